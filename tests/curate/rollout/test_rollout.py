"""The rollout stage end to end on a tiny local model (hf backend, CPU): plan, shards, ledger, resume, stats.

Real parts: a tiny Qwen2 built and taught in the test session, transformers ``generate``, curate.verify's worker
pool, real parquet files; the crash test SIGKILLs a real ``curate rollout`` process. No network, no GPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from curate import io, pipeline
from curate import schema as S
from curate.cli import main as cli_main
from curate.config import ConfigError, recipe_from_mapping
from curate.rollout import ledger, stats
from curate.rollout import stage as rollout
from curate.rollout.backends import HFOptions
from tests.tiny_model import problems_frame, shared_tiny_model


POOL = "tiny"
VOLATILE = [S.CREATED_AT]  # the only ledger column that differs between two identical runs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The taught tiny model; torch runs on one thread meanwhile (faster for tiny matrices, and the same thread
    count as the `curate rollout` subprocesses, so their completions are bit-identical)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield shared_tiny_model(tmp_path_factory)
    torch.set_num_threads(threads)


def make_pool(ws, problems, split="train"):
    io.write_parquet(problems_frame(problems, split), ws.table(POOL, "problems"), S.PROBLEMS)


def config(model_path, **kw) -> rollout.RolloutConfig:
    base = dict(model=str(model_path), n=2, max_tokens=16, shard_size=3, hf=HFOptions(batch_size=16), verify_workers=1)
    return rollout.RolloutConfig(**{**base, **kw})


def ledger_of(ws, model) -> pl.DataFrame:
    return ledger.read(ws, POOL, str(model)).sort([S.PROBLEM_ID, S.SAMPLE_IDX]).drop(VOLATILE)


def raw_keys(ws) -> pl.DataFrame:
    files = ledger.files(ws, POOL)
    return pl.concat([pl.read_parquet(f, columns=ledger.KEY) for f in files]) if files else S.empty(S.ROLLOUTS)


# --------------------------------------------------------------------------------------------------- end to end
def test_hf_rollout_ledger_and_stats(ws, tiny):
    path, problems = tiny
    make_pool(ws, problems[:9])
    cfg = config(path)
    result = rollout.rollout(ws, POOL, cfg)
    led = ledger_of(ws, path)
    assert led.height == 18 and not result.skipped
    assert led.select(ledger.KEY).is_unique().all()
    assert sorted(led[S.SAMPLE_IDX].unique().to_list()) == [0, 1]
    assert set(led[S.VERDICT].unique().to_list()) <= set(S.VERDICTS)
    row = led.row(0, named=True)
    assert (row[S.TEMPERATURE], row[S.TOP_P], row[S.MAX_TOKENS], row[S.SEED], row[S.BACKEND]) == (
        1.0,
        1.0,
        16,
        0,
        "hf",
    )
    assert row[S.RUN_ID] == rollout.run_id(cfg) and row[S.PROMPT_TOKENS] > 10
    assert led[S.COMPLETION_TOKENS].max() <= 16 and set(led[S.FINISH_REASON].to_list()) <= {"stop", "length"}
    # the taught model gets some right, and "correct" means the extracted answer is the gold one
    gold = dict(zip([S.problem_id(q) for q, _ in problems], [a for _, a in problems], strict=True))
    right = led.filter(pl.col(S.CORRECT))
    assert right.height > 0 and all(gold[p] == a for p, a in right.select(S.PROBLEM_ID, S.EXTRACTED_ANSWER).rows())
    assert (led[S.REWARD] == led[S.CORRECT].cast(pl.Float64)).all()
    # stats agree with the ledger
    st = stats.read_stats(ws, POOL)
    assert st.height == 9 and st[S.N_SAMPLES].to_list() == [2] * 9
    assert st[S.N_CORRECT].sum() == right.height
    assert result.summary["samples_generated"] == 18 and result.summary["tokens_generated"] > 0
    assert result.summary["problems"] == {
        "pool": 9,
        "excluded": {"split": 0},
        "complete": 0,
        "other_rank": 0,
        "planned": 9,
    }
    # one manifest naming rule (manifest.manifest_path): the model's folder holds its parquet parts and manifest.json
    assert rollout.manifest_path(ws, POOL, str(path)) == ws.ledger_dir(POOL, str(path)) / "manifest.json"
    assert rollout.manifest_path(ws, POOL, str(path)).is_file()
    assert {p.name for p in ws.ledger_dir(POOL, str(path)).iterdir() if p.suffix != ".parquet"} == {"manifest.json"}

    # the same job again: nothing missing, nothing written
    files = ledger.files(ws, POOL)
    again = rollout.rollout(ws, POOL, cfg)
    assert again.skipped and ledger.files(ws, POOL) == files

    # more samples per problem: only the new indices are generated, with fresh seeds (not replays of 0..1)
    more = rollout.rollout(ws, POOL, dataclasses.replace(cfg, n=4))
    led4 = ledger_of(ws, path)
    assert more.summary["samples_generated"] == 18 and led4.height == 36
    assert led4.select(ledger.KEY).is_unique().all()
    assert_frame_equal(led4.filter(pl.col(S.SAMPLE_IDX) < 2).drop(S.RUN_ID), led.drop(S.RUN_ID))


def test_a_model_inside_the_workspace_keeps_its_ledger_when_the_workspace_moves(tmp_path, tiny, monkeypatch):
    """A training run's model is named by its path relative to the workspace (``Workspace.model_name``) and loaded
    from there (``model_path``): the ledger folder no longer carries the machine's absolute path, and a moved
    workspace finds its rollouts instead of sampling them again under another name (issue 30.10)."""
    import shutil

    path, problems = tiny
    ws = io.Workspace.resolve(tmp_path / "a" / "ws")
    make_pool(ws, problems[:4])
    shutil.copytree(path, ws.root / "runs" / "r" / "sft" / "final")
    monkeypatch.chdir(tmp_path)  # not the workspace: the relative name is resolved against the workspace root
    name = ws.model_name(str(ws.root / "runs" / "r" / "sft" / "final"))
    assert name == "runs/r/sft/final"
    first = rollout.rollout(ws, POOL, config(name))
    assert first.summary["samples_generated"] == 8
    assert [p.name for p in ws.ledger_dir(POOL).iterdir()] == ["runs__r__sft__final"]
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = io.Workspace.resolve(tmp_path / "b" / "ws")
    again = rollout.rollout(moved, POOL, config(moved.model_name(str(moved.root / "runs/r/sft/final"))))
    assert again.summary["samples_generated"] == 0 and ledger.read(moved, POOL, name).height == 8


def test_same_config_same_rows_and_test_split_skipped(ws, tiny, tmp_path):
    path, problems = tiny
    make_pool(ws, problems[:6])
    other = io.Workspace.resolve(tmp_path / "other")
    io.write_parquet(
        pl.concat([problems_frame(problems[:6]), problems_frame(problems[6:8], "test")]),
        other.table(POOL, "problems"),
        S.PROBLEMS,
    )
    cfg = config(path, shard_size=2)
    rollout.rollout(ws, POOL, cfg)
    result = rollout.rollout(other, POOL, cfg)
    assert result.summary["problems"]["excluded"] == {"split": 2}
    assert_frame_equal(ledger_of(ws, path), ledger_of(other, path))


def test_plan_is_stable_while_shards_finish(ws, tiny):
    path, problems = tiny
    make_pool(ws, problems[:10])
    cfg = config(path, shard_size=3)
    plan = rollout.plan_shards(ws, POOL, cfg)
    assert [s.index for s in plan] == [0, 1, 2, 3] and [len(s.items) for s in plan] == [3, 3, 3, 1]
    ids = [i.problem_id for s in plan for i in s.items]
    assert ids == sorted(ids)
    for shard in (plan[1], plan[3]):  # finish shards out of order, as parallel workers would
        assert rollout.run_shard(ws, POOL, cfg, shard) == rollout.shard_path(ws, POOL, cfg, shard)
    assert rollout.plan_shards(ws, POOL, cfg) == [plan[0], plan[2]]
    # a shard already on disk is not redone; a crash mid-write leaves only an ignored temp file
    before = rollout.shard_path(ws, POOL, cfg, plan[1]).stat().st_mtime_ns
    rollout.run_shard(ws, POOL, cfg, plan[1])
    assert rollout.shard_path(ws, POOL, cfg, plan[1]).stat().st_mtime_ns == before
    (ws.ledger_dir(POOL, str(path)) / ".part-x.parquet.tmp123").write_bytes(b"half a file")
    assert rollout.plan_shards(ws, POOL, cfg) == [plan[0], plan[2]]
    # data parallel ranks split the remaining shards
    ranks = [dataclasses.replace(cfg, data_parallel_size=2, data_parallel_rank=r) for r in (0, 1)]
    assert [rollout.plan_shards(ws, POOL, c) for c in ranks] == [[plan[0], plan[2]], []]


def test_only_unsolved_and_limit(ws, tiny):
    path, problems = tiny
    make_pool(ws, problems[:9])
    cfg = config(path)
    rollout.rollout(ws, POOL, cfg)
    solved = set(ledger.read(ws, POOL, str(path)).filter(pl.col(S.CORRECT))[S.PROBLEM_ID].to_list())
    assert solved, "the taught model should solve some problems"
    nxt = dataclasses.replace(cfg, n=3, only_unsolved=True)
    keep, excluded = rollout.candidates(ws, POOL, nxt)
    assert excluded["solved"] == len(solved) and not set(keep[S.PROBLEM_ID].to_list()) & solved
    # the job's own rows never count as "solved before": its candidates stay the same across a resume
    own, _ = rollout.candidates(ws, POOL, dataclasses.replace(cfg, only_unsolved=True))
    assert own.height == 9
    limited, excluded = rollout.candidates(ws, POOL, dataclasses.replace(nxt, limit=2))
    assert limited.height == 2 and excluded["limit"] == keep.height - 2


@pytest.mark.slow
def test_selection_restricts_the_job_and_a_larger_n_draws_only_fresh_samples(ws, tiny):
    """``rollout.selection`` (issue 36): re-sampling a selection adds indices n..2n-1 for its problems only, the
    fresh samples ``curate.score.headroom.fresh_forecast`` reads; a missing selection is one clear error."""
    from curate.errors import MissingInput

    path, problems = tiny
    make_pool(ws, problems[:6])
    cfg = config(path)
    rollout.rollout(ws, POOL, cfg)
    chosen = sorted(ledger.read(ws, POOL, str(path))[S.PROBLEM_ID].unique().to_list())[:2]
    ws.selection_dir("pick").mkdir(parents=True)
    pl.DataFrame({S.PROBLEM_ID: chosen}).write_parquet(ws.selection_dir("pick") / "selection.parquet")
    keep, excluded = rollout.candidates(ws, POOL, dataclasses.replace(cfg, selection="pick"))
    assert keep[S.PROBLEM_ID].to_list() == chosen and excluded["other_selection"] == 4
    rollout.rollout(ws, POOL, dataclasses.replace(cfg, selection="pick", n=4))
    rows = ledger.read(ws, POOL, str(path))
    fresh = rows.filter(pl.col(S.SAMPLE_IDX) >= 2)
    assert sorted(fresh[S.PROBLEM_ID].unique().to_list()) == chosen and fresh.height == 2 * 2
    with pytest.raises(MissingInput, match="selection 'nope' not found"):
        rollout.candidates(ws, POOL, dataclasses.replace(cfg, selection="nope"))


def test_duplicate_part_is_deduplicated_on_read(ws, tiny):
    path, problems = tiny
    make_pool(ws, problems[:3])
    rollout.rollout(ws, POOL, config(path))
    first = ledger.files(ws, POOL)[0]
    (first.parent / ("part-zz-copy.parquet")).write_bytes(first.read_bytes())
    assert raw_keys(ws).height == 12 and ledger_of(ws, path).height == 6
    refreshed = stats.refresh_stats(ws, POOL)
    assert refreshed["mode"] == "incremental" and refreshed["new_rows"] == 0
    assert stats.read_stats(ws, POOL)[S.N_SAMPLES].to_list() == [2, 2, 2]


# --------------------------------------------------------------------------------------------------- config + stage
def test_config_errors_and_recipe_stage(ws, tiny):
    path, problems = tiny
    with pytest.raises(ConfigError, match="model is required"):
        rollout.RolloutConfig()
    with pytest.raises(ConfigError, match="backend"):
        rollout.RolloutConfig(model="m", backend="tgi")
    bad = recipe_from_mapping({"name": "r", "pool": POOL, "stages": ["rollout"], "rollout": {"model": "m", "k": 1}})
    with pytest.raises(ConfigError, match="unknown key"):
        rollout.load_config(bad)
    nested = recipe_from_mapping({"name": "r", "pool": POOL, "rollout": {"model": "m", "verify": {"workers": 1}}})
    with pytest.raises(ConfigError, match="top-level `verify:`"):
        rollout.load_config(nested)

    make_pool(ws, problems[:3])
    recipe = recipe_from_mapping(
        {
            "name": "r",
            "pool": POOL,
            "stages": ["rollout"],
            "verify": {"workers": 1},
            "rollout": {"model": str(path), "n": 2, "max_tokens": 8, "hf": {"batch_size": 8}, "prior": [2, 2]},
        }
    )
    cfg = rollout.load_config(recipe)
    assert cfg.verify.workers == 1 and cfg.prior == (2.0, 2.0) and cfg.hf.batch_size == 8
    names = pipeline.stage_names()
    assert names.index("ingest") < names.index("rollout") < names.index("score")
    first = pipeline.run_stage("rollout", ws, recipe)
    assert not first.skipped and first.summary["ledger_rows"] == 6
    assert stats.read_stats(ws, POOL)[S.ALPHA].min() >= 2.0
    assert pipeline.run_stage("rollout", ws, recipe).skipped


def test_cli_stats_json(ws, tiny, capsys):
    path, problems = tiny
    make_pool(ws, problems[:3])
    rollout.rollout(ws, POOL, config(path))
    assert cli_main(["stats", "--pool", POOL, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    (m,) = payload["models"]
    assert m["model"] == str(path) and m["problems"] == 3 and m["samples"] == 6
    assert sum(h["problems"] for h in m["histogram"]) == 3
    assert cli_main(["stats", "--pool", POOL]) == 0
    assert "problems with evidence" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------- crash + resume
@pytest.mark.slow
def test_sigkill_at_several_points_then_resume_matches_uninterrupted_run(ws, tiny, tmp_path):
    """A real `curate rollout` process SIGKILLed twice mid-job, then rerun: same rows as one uninterrupted run.

    The three runs share one time budget (most of pytest's 900 s), not 240 s each: at load 15-17 one run alone took
    longer than that (issue 38.17), and the budget only guards against a hang."""
    path, problems = tiny
    make_pool(ws, problems)  # 24 problems, shard size 2: 12 shards
    cli = Path(sys.executable).with_name("curate")
    cmd = [str(cli), "rollout", "--pool", POOL, "--model", str(path), "--n", "2", "--max-tokens", "16"]
    cmd += ["--shard-size", "2", "--batch-size", "16", "--workers", "1", "--json"]
    env = {**os.environ, "CURATE_HOME": str(ws.root), "OMP_NUM_THREADS": "1"}
    deadline = time.monotonic() + 750

    log = tmp_path / "rollout.log"  # a file, not a pipe nobody reads while the run goes on (a full pipe blocks it)

    def run(kill_at_parts: int | None) -> str:
        with open(log, "wb") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        while time.monotonic() < deadline:
            if kill_at_parts is not None and len(ledger.files(ws, POOL)) >= kill_at_parts:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return "killed"
            if proc.poll() is not None:
                assert proc.returncode == 0, log.read_text(errors="replace")[-2000:]
                return "finished"
            time.sleep(0.005)
        proc.kill()
        raise AssertionError("curate rollout did not finish in time")

    assert run(kill_at_parts=1) == "killed"
    assert run(kill_at_parts=5) == "killed"
    interrupted = len(ledger.files(ws, POOL))
    assert 1 <= interrupted < 12
    assert run(kill_at_parts=None) == "finished"
    assert len(ledger.files(ws, POOL)) == 12
    keys = raw_keys(ws)
    assert keys.height == 48 and keys.is_unique().all()  # no duplicated rows, none lost

    reference = io.Workspace.resolve(tmp_path / "reference")
    make_pool(reference, problems)
    rollout.rollout(reference, POOL, config(path, shard_size=2))  # in-process, one torch thread (fixture)
    assert_frame_equal(ledger_of(ws, path), ledger_of(reference, path))
    assert_frame_equal(
        stats.read_stats(ws, POOL).drop(S.UPDATED_AT), stats.read_stats(reference, POOL).drop(S.UPDATED_AT)
    )


def test_a_damaged_model_folder_writes_no_row(ws, tiny, tmp_path):
    """Issue 45.1: ``curate rollout --model`` of a damaged model folder (here NaN weights whose ``files.json`` was
    rewritten to match) sampled it (a sampling traceback on NaN logits, or rows from the damaged model). It is one
    ``InputError`` line before any sample, and the ledger stays empty."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from curate.errors import InputError
    from training.run_folder import WEIGHTS, record_files

    path, problems = tiny
    make_pool(ws, problems[:3])
    damaged = tmp_path / "damaged"
    shutil.copytree(path, damaged)
    weights = load_file(str(damaged / "model.safetensors"))
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, str(damaged / "model.safetensors"))
    record_files(damaged, WEIGHTS)
    with pytest.raises(InputError, match=r"model folder .*damaged is damaged: model.safetensors: .* NaN"):
        rollout.rollout(ws, POOL, config(damaged))
    assert not ledger.files(ws, POOL)
