"""Shared clustering helpers: seeded k-means labels over problem embeddings, used by score and select.

Kept below the stages so select never reaches into score: both call these with the embeddings from
``curate.embed``'s cache.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from curate import io
from curate.config import from_mapping


def kmeans_clusters(embeddings: np.ndarray | None, k: int, seed: int) -> np.ndarray:
    """Seeded MiniBatchKMeans labels (int32); one cluster (all 0) without embeddings or with k <= 1.

    Rows must come in a fixed order (sorted by problem_id) for the labels to be reproducible.
    """
    n = 0 if embeddings is None else len(embeddings)
    k = min(k, n)
    if k <= 1:
        return np.zeros(n, dtype=np.int32)
    from sklearn.cluster import MiniBatchKMeans

    km = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=3, batch_size=4096, max_iter=100)
    with one_blas_thread():
        return km.fit_predict(np.asarray(embeddings, dtype=np.float32)).astype(np.int32)


def one_blas_thread():
    """Run BLAS single-threaded: k-means++ and the small Ridge solves make many small BLAS calls, and threaded
    BLAS spent its time waking threads (k-means 7x slower on a busy 2-core box); the big products here take
    about a second single-threaded even at 220K rows. sklearn's own OpenMP loops are untouched."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def embed_pool(ws: io.Workspace, problems: pl.DataFrame, embed: Any, progress: bool) -> np.ndarray:
    """Embeddings aligned with ``problems`` rows through the shared, cached encoder (``curate.embed``).

    ``embed`` is an ``EmbedConfig`` (the typed ``score.embed`` / ``select.embed`` sections) or a mapping of its
    settings."""
    from curate.embed import EmbedConfig, embed_problems

    cfg = embed if isinstance(embed, EmbedConfig) else from_mapping(EmbedConfig, embed, "embed")
    return embed_problems(ws, problems, cfg, progress)
