r"""The rollout ledger: the one module that names, numbers, reads and writes its part files.

Pipeline position: every writer of samples (``curate rollout``, the solutions stage's teacher through it,
``curate import-generations``, training's RL rollouts) appends here; every
reader (stats, score, solutions, re-distillation) reads here. Schema: ``schema.ROLLOUTS``, key
(problem_id, model, sample_idx).

Layout and the one glob rule::

    pools/<pool>/rollouts/<model_key(model)>/part-<run_id>-<label>[-<digest>].parquet   (PART_GLOB = "part-*.parquet")
    pools/<pool>/rollouts/<model_key(model)>/manifest.json                                (the rollout stage's)
    locks/ledger-<pool>__<model>.lock, locks/ledger-<pool>__<model>.claims/               (the model ledger's lock)

A part is immutable once renamed into place; a part name is a writer's unit of resume. Names in use: rollout
shards ``part-r-<hash>-<shard:06d>-<digest of keys>``, teacher shards ``part-teacher-<hash>-...`` (the same),
imports ``part-import-<hash>-<shard:06d>-<digest>``, training ``part-rl-<hash>-step<step:07d>`` (older
ledgers may hold ``part-sampler-<digest>`` parts of the online sampler's former writer). Run ids are a prefix plus
a fixed-length hash, so ``part-<run_id>-`` names one run's parts. Reads take ``part-*.parquet`` of a model folder
(or of every model folder), in name order, and deduplicate on the key: the first file in name order wins (a part
written twice, by a crash between two runs' claims or a copy, counts once).

Sample numbering, one rule: within one (model, problem), a new sample gets the lowest index that is free, i.e. in
no part of the model's ledger and in no claim of a live writer, and the choice is made under the model ledger's
lock in the same step that claims the index (``claim``) or writes it (``append``). A writer with a target takes
every free index below it (``curate rollout`` with n=8 takes what is free of 0..7, so raising n adds only the new
indices; ``free_indices(used, below=n)``); an open-ended writer takes the next k free ones (training's batches,
the teacher's rounds; ``free_indices(used, count=k)``). Two writers never collide: each
assignment sees every part written and every live claim. A resumed writer never duplicates: a rollout shard is named
by its keys, so a resumed one finds its file and is not redone; ``append`` replaces a part of the same name and does
not count that part's own rows as used, so a resumed training step gets its indices back instead of new ones.
Imported generations are the one exception: they keep the index their dataset gives them (position in its list of
generations), so that re-importing the file finds the same keys. Parts numbered by the older rules read as they
are: training's ``base + (step - 1) * batch_rows + row`` (base: 1 + the model's largest index when the run started)
and the sampler's ``max + 1`` per problem; the rule only asks which indices are used, so new rows fill in around
them (and the read's dedupe keeps one row of a key two old runs started at once may both have written).

Writes are atomic: ``write_part`` writes a temp file beside the part, ``.<part>.<hex>.ledger.tmp``, holding an
``flock`` on it until it is renamed into place. A temp whose lock is free belongs to a dead writer (SIGKILL
included: the kernel frees the lock) and is removed by the next write or read of that model folder
(``clean_temps``); the writer checks after locking that its temp is still the file at that name, so a cleaner that
came between its create and its lock costs it a retry, never a lost part. Temps of writers that do not lock
(``io.write_parquet`` in older code: ``.part-rl-...parquet.<hex>.tmp``) are removed once untouched for
``LEGACY_TEMP_AGE_S``.

Example row (``build_rows``)::

    {"problem_id": "3f9c...", "model": "Qwen/Qwen2.5-Math-1.5B", "sample_idx": 3, "completion": "... \\boxed{5}",
     "verdict": "correct", "correct": True, "reward": 1.0, "temperature": 1.0, "backend": "vllm",
     "run_id": "r-1a2b3c4d5e6f", "step": None, ...}
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import os
import re
import secrets
import socket
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.errors import InputError


KEY = [S.PROBLEM_ID, S.MODEL, S.SAMPLE_IDX]
PART_GLOB = "part-*.parquet"
LEGACY_TEMP_AGE_S = 600.0  # an unlocked temp untouched this long belongs to a dead writer
_TEMP = re.compile(r"^\.part-.+\.parquet\.[0-9a-f]+(\.ledger)?\.tmp$")
_FIXED = (S.PROBLEM_ID, S.MODEL, S.BACKEND, S.RUN_ID, S.CREATED_AT)  # build_rows' own arguments


# --------------------------------------------------------------------------------------------------- names
model_key = io.model_key  # a model's ledger folder name; the rule lives in io, a lower floor (Workspace.ledger_dir)


def folder(ws: io.Workspace, pool: str, model: str | None = None) -> Path:
    """``pools/<pool>/rollouts/`` or, for one model, ``pools/<pool>/rollouts/<model_key(model)>/``."""
    return ws.ledger_dir(pool, model)


def digest(text: str, n: int = 12) -> str:
    """The first ``n`` hex digits of sha256(text): how part names carry the keys they hold."""
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def part_name(run_id: str, label: str, keys_digest: str | None = None) -> str:
    """``part-<run_id>-<label>[-<keys_digest>]`` (no suffix).

    >>> part_name("r-1a2b3c4d5e6f", "000003", "0123456789ab"), part_name("rl-x", "step0000007")
    ('part-r-1a2b3c4d5e6f-000003-0123456789ab', 'part-rl-x-step0000007')
    """
    return f"part-{run_id}-{label}" + (f"-{keys_digest}" if keys_digest else "")


def part_path(ws: io.Workspace, pool: str, model: str, name: str) -> Path:
    """Where part ``name`` (``part_name``) of ``model``'s ledger lives."""
    return folder(ws, pool, model) / f"{name}.parquet"


