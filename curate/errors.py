"""User-facing errors. The CLI prints a ``CurateError`` as one line and exits 2; anything else is a bug and keeps
its traceback (a blanket ``except ValueError`` would hide real bugs).

- ``ConfigError``: a recipe or option is wrong (unknown key, bad value); raised before any work starts.
- ``InputError``: an input file or source cannot be read as asked (missing column, unknown format, bad rows).
- ``MissingInput``: a file, pool, selection or table the command needs does not exist (also a
  ``FileNotFoundError``, so callers that catch that keep working).
- ``LockTimeout``: another writer holds the pool, selection or curriculum lock longer than ``--lock-timeout``.
"""

from __future__ import annotations


class CurateError(Exception):
    """Base of every error a user can fix by changing the command, the recipe or the input."""


class ConfigError(CurateError, ValueError):
    """A recipe, option or stage setting is invalid."""


class InputError(CurateError, ValueError):
    """An input cannot be read as asked."""


class MissingInput(InputError, FileNotFoundError):
    """A file, pool, selection or table the command needs does not exist."""


class LockTimeout(CurateError, TimeoutError):
    """Another process holds a workspace lock."""
