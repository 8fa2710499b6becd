"""A SIGKILLed flow leaves Prefect's temporary API server listening; the next flow start stops it (issue 24.6). The
server here is a stand-in process with the same command line marker and environment, so no Prefect is started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows.curation import EPHEMERAL_APP, reap_orphaned_servers
from tests.processes import alive


pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc (Linux)")


def _flow_with_server(tmp_path: Path, name: str = "python") -> tuple[subprocess.Popen, int]:
    """A 'flow' process that starts a stand-in temporary server as Prefect does, then waits. ``name``: the flow
    process's name (``comm``), as IPython, pytest or a Jupyter kernel rename theirs."""
    pid_file = tmp_path / "server.pid"
    flow = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, sys, time
        open("/proc/self/comm", "w").write({name!r})
        env = {{**os.environ, "PREFECT__SERVER_EPHEMERAL": "1"}}
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{EPHEMERAL_APP}"], env=env)
        open({str(pid_file)!r}, "w").write(str(server.pid))
        time.sleep(120)
    """)])  # fmt: skip
    deadline = time.monotonic() + 120  # a loaded box starts two interpreters slowly; only a failure waits
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return flow, int(pid_file.read_text())


@pytest.mark.parametrize("name", ["python3", "ipython", "pytest"])
def test_a_killed_flows_server_is_stopped_and_a_live_flows_is_not(tmp_path, name):
    """A live flow's server is kept whatever its process is called (issue 30.4: a flow in IPython or pytest had its
    server stopped by the next flow's start, and failed)."""
    live, live_server = _flow_with_server(tmp_path / "live", name) if (tmp_path / "live").mkdir() is None else None
    dead, orphan = _flow_with_server(tmp_path / "dead") if (tmp_path / "dead").mkdir() is None else None
    try:
        assert Path(f"/proc/{live.pid}/comm").read_text().strip() == name
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        time.sleep(0.2)  # re-parented
        stopped = reap_orphaned_servers()
        assert orphan in stopped and live_server not in stopped
        deadline = time.monotonic() + 60
        while alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(orphan) and alive(live_server)
    finally:
        for pid in (live_server, orphan):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        live.kill()
        live.wait()