def _parts(base: Path, *, nested: bool = False) -> list[Path]:
    """The one glob rule: ``part-*.parquet`` in ``base`` (``nested``: in each of its model folders), in name order."""
    if not base.is_dir():
        return []
    found = base.glob(f"*/{PART_GLOB}" if nested else PART_GLOB)
    return sorted(p for p in found if not p.name.startswith(".") and not (nested and p.parent.name.startswith(".")))


def files(ws: io.Workspace, pool: str, model: str | None = None, *, run_id: str | None = None) -> list[Path]:
    """The ledger's part files (every model, or one; only ``run_id``'s when given), in name order."""
    found = _parts(folder(ws, pool, model), nested=model is None)
    if run_id is not None:
        found = [p for p in found if p.name.startswith(f"part-{run_id}-")]
    return found


def files_at(location: str | os.PathLike) -> list[Path]:
    """Part files at a location a user gives: a part file; a model's folder; a ``rollouts/`` folder (every model's
    parts); or a glob of any of these (``ws/pools/p/rollouts/rl-*``). In name order, each file once."""
    path = Path(location)
    if path.is_file():
        return [path]
    if path.is_dir():
        return _parts(path) or _parts(path, nested=True)
    found: list[Path] = []
    for match in sorted(glob.glob(str(location))):
        p = Path(match)
        if p.is_dir():
            found += files_at(p)
        elif p.suffix == ".parquet" and not p.name.startswith("."):
            found.append(p)
    return list(dict.fromkeys(found))


