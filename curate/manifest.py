"""Manifests: what produced an output, and whether it is still up to date.

Every output (a table ``x.parquet``, or a folder) has a manifest beside it (``manifest_path``: ``x.manifest.json``,
or ``<folder>/manifest.json``), one layout for every stage (``Manifest``): the inputs with their content hashes
(``file_hash``), the config, the code version (``code_version``: the curate-rl version plus a hash of the package's
sources) and package versions, row counts, drops by reason, the summary the stage reported, and what each output
looked like when written (``output_identity``). ``fingerprint`` hashes inputs + config + code: equal fingerprints
mean the output is up to date, which is what the stage wrapper's skip-if-done rests on (curate.stage_wrapper).

Example ``problems.manifest.json`` (trimmed)::

    {"stage": "ingest", "fingerprint": "3f2a...", "inputs": {"pools/demo/raw/gsm8k.parquet": "9c1e..."},
     "config": {"pool": "demo"}, "code_version": "0.1.0+a1b2c3d4e5f6", "rows_in": 40, "rows_out": 38,
     "drops": {"missing_answer": 2}, "outputs": {"pools/demo/problems.parquet": "size:18234"}}
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from curate.io import write_json


_VERSIONED = ("curate-rl", "polars", "pyarrow", "math-verify", "datasets", "sentence-transformers", "scikit-learn")


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
