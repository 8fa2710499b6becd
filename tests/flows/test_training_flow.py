"""The training flow (issue 15) against a real ``prefect server`` on 127.0.0.1, through process workers.

One test, in phases that build on each other (each phase costs a chain's worth of CPU, so they share one run):

1. ``prefect --no-prompt deploy --all`` registers the two training deployments of ``prefect.yaml`` (the tiny chain
   on the CPU pool, the GPU recipe on the ``training-gpu`` pool, neither scheduled);
2. a run of ``train-chain/tiny-cpu`` on a tiny recipe (gen://arith n=40, SFT, two RL stages of two steps, eval of
   8 problems x 2) is picked up by a process worker; when the first RL checkpoint is complete the worker's whole
   process group is SIGKILLed (worker, flow run, training step);
3. the deployment is triggered again: the run completes without curating again (the run's data is pinned once
   training has started), RL stage 1 resumes from its checkpoint, the pool's ledger
   holds each training rollout once, the final model's card names its selection, curriculum, solutions table,
   recipe and code version, and the run's artifacts (curation summary, chain summary, lineage table, solutions
   histogram, learning curves, eval curve) are on the server;
4. the same deployment with ``training_pool=training-gpu`` runs curation on its own worker and hands the training
   part to the deployment on the ``training-gpu`` pool, run by a second worker (the chain is done, so every step
   is skipped).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.flows.test_server import BIN, POOL, REPO, _client, _wait_for, patience, server  # noqa: F401 (server: fixture)
from tests.tiny_chain import write_tiny_chain


GPU_POOL = "training-gpu"
STAGE1_STEPS = 20  # long enough that the worker is killed mid-stage on an idle box too (5 finished before the kill)


def write_recipes(tmp_path: Path) -> Path:
    """The chain tests' tiny recipes (tests/tiny_chain.py); stage 1 runs 5 steps so the kill (at its first
    checkpoint) lands mid-stage even on a busy box."""
    stages = {"stage1": {"max_steps": STAGE1_STEPS}, "stage2": {"max_steps": 2, "max_completion_length": 96}}
    return write_tiny_chain(tmp_path, stages=stages)


def _descendants(pid: int) -> list[int]:
    """Every descendant PID of ``pid`` (Linux /proc), depth first."""
    out = []
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return out
    for child in children:
        out += [child, *_descendants(child)]
    return out


def _kill_tree(proc) -> None:
    """SIGKILL a worker started in its own session: its process group and anything that left it."""
    pids = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(30)


def _finished(client, run_id):
    fr = client.read_flow_run(run_id)
    return fr.state.is_final() and fr


def test_prefect_yaml_and_flows_serve_declare_the_same_training_deployments():
    import inspect

    from flows import serve
    from flows.training import train_chain
    from training.recipe import load_recipe

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    declared = {d["name"]: d for d in spec["deployments"] if d["entrypoint"] == "flows/training.py:train_chain"}
    served = {d.name: d for d in serve.training_deployments()}
    assert declared.keys() == served.keys() == {serve.TINY_CHAIN, serve.GPU_CHAIN}
    params = set(inspect.signature(train_chain.fn).parameters)
    for name, d in declared.items():
        assert set(d["parameters"]) <= params and d["parameters"] == served[name].parameters
        assert not d.get("schedules") and not served[name].schedules  # on demand only
    assert declared[serve.TINY_CHAIN]["work_pool"]["name"] == POOL
    assert declared[serve.GPU_CHAIN]["work_pool"]["name"] == GPU_POOL
    for d in declared.values():  # both recipes exist and pass the strict loader
        assert load_recipe(REPO / d["parameters"]["recipe_path"]).name


@pytest.mark.slow
def test_the_flow_reads_and_validates_each_recipe_file_once(prefect_harness, tmp_path, monkeypatch):
    """``train-chain`` loads the training recipe and its curate recipe once and hands the typed curate recipe to the
    ``curate-dataset`` subflow and its tasks (issue 31.6: the subflow read the file again, and each task again)."""
    from flows.training import train_chain
    from tests.training.test_runner import count_recipe_reads

    recipe = write_tiny_chain(tmp_path)
    reads, checks = count_recipe_reads(monkeypatch)
    out = train_chain(recipe_path=str(recipe), home=str(tmp_path / "ws"), part="curation")
    assert out["part"] == "curation" and (tmp_path / "ws" / "solutions" / "t" / "sft.parquet").is_file()
    assert reads == {"train.yaml": 1, "curate.yaml": 1} and checks == {"t": 1}


@pytest.mark.slow
def test_a_failed_step_fails_the_run_and_publishes_what_finished(server, tmp_path):  # noqa: F811
    """A starting model that cannot be loaded (offline hub id): the sft task fails, the flow run fails with its
    error, the chain summary artifact says so, and nothing is recorded as done for the step (a re-run starts at
    it)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from curate import io
    from curate import schema as S
    from flows.training import train_chain

    home = tmp_path / "ws"
    problems = pl.DataFrame({S.PROBLEM_ID: ["a", "b"], S.PROBLEM: ["1+1", "2+2"], S.ANSWER: ["2", "4"],
                             S.SPLIT: ["train", "test"]})  # fmt: skip
    io.write_parquet(problems, home / "pools" / "t" / "problems.parquet")
    io.write_json(home / "curricula" / "c" / "plan.json", {"stages": [{"stage": "s1", "shard": "s1.parquet"}]})
    io.write_parquet(problems.head(1), home / "curricula" / "c" / "s1.parquet")
    rows = pl.DataFrame({"prompt": [[{"role": "user", "content": "1+1"}]],
                         "completion": [[{"role": "assistant", "content": "2"}]]})  # fmt: skip
    io.write_parquet(rows, home / "solutions" / "t" / "sft.parquet")
    recipe = tmp_path / "failing.yaml"
    recipe.write_text(yaml.safe_dump({"name": "failing", "pool": "t", "model": "no-such-org/no-such-model",
                                      "curriculum": "c", "sft": {"data": "solutions/t/sft.parquet"},
                                      "rl": {"loss_type": "cispo"}}))  # fmt: skip
    url, _ = server
    with temporary_settings(updates={PREFECT_API_URL: url}):  # in this process, against the test's server
        state = train_chain(recipe_path=str(recipe), home=str(home), return_state=True)
        APILogWorker.drain_all(timeout=patience(30))  # the run's logs reach the server before it stops
    assert state.is_failed() and "training step sft" in state.message
    with _client(url) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]))
        )
    [chain] = [a for a in found if a.key == "failing-chain"]
    assert "**failed:**" in chain.data and "training step sft" in chain.data
    summary = json.loads((home / "runs" / "failing" / "summary.json").read_text())
    assert "training step sft" in summary["failed"] and summary["steps"] == []


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~2 min on an idle 2-core box, the suite's longest test: 15 min at load 8+ is possible
def test_chain_deploys_resumes_after_a_killed_worker_publishes_artifacts_and_hands_off(server, tmp_path):  # noqa: F811
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
    )
    from prefect.states import Crashed

    from training.run_folder import SAMPLER_STATE, last_checkpoint

    url, stack = server
    prefect = str(BIN / "prefect")
    _deploy_all(stack, prefect)  # phase 1

    home = tmp_path / "ws"
    run_dir, params = home / "runs" / "chain", {"recipe_path": str(write_recipes(tmp_path)), "home": str(home)}
    stage1 = run_dir / "rl" / "01-stage1"
    with _client(url) as client:
        tiny = client.read_deployment_by_name("train-chain/tiny-cpu")
        gpu = client.read_deployment_by_name("train-chain/qwen-math-1.5b-gpu")
        assert (tiny.work_pool_name, gpu.work_pool_name) == (POOL, GPU_POOL)
        assert tiny.schedules == [] and gpu.schedules == []
        assert gpu.parameters["recipe_path"] == "training/recipes/qwen2.5-math-1.5b/fastcurl.yaml"
        first = client.create_flow_run_from_deployment(tiny.id, parameters=params)

    # Phase 2: kill the worker (and the flow run and training step under it) once stage 1 has a checkpoint.
    worker = stack.start("worker-1", [prefect, "worker", "start", "--pool", POOL], cwd=tmp_path,
                         start_new_session=True)  # fmt: skip
    with _client(url) as client:

        def checkpointed():
            assert not client.read_flow_run(first.id).state.is_final(), worker.log_path.read_text(errors="replace")
            return last_checkpoint(stage1 / "checkpoints", required=(SAMPLER_STATE,))

        _wait_for(checkpointed, patience(360), "the first RL checkpoint", interval=0.5)
        _kill_tree(worker)
        stack.procs.remove(worker)
        worker.log.close()
        assert not (stage1 / "summary.json").exists()  # killed mid-stage
        client.set_flow_run_state(first.id, Crashed(message="worker killed by the test"), force=True)

        # Phase 3: the same deployment again resumes and completes.
        second = client.create_flow_run_from_deployment(tiny.id, parameters=params)
        worker = stack.start("worker-2", [prefect, "worker", "start", "--pool", POOL], cwd=tmp_path)
        final = _wait_for(lambda: _finished(client, second.id), patience(480), "the resumed run finishing")
        assert final.state.is_completed(), f"{final.state!r}; worker log: {worker.log_path}"
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[second.id]))
        )
        keys = {a.key for a in artifacts}
        subflows = {
            run.id: client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
            )
            for run in (first, second)
        }
        [curation] = subflows[first.id]
        curation_keys = {
            a.key
            for a in client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[curation.id]))
            )
        }
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[second.id])))
        task_names = {t.name for t in tasks}

    _check_resumed_chain(home, run_dir)
    assert {"chain-chain", "chain-lineage", "chain-solutions", "chain-training", "chain-eval"} <= keys
    # Curation ran as a subflow of the first run (its summary artifact is keyed by the curate recipe's name "t"); the
    # resumed run did not curate again: the run's data is pinned once training has started.
    assert curation.state.is_completed() and "t-summary" in curation_keys
    assert subflows[second.id] == []
    assert {"rl:stage1", "eval rl:stage1", "rl:stage2", "fit", "summary"} <= task_names

    # Phase 4: curation on this pool's worker, the training part on the GPU pool's deployment and worker.
    gpu_worker = stack.start("worker-gpu", [prefect, "worker", "start", "--pool", GPU_POOL], cwd=tmp_path)
    with _client(url) as client:
        handed = client.create_flow_run_from_deployment(tiny.id, parameters={**params, "training_pool": GPU_POOL})
        final = _wait_for(lambda: _finished(client, handed.id), patience(240), "the handed-off run finishing")
        assert final.state.is_completed(), f"{final.state!r}; logs: {worker.log_path}, {gpu_worker.log_path}"
        [child] = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[gpu.id])))
    assert child.state.is_completed() and child.work_pool_name == GPU_POOL
    assert child.parameters["part"] == "training" and child.parameters["recipe_path"] == params["recipe_path"]


