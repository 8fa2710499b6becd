"""All workspace I/O: paths, atomic Parquet writes, manifests, and skip-if-done.

Layout under the root (``--home``, env ``CURATE_HOME``, default ``./workspace``)::

    pools/<pool>/problems.parquet        + problems.manifest.json
    pools/<pool>/quarantine.parquet      ingest's dropped rows; quarantine_<stage>.parquet: another stage's
    pools/<pool>/raw/<source-key>.parquet  one per ingested source (what "adds only what is new" rests on)
    pools/<pool>/rollouts/<model>/part-*.parquet   the append-only ledger, one file per shard; + manifest.json
    pools/<pool>/stats.parquet, scores.parquet, ...
    cache/embeddings/<encoder>/part-*.parquet      keyed by problem_id, shared by every pool
    selections/<name>/   curricula/<name>/          each with a manifest.json
    locks/<kind>-<name>.lock                        one writer at a time per pool, selection, curriculum, ledger

Every table is written to a temporary file in the same folder and renamed into place, so a reader (or a crash)
never sees half a file; files get the usual mode of new files (0644 under umask 022). Concurrent writers:
every stage holds its pool's (or folder's) lock for its whole read-modify-write (``Workspace.lock``, an
``flock`` a killed process cannot leave behind), writes the files that change together through ``commit``
(all or none, rolled forward after a crash), and replaces a folder with ``replace_dir`` (never absent).
Every stage goes through one wrapper, ``run_wrapped``: its manifest (one layout, ``Manifest``, named by
``manifest_path``) records inputs with content hashes, the config, the code and package versions, row counts,
drops by reason, the summary and what was written; a stage whose fingerprint (inputs + config + code) matches its
manifest, with its outputs still as written, is skipped on re-run.
Object stores are a later concern: they would be added here and nowhere else.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from curate import schema as S
from curate.errors import ConfigError, LockTimeout, MissingInput


ENV_HOME = "CURATE_HOME"
DEFAULT_HOME = "workspace"
_VERSIONED = ("curate-rl", "polars", "pyarrow", "math-verify", "datasets", "sentence-transformers", "scikit-learn")


# --------------------------------------------------------------------------------------------------- workspace
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
        base = self.pool_dir(pool) / "rollouts"
        return base if model is None else base / S.slug(model)

    def embeddings_dir(self, encoder: str) -> Path:
        return self.root / "cache" / "embeddings" / S.slug(encoder)

    def selection_dir(self, name: str) -> Path:
        return self.root / "selections" / name

    def curriculum_dir(self, name: str) -> Path:
        return self.root / "curricula" / name

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
            for folder in (self.pool_dir(name), self.raw_dir(name), self.ledger_dir(name)):
                recover(folder)
                remove_temp(folder)
        elif kind == "selection":
            recover_dir(self.selection_dir(name))
        elif kind == "curriculum":
            recover_dir(self.curriculum_dir(name))


# --------------------------------------------------------------------------------------------------- parquet
def _create_temp(path: Path) -> Path:
    """A new empty ``.<name>.<random>.tmp`` beside ``path``, created with mode 0666 & ~umask (0644 under umask
    022) like any new file: ``mkstemp``'s 0600 would hide every workspace file from the other users of a shared
    machine (issue 11). Readers skip dot-files; ``remove_temp`` removes those of killed writers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def _stage_parquet(df: pl.DataFrame, path: Path, schema: pl.Schema | None) -> Path:
    """``df`` (validated first if a schema is given) written and fsynced to a temp file beside ``path``."""
    if schema is not None:
        df = S.validate(df, schema, table=path.stem)
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

    def manifest(self, output: str | os.PathLike, manifest: Manifest) -> Path:
        manifest.seal()
        return self.json(manifest_path(output), asdict(manifest))

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


# --------------------------------------------------------------------------------------------------- locks
ENV_LOCK_TIMEOUT = "CURATE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0
LOCK_KINDS = ("pool", "selection", "curriculum", "ledger")


