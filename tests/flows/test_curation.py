"""The curation flow under a real Prefect API (temporary SQLite database), plus its pure helpers.

Covers: every stage runs as a Completed task; the flow writes the same tables as ``curate run``; the summary,
selection-table and plot artifacts are readable through the client; a re-run skips finished stages through the
workspace manifests; a failing stage fails the run with its error, keeps what finished, and a fixed re-run
resumes from it. Data comes from the built-in generator (no network, no GPU).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from curate import cli, config
from curate.io import Workspace
from curate.pipeline import planned_stages
from flows import artifacts
from flows.curation import curate_dataset, touches_outside


PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


# --------------------------------------------------------------------------------------------------- helpers
def _recipe(**data) -> config.Recipe:
    return config.recipe_from_mapping({"name": "t", "pool": "t", **data})


def test_only_outside_io_stages_get_retries():
    hub = _recipe(ingest={"sources": ["hf://org/set", "gen://mixed?n=5"]})
    local = _recipe(ingest={"sources": ["gen://mixed?n=5"]})
    assert touches_outside("ingest", hub)
    assert not touches_outside("ingest", local)
    assert touches_outside("rollout", _recipe(rollout={"backend": "openai"}))
    assert not touches_outside("rollout", _recipe(rollout={"backend": "hf"}))
    assert not touches_outside("select", hub)


def test_planned_stages_keep_recipe_order_and_reject_strangers():
    recipe = _recipe(stages=["ingest"])
    assert planned_stages(recipe, None) == ["ingest"]
    assert planned_stages(recipe, ["ingest"]) == ["ingest"]
    with pytest.raises(config.ConfigError, match="not in the recipe's stages"):
        planned_stages(recipe, ["select"])


def test_artifact_keys_are_what_prefect_accepts(tmp_path):
    assert artifacts.key("Demo v1", "summary") == "demo-v1-summary"
    assert artifacts.key("math_rl/v2", "plot_1") == "math-rl-v2-plot-1"
    ws = Workspace(tmp_path)
    assert artifacts.file_key("demo", ws.selection_dir("demo") / "des.png", ws) == "demo-selections-des"
    assert artifacts.file_key("demo", ws.curriculum_dir("x") / "plan.png", ws) == "demo-curricula-x-plan"
    assert artifacts.file_key("demo", Path("/elsewhere/sel/a.png"), ws) == "demo-sel-a"


def test_summary_markdown_renders_any_stage_summary(tmp_path):
    report = {
        "name": "demo",
        "recipe": "datasets/demo/recipe.yaml",
        "pool": "demo",
        "home": str(tmp_path),
        "wall_s": 3.25,
        "stages": [
            {"stage": "ingest", "skipped": True, "outputs": ["a.parquet"], "wall_s": 0.1,
             "summary": {"read": 10, "drops": {"too_long": 2, "missing_answer": 1}}},
            {"stage": "select", "skipped": False, "outputs": [], "wall_s": 2.0,
             "summary": {"size": 5, "by_cluster": [{"cluster": 0, "n": 3}, {"cluster": 1, "n": 2}]}},
        ],
        "failed": {"stage": "curriculum", "error": "FileNotFoundError: x | y"},
    }  # fmt: skip
    md = artifacts.summary_markdown(report, [], [])
    assert "| ingest | skipped (up to date) | 0.1 | `a.parquet` |" in md
    assert "| drops | too_long=2, missing_answer=1 |" in md
    assert "| cluster | n |" in md and "| 1 | 2 |" in md
    assert "| curriculum | **failed** |" in md and "x \\| y" in md


def test_selection_tables_and_plots_are_found_in_outputs(tmp_path):
    sel = tmp_path / "selections" / "demo"
    (sel / "plots").mkdir(parents=True)
    pl.DataFrame({"problem_id": [f"p{i}" for i in range(60)], "problem": ["x" * 500] * 60}).write_parquet(
        sel / "selection.parquet"
    )
    (sel / "plots" / "des.png").write_bytes(PNG_1PX)
    stages = [{"outputs": [str(sel)]}, {"outputs": [str(sel / "selection.parquet"), str(tmp_path / "nope")]}]
    assert artifacts.selection_files(stages) == [sel / "selection.parquet"]
    assert artifacts.plot_files(stages) == [sel / "plots" / "des.png"]
    rows = artifacts.table_rows(sel / "selection.parquet")
    assert len(rows) == artifacts.TABLE_ROWS and len(rows[0]["problem"]) == artifacts.MAX_CELL_CHARS
    uri = artifacts.data_uri(sel / "plots" / "des.png")
    assert base64.b64decode(uri.removeprefix("data:image/png;base64,")) == PNG_1PX


# --------------------------------------------------------------------------------------------------- flow runs
def _frames(ws: Workspace) -> dict[str, pl.DataFrame]:
    """Every Parquet table in a workspace by relative path, rows sorted so that order cannot matter."""
    out = {}
    for path in sorted(ws.root.rglob("*.parquet")):
        frame = pl.read_parquet(path)
        out[str(path.relative_to(ws.root))] = frame.sort(frame.columns[0], maintain_order=True)
    return out


def _flow_run_id(state):
    return state.state_details.flow_run_id


def _task_runs(client, flow_run_id):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def _artifacts(client, flow_run_id):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    return client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    )


@pytest.mark.slow
def test_flow_runs_every_stage_like_the_cli_and_publishes_artifacts(prefect_harness, write_recipe, tmp_path):
    client = prefect_harness
    recipe = write_recipe("flowtest")
    stages = config.load_recipe(recipe).stages
    flow_ws, cli_ws = Workspace(tmp_path / "flow"), Workspace(tmp_path / "cli")

    state = curate_dataset(recipe_path=str(recipe), home=str(flow_ws.root), return_state=True)
    assert state.is_completed(), state.message
    report = state.result()
    assert [r["stage"] for r in report["stages"]] == list(stages)
    assert not any(r["skipped"] for r in report["stages"])
    runs = _task_runs(client, _flow_run_id(state))
    assert sorted(r.name for r in runs) == sorted(stages)
    assert all(r.state.is_completed() for r in runs)

    # The CLI, same recipe, another workspace: identical tables.
    assert cli.main(["run", "--recipe", str(recipe), "--home", str(cli_ws.root), "--json"]) == 0
    flow_frames, cli_frames = _frames(flow_ws), _frames(cli_ws)
    assert f"pools/{report['pool']}/problems.parquet" in flow_frames
    assert flow_frames.keys() == cli_frames.keys()
    for rel, frame in flow_frames.items():
        assert_frame_equal(frame, cli_frames[rel], check_row_order=False)

    found = {a.key: a for a in _artifacts(client, _flow_run_id(state))}
    summary = found["flowtest-summary"]
    assert summary.type == "markdown"
    for result in report["stages"]:
        assert f"| {result['stage']} | done |" in summary.data
        assert not result["summary"] or f"## {result['stage']}" in summary.data
    if "select" in stages:
        assert artifacts.selection_files(report["stages"])
    if {"select", "curriculum"} & set(stages):
        assert artifacts.plot_files(report["stages"])
    for path in artifacts.selection_files(report["stages"]):
        table = found[artifacts.file_key("flowtest", path, flow_ws)]
        assert table.type == "table"
        rows = json.loads(table.data)
        assert 0 < len(rows) <= artifacts.TABLE_ROWS and "problem_id" in rows[0]
    for path in artifacts.plot_files(report["stages"])[: artifacts.MAX_IMAGES]:
        image = found[artifacts.file_key("flowtest", path, flow_ws)]
        assert image.type == "image" and image.data.startswith("data:image/png;base64,")

    # A re-run of the finished flow skips every stage through the manifests, not through Prefect's cache.
    again = curate_dataset(recipe_path=str(recipe), home=str(flow_ws.root))
    assert [r["skipped"] for r in again["stages"]] == [True] * len(stages)


@pytest.mark.slow
def test_a_stages_progress_is_in_the_runs_log(prefect_harness, write_recipe, tmp_path):
    """A stage run by the flow reports its progress to the run's Prefect log (what a worker's log and the UI show):
    ingest's status lines, and the near-duplicate search's progress line (the end line of its bar). Before, the flow
    ran its stages with progress off: a worker's log was silent 6.4 minutes while a stage embedded 2,977 problems
    (issue 38.10)."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    from tests.flows.test_server import patience

    recipe = write_recipe("progress", stages=["ingest", "decontaminate"], decontaminate={"use_embeddings": False})
    state = curate_dataset(recipe_path=str(recipe), home=str(tmp_path / "ws"), return_state=True)
    assert state.is_completed(), state.message
    APILogWorker.drain_all(timeout=patience(30))
    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[_flow_run_id(state)]))
    messages = [log.message for log in prefect_harness.read_logs(log_filter=log_filter)]
    assert any(m.startswith("reading gen/train") for m in messages), messages
    assert any(m.startswith("near-duplicate search over") and " rows in " in m for m in messages), messages


