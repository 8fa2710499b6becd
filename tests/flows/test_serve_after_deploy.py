"""Flow fixes of issue 11: serving after ``prefect deploy --all``, and clean task logs of the select stage.

``python -m flows.serve`` after ``prefect deploy --all`` (the README's Prefect block read top to bottom):

Both register deployments of the same names. Before the fix, serving on top of the yaml's deployments kept their
pull steps / storage fields and every served run failed with "Downloading flow code from storage at None". Here a
real ``prefect server`` on 127.0.0.1 (the ``server`` fixture of ``test_server``) gets the yaml's deployments first,
then ``flows.serve`` takes them over, and a run triggered through the API must complete and write its workspace.

Select's logs: with ``log_prints=True`` the flow forwarded every ``print`` to the run's log, including the bytecode
disassembly that dill prints (into a capture Prefect's patched ``print`` bypasses) while ``datasets`` fingerprints
the selection's ``hf/`` folder. The run's logs must not contain it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flows.test_server import BIN, POOL, REPO, _client, _wait_for, patience, server  # noqa: F401 (server: fixture)


DISASSEMBLY = re.compile(r"\b(RESUME|LOAD_GLOBAL|LOAD_CONST|RETURN_VALUE|LOAD_FAST)\b")


@pytest.mark.slow
def test_select_task_logs_have_no_bytecode_disassembly(prefect_harness, write_recipe, tmp_path):
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    from flows.curation import curate_dataset

    recipe = write_recipe("logs", stages=["ingest", "score", "select"], select={"size": 20, "plots": False})
    state = curate_dataset(recipe_path=str(recipe), home=str(tmp_path / "ws"), return_state=True)
    assert state.is_completed(), state.message
    assert (tmp_path / "ws" / "selections" / "logs" / "hf").is_dir()  # the save_to_disk that used to print
    APILogWorker.drain_all(timeout=patience(30))
    flow_run_id = state.state_details.flow_run_id
    logs = prefect_harness.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    messages = [log.message for log in logs]
    assert any("select done" in m for m in messages)  # the logs were read at all
    assert not [m for m in messages if DISASSEMBLY.search(m)]


@pytest.mark.slow
def test_serve_after_deploy_all_runs_complete(server, write_recipe, tmp_path):  # noqa: F811
    url, stack = server
    prefect = str(BIN / "prefect")
    made = stack.run([prefect, "work-pool", "create", POOL, "--type", "process"], timeout=patience(120))
    assert made.returncode == 0 or "already exists" in made.stdout + made.stderr, made.stdout + made.stderr
    gpu = stack.run([prefect, "work-pool", "create", "training-gpu", "--type", "process"], timeout=patience(120))
    assert gpu.returncode == 0 or "already exists" in gpu.stdout + gpu.stderr, gpu.stdout + gpu.stderr
    deployed = stack.run(
        [prefect, "--no-prompt", "deploy", "--all"], timeout=patience(240), cwd=REPO, extra_env={"PWD": str(REPO)}
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    with _client(url) as client:
        before = client.read_deployment_by_name("curate-dataset/demo-nightly")
        assert before.work_pool_name == POOL and before.pull_steps  # the yaml's deployment, with its pull step

    recipe = write_recipe("served", stages=["ingest"])
    serving = stack.start("serve", [sys.executable, "-m", "flows.serve", "--recipe", str(recipe)], cwd=REPO)
    with _client(url) as client:

        def taken_over():
            assert serving.poll() is None, serving.log_path.read_text(errors="replace")
            with contextlib.suppress(Exception):
                deployment = client.read_deployment_by_name("curate-dataset/demo-nightly")
                return deployment.parameters.get("recipe_path") == str(recipe) and deployment

        nightly = _wait_for(taken_over, patience(120), "flows.serve taking the deployments over")
        assert nightly.work_pool_name is None  # now served by the process, not by a worker
        assert not nightly.pull_steps  # no `set_working_directory` left over from the yaml
        run = client.create_flow_run_from_deployment(nightly.id, parameters={"home": str(tmp_path / "ws")})
        final = _wait_for(
            lambda: (fr := client.read_flow_run(run.id)).state.is_final() and fr,
            patience(180),
            "the served run finishing",
        )
    log = serving.log_path.read_text(errors="replace")
    assert final.state.is_completed(), log[-3000:]
    assert "storage at None" not in log
    assert (tmp_path / "ws" / "pools" / "served" / "problems.parquet").is_file()


def _children(pid: int) -> list[int]:
    """Direct child PIDs of ``pid`` (Linux /proc), to clean up after a failed run."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


@pytest.mark.slow
def test_sigterm_of_flows_curation_stops_the_temporary_api_server(tmp_path):
    """``kill PID`` of ``python -m flows.curation`` without a server: the run is marked crashed and the temporary
    API server Prefect started for the process stops (before the fix it kept listening, the run stayed RUNNING)."""
    recipe = tmp_path / "slow.yaml"
    recipe.write_text(
        "name: killed\npool: killed\nstages: [ingest]\ningest:\n  sources: ['gen://mixed?n=100000&seed=0']\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PREFECT_API_URL", None)
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.curation", str(recipe), "--home", str(tmp_path / "ws")],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
        )  # fmt: skip
        children: list[int] = []
        try:
            _wait_for(
                lambda: "Beginning flow run" in log_path.read_text(errors="replace"),
                patience(240),
                "the flow starting",
            )
            children = _children(proc.pid)
            proc.send_signal(signal.SIGTERM)
            proc.wait(patience(60))
        finally:
            for pid in [proc.pid, *children]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    text = log_path.read_text(errors="replace")
    port = int(re.search(r"Starting temporary server on http://127\.0\.0\.1:(\d+)", text).group(1))
    assert "Stopping temporary server" in text, text[-3000:]
    assert re.search(r"Flow run .* Finished in state Crashed", text), text[-3000:]
    with socket.socket() as s:  # nothing listens there any more
        assert s.connect_ex(("127.0.0.1", port)) != 0
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in children)


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    return True
