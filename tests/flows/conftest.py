"""Shared setup of the flow tests: Prefect isolated from ~/.prefect, one test harness per session, small recipes.

- ``PREFECT_HOME`` points at a temporary folder before Prefect is imported, and analytics are off (ENV.md §8).
- ``prefect_harness``: ``prefect_test_harness`` (real Prefect API on a temporary SQLite database), entered once per
  session because it costs ~15 s (up to ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` on a loaded box).
- ``write_recipe``: a recipe YAML over the built-in generator with the registered stages that can run here.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml


os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="curate-prefect-home-")
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"

TRAIN_SOURCE = "gen://mixed?n=200&seed=0"
EVAL_SOURCE = "gen://mixed?n=40&seed=1"
# Stages that need more than the generator (a model to sample from): the flow tests leave them out.
NEEDS_MODEL = ("rollout", "solutions")
# Settings that keep the flow tests fast without changing what the flow does (no sentence-transformers load).
FAST = {"score": {"use_embeddings": False}, "decontaminate": {"use_embeddings": False, "dedup": {"enabled": False}}}


@pytest.fixture(scope="session")
def prefect_harness():
    """A real Prefect API on a temporary database for the whole session; yields a sync client."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_HOME, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with (
        temporary_settings(updates={PREFECT_HOME: os.environ["PREFECT_HOME"]}),
        prefect_test_harness(
            server_startup_timeout=int(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"])
        ),
        get_client(sync_client=True) as client,
    ):
        yield client


def runnable_stages() -> list[str]:
    """Registered stages that need no model, in pipeline order."""
    from curate import pipeline

    return [stage.name for stage in pipeline.STAGES if stage.name not in NEEDS_MODEL]


@pytest.fixture
def write_recipe(tmp_path):
    """``write_recipe(name, stages=None, **sections) -> Path``: a recipe over the generator (train + eval split)."""

    def write(name: str = "flowtest", stages: list[str] | None = None, **sections) -> Path:
        data = {
            "name": name,
            "pool": name,
            "seed": 0,
            "stages": list(stages if stages is not None else runnable_stages()),
            "ingest": {
                "sources": [
                    {"path": TRAIN_SOURCE, "name": "gen/train", "split": "train"},
                    {"path": EVAL_SOURCE, "name": "gen/eval", "split": "test"},
                ]
            },
        }
        for stage, settings in FAST.items():
            if stage in data["stages"]:
                data[stage] = dict(settings)
        data.update(sections)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return write