def lock_timeout(value: float | None = None) -> float:
    """Seconds a writer waits for a lock another process holds: ``value``, else ``$CURATE_LOCK_TIMEOUT``, else
    600. A negative value waits as long as it takes."""
    if value is None:
        env = os.environ.get(ENV_LOCK_TIMEOUT, "").strip()
        if not env:
            return DEFAULT_LOCK_TIMEOUT
        try:
            value = float(env)
        except ValueError:
            raise ConfigError(f"${ENV_LOCK_TIMEOUT}={env!r} is not a number of seconds") from None
    return float(value)


def _owner_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".owner")


def lock_owner(lock: str | os.PathLike) -> str:
    """Who holds (or last held) a lock, from the record its holder wrote beside it."""
    try:
        rec = json.loads(_owner_file(Path(lock)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "another process (no owner record)"
    return f"pid {rec.get('pid')} on {rec.get('host')} since {rec.get('since')} ({rec.get('command')})"


_HELD: dict[tuple[str, int], list[Any]] = {}  # (lock file, thread) -> [depth, pid]: re-entry within a thread


@contextlib.contextmanager
def hold(
    path: str | os.PathLike,
    *,
    what: str,
    timeout: float | None = None,
    on_acquire: Callable[[], Any] | None = None,
) -> Iterator[Path]:
    """Hold the file lock ``path`` (``filelock.FileLock``: an ``flock``, so the kernel releases it when its holder
    dies, SIGKILL included: a killed writer never blocks the next one).

    A second writer waits with a message on stderr naming the holder, and raises ``LockTimeout`` after
    ``lock_timeout(timeout)`` seconds. Holding is re-entrant within a thread (a stage that calls another stage's
    entry point on the same pool does not wait for itself); other threads and processes (a forked child too)
    wait. ``on_acquire`` runs once the lock is taken (outermost hold only): the place to repair what a killed
    writer left.
    """
    from filelock import FileLock, Timeout

    path = Path(path).absolute()
    key = (str(path), threading.get_ident())
    held = _HELD.get(key)
    if held is not None and held[1] == os.getpid():
        held[0] += 1
        try:
            yield path
        finally:
            held[0] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(blocking=False)
    except Timeout:
        from curate.progress import log

        limit = lock_timeout(timeout)
        wait = f"up to {limit:g} s" if limit >= 0 else "without a time limit"
        log(
            f"waiting for the {what} lock, held by {lock_owner(path)} ({wait}; --lock-timeout or "
            f"${ENV_LOCK_TIMEOUT} changes this)"
        )
        try:
            lock.acquire(timeout=limit if limit >= 0 else -1)
        except Timeout:
            raise LockTimeout(
                f"the {what} is locked by {lock_owner(path)}; gave up after {limit:g} s (lock file {path}). "
                f"Wait for that process to finish, or raise --lock-timeout / ${ENV_LOCK_TIMEOUT}."
            ) from None
    _HELD[key] = [1, os.getpid()]
    try:
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200] if sys.argv else "python",
        }
        _owner_file(path).write_text(json.dumps(record), encoding="utf-8")
        if on_acquire is not None:
            on_acquire()
        yield path
    finally:
        del _HELD[key]
        _owner_file(path).unlink(missing_ok=True)
        lock.release()


def pool_locked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a stage entry point ``fn(ws, pool, ...)`` holding ``ws.lock("pool", pool)``: its read-modify-write
    of the pool's tables cannot interleave with another writer's (issue 10: two ingests lost one source)."""

    @functools.wraps(fn)
    def locked(ws: Workspace, pool: str, *args: Any, **kwargs: Any) -> Any:
        with ws.lock("pool", pool):
            return fn(ws, pool, *args, **kwargs)

    return locked


# --------------------------------------------------------------------------------------------------- hashing
def file_hash(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, or of a folder's files (relative names and contents, sorted)."""
    path = Path(path)
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
            h.update(str(f.relative_to(path)).encode())
            h.update(file_hash(f).encode())
        return h.hexdigest()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def package_versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


