"""The nightly schedule through the README's own path (issue 30.12): a real ``prefect server start`` on a free port,
the two work pools, ``prefect --no-prompt deploy --all``, then the server's own scheduler loops must create the
nightly deployment's SCHEDULED runs, at 03:00 UTC, and none for the on-demand deployments. Nothing but the server
schedules them (``test_schedule`` runs the scheduler's function itself; this one waits for the running server).

Prefect 3.7.7's server runs two scheduler loops (``prefect.server.services.scheduler``): every 5 s one picks up
deployments changed in the last 6 s, and every 60 s a full pass schedules every deployment with fewer than 3 future
runs (``PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS``, ``..._LOOP_SECONDS``, ``..._MIN_RUNS``).
The runs therefore appear within about a minute of the deploy; the test allows several minutes for a loaded box.

Why they did not appear here before: in a shell without ``PREFECT_API_URL`` every ``prefect`` command silently runs
on a temporary server of its own, which runs no scheduler. Pools and deployments were created and listed, and no
run was ever scheduled. ``prefect.yaml``'s build step (``flows.steps.require_api_server``) now stops that deploy.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time

import pytest

from tests.flows.test_server import BIN, POOL, REPO, _client, _wait_for, patience, server  # noqa: F401 (server: fixture)


pytestmark = pytest.mark.slow  # a server start, a deploy, a scheduler pass

SCHEDULED_WITHIN_S = patience(140)  # the full pass runs every 60 s


def _scheduled(client, deployment_id) -> list:
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )

    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["SCHEDULED"]))),
    )


def test_deploy_all_on_a_fresh_server_schedules_the_nightly_runs(server):  # noqa: F811
    url, stack = server
    prefect = str(BIN / "prefect")
    for pool in (POOL, "training-gpu"):  # README: every pool prefect.yaml names must exist before deploy
        made = stack.run([prefect, "work-pool", "create", pool, "--type", "process"], timeout=patience(120))
        assert made.returncode == 0 or "already exists" in made.stdout + made.stderr, made.stdout + made.stderr
    deployed = stack.run(
        [prefect, "--no-prompt", "deploy", "--all"], timeout=patience(240), cwd=REPO, extra_env={"PWD": str(REPO)}
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    t0 = time.monotonic()
    with _client(url) as client:
        nightly = client.read_deployment_by_name("curate-dataset/demo-nightly")
        runs = _wait_for(lambda: _scheduled(client, nightly.id), SCHEDULED_WITHIN_S, "scheduled nightly runs")
        waited = time.monotonic() - t0
        runs = _wait_for(
            lambda: len(r := _scheduled(client, nightly.id)) >= 3 and r, patience(40), "three scheduled runs"
        )
        assert all(run.auto_scheduled for run in runs)
        now = datetime.datetime.now(datetime.UTC)
        starts = sorted(run.expected_start_time for run in runs)
        assert {(t.astimezone(datetime.UTC).hour, t.minute) for t in starts} == {(3, 0)}
        assert now < starts[0] <= now + datetime.timedelta(days=1)  # the next night first, then one per night
        for name in ("curate-dataset/demo-select", "train-chain/tiny-cpu", "train-chain/qwen-math-1.5b-gpu"):
            assert _scheduled(client, client.read_deployment_by_name(name).id) == []  # on demand only
    print(f"first scheduled run {waited:.0f} s after `prefect deploy --all` returned")


def test_deploy_without_an_api_server_stops_with_one_line(tmp_path):
    """Without PREFECT_API_URL the deploy went to a temporary server with no scheduler and succeeded, scheduling
    nothing, ever; now it fails before registering anything, with one line saying what to export."""
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PWD": str(REPO)}
    env.pop("PREFECT_API_URL", None)
    made = subprocess.run(  # succeeds, on the temporary server (on $PREFECT_HOME's database), as before
        [str(BIN / "prefect"), "work-pool", "create", POOL, "--type", "process"],
        env=env, capture_output=True, text=True, timeout=patience(200),
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    deployed = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "demo-nightly"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=patience(200),
    )  # fmt: skip
    out = deployed.stdout + deployed.stderr
    assert deployed.returncode != 0, out
    assert "PREFECT_API_URL is not set" in out and "Traceback" not in out, out
