"""Workspace I/O: paths, atomic Parquet and text writes, changes that land together, folders replaced whole.

Layout under the root (``--home``, env ``CURATE_HOME``, default ``./workspace``)::

    pools/<pool>/problems.parquet        + problems.manifest.json
    pools/<pool>/quarantine.parquet      ingest's dropped rows; quarantine_<stage>.parquet: another stage's
    pools/<pool>/raw/<source-key>.parquet  one per ingested source (what "adds only what is new" rests on)
    pools/<pool>/rollouts/<model>/part-*.parquet   the append-only ledger, one file per shard; + manifest.json
    pools/<pool>/stats.parquet, scores.parquet, ...
    pools/<pool>/solutions/<set>/solutions.parquet  one solution set's tables (curate.solutions), one folder per set
    cache/embeddings/<encoder>/part-*.parquet      keyed by problem_id, shared by every pool
    selections/<name>/   curricula/<name>/          each with a manifest.json
    locks/<kind>-<name>.lock                        one writer at a time per pool, selection, curriculum, ledger

Every table is written to a temporary file in the same folder and renamed into place, so a reader (or a crash)
never sees half a file; files get the usual mode of new files (0644 under umask 022). Concurrent writers:
every stage holds its pool's (or folder's) lock for its whole read-modify-write (``Workspace.lock``, an
``flock`` a killed process cannot leave behind: curate.locks), writes the files that change together through
``commit`` (all or none, rolled forward after a crash), and replaces a folder with ``replace_dir`` (never absent).
Manifests and skip-if-done live in curate.manifest, the one stage wrapper (``run_wrapped``) in
curate.stage_wrapper. Object stores are a later concern: they would be added here and nowhere else.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate import schema as S
from curate.errors import MissingInput
from curate.locks import LOCK_KINDS, hold


ENV_HOME = "CURATE_HOME"
DEFAULT_HOME = "workspace"


# --------------------------------------------------------------------------------------------------- workspace
def model_key(model: str) -> str:
    """The folder name of a model's rollout ledger (``Workspace.ledger_dir``; ``curate.rollout.ledger.model_key``):
    ``Qwen/Qwen2.5-Math-1.5B`` -> ``Qwen__Qwen2.5-Math-1.5B`` (``schema.slug``)."""
    return S.slug(model)


@dataclass(frozen=True)
class Workspace:
    """The root folder of everything a run produces, with one method per kind of path."""

    root: Path
    lock_timeout: float | None = field(default=None, compare=False)  # None: ``lock_timeout()`` (env or 600 s)

    @classmethod
    def resolve(cls, home: str | os.PathLike | None = None, recipe_home: str | os.PathLike | None = None) -> Workspace:
        """The workspace root, by one precedence shared by every entry point (``curate <verb>``, ``curate run``,
        ``python -m flows.curation``, the Prefect deployment):

        1. ``home``: the ``--home`` flag (or the flow's ``home`` parameter);
        2. ``$CURATE_HOME``;
        3. ``recipe_home``: the recipe's ``home:`` key (``curate run`` and the flow pass it);
        4. ``./workspace``.

        The operator's choice (flag, then environment) beats the recipe's, as a command-line flag beats a config
        file; so ``curate run`` and the flow, given the same recipe and environment, write to the same root.
        """
        chosen = home or os.environ.get(ENV_HOME) or recipe_home or DEFAULT_HOME
        return cls(Path(chosen).expanduser().resolve())

    def pool_dir(self, pool: str) -> Path:
        return self.root / "pools" / pool

    def table(self, pool: str, name: str) -> Path:
        """Path of a pool-level table, e.g. ``table("demo", "problems")``."""
        return self.pool_dir(pool) / f"{name}.parquet"

    def raw_dir(self, pool: str) -> Path:
        return self.pool_dir(pool) / "raw"

    def ledger_dir(self, pool: str, model: str | None = None) -> Path:
        """``pools/<pool>/rollouts/`` or, for one model, ``pools/<pool>/rollouts/<model_key(model)>/``."""
        base = self.pool_dir(pool) / "rollouts"
        return base if model is None else base / model_key(model)

    def model_path(self, model: str) -> str:
        """Where to load ``model`` from: a relative path that exists under the workspace root (how a training run
        names its own models in the ledger, ``runs/<run>/sft/final``, so the name and its ledger folder survive a
        moved workspace) as that folder; anything else (a hub id, an absolute path, a path from the working
        directory) as given."""
        if not os.path.isabs(model) and (self.root / model).is_dir():
            return str(self.root / model)
        return model

    def model_name(self, model: str) -> str:
        """How a model of this workspace is named in the ledger, the stats and the scores: a folder inside the
        workspace by its path relative to the root (``model_path`` loads it back), anything else as given.

        >>> Workspace(Path("/ws")).model_name("/ws/runs/a/sft/final"), Workspace(Path("/ws")).model_name("Qwen/Q")
        ('runs/a/sft/final', 'Qwen/Q')
        """
        path = Path(model)
        if path.is_absolute() and path != self.root and path.is_relative_to(self.root):
            return str(path.relative_to(self.root))
        return model

    def embeddings_dir(self, encoder: str) -> Path:
        return self.root / "cache" / "embeddings" / S.slug(encoder)

    def selection_dir(self, name: str) -> Path:
        return self.root / "selections" / name

    def curriculum_dir(self, name: str) -> Path:
        return self.root / "curricula" / name

    def solution_set_dir(self, pool: str, name: str) -> Path:
        """``pools/<pool>/solutions/<name>/``: one solution set's tables (``curate solutions``). Each set has its own
        folder, so two recipes on one pool (the curated set and the raw one) never replace each other's tables."""
        return self.pool_dir(pool) / "solutions" / S.slug(name)

    def solution_sets(self, pool: str) -> list[Path]:
        """The folders of a pool's solution sets that hold a finished set (its ``solution_pools.parquet``)."""
        base = self.pool_dir(pool) / "solutions"
        return sorted(p for p in base.glob("*") if (p / "solution_pools.parquet").is_file()) if base.is_dir() else []

    def pools(self) -> list[str]:
        """Names of pools that have a problems table."""
        base = self.root / "pools"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / "problems.parquet").is_file())

    def require_pool(self, pool: str) -> Path:
        """The pool's problems table, or a clear error listing the pools that exist."""
        path = self.table(pool, "problems")
        if not path.is_file():
            have = ", ".join(self.pools()) or "none"
            raise MissingInput(
                f"pool {pool!r} not found under {self.root} (pools: {have}); create it with `curate ingest ... "
                f"--pool {pool}`"
            )
        return path

    def quarantine_path(self, pool: str, stage: str = "ingest") -> Path:
        """The quarantine table a stage owns: ``quarantine.parquet`` (ingest), ``quarantine_<stage>.parquet``
        (any other stage). Each stage replaces only its own file, so no two stages read-modify-write one table."""
        return self.table(pool, "quarantine" if stage == "ingest" else f"quarantine_{stage}")

    def quarantine_files(self, pool: str) -> list[Path]:
        """Every quarantine table of a pool, ingest's first (``read_quarantine`` reads them all)."""
        base = self.pool_dir(pool)
        if not base.is_dir():
            return []
        first = [base / "quarantine.parquet"] if (base / "quarantine.parquet").is_file() else []
        return first + sorted(p for p in base.glob("quarantine_*.parquet") if not p.name.startswith("."))

    # ----------------------------------------------------------------------------------------------- locks
    def lock_path(self, kind: str, name: str) -> Path:
        """``<root>/locks/<kind>-<name>.lock``: one lock per pool, selection, curriculum folder or model ledger
        (``ledger`` names are ``<pool>/<model>``)."""
        if kind not in LOCK_KINDS:
            raise ValueError(f"lock kind must be one of {LOCK_KINDS}, got {kind!r}")
        return self.root / "locks" / f"{kind}-{S.slug(name)}.lock"

    def lock(self, kind: str, name: str, timeout: float | None = None) -> contextlib.AbstractContextManager[Path]:
        """Hold the workspace lock of one pool / selection / curriculum folder / model ledger while writing it.

        Every stage that writes a pool's tables holds ``lock("pool", pool)`` for its whole read-modify-write;
        ``select`` and ``curriculum`` hold their folder's lock. A second writer waits (message on stderr) up to
        ``timeout`` (default: this workspace's ``lock_timeout``, else ``$CURATE_LOCK_TIMEOUT``, else 600 s), then
        fails with ``LockTimeout`` naming the holder. Once taken, ``tidy`` repairs what killed writers left.

        >>> with Workspace(Path("/tmp/ws")).lock("pool", "demo"):  # doctest: +SKIP
        ...     ...  # read, change and write the pool's tables
        """
        return hold(
            self.lock_path(kind, name),
            what=f"{kind} {name!r}",
            timeout=self.lock_timeout if timeout is None else timeout,
            on_acquire=functools.partial(self.tidy, kind, name),
        )

    def tidy(self, kind: str, name: str) -> None:
        """Finish or undo what a killed writer left (``lock`` calls it once taken; never call it without the lock):
        a pool's interrupted ``commit`` is rolled forward and temp files are removed; a selection or curriculum
        folder missing after a crash mid-swap is put back and its temp folders are removed."""
        if kind == "pool":
            sets = sorted((self.pool_dir(name) / "solutions").glob("*"))
            for folder in (self.pool_dir(name), self.raw_dir(name), self.ledger_dir(name), *sets):
                recover(folder)
                remove_temp(folder)
        elif kind == "selection":
            recover_dir(self.selection_dir(name))
        elif kind == "curriculum":
            recover_dir(self.curriculum_dir(name))