# --------------------------------------------------------------------------------------------------- manifests
@dataclass
class Manifest:
    """What produced an output: the record behind skip-if-done and the numbers behind every summary."""

    stage: str
    inputs: dict[str, str] = field(default_factory=dict)  # path -> content hash
    config: dict[str, Any] = field(default_factory=dict)
    rows_in: int = 0
    rows_out: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=package_versions)
    started_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    wall_s: float = 0.0
    fingerprint: str = ""
    summary: dict[str, Any] = field(default_factory=dict)  # what the stage reported (StageResult.summary)
    code_version: str = ""  # ``code_version()`` of the run that wrote it (part of the fingerprint when set)
    outputs: dict[str, str] = field(default_factory=dict)  # path -> ``output_identity`` as written

    def seal(self) -> Manifest:
        """Set the fingerprint from inputs, config and code version (call before writing)."""
        self.fingerprint = fingerprint(self.inputs, self.config, self.code_version)
        return self


def fingerprint(inputs: Mapping[str, str], config: Any, code: str = "") -> str:
    """One hash over input content hashes, the config and (when given) the code version: equal fingerprints mean
    the output is up to date."""
    payload: dict[str, Any] = {"inputs": dict(sorted(inputs.items())), "config": config}
    if code:
        payload["code"] = code
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def manifest_path(output: str | os.PathLike) -> Path:
    """``x.parquet`` -> ``x.manifest.json``; a folder -> ``folder/manifest.json``."""
    output = Path(output)
    if output.suffix == ".parquet":
        return output.with_name(output.stem + ".manifest.json")
    return output / "manifest.json"


def write_manifest(output: str | os.PathLike, manifest: Manifest) -> Path:
    manifest.seal()
    return write_json(manifest_path(output), asdict(manifest))


def read_manifest(output: str | os.PathLike) -> dict[str, Any] | None:
    path = manifest_path(output)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def up_to_date(output: str | os.PathLike, inputs: Mapping[str, str], config: Any) -> dict[str, Any] | None:
    """The stored manifest if ``output`` exists and was made from exactly these inputs and config, else None."""
    output = Path(output)
    if not output.exists():
        return None
    stored = read_manifest(output)
    if stored is None or stored.get("fingerprint") != fingerprint(inputs, config):
        return None
    return stored


def hash_inputs(paths: Iterable[str | os.PathLike]) -> dict[str, str]:
    """``{path: content hash}`` for the paths that exist (missing inputs hash as "missing")."""
    out = {}
    for p in paths:
        p = Path(p)
        out[str(p)] = file_hash(p) if p.exists() else "missing"
    return out


@dataclass
class StageResult:
    """What one stage did: printed by the CLI, returned as JSON, shown as a Prefect artifact."""

    stage: str
    skipped: bool = False
    outputs: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "skipped": self.skipped,
            "outputs": self.outputs,
            "summary": self.summary,
            "wall_s": round(self.wall_s, 3),
        }


# --------------------------------------------------------------------------------------------------- stage wrapper
@functools.cache
def code_version() -> str:
    """``<curate-rl version>+<12 hex digits over the curate package's source files>``.

    Part of every stage fingerprint, so outputs made by other code are recomputed rather than trusted (a stage
    skipped after an upgrade could silently keep a fixed bug's output). Cached per process.
    """
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    try:
        version = metadata.version("curate-rl")
    except metadata.PackageNotFoundError:
        version = "0"
    return f"{version}+{h.hexdigest()[:12]}"


def output_identity(path: str | os.PathLike) -> str:
    """A cheap identity of an output as written: its size (a file), or a hash over the names and sizes of a
    folder's files (dot-files and the folder's own ``manifest.json`` left out); ``"missing"`` when absent.

    Stored in the manifest so that a deleted, truncated or partly removed output is redone on the next run even
    though its inputs did not change. Sizes, not contents: this guards against missing work, not tampering.
    """
    path = Path(path)
    if path.is_file():
        return f"size:{path.stat().st_size}"
    if not path.is_dir():
        return "missing"
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path)
        if not f.is_file() or any(part.startswith(".") for part in rel.parts) or str(rel) == "manifest.json":
            continue
        h.update(f"{rel}:{f.stat().st_size};".encode())
    return f"files:{h.hexdigest()[:16]}"