@pytest.mark.slow
def test_failed_stage_fails_the_run_keeps_finished_work_and_resumes(prefect_harness, write_recipe, tmp_path):
    client = prefect_harness
    stages = [s for s in ("ingest", "score") if s in config.load_recipe(write_recipe("probe")).stages]
    if len(stages) < 2:
        pytest.skip("needs the ingest and score stages")
    recipe = write_recipe("failing", stages=stages, score={"use_embeddings": False})
    ws = Workspace(tmp_path / "ws")
    # score's second input is corrupt: a filters table that is not Parquet.
    corrupt = ws.table("failing", "filters")
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text("not parquet", encoding="utf-8")

    state = curate_dataset(recipe_path=str(recipe), home=str(ws.root), return_state=True)
    assert state.is_failed()
    assert "parquet" in state.message.lower()  # the stage's own error, on the flow run
    runs = {r.name: r for r in _task_runs(client, _flow_run_id(state))}
    assert runs["ingest"].state.is_completed()
    assert runs["score"].state.is_failed()
    assert "parquet" in runs["score"].state.message.lower()
    assert ws.table("failing", "problems").is_file()
    summary = {a.key: a for a in _artifacts(client, _flow_run_id(state))}["failing-summary"]
    assert "| score | **failed** |" in summary.data

    corrupt.unlink()
    report = curate_dataset(recipe_path=str(recipe), home=str(ws.root))
    assert [(r["stage"], r["skipped"]) for r in report["stages"]] == [("ingest", True), ("score", False)]


