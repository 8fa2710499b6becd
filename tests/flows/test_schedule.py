"""Prefect's own scheduler service creates the scheduled runs of a deployment (issue 23.1).

A nightly deployment that never fires is silent: the server's scheduler logged an SQLAlchemy error every minute
(``Can't evaluate bulk DML statement`` in ``_insert_scheduled_flow_runs``, SQLAlchemy 2.1) and no run was created.
Here a deployment with the nightly cron of ``prefect.yaml`` and one with an interval schedule are created through a
real Prefect API (``prefect_test_harness``: a server subprocess on a temporary SQLite database), then one pass of
Prefect's scheduler service (``schedule_deployments``, the loop the server runs every 60 s; the test server does not
run it) is run against that server's database, and the runs it scheduled are read back through the API. No network.
"""

from __future__ import annotations

import asyncio
import datetime
from itertools import pairwise

import pytest


pytestmark = pytest.mark.slow  # the session's test server takes ~15 s to start


def _scheduled_runs(client, deployment_id):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    return client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])))


def test_the_scheduler_service_creates_runs_for_cron_and_interval_deployments(prefect_harness):
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule
    from prefect.server.services.scheduler import schedule_deployments
    from prefect.settings import get_current_settings

    client = prefect_harness
    flow_id = client.create_flow_from_name("schedule-probe")
    nightly = client.create_deployment(
        flow_id=flow_id,
        name="nightly",
        schedules=[DeploymentScheduleCreate(schedule=CronSchedule(cron="0 3 * * *", timezone="UTC"), active=True)],
    )
    hourly = client.create_deployment(
        flow_id=flow_id,
        name="hourly",
        schedules=[DeploymentScheduleCreate(schedule=IntervalSchedule(interval=datetime.timedelta(hours=1)))],
    )
    try:
        assert _scheduled_runs(client, nightly) == [] and _scheduled_runs(client, hourly) == []

        asyncio.run(schedule_deployments())  # one pass of the server's own loop, on the harness's database

        settings = get_current_settings().server.services.scheduler
        for deployment_id, expected in ((nightly, (3, 0)), (hourly, None)):
            runs = _scheduled_runs(client, deployment_id)
            assert len(runs) >= settings.min_runs, f"the scheduler created {len(runs)} run(s)"
            assert all(run.state.is_scheduled() and run.auto_scheduled for run in runs)
            times = sorted(run.expected_start_time for run in runs)
            assert times[0] > datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)
            if expected is not None:
                assert {(t.astimezone(datetime.UTC).hour, t.minute) for t in times} == {expected}
            else:
                assert all(b - a == datetime.timedelta(hours=1) for a, b in pairwise(times))
    finally:  # the session's other tests share this server: leave no deployments (their scheduled runs go too)
        for deployment_id in (nightly, hourly):
            client.delete_deployment(deployment_id)