def _deploy_all(stack, prefect: str) -> None:
    """Phase 1: the two process work pools, then ``prefect --no-prompt deploy --all`` of ``prefect.yaml``."""
    for pool in (POOL, GPU_POOL):
        made = stack.run([prefect, "work-pool", "create", pool, "--type", "process"], timeout=patience(120))
        assert made.returncode == 0 or "already exists" in made.stdout + made.stderr, made.stdout + made.stderr
    deployed = stack.run(
        [prefect, "--no-prompt", "deploy", "--all"], timeout=patience(240), cwd=REPO, extra_env={"PWD": str(REPO)}
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr


def _check_resumed_chain(home: Path, run_dir: Path) -> None:
    """Phase 3's run folder: stage 1 resumed from a checkpoint, every step done, each training rollout once in the
    run's own ledger, and the final model's card naming its selection, curriculum, solutions and recipe."""
    from curate import io
    from curate.rollout import ledger as rollout_ledger
    from training.card import read_lineage

    rl1 = json.loads((run_dir / "rl" / "01-stage1" / "summary.json").read_text())
    assert rl1["resumed_from"] and Path(rl1["resumed_from"]).name.startswith("checkpoint-")
    chain = json.loads((run_dir / "chain.json").read_text())
    assert [s["step"] for s in chain["steps"]] == ["init", "sft", "rl:stage1", "rl:stage2"]
    ledger = rollout_ledger.read(io.Workspace(home), "t", rl1["ledger"]["model"])  # the run's own ledger name
    assert rl1["ledger"]["model"].startswith(f"{run_dir.name}-") and rl1["ledger"]["model"].endswith("-01-stage1")
    assert ledger.height == STAGE1_STEPS * 2 * 2  # steps x 2 prompts x 2 generations: resumed steps rewrote parts
    assert ledger.select("problem_id", "sample_idx").is_duplicated().sum() == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    model = Path(summary["final_model"])
    assert model == run_dir / "rl" / "02-stage2" / "final" and (model / "config.json").is_file()
    assert str(home) not in (model / "lineage.json").read_text()  # no machine path in the file (issue 38.13)
    lineage = read_lineage(model)  # its paths absolute again
    assert lineage["data"]["selection"].endswith("selections/t/selection.parquet")
    assert lineage["data"]["curriculum"] == str(run_dir / "data" / "curriculum")  # the run's own copy
    assert lineage["data"]["data"]["sources"]["curriculum"].endswith("curricula/t")
    assert lineage["data"]["solutions"] == str(run_dir / "data" / "sft.parquet")
    assert lineage["data"]["data"]["sources"]["sft"].endswith("solutions/t/sft.parquet")
    assert lineage["data"]["recipe"] == str(run_dir / "recipe.json") and lineage["code"]["curate_rl"]
    assert "selections/t/selection.parquet" in (model / "README.md").read_text()