def test_flow_module_parses_its_command_line(monkeypatch):
    """``python -m flows.curation`` parses its arguments into the flow's JSON-simple parameters."""
    from flows import curation

    seen = {}
    monkeypatch.setattr(curation, "curate_dataset", lambda **kw: seen.update(kw) or kw)
    curation.main(["r.yaml", "--set", "select.size=5", "--stage", "select", "--force", "--dask", "local"])
    assert seen == {
        "recipe_path": "r.yaml",
        "overrides": {"select.size": 5},
        "stages": ["select"],
        "force": True,
        "home": None,
        "dask_address": "local",
    }


def test_prefect_yaml_and_flows_serve_declare_the_same_deployments():
    import inspect

    import yaml

    from flows import curation, serve

    spec = yaml.safe_load((Path(curation.__file__).parents[1] / "prefect.yaml").read_text(encoding="utf-8"))
    declared = {d["name"]: d for d in spec["deployments"] if d["entrypoint"] == "flows/curation.py:curate_dataset"}
    served = {d.name: d for d in serve.deployments()}
    assert declared.keys() == served.keys() == {serve.NIGHTLY, serve.SELECT}
    params = set(inspect.signature(curation.curate_dataset.fn).parameters)
    for name, d in declared.items():
        assert d["entrypoint"] == "flows/curation.py:curate_dataset"
        assert set(d["parameters"]) <= params
        assert d["parameters"] == served[name].parameters
        assert [(s["cron"], s["timezone"]) for s in d.get("schedules", [])] == [
            (s.schedule.cron, s.schedule.timezone) for s in served[name].schedules
        ]
    assert declared[serve.NIGHTLY]["schedules"][0]["cron"] == "0 3 * * *"
    assert spec["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": "."}}]


def test_the_deploy_step_requires_an_api_server(monkeypatch):
    """``prefect.yaml``'s build step: no API server configured -> one line (SystemExit), else the URL."""
    import yaml
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows import serve
    from flows.steps import require_api_server

    spec = yaml.safe_load((Path(__file__).parents[2] / "prefect.yaml").read_text(encoding="utf-8"))
    assert {"flows.steps.require_api_server": {}} in spec["build"]
    with temporary_settings(updates={PREFECT_API_URL: None}), pytest.raises(SystemExit, match="PREFECT_API_URL"):
        require_api_server()
    # serving the same deployments without a server: its temporary one never schedules the nightly run either
    # (measured: 0 scheduled runs after 100 s, where a real server lists 3 within a minute)
    monkeypatch.setattr(serve, "serve", lambda *a: pytest.fail("served on a temporary server"))
    with temporary_settings(updates={PREFECT_API_URL: None}), pytest.raises(SystemExit, match=r"flows\.serve` would"):
        serve.main([])
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        assert require_api_server() == {"api_url": "http://127.0.0.1:4200/api"}


@pytest.mark.slow  # two interpreters importing prefect
def test_env_sh_gives_the_temporary_prefect_server_time_to_start_on_a_busy_box():
    """``source scripts/env.sh`` raises Prefect's 20 s start-up limit of its temporary API server, under the name
    prefect 3.7.7 reads (a flow without a server failed with "Timed out while attempting to connect to ephemeral
    Prefect API server" at load 12-30, issue 30.9); a value the user set is kept."""
    import subprocess
    import sys

    repo = Path(__file__).parents[2]
    probe = (
        "from prefect.settings import get_current_settings as s; print(s().server.ephemeral.startup_timeout_seconds)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"}

    def seconds(extra: dict[str, str]) -> int:
        cmd = f"source scripts/env.sh && {sys.executable} -c '{probe}'"
        done = subprocess.run(["bash", "-c", cmd], cwd=repo, env={**env, **extra}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())

    assert seconds({}) >= 300
    assert seconds({"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "45"}) == 45
