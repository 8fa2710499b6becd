"""The deployments against a real ``prefect server`` on 127.0.0.1 (its own PREFECT_HOME, stopped by PID).

Covers: ``prefect --no-prompt deploy --all`` registers both deployments of ``prefect.yaml`` (nightly cron at
03:00 UTC; the on-demand one without a schedule); a run of the nightly deployment, triggered through the API and
picked up by a process worker, completes and writes its workspace; ``python -m flows.serve`` serves the same
deployment names with the same schedule. Everything it starts is stopped at the end (SIGTERM, then SIGINT, then
SIGKILL; a Prefect worker needs the second signal, ENV.md §8). Uses no network beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml


REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POOL = "curate-process"
SLACK = 3  # every wait below is an idle box's generous time x SLACK: CI shares a 2-core box (load 8 and more)
pytestmark = pytest.mark.slow


def patience(seconds: float) -> float:
    """How long to wait for something that takes well under ``seconds`` on an idle box (``SLACK``); only a
    failure ever waits this long."""
    return seconds * SLACK


# --------------------------------------------------------------------------------------------------- processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGINT, then SIGKILL, each with a few seconds' grace; only this process, by its PID."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGINT, 5), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)


def _wait_for(check, timeout: float, what: str, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout:.0f} s")


class Stack:
    """The processes of one test: each started with its log file, all stopped in reverse order at the end."""

    def __init__(self, tmp: Path, env: dict[str, str]):
        self.tmp, self.env, self.procs = tmp, env, []

    def start(self, name: str, args: list[str], **kw) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env, **kw)
        proc.log, proc.log_path = log, self.tmp / f"{name}.log"
        self.procs.append(proc)
        return proc

    def run(self, args: list[str], timeout: float, extra_env: dict[str, str] | None = None, **kw):
        env = {**self.env, **(extra_env or {})}
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, **kw)

    def stop(self, proc: subprocess.Popen) -> None:
        _stop(proc)
        proc.log.close()
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)
            proc.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A fresh ``prefect server start`` on a free 127.0.0.1 port; yields (api_url, Stack). Retries on port races.

    Module-scoped (a start costs 10-30 s here); the serve test runs after the deploy test and replaces its
    deployments of the same names.
    """
    tmp_path = tmp_path_factory.mktemp("prefect-server")
    home = tmp_path / "prefect-home"
    home.mkdir()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PREFECT_API_URL", None)
    stack = Stack(tmp_path, env)
    try:
        for attempt in range(3):
            port = _free_port()
            proc = stack.start(
                f"server-{attempt}",
                [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            )
            url = f"http://127.0.0.1:{port}/api"
            deadline = time.monotonic() + patience(90)
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                time.sleep(0.5)
            else:
                _stop(proc)
                continue
            env["PREFECT_API_URL"] = url
            yield url, stack
            return
        pytest.fail(f"prefect server did not start; see {tmp_path}/server-*.log")
    finally:
        stack.stop_all()


def _client(url: str):
    """A sync client for ``url`` (this test's server, whatever else the session configured)."""
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(url)


# --------------------------------------------------------------------------------------------------- tests
def test_prefect_yaml_deploys_with_schedule_and_a_triggered_run_completes(server, write_recipe, tmp_path):
    url, stack = server
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    names = [d["name"] for d in spec["deployments"]]
    assert names == ["demo-nightly", "demo-select", "tiny-cpu", "qwen-math-1.5b-gpu"]

    prefect = str(BIN / "prefect")
    made = stack.run([prefect, "work-pool", "create", POOL, "--type", "process"], timeout=patience(120))
    assert made.returncode == 0, made.stdout + made.stderr
    # `prefect deploy --all` stops at the first deployment whose work pool does not exist: the GPU recipe's too.
    gpu = stack.run([prefect, "work-pool", "create", "training-gpu", "--type", "process"], timeout=patience(120))
    assert gpu.returncode == 0 or "already exists" in gpu.stdout + gpu.stderr, gpu.stdout + gpu.stderr
    # `{{ $PWD }}` in prefect.yaml is resolved at deploy time: the repo root the deployment runs from.
    deployed = stack.run(
        [prefect, "--no-prompt", "deploy", "--all"], timeout=patience(240), cwd=REPO, extra_env={"PWD": str(REPO)}
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    with _client(url) as client:
        nightly = client.read_deployment_by_name("curate-dataset/demo-nightly")
        on_demand = client.read_deployment_by_name("curate-dataset/demo-select")
        [schedule] = nightly.schedules
        assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == ("0 3 * * *", "UTC", True)
        assert on_demand.schedules == []
        assert on_demand.parameters["stages"] == ["score", "select"]
        assert nightly.work_pool_name == POOL
        assert nightly.job_variables["working_dir"] == str(REPO)
        # A small recipe instead of the demo's 3,300 problems: parameters are editable per run, as in the UI.
        recipe = write_recipe("served", stages=["ingest"])
        home = tmp_path / "ws"
        run = client.create_flow_run_from_deployment(
            nightly.id, parameters={"recipe_path": str(recipe), "home": str(home)}
        )

    worker = stack.start("worker", [prefect, "worker", "start", "--pool", POOL], cwd=tmp_path)
    with _client(url) as client:
        final = _wait_for(
            lambda: (fr := client.read_flow_run(run.id)).state.is_final() and fr,
            patience(240),
            "the triggered run finishing",
        )
    stack.stop(worker)
    assert final.state.is_completed(), f"{final.state!r}; worker log: {stack.tmp / 'worker.log'}"
    assert (home / "pools" / "served" / "problems.parquet").is_file()


def test_flows_serve_registers_the_same_deployments(server, tmp_path, write_recipe):
    url, stack = server
    recipe = write_recipe("served", stages=["ingest"])
    with _client(url) as client:  # start from no deployments: serve must create them, not inherit the yaml's
        for name in ("demo-nightly", "demo-select"):
            with contextlib.suppress(Exception):
                client.delete_deployment(client.read_deployment_by_name(f"curate-dataset/{name}").id)
    serving = stack.start("serve", [sys.executable, "-m", "flows.serve", "--recipe", str(recipe)], cwd=REPO)
    with _client(url) as client:

        def registered():
            assert serving.poll() is None, serving.log_path.read_text(errors="replace")
            with contextlib.suppress(Exception):
                return client.read_deployment_by_name("curate-dataset/demo-select")

        _wait_for(registered, patience(120), "the served deployments registering")
        nightly = client.read_deployment_by_name("curate-dataset/demo-nightly")
        assert nightly.work_pool_name is None  # served: this process runs it, no worker involved
        [schedule] = nightly.schedules
        assert (schedule.schedule.cron, schedule.schedule.timezone) == ("0 3 * * *", "UTC")
        run = client.create_flow_run_from_deployment(nightly.id, parameters={"home": str(tmp_path / "ws")})
        final = _wait_for(
            lambda: (fr := client.read_flow_run(run.id)).state.is_final() and fr,
            patience(180),
            "the served run finishing",
        )
    assert final.state.is_completed(), serving.log_path.read_text(errors="replace")[-3000:]
    assert (tmp_path / "ws" / "pools" / "served" / "problems.parquet").is_file()