# --------------------------------------------------------------------------------------------------- reads
def dedupe(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """One row per ledger key, the first one seen (rows come in file-name order, then row order)."""
    return frame.unique(subset=KEY, keep="first", maintain_order=True)


def scan_files(
    paths: Sequence[Path], columns: Sequence[str] | None = None, *, file_column: str | None = None
) -> pl.LazyFrame:
    """``columns`` (default: all of schema.ROLLOUTS) of the given part files, lazily, in order, typed as
    schema.ROLLOUTS, not deduplicated. Parts written by older or foreign writers read too: a column a part lacks is
    null, integer columns of another width are cast. ``file_column``: add each row's file path under that name."""
    target = {c: S.ROLLOUTS[c] for c in (list(columns) if columns is not None else list(S.ROLLOUTS))}
    if not paths:
        schema = target | ({file_column: pl.String} if file_column else {})
        return S.empty(pl.Schema(schema)).lazy()
    wide = {c: pl.Int64 if d.is_integer() else d for c, d in target.items()}
    lf = pl.scan_parquet(
        [str(p) for p in paths],
        schema=wide,
        missing_columns="insert",
        extra_columns="ignore",
        cast_options=pl.ScanCastOptions(integer_cast="upcast", float_cast="upcast"),
        include_file_paths=file_column,
    )
    return lf.with_columns(pl.col(c).cast(d) for c, d in target.items() if wide[c] != d)


def collect(frame: pl.LazyFrame, paths: Sequence[Path]) -> pl.DataFrame:
    """``frame.collect()`` for a scan of the part files ``paths``. When polars cannot read one (a part damaged on
    disk), the error names that part and the command that sets it aside (``DamagedPart``) instead of polars' words,
    which name no file."""
    try:
        return frame.collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        for path in paths:
            problem = _unreadable(path)
            if problem is not None:
                raise DamagedPart(path, problem) from None
        raise exc from None


def read_files(paths: Sequence[Path], columns: Sequence[str] | None = None) -> pl.DataFrame:
    """``scan_files(paths, columns)`` collected, a damaged part named (``collect``); not deduplicated."""
    return collect(scan_files(paths, columns), paths)


class DamagedPart(InputError):
    """A ledger part polars cannot read. One line: the part, what is wrong, and how to set it aside: renamed
    ``damaged-part-....parquet`` it leaves the one glob rule (``PART_GLOB``), so every read, the stats (recomputed
    in full when a part goes) and every count leave its rows out, and ``curate rollout`` with the same settings
    samples the missing ones again (its shards are cut by what the ledger lacks)."""

    def __init__(self, path: Path, problem: str) -> None:
        import shlex

        aside = path.with_name(f"damaged-{path.name}")
        rows = _row_count(path)
        super().__init__(
            f"ledger part {path} is damaged ({problem}); set it aside and run the command again: mv "
            f"{shlex.quote(str(path))} {shlex.quote(str(aside))} ({rows or 'its'} rows then leave the ledger and "
            "every count; `curate rollout` samples missing rows again)"
        )
        self.path = path


def _unreadable(path: Path) -> str | None:
    """What polars says about reading the part at ``path`` whole, or None when it reads."""
    try:
        pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _row_count(path: Path) -> int | None:
    """The rows a part's footer records, when the footer itself still reads."""
    try:
        return int(pl.scan_parquet(path).select(pl.len()).collect().item())
    except (pl.exceptions.PolarsError, OSError):
        return None


def scan(
    ws: io.Workspace,
    pool: str,
    model: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    run_id: str | None = None,
    file_column: str | None = None,
) -> pl.LazyFrame:
    """The ledger (every model, or one; only ``run_id``'s parts when given), lazily, deduplicated on the key.

    ``columns`` (default all) always gain the key columns. ``file_column``: each row's part file, relative to the
    pool's folder (``rollouts/<model>/part-....parquet``). Temp files of dead writers are removed first.
    """
    _clean(ws, pool, model)
    cols = list(columns) if columns is not None else list(S.ROLLOUTS)
    cols += [k for k in KEY if k not in cols]
    lf = scan_files(files(ws, pool, model, run_id=run_id), cols, file_column=file_column)
    if file_column:
        lf = lf.with_columns(pl.col(file_column).str.strip_prefix(f"{ws.pool_dir(pool)}{os.sep}"))
    return dedupe(lf)


def read(
    ws: io.Workspace,
    pool: str,
    model: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    run_id: str | None = None,
    file_column: str | None = None,
) -> pl.DataFrame:
    """``scan`` collected: the ledger as a frame, one row per key (the first file in name order wins); a part polars
    cannot read is named (``collect``)."""
    lf = scan(ws, pool, model, columns=columns, run_id=run_id, file_column=file_column)
    return collect(lf, files(ws, pool, model, run_id=run_id))


def taken(
    ws: io.Workspace,
    pool: str,
    model: str,
    problem_ids: Iterable[str] | None = None,
    *,
    exclude: Path | None = None,
) -> dict[str, set[int]]:
    """Indices in use per problem (of ``problem_ids``, or all): in a part of the model's ledger other than
    ``exclude``, or claimed by a live writer. Call under the model ledger's lock (``claim`` and ``append`` do).

    The claims are read before the parts are listed: a claim holder writes its part (without the ledger lock) and
    only then releases its claim, so a claim gone by the time it is read has its part in place for the listing
    that follows. The other order lets a part renamed between the listing and the claims' reading go unseen,
    and its samples be generated twice (two rollouts of one model at once, under load)."""
    wanted = None if problem_ids is None else set(problem_ids)
    used: dict[str, set[int]] = {}
    for rec in live_claims(claims_dir(ws, pool, model)):
        for pid, idx in rec["keys"]:
            if wanted is None or pid in wanted:
                used.setdefault(pid, set()).add(idx)
    parts = [p for p in files(ws, pool, model) if p != exclude]
    lf = scan_files(parts, [S.PROBLEM_ID, S.SAMPLE_IDX])
    if wanted is not None:
        lf = lf.filter(pl.col(S.PROBLEM_ID).is_in(sorted(wanted)))
    for pid, idx in collect(lf.unique(), parts).iter_rows():
        used.setdefault(pid, set()).add(idx)
    return used


# --------------------------------------------------------------------------------------------------- numbering
def free_indices(used: Collection[int], *, below: int | None = None, count: int | None = None) -> tuple[int, ...]:
    """The numbering rule: the lowest indices not in ``used``; every one below ``below`` (a writer with a target),
    or the first ``count`` (an open-ended writer). Give exactly one of the two.

    >>> free_indices({0, 1, 3}, below=5), free_indices({0, 1, 3}, count=3)
    ((2, 4), (2, 4, 5))
    """
    if (below is None) == (count is None):
        raise ValueError("free_indices: give one of below= and count=")
    if below is not None:
        return tuple(i for i in range(below) if i not in used)
    out: list[int] = []
    i = 0
    while len(out) < count:
        if i not in used:
            out.append(i)
        i += 1
    return tuple(out)


def number(rows: pl.DataFrame, used: Mapping[str, Collection[int]] | None = None) -> pl.DataFrame:
    """``rows`` with every null sample_idx set by the rule: per problem, in row order, the lowest indices that are
    neither in ``used`` nor on another of ``rows``. Rows that carry an index keep it.

    >>> rows = pl.DataFrame({"problem_id": ["a", "b", "a"], "sample_idx": [None, None, None]},
    ...                     schema_overrides={"sample_idx": pl.Int32})
    >>> number(rows, {"a": {0, 2}})["sample_idx"].to_list()
    [1, 0, 3]
    """
    pids, idxs = rows[S.PROBLEM_ID].to_list(), rows[S.SAMPLE_IDX].to_list()
    busy = {pid: set(v) for pid, v in (used or {}).items()}
    for pid, idx in zip(pids, idxs, strict=True):
        if idx is not None:
            busy.setdefault(pid, set()).add(idx)
    need = Counter(pid for pid, idx in zip(pids, idxs, strict=True) if idx is None)
    fresh = {pid: iter(free_indices(busy.get(pid, ()), count=k)) for pid, k in need.items()}
    out = [idx if idx is not None else next(fresh[pid]) for pid, idx in zip(pids, idxs, strict=True)]
    return rows.with_columns(pl.Series(S.SAMPLE_IDX, out, dtype=S.ROLLOUTS[S.SAMPLE_IDX]))


# --------------------------------------------------------------------------------------------------- rows
def build_rows(
    model: str,
    problem_ids: Sequence[str],
    values: Mapping[str, Any] | None = None,
    *,
    backend: str,
    run_id: str,
    created_at: dt.datetime | None = None,
) -> pl.DataFrame:
    """Ledger rows (schema.ROLLOUTS), one per problem id, in the order given.

    ``values`` maps other ROLLOUTS columns to one value per row (a list, tuple or Series) or to one value for every
    row (the sampling parameters, ``step``); a column left out is null. ``sample_idx`` left out or null is assigned
    when the rows are ``append``-ed. ``correct`` left out is ``verdict == "correct"`` where a verdict is given; a NaN
    reward is null (no reward). ``created_at`` defaults to now.

    >>> f = build_rows("m", ["a", "b"], {"verdict": ["correct", None], "reward": [1.0, float("nan")],
    ...                "temperature": 0.7, "step": 3}, backend="trl", run_id="rl-x")
    >>> f["correct"].to_list(), f["reward"].to_list(), f["temperature"].to_list(), f["sample_idx"].null_count()
    ([True, False], [1.0, None], [0.7, 0.7], 2)
    """
    values = dict(values or {})
    bad = sorted(set(values) - set(S.ROLLOUTS)) + sorted(set(values) & set(_FIXED))
    if bad:
        raise ValueError(f"build_rows: {bad} are not columns it takes in `values`")
    n = len(problem_ids)
    values |= {
        S.PROBLEM_ID: list(problem_ids),
        S.MODEL: model,
        S.BACKEND: backend,
        S.RUN_ID: run_id,
        S.CREATED_AT: created_at or dt.datetime.now(dt.UTC),
    }
    cols = {}
    for name, dtype in S.ROLLOUTS.items():
        v = values.get(name)
        if isinstance(v, str) or not hasattr(v, "__len__"):
            v = [v] * n
        elif len(v) != n:
            raise ValueError(f"build_rows: {len(v)} values of {name!r} for {n} rows")
        cols[name] = pl.Series(name, list(v), dtype=dtype)
    frame = pl.DataFrame(cols).with_columns(pl.col(S.REWARD).fill_nan(None))
    if S.CORRECT not in values and S.VERDICT in values:
        frame = frame.with_columns((pl.col(S.VERDICT) == "correct").fill_null(False).alias(S.CORRECT))
    return frame


# --------------------------------------------------------------------------------------------------- writes
def write_part(frame: pl.DataFrame, path: Path) -> Path:
    """Write numbered ledger rows as one part, atomically: a locked temp file beside ``path``, fsync, rename
    (replacing a part of the same name). Temp files of dead writers in the folder are removed first."""
    frame = S.validate(frame, S.ROLLOUTS, table="rollouts")
    if frame[S.SAMPLE_IDX].null_count():
        raise ValueError(f"{path.name}: rows without a sample_idx; number them (`append` does)")
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_temps(path.parent)
    fd, tmp = _locked_temp(path)
    try:
        with io.naming(path), os.fdopen(os.dup(fd), "wb") as fh:  # a full disk: one line naming the part
            frame.write_parquet(fh, compression="zstd", statistics=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)  # releases the temp's lock, after the rename
    return path


def append(ws: io.Workspace, pool: str, model: str, rows: pl.DataFrame, *, part: str) -> Path:
    """Number ``rows`` by the rule and write them as part ``part`` (``part_name``) of ``model``'s ledger, both under
    the model ledger's lock, so no other writer takes the same indices meanwhile. A part of that name already there
    is replaced and its rows do not count as used: a resumed writer rewrites its part with the same indices."""
    path = part_path(ws, pool, model, part)
    with ws.lock("ledger", f"{pool}/{model}"):
        need = rows.filter(pl.col(S.SAMPLE_IDX).is_null())[S.PROBLEM_ID].unique().to_list()
        used = taken(ws, pool, model, need, exclude=path) if need else {}
        return write_part(number(rows, used), path)


def _locked_temp(path: Path) -> tuple[int, Path]:
    """A new temp file beside ``path`` (mode 0666 & ~umask), created and ``flock``-ed by this process: (fd, path)."""
    import fcntl

    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.ledger.tmp")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)  # a cleaner removed it between our create and our lock: take another name


def clean_temps(directory: Path) -> list[str]:
    """Remove the part temp files dead writers left in one model folder; returns their names.

    A ``write_part`` temp whose ``flock`` is free goes at once; an unlocked legacy temp (``io.write_parquet``) once
    untouched for ``LEGACY_TEMP_AGE_S``. Safe from any process at any time, without the ledger lock; a file that
    cannot be opened or removed (another user's workspace) is left.
    """
    import fcntl

    if not directory.is_dir():
        return []
    removed = []
    for p in directory.iterdir():
        m = _TEMP.match(p.name)
        if m is None:
            continue
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while its writer lives
            st = os.fstat(fd)
            if m.group(1) is None and time.time() - st.st_mtime < LEGACY_TEMP_AGE_S:
                continue
            if os.stat(p).st_ino == st.st_ino:
                p.unlink()
                removed.append(p.name)
        except OSError:
            continue
        finally:
            os.close(fd)
    return sorted(removed)


def _clean(ws: io.Workspace, pool: str, model: str | None) -> None:
    base = folder(ws, pool, model)
    if model is not None:
        clean_temps(base)
    elif base.is_dir():
        for sub in base.iterdir():
            if sub.is_dir() and not sub.name.startswith("."):
                clean_temps(sub)


# --------------------------------------------------------------------------------------------------- claims
@dataclass
class Claim:
    """Samples a writer is generating, announced to the other writers of the model until ``release``.

    ``keys``: problem_id -> the claimed sample indices. A claim is a record (``<token>.json``: pid, host, run id,
    keys) beside a lock file this process holds (``filelock``, an ``flock``): if the process dies, SIGKILL
    included, the kernel frees the lock and the next writer treats the record as stale, so a killed writer's
    samples are taken over, never blocked.
    """

    keys: dict[str, tuple[int, ...]]
    record: Path
    lock: Any

    def release(self) -> None:
        self.record.unlink(missing_ok=True)
        self.lock.release()
        Path(self.lock.lock_file).unlink(missing_ok=True)


def claims_dir(ws: io.Workspace, pool: str, model: str) -> Path:
    """``locks/ledger-<pool>__<model>.claims/``: the live claims on one model's ledger."""
    return ws.lock_path("ledger", f"{pool}/{model}").with_suffix(".claims")


def live_claims(directory: Path) -> list[dict[str, Any]]:
    """Records of the claims whose holder is alive; a dead holder's record and lock file are removed.

    Call under the ledger lock (``claim`` and ``append`` do), so no claim is being created or checked meanwhile.
    """
    from filelock import FileLock, Timeout

    out: list[dict[str, Any]] = []
    if not directory.is_dir():
        return out
    for lock_file in sorted(directory.glob("*.lock")):
        record = lock_file.with_suffix(".json")
        probe = FileLock(str(lock_file))  # a new descriptor: busy while the holder (even this process) has it
        try:
            probe.acquire(blocking=False)
        except Timeout:
            if record.is_file():
                out.append(json.loads(record.read_text(encoding="utf-8")))
            continue
        record.unlink(missing_ok=True)
        probe.release()
        lock_file.unlink(missing_ok=True)
    return out


def claim(
    ws: io.Workspace, pool: str, model: str, wanted: Mapping[str, Sequence[int]], *, run_id: str
) -> Claim | None:
    """Claim the free part of ``wanted`` (problem_id -> sample indices): under the model ledger's lock, leave out
    the indices in the ledger or claimed by a live writer, and claim the rest; None when nothing is left."""
    from filelock import FileLock

    with ws.lock("ledger", f"{pool}/{model}"):
        used = taken(ws, pool, model, wanted)
        keys = {pid: tuple(i for i in idxs if i not in used.get(pid, ())) for pid, idxs in wanted.items()}
        keys = {pid: idxs for pid, idxs in keys.items() if idxs}
        if not keys:
            return None
        directory = claims_dir(ws, pool, model)
        directory.mkdir(parents=True, exist_ok=True)
        token = f"{os.getpid()}-{secrets.token_hex(4)}"
        lock = FileLock(str(directory / f"{token}.lock"))
        lock.acquire(blocking=False)
        record = directory / f"{token}.json"
        io.write_json(
            record,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "run_id": run_id,
                "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "keys": [[pid, i] for pid, idxs in keys.items() for i in idxs],
            },
        )
        return Claim(keys, record, lock)