def pool_locked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a stage entry point ``fn(ws, pool, ...)`` holding ``ws.lock("pool", pool)``: its read-modify-write
    of the pool's tables cannot interleave with another writer's (unlocked, two ingests at once lost a source)."""

    @functools.wraps(fn)
    def locked(ws: Workspace, pool: str, *args: Any, **kwargs: Any) -> Any:
        with ws.lock("pool", pool):
            return fn(ws, pool, *args, **kwargs)

    return locked


# --------------------------------------------------------------------------------------------------- parquet
def _create_temp(path: Path) -> Path:
    """A new empty ``.<name>.<random>.tmp`` beside ``path``, created with mode 0666 & ~umask (0644 under umask
    022) like any new file: ``mkstemp``'s 0600 would hide every workspace file from the other users of a shared
    machine. Readers skip dot-files; ``remove_temp`` removes those of killed writers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def public_mode(path: str | os.PathLike) -> Path:
    """Give a file another library left private (safetensors writes weights 0600) the mode the umask gives any new
    file (0644 under umask 022), as every file this project writes has; a file with another mode is left as it is.
    Model folders (``training.run_folder.record_files``, ``training.tiny.init_tiny``) call it on what they saved."""
    path = Path(path)
    umask = os.umask(0)
    os.umask(umask)
    if path.stat().st_mode & 0o777 == 0o600 and umask != 0o177:
        path.chmod(0o666 & ~umask)
    return path


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """Make a failed write name the file it was writing: an ``OSError`` without a file name (``write`` on a full disk
    raises ``[Errno 28] No space left on device`` alone) gets ``path``, and polars' ``ComputeError("... underlying IO
    error: No space left on device (os error 28)")`` becomes the ``OSError`` it stands for. The CLI prints such an
    error as one line (``curate.console.run_app``) instead of a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except pl.exceptions.ComputeError as exc:
        found = re.search(r"\(os error (\d+)\)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def _stage_parquet(df: pl.DataFrame, path: Path, schema: pl.Schema | None) -> Path:
    """``df`` (validated first if a schema is given) written and fsynced to a temp file beside ``path``."""
    if schema is not None:
        df = S.validate(df, schema, table=path.stem)
    with naming(path):
        tmp = _create_temp(path)
        try:
            df.write_parquet(tmp, compression="zstd", statistics=True)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return tmp


def _stage_text(path: Path, text: str) -> Path:
    with naming(path):
        tmp = _create_temp(path)
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return tmp


def _place(tmp: Path, path: Path) -> Path:
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def copy_file(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Copy a file atomically: a temp file beside ``target`` (the workspace's temp naming, so a killed copy is
    cleaned like any other), fsynced, then renamed into place."""
    target = Path(target)
    with naming(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_temp(target)
        try:
            shutil.copyfile(source, tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return _place(tmp, target)


def write_parquet(df: pl.DataFrame, path: str | os.PathLike, schema: pl.Schema | None = None) -> Path:
    """Write ``df`` atomically (temp file in the same folder, fsync, rename), validated first if a schema is given."""
    path = Path(path)
    return _place(_stage_parquet(df, path, schema), path)


def read_parquet(path: str | os.PathLike, schema: pl.Schema | None = None) -> pl.DataFrame:
    """Read one Parquet file, or every ``*.parquet`` in a folder (temp files ignored), validated if schema given."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("."))
        if not files:
            if schema is None:
                raise FileNotFoundError(f"no parquet files in {path}")
            return S.empty(schema)
        df = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    else:
        df = pl.read_parquet(path)
    return S.validate(df, schema, table=path.stem) if schema is not None else df


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Atomically write a text file (JSON, Markdown, YAML)."""
    path = Path(path)
    return _place(_stage_text(path, text), path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file another tool wrote (a model's ``config.json``, its tokenizer files, a benchmark's cache). A
    project record (a run's ``chain.json``, a stage's ``config.json``, a curriculum's ``plan.json``, ...) is read
    through its own reader, beside its writer, instead."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def jsonable(obj: Any) -> Any:
    """``obj`` as ``write_json`` writes it, read back: plain dicts, lists, strings and numbers (a path, a date or
    a numpy number becomes its ``str``), so what a function returns is what its JSON file holds."""
    return json.loads(json.dumps(obj, default=str))


ROW_FILES = {".jsonl": "JSONL", ".ndjson": "JSONL", ".json": "JSON", ".parquet": "Parquet", ".csv": "CSV"}


def read_rows(path: str | os.PathLike, what: str = "rows") -> pl.DataFrame:
    """A table a user hands a verb (``curate verify``, ``training reward``, ``training fit``): JSONL
    (``.jsonl``/``.ndjson``), a JSON array (``.json``), Parquet or CSV, by suffix. A missing file, an unknown suffix,
    an empty file (0 bytes, only blank lines, or no rows) and a file polars cannot read are each one
    ``InputError`` line naming the file, never polars' own words; ``what`` says what the rows were for."""
    from curate.errors import InputError

    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise MissingInput(f"{path} does not exist")
    if suffix not in ROW_FILES:
        raise InputError(f"{path}: expected one of {', '.join(ROW_FILES)}")
    kind = ROW_FILES[suffix]
    if path.stat().st_size == 0 or (suffix != ".parquet" and not _has_text(path)):
        raise InputError(f"{path}: the file is empty; no {what} (expected {kind} rows)")
    try:
        if suffix == ".json":
            df = pl.read_json(path, infer_schema_length=None)
        elif suffix == ".parquet":
            df = pl.read_parquet(path)
        elif suffix == ".csv":
            df = pl.read_csv(path, infer_schema_length=None)
        else:
            df = pl.read_ndjson(path, infer_schema_length=None)
    except pl.exceptions.PolarsError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not a readable {kind} file ({why})") from None
    if df.height == 0:
        raise InputError(f"{path}: no rows; no {what}")
    return df


def _has_text(path: Path) -> bool:
    """Whether the file holds anything but whitespace (read in blocks: stops at the first non-blank one)."""
    with open(path, "rb") as fh:
        while block := fh.read(1 << 16):
            if block.strip():
                return True
    return False


def read_quarantine(ws: Workspace, pool: str) -> pl.DataFrame:
    """Every quarantined row of a pool (schema.QUARANTINE), read from each stage's own file.

    Pools written before each stage had its own file kept all stages' rows in ``quarantine.parquet``: rows of a
    stage that now has its own file are taken from that file only, so nothing is counted twice.
    """
    files = ws.quarantine_files(pool)
    own = {p.stem.removeprefix("quarantine_") for p in files if p.stem != "quarantine"}
    frames = []
    for path in files:
        df = read_parquet(path, S.QUARANTINE)
        if path.stem == "quarantine" and own:
            df = df.filter(~pl.col(S.STAGE).is_in(sorted(own)))
        frames.append(df)
    return pl.concat(frames, how="vertical") if frames else S.empty(S.QUARANTINE)


# ------------------------------------------------------------------------------------------ all or nothing
JOURNAL = ".commit.json"


class Commit:
    """Files that change together (a stage's tables, manifests and state): all of them or none.

    Each file is first written to a temp file beside its target. ``apply`` then writes a journal
    (``<folder>/.commit.json``, atomically) listing the renames, does them, and removes the journal. A crash
    before the journal leaves only temp files (removed by the next run, under the lock); a crash after it is
    finished by ``recover`` on the next run (roll forward), so readers never keep a half-changed set. Use it
    through ``commit()``, under the lock of whatever owns the folder (``Workspace.lock``).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.moves: dict[Path, Path] = {}  # target -> temp file

    def parquet(self, df: pl.DataFrame, path: str | os.PathLike, schema: pl.Schema | None = None) -> Path:
        """Stage a table; returns its temp file (hash it to fingerprint what is about to be written)."""
        path = Path(path)
        return self._add(path, _stage_parquet(df, path, schema))

    def text(self, path: str | os.PathLike, text: str) -> Path:
        path = Path(path)
        return self._add(path, _stage_text(path, text))

    def json(self, path: str | os.PathLike, obj: Any) -> Path:
        return self.text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    def _add(self, path: Path, tmp: Path) -> Path:
        previous = self.moves.pop(path, None)
        if previous is not None:
            previous.unlink(missing_ok=True)
        self.moves[path] = tmp
        return tmp

    def apply(self) -> None:
        if not self.moves:
            return
        journal = self.folder / JOURNAL
        rel = [[os.path.relpath(t, self.folder), os.path.relpath(p, self.folder)] for p, t in self.moves.items()]
        write_json(journal, rel)
        for path, tmp in self.moves.items():
            os.replace(tmp, path)
        journal.unlink()
        self.moves = {}

    def discard(self) -> None:
        for tmp in self.moves.values():
            tmp.unlink(missing_ok=True)
        self.moves = {}


@contextlib.contextmanager
def commit(folder: str | os.PathLike) -> Iterator[Commit]:
    """``with commit(pool_dir) as c: c.parquet(...); c.json(...)``: every staged file is renamed into place when
    the block ends normally, none when it raises (see ``Commit``)."""
    staged = Commit(folder)
    try:
        yield staged
    except BaseException:
        staged.discard()
        raise
    staged.apply()


def recover(folder: str | os.PathLike) -> int:
    """Finish a ``Commit`` a crash interrupted in ``folder`` (roll forward); returns how many files it moved."""
    folder = Path(folder)
    journal = folder / JOURNAL
    if not journal.is_file():
        return 0
    moved = 0
    for tmp, target in json.loads(journal.read_text(encoding="utf-8")):
        if (folder / tmp).exists():
            os.replace(folder / tmp, folder / target)
            moved += 1
    journal.unlink()
    return moved


_TEMP = re.compile(r"^\..+\.tmp$")


def remove_temp(folder: str | os.PathLike) -> list[str]:
    """Remove the temp files and folders (``.<name>.<random>.tmp``) killed writers left directly in ``folder``.

    Only under the lock of whatever writes there, so that no live writer's temp file is removed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in folder.iterdir():
        if _TEMP.match(p.name):
            _remove(p)
            removed.append(p.name)
    return sorted(removed)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def temp_dir(target: str | os.PathLike) -> Path:
    """A new empty folder ``.<name>.<random>.tmp`` beside ``target``, to build its replacement in (mode 0777 &
    ~umask, like any new folder)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.mkdir(tmp, 0o777)
        except FileExistsError:
            continue
        return tmp


@contextlib.contextmanager
def building(target: str | os.PathLike) -> Iterator[Path]:
    """``with building(folder) as tmp:`` write the new folder's files into ``tmp`` (beside ``folder``); when the
    block ends normally ``tmp`` replaces ``folder`` (``replace_dir``), when it raises ``tmp`` is removed. Hold the
    folder's lock around it."""
    tmp = temp_dir(target)
    try:
        with naming(target):  # a full disk names the folder being built
            yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, target)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with Linux ``renameat2(RENAME_EXCHANGE)``; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28 or another libc
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):  # the file system cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def replace_dir(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put the finished folder ``tmp`` in place of ``target`` so that ``target`` is never absent.

    On Linux one ``renameat2(RENAME_EXCHANGE)`` swaps the two at once (a reader finds the old folder or the new
    one, whole), then the old one, now at ``tmp``, is removed. Where the file system cannot exchange: rename
    ``target`` aside to ``.<name>.<random>.old``, rename ``tmp`` into place, remove the old one; a crash between
    those two renames is repaired by ``recover_dir`` on the next run under the folder's lock.
    """
    tmp, target = Path(tmp), Path(target)
    if not target.exists():
        os.rename(tmp, target)
        return
    if _exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = target.with_name(f".{target.name}.{secrets.token_hex(4)}.old")
    os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def recover_dir(target: str | os.PathLike) -> str | None:
    """Repair what killed writers of the folder ``target`` left beside it; returns the folder put back, if any.

    If ``target`` is missing (a crash between the two renames of ``replace_dir``'s fallback), the new folder is
    put in place when it is complete (its ``manifest.json``, written last, is there), else the old one. Then
    every other ``.<name>.*.tmp`` / ``.<name>.*.old`` folder of ``target`` is removed. Only under its lock.
    """
    target = Path(target)
    if not target.parent.is_dir():
        return None
    mine = re.compile(rf"^\.{re.escape(target.name)}\.(?:[^.]+\.(?:tmp|old)|old-[^.]+)$")
    litter = [p for p in target.parent.iterdir() if mine.match(p.name)]
    restored = None
    if not target.exists():
        new = [p for p in litter if p.name.endswith(".tmp") and (p / "manifest.json").is_file()]
        old = [p for p in litter if not p.name.endswith(".tmp") and p.is_dir()]
        pick = max(new or old, key=lambda p: p.stat().st_mtime, default=None)
        if pick is not None:
            os.rename(pick, target)
            litter.remove(pick)
            restored = pick.name
    for p in litter:
        _remove(p)
    return restored