@dataclass
class StageOutput:
    """What a stage's work returns to ``run_wrapped``.

    summary: the numbers printed by the CLI and stored in the manifest. tables: ``{path: (frame, schema or
    None)}`` the wrapper writes atomically, in order (a stage that writes a folder itself leaves this empty).
    rows_in / rows_out / drops / extra: the manifest's counts and any further facts. check: called after the
    tables are written; returns entries for the summary computed from the files on disk (e.g. ``reconciles``).
    """

    summary: dict[str, Any]
    tables: dict[Path, tuple[pl.DataFrame, pl.Schema | None]] = field(default_factory=dict)
    rows_in: int = 0
    rows_out: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    check: Callable[[], dict[str, Any]] | None = None


def _input_key(ws: Workspace, path: Path) -> str:
    """Inputs under the workspace are recorded relative to it, so a moved workspace still skips finished stages."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ws.root))
    except ValueError:
        return str(path)


def run_wrapped(
    ws: Workspace,
    stage: str,
    *,
    inputs: Sequence[str | os.PathLike],
    config: Mapping[str, Any],
    outputs: Sequence[str | os.PathLike],
    fn: Callable[[Manifest], StageOutput],
    force: bool = False,
) -> StageResult:
    """The one stage wrapper: fingerprint -> skip if done -> run -> atomic writes -> one manifest layout.

    1. Fingerprint: the content hash of every input (files or folders; missing ones hash as "missing"), the
       JSON-able ``config`` and ``code_version()``.
    2. Skip: when the manifest of ``outputs[0]`` (``manifest_path``) carries the same fingerprint and every output
       is still as it was written (``output_identity``), return its stored summary with ``skipped=True``
       (``force`` always runs).
    3. Run ``fn(manifest)``: the stage's work (pure functions on frames plus whatever the stage writes itself).
       It gets the manifest being built, already holding stage, inputs, config and code version (the select stage
       writes it into its folder's dataset card).
    4. Write ``StageOutput.tables`` together (``commit``: all or none), run ``StageOutput.check`` on what is now
       on disk.
    5. Write the manifest (``Manifest``: stage, fingerprint, inputs, config, code_version, versions, rows_in,
       rows_out, drops, summary, extra, outputs, started_at, wall_s) beside ``outputs[0]``: ``x.manifest.json``
       for a table, ``<folder>/manifest.json`` for a folder.

    The CLI verbs, ``curate run`` and the Prefect tasks reach this through each stage's ``run_stage`` (or its
    named entry point), so all of them skip, write and report the same way.
    """
    t0 = dt.datetime.now(dt.UTC)
    hashed = {_input_key(ws, Path(p)): v for p, v in hash_inputs(inputs).items()}
    config = dict(config)
    code = code_version()
    first = Path(outputs[0])
    stored = None if force else read_manifest(first)
    if stored is not None and stored.get("fingerprint") == fingerprint(hashed, config, code):
        recorded = stored.get("outputs") or {}
        if "summary" in stored and all(recorded.get(str(o)) == output_identity(o) for o in outputs):
            return StageResult(stage, skipped=True, outputs=[str(o) for o in outputs], summary=stored["summary"])
    manifest = Manifest(stage=stage, inputs=hashed, config=config, code_version=code).seal()
    out = fn(manifest)
    if out.tables:
        with commit(Path(next(iter(out.tables))).parent) as staged:  # the tables change together or not at all
            for path, (frame, schema) in out.tables.items():
                staged.parquet(frame, path, schema)
    summary = dict(out.summary)
    if out.check is not None:
        summary.update(out.check())
    manifest.summary, manifest.rows_in, manifest.rows_out = summary, out.rows_in, out.rows_out
    manifest.drops = dict(out.drops)
    manifest.extra.update(out.extra)
    manifest.wall_s = round((dt.datetime.now(dt.UTC) - t0).total_seconds(), 3)
    manifest.outputs = {str(o): output_identity(o) for o in outputs}
    write_manifest(first, manifest)
    return StageResult(stage, outputs=[str(o) for o in outputs], summary=summary, wall_s=manifest.wall_s)
