"""Shared test setup: hermetic by default (no network, no GPU), markers that skip themselves, common fixtures.

- ``gpu`` tests run only where CUDA is available; ``network`` tests only with CURATE_TEST_NETWORK=1.
- ``shared_data`` is ``../shared/data`` beside the repo; tests that need it skip with a clear reason if absent.
- Every test gets its own empty workspace through ``ws`` (and CURATE_HOME points at it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_k, "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect's temporary API server must start on a loaded box too (its default, 20 s, fails there; scripts/env.sh).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CURATE_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    cuda = False
    if any("gpu" in item.keywords for item in items):
        try:
            import torch

            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
    skip_gpu = pytest.mark.skip(reason="needs CUDA (no GPU on this machine)")
    skip_net = pytest.mark.skip(reason="touches the network; set CURATE_TEST_NETWORK=1 to run")
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(skip_gpu)
        if "network" in item.keywords and os.environ.get("CURATE_TEST_NETWORK") != "1":
            item.add_marker(skip_net)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; skips the test where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set CURATE_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A fresh, empty workspace; CURATE_HOME points at it for CLI calls."""
    from curate.io import Workspace

    home = tmp_path / "workspace"
    monkeypatch.setenv("CURATE_HOME", str(home))
    return Workspace.resolve(home)
