"""Rollout shards on Dask (``dask_address="local"``) write the same ledger as the default task runner.

A tiny Qwen2 built locally (``tests/tiny_model.py``) samples a few generator problems on CPU through the ``hf``
backend; the flow runs once with the default runner and once with a ``LocalCluster``, into two workspaces, and
the ledgers must match row for row (run ids and timestamps aside). Real Prefect (the session's test harness), real
Dask, real math-verify; no network, no GPU.
"""

from __future__ import annotations

import pytest


pytestmark = pytest.mark.slow

VOLATILE = ("run_id", "created_at")  # differ between any two runs by design


def _ledger(root):
    import polars as pl

    files = sorted(p for p in (root / "pools").rglob("rollouts/**/*.parquet") if not p.name.startswith("."))
    assert files, f"no ledger parts under {root}"
    frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    return frame.drop([c for c in VOLATILE if c in frame.columns]).sort(["problem_id", "model", "sample_idx"])


def test_dask_runner_writes_the_same_ledger_as_the_default_runner(prefect_harness, write_recipe, tmp_path):
    pytest.importorskip("curate.rollout", reason="the rollout stage has not landed")
    from polars.testing import assert_frame_equal
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId

    from flows.curation import curate_dataset
    from tests.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    rollout = {
        "backend": "hf",
        "model": str(model),
        "n": 2,
        "limit": 8,
        "shard_size": 2,
        "max_tokens": 16,
        "temperature": 1.0,
        "seed": 0,
    }
    recipe = write_recipe("sharded", stages=["ingest", "rollout"], rollout=rollout)

    plain = curate_dataset(recipe_path=str(recipe), home=str(tmp_path / "plain"))
    state = curate_dataset(
        recipe_path=str(recipe), home=str(tmp_path / "dask"), dask_address="local", return_state=True
    )
    assert state.is_completed(), state.message
    sharded = state.result()
    assert [r["stage"] for r in sharded["stages"]] == [r["stage"] for r in plain["stages"]] == ["ingest", "rollout"]
    assert sharded["stages"][1]["summary"]["shards_run"] == 4  # 8 problems / 2 per shard

    ledger = _ledger(tmp_path / "plain")
    assert ledger.height == 16  # 8 problems x 2 samples
    assert_frame_equal(_ledger(tmp_path / "dask"), ledger)

    # The shards ran as tasks of the sharded subflow (on the Dask cluster), one per shard, all completed.
    [sub] = prefect_harness.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])
        )
    )
    tasks = prefect_harness.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[sub.id])))
    assert sorted(t.name for t in tasks) == sorted(
        ["rollout-plan", "rollout-finalize", *(f"rollout-shard-{i}" for i in range(4))]
    )
    assert all(t.state.is_completed() for t in tasks)

    # What the shards and finalize wrote is a finished stage for the plain runner too: nothing left to generate.
    again = curate_dataset(recipe_path=str(recipe), home=str(tmp_path / "dask"))
    assert [r["skipped"] for r in again["stages"]] == [True, True]
    assert_frame_equal(_ledger(tmp_path / "dask"), ledger)
