"""All workspace I/O: paths, atomic Parquet writes, manifests, and skip-if-done.

Layout under the root (``--home``, env ``CURATE_HOME``, default ``./workspace``)::

    pools/<pool>/problems.parquet        + problems.manifest.json
    pools/<pool>/quarantine.parquet
    pools/<pool>/raw/<source-key>.parquet  one per ingested source (what "adds only what is new" rests on)
    pools/<pool>/rollouts/<model>/part-*.parquet   the append-only ledger, one file per finished shard
    pools/<pool>/stats.parquet, scores.parquet, ...
    cache/embeddings/<encoder>/part-*.parquet      keyed by problem_id, shared by every pool
    selections/<name>/   curricula/<name>/          each with a manifest.json

Every table is written to a temporary file in the same folder and renamed into place, so a reader (or a crash)
never sees half a file. A manifest records inputs with content hashes, the config, package versions, row counts
and drops by reason; a stage whose fingerprint (inputs + config) matches its manifest is skipped on re-run.
Object stores are a later concern: they would be added here and nowhere else.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from curate import schema as S


ENV_HOME = "CURATE_HOME"
DEFAULT_HOME = "workspace"
_VERSIONED = ("curate-rl", "polars", "pyarrow", "math-verify", "datasets", "sentence-transformers", "scikit-learn")


# --------------------------------------------------------------------------------------------------- workspace
@dataclass(frozen=True)
class Workspace:
    """The root folder of everything a run produces, with one method per kind of path."""

    root: Path

    @classmethod
    def resolve(cls, home: str | os.PathLike | None = None) -> Workspace:
        """``home`` if given, else ``$CURATE_HOME``, else ``./workspace``."""
        return cls(Path(home or os.environ.get(ENV_HOME) or DEFAULT_HOME).expanduser().resolve())

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
            raise FileNotFoundError(
                f"pool {pool!r} not found under {self.root} (pools: {have}); create it with `curate ingest ... "
                f"--pool {pool}`"
            )
        return path


# --------------------------------------------------------------------------------------------------- parquet
def write_parquet(df: pl.DataFrame, path: str | os.PathLike, schema: pl.Schema | None = None) -> Path:
    """Write ``df`` atomically (temp file in the same folder, fsync, rename), validated first if a schema is given."""
    path = Path(path)
    if schema is not None:
        df = S.validate(df, schema, table=path.stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        df.write_parquet(tmp, compression="zstd", statistics=True)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


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


def config_hash(config: Any) -> str:
    """sha256 of a config's canonical JSON (dataclasses are converted with ``asdict``)."""
    if hasattr(config, "__dataclass_fields__"):
        config = asdict(config)
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


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

    def seal(self) -> Manifest:
        """Set the fingerprint from inputs and config (call before writing)."""
        self.fingerprint = fingerprint(self.inputs, self.config)
        return self


def fingerprint(inputs: Mapping[str, str], config: Any) -> str:
    """One hash over input content hashes and the config: equal fingerprints mean the output is up to date."""
    payload = json.dumps({"inputs": dict(sorted(inputs.items())), "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


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
