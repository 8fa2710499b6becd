"""The replay simulator: policy parsing, starting pass rates from ledger evidence, and policy comparisons on a small
curriculum (real parquet and plan folder; in-memory otherwise, no network)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.cli import main as cli_main
from curate.config import ConfigError
from curate.curriculum.sampler import SamplerConfig
from curate.curriculum.simulate import SimulateConfig, initial_pass_rates, policy_config, run_simulation, stage_steps
from curate.curriculum.stage import CurriculumConfig, build
from curate.manifest import Manifest, write_manifest


def test_policy_names():
    base = SamplerConfig(seed=4)
    cfg = policy_config("des+filters", base)
    assert (cfg.policy, cfg.zero_variance_skip, cfg.no_positive_resampling, cfg.seed) == ("scalingrl", True, True, 4)
    cfg = policy_config("uniform+npr", base)
    assert (cfg.policy, cfg.zero_variance_skip, cfg.no_positive_resampling) == ("uniform", False, True)
    for bad in ("greedy", "des+magic"):
        with pytest.raises(ConfigError):
            policy_config(bad, base)
    with pytest.raises(ConfigError):
        SimulateConfig(policies=("uniform", "des+zz"))


def test_stage_steps_share_out_the_total():
    assert stage_steps([160, 590, 230, 580], 100) == [10, 38, 15, 37]
    assert sum(stage_steps([1, 1, 1], 10)) == 10
    assert stage_steps([1000, 1], 5) == [5, 1]  # every stage runs at least one step


def test_initial_pass_rates_from_evidence():
    problems = pl.DataFrame({S.PROBLEM_ID: ["a", "b", "c"], S.PASS_RATE: [0.9, 0.4, None]})
    stats = pl.DataFrame({S.PROBLEM_ID: ["a"], S.ALPHA: [3.0], S.BETA: [1.0]})
    truth, counts = initial_pass_rates(problems, stats, SimulateConfig(init="mean"), np.random.default_rng(0))
    assert truth.tolist() == [0.75, 0.4, 0.5] and counts == {"ledger": 1, "prior": 1, "default": 1}
    sampled, _ = initial_pass_rates(problems, stats, SimulateConfig(init="sample"), np.random.default_rng(0))
    assert sampled[0] != 0.75 and sampled[1:].tolist() == [0.4, 0.5]
    prior_only, counts = initial_pass_rates(problems, None, SimulateConfig(), np.random.default_rng(0))
    assert counts == {"ledger": 0, "prior": 2, "default": 1} and prior_only.tolist() == [0.9, 0.4, 0.5]


def hard_and_easy_curriculum(ws: io.Workspace, n: int = 120) -> None:
    """A selection where most problems are solved or unsolvable (ledger stats say so), a few are learnable."""
    rng = np.random.default_rng(0)
    ids = [f"{i:016x}" for i in range(n)]
    kind = rng.choice(["solved", "unsolvable", "learnable"], size=n, p=[0.4, 0.3, 0.3])
    k = np.where(kind == "solved", 8, np.where(kind == "unsolvable", 0, 3))
    sel = pl.DataFrame({
        S.PROBLEM_ID: ids, S.PROBLEM: [f"Problem {i}" for i in range(n)], S.ANSWER: ["1"] * n,
        S.ANSWER_ALTERNATIVES: [["1"]] * n, S.SOURCE: ["synthetic"] * n, S.SPLIT: ["train"] * n,
        S.RANK: list(range(n)), S.CLUSTER: [0] * n, S.PASS_RATE: ((k + 1) / 10).tolist(), S.DES: [0.5] * n,
        S.PROMPT_CHARS: [10] * n,
    }, schema_overrides={S.RANK: pl.Int32, S.CLUSTER: pl.Int32, S.PROMPT_CHARS: pl.Int32})  # fmt: skip
    path = ws.selection_dir("sel") / "selection.parquet"
    io.write_parquet(sel, path, S.SELECTIONS)
    write_manifest(path.parent, Manifest(stage="select", config={"pool": "demo"}))
    stats = pl.DataFrame({
        S.PROBLEM_ID: ids, S.MODEL: ["m"] * n, S.N_SAMPLES: [8] * n, S.N_CORRECT: k.tolist(),
        S.ALPHA: (k + 0.05).tolist(), S.BETA: (8 - k + 0.05).tolist(),
    })  # fmt: skip
    stats = stats.with_columns(
        pl.col(S.N_SAMPLES).cast(pl.Int32), pl.col(S.N_CORRECT).cast(pl.Int32),
        *(pl.lit(None, dtype).alias(c) for c, dtype in S.STATS.items() if c not in stats.columns),
    )  # fmt: skip
    io.write_parquet(stats, ws.table("demo", "stats"), S.STATS)
    sampler = SamplerConfig(size=40, epochs=5, backoff_max=4)
    build(ws, CurriculumConfig(name="c", selection="sel", plan="scalingrl", prompt_batch=16, sampler=sampler))


def test_filters_raise_the_signal_fraction(ws):
    hard_and_easy_curriculum(ws)
    cfg = SimulateConfig(policies=("uniform", "des", "des+filters", "uniform+filters"), steps=60, seed=0)
    result = run_simulation(ws, "c", cfg)
    p = result["policies"]
    assert result["evidence"] == {"pool": "demo", "model": "m", "ledger": 120, "prior": 0, "default": 0}
    assert p["des+filters"]["signal_fraction"] > p["uniform"]["signal_fraction"] + 0.2
    assert p["uniform+filters"]["signal_fraction"] > p["uniform"]["signal_fraction"]
    assert p["des+filters"]["wasted_rollouts"] < p["uniform"]["wasted_rollouts"]
    assert p["uniform"]["backoff_skips"] == 0 and p["des+filters"]["backoff_skips"] > 0
    for row in p.values():
        assert row["groups"] == 60 * 16 or row["stopped_early"]
        assert row["final_pass_rate"] >= row["initial_pass_rate"]
        assert row["rollouts"] == row["groups"] * 8
    folder = ws.curriculum_dir("c")
    assert (folder / "simulation.png").is_file()
    assert json.loads((folder / "simulation.json").read_text())["policies"]["uniform"] == json.loads(
        json.dumps(p["uniform"])
    )
    assert run_simulation(ws, "c", cfg)["policies"] == p  # deterministic


def test_cli_simulate(ws, capsys):
    hard_and_easy_curriculum(ws, n=40)
    assert cli_main(["simulate", "--curriculum", "c", "--policies", "uniform,des+filters", "--steps", "20",
                     "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"uniform", "des+filters"} and out["steps"] == 20
    assert cli_main(["simulate", "--curriculum", "nope"]) == 2
