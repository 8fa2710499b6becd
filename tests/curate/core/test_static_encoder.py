"""The static encoder (``static-minilm``, distilled from the bundled MiniLM by curate.embed), encoder keys, thresholds.

Hermetic and fast: the distillation runs the real code (real transformers, real tokenizer, real parquet cache) on a
tiny random BERT that shares MiniLM's tokenizer, standing in for MiniLM (``encoder_path`` is pointed at it), so the
whole static path (distill on first use, save in the workspace, encode, cache, resume) runs in seconds. The one test
with the real distilled MiniLM is marked slow (the distillation is ~1 min of CPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from curate import embed as E
from curate import io
from curate import schema as S
from curate.config import ConfigError
from curate.decontaminate.dedup import DedupConfig
from curate.decontaminate.stage import DecontamConfig, decontaminate_pool, with_thresholds
from curate.manifest import read_manifest
from tests.curate.core import test_embed
from tests.curate.core.test_embed import problems


TEXTS = [*test_embed.TEXTS, "Let $f(x) = 3x + 1$. Find $f(2)$.", "A circle has radius 5. What is its area?"]
STATIC_KEY = f"{E.STATIC}-{E.STATIC_DIMS}d-v{E.STATIC_VERSION}"
STATIC = E.EmbedConfig(encoder="static-minilm")


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide random BERT saved with MiniLM's tokenizer: distills in about a second."""
    import torch
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64,
    )  # fmt: skip
    BertModel(config).eval().save_pretrained(folder)
    shutil.copy(Path(E.encoder_path(E.MINILM)) / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture
def tiny_default(tiny_bert, monkeypatch) -> Path:
    """Point the static model's source (MiniLM) at the tiny BERT for this test."""
    monkeypatch.setattr(E, "encoder_path", lambda name: str(tiny_bert))
    return tiny_bert


def test_default_is_minilm_and_keys_never_mix():
    keys = {
        E.encoder_key(STATIC),
        E.encoder_key(E.EmbedConfig(encoder="minilm", dtype="float32")),
        E.encoder_key(E.EmbedConfig(encoder="minilm", dtype="bfloat16")),
        E.encoder_key(E.EmbedConfig(encoder="some/other-model", dtype="float32")),
    }
    assert keys == {STATIC_KEY, "minilm", "minilm@bf16", "some/other-model"}  # four encoders, four caches
    assert E.encoder_key(E.EmbedConfig(dtype="float32")) == "minilm"  # "default" is only an alias, never a key
    assert E.encoder_key(E.EmbedConfig(encoder="static-minilm", dtype="bfloat16")) == STATIC_KEY  # no precision knob
    assert E.thresholds("default") == E.THRESHOLDS[E.MINILM] != E.THRESHOLDS[E.STATIC]
    with pytest.raises(ConfigError, match=r"embed_threshold and decontaminate\.dedup\.threshold"):
        E.thresholds("some/other-model")


def test_thresholds_come_from_the_encoder_unless_given():
    static = with_thresholds(DecontamConfig(embed=STATIC))
    assert static.embed_threshold == E.THRESHOLDS[E.STATIC].contamination
    assert static.dedup.threshold == E.THRESHOLDS[E.STATIC].near_duplicate
    minilm = with_thresholds(DecontamConfig())
    assert (minilm.embed_threshold, minilm.dedup.threshold) == (0.85, 0.95)
    other = E.EmbedConfig(encoder="some/other-model")
    with pytest.raises(ConfigError, match="no calibrated thresholds"):
        with_thresholds(DecontamConfig(embed=other))
    given = DecontamConfig(embed=other, embed_threshold=0.7, dedup=DedupConfig(threshold=0.9))
    assert with_thresholds(given) == given  # explicit values are kept, the uncalibrated encoder is fine then


def test_distillation_follows_the_recipe(tiny_bert):
    E._DISTILLED.pop(str(tiny_bert), None)
    tok_json, table = E.distill_static(str(tiny_bert))
    assert table.shape == (30522, 32) and table.dtype == np.float32  # PCA keeps min(256, width) components
    assert np.array_equal(table, table.astype(np.float16).astype(np.float32))  # stored as float16
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_str(tok_json).get_vocab()
    unused = [i for t, i in vocab.items() if t.startswith("[unused")]
    assert unused and not table[unused].any()  # [unusedN] tokens are left out, as model2vec does
    used = np.delete(np.arange(len(table)), unused)
    assert np.count_nonzero(np.abs(table[used]).sum(axis=1)) == len(used)
    E._DISTILLED.pop(str(tiny_bert))
    assert np.array_equal(E.distill_static(str(tiny_bert))[1], table)  # deterministic


def test_static_path_distills_once_per_workspace_and_encodes_a_bag_of_tokens(tiny_default, ws, capsys, monkeypatch):
    vecs = E.embed_problems(ws, problems(TEXTS), E.EmbedConfig(encoder="static-minilm", chunk_size=3), progress=True)
    err = capsys.readouterr().err
    assert "distilling the static encoder" in err and "embedding: 7 problems in" in err
    assert vecs.shape == (7, 32) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    folder = ws.root / "cache" / "encoders" / STATIC_KEY
    assert {p.name for p in folder.iterdir()} == {"tokenizer.json", "table.npy", "meta.json"}
    assert E.cache_summary(ws, STATIC)["cached"] == 7

    # a text's vector is the normalized mean of its tokens' rows, whatever their order
    model = E.load_static(ws)
    ids = model.tokenizer.encode(TEXTS[1], add_special_tokens=False).ids
    mean = model.table[ids].mean(axis=0)
    assert np.allclose(vecs[1], mean / np.linalg.norm(mean), atol=1e-5)
    swapped = E.encode_texts(model, ["2 + 3. Compute"], E.EmbedConfig())
    assert np.allclose(swapped[0], vecs[1], atol=1e-5)

    # later processes read the saved model: no distillation, the same vectors
    monkeypatch.setattr(E, "distill_static", lambda *a, **k: pytest.fail("must not distill again"))
    E._read_static.cache_clear()
    again = E.encode_texts(E.load_static(ws), TEXTS, E.EmbedConfig())
    assert np.allclose(again, vecs, atol=1e-6)


KILL_AFTER_TWO_CHUNKS = """
import os, signal, sys
import polars as pl
from curate import embed as E, io, schema as S
E.encoder_path = lambda name: sys.argv[2]
ws = io.Workspace.resolve(sys.argv[1])
texts = sys.argv[3:]
frame = pl.DataFrame({S.PROBLEM_ID: [S.problem_id(t) for t in texts], S.PROBLEM: texts})
real, written = E.write_cache_part, []
def write_then_die(*args):
    real(*args)
    written.append(1)
    if len(written) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: what a kill -9 or an OOM kill does
E.write_cache_part = write_then_die
E.embed_problems(ws, frame, E.EmbedConfig(encoder="static-minilm", chunk_size=2))
"""


def test_a_killed_embedding_keeps_its_finished_chunks_and_resumes(tiny_default, ws, monkeypatch):
    E.load_static(ws)  # the model is saved first (as after any earlier run), so the child needs no torch
    script = [sys.executable, "-c", textwrap.dedent(KILL_AFTER_TWO_CHUNKS), str(ws.root), str(tiny_default)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([*script, *TEXTS], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert E.cache_summary(ws, STATIC)["cached"] == 4  # two chunks of 2 survived the kill

    encoded: list[int] = []
    real = E.encode_texts
    monkeypatch.setattr(
        E, "encode_texts", lambda m, texts, *a, **k: encoded.append(len(texts)) or real(m, texts, *a, **k)
    )
    resumed = E.embed_problems(ws, problems(TEXTS), E.EmbedConfig(encoder="static-minilm", chunk_size=2))
    assert encoded == [3]  # only the rest
    fresh = E.encode_texts(E.load_static(ws), TEXTS, E.EmbedConfig())
    assert np.allclose(resumed, fresh, atol=1e-6)  # the kept vectors are the ones a full run gives


def _pool(ws: io.Workspace) -> None:
    train = [(t, str(i)) for i, t in enumerate(TEXTS)]
    rows = [{S.PROBLEM_ID: S.problem_id(t), S.PROBLEM: t, S.ANSWER: a, S.SPLIT: "train"} for t, a in train]
    test = "Find the area of a circle of radius 5."
    rows.append({S.PROBLEM_ID: S.problem_id(test), S.PROBLEM: test, S.ANSWER: "25\\pi", S.SPLIT: "test"})
    frame = pl.concat([S.empty(S.PROBLEMS), pl.DataFrame(rows)], how="diagonal_relaxed").with_columns(
        pl.lit("src").alias(S.SOURCE), pl.int_range(pl.len()).cast(pl.Int64).alias(S.SOURCE_ROW)
    )
    io.write_parquet(frame.sort(S.PROBLEM_ID), ws.table("p", "problems"), S.PROBLEMS)


def test_manifests_record_the_encoder_and_its_thresholds(tiny_default, ws):
    _pool(ws)
    result = decontaminate_pool(ws, "p", DecontamConfig(verify_answers=False, embed=STATIC))
    assert result.summary["encoder"] == STATIC_KEY
    t = E.THRESHOLDS[E.STATIC]
    assert result.summary["thresholds"] == {"embedding": t.contamination, "near_duplicate": t.near_duplicate}
    config = read_manifest(ws.table("p", "filters"))["config"]
    assert config["encoder_key"] == STATIC_KEY and config["embed_threshold"] == t.contamination
    assert config["dedup"]["threshold"] == t.near_duplicate
    assert decontaminate_pool(ws, "p", DecontamConfig(verify_answers=False, embed=STATIC)).skipped
    again = DecontamConfig(verify_answers=False, embed=STATIC, embed_threshold=0.99)
    assert decontaminate_pool(ws, "p", again).skipped is False  # an explicit threshold is a new config


@pytest.mark.slow
def test_the_real_distilled_minilm_separates_rewordings_from_other_problems(ws):
    """The real static encoder (distilled from the bundled MiniLM, ~1 min of CPU once per session)."""
    vecs = E.embed_problems(
        ws,
        problems(
            [
                "Compute the sum of all positive divisors of 36.",
                "Compute the sum of all the positive divisors of 36.",
                "Alice has 3 apples and buys 4 more. How many apples does she have now?",
            ]
        ),
        STATIC,
    )
    assert vecs.shape == (3, E.STATIC_DIMS)
    sims = vecs @ vecs.T
    t = E.THRESHOLDS[E.STATIC]
    assert sims[0, 1] >= t.near_duplicate  # a one-word rewording is a near duplicate
    assert sims[0, 2] < t.contamination  # an unrelated problem is not even a candidate
