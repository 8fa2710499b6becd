"""How the CLIs fail (issue 11 item 1, issue 10 part 6) and what they say when an answer is weak (item 9).

Usage errors, ``--version`` and Ctrl-C run the installed console scripts in subprocesses, as a user types them;
the rest call ``curate.cli.main`` in-process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from curate.cli import main
from curate.console import version


BIN = Path(sys.executable).parent

USAGE_ERRORS = [
    (["curate", "ingest", "--bogus", "x"], "No such option: --bogus"),
    (["curate", "ingest", "f.csv"], "Missing option '--pool'"),
    (["curate", "select", "--pool", "p", "--size", "abc"], "Invalid value for '--size'"),
    (["curate", "ingestt"], "No such command 'ingestt'"),
    (["training", "reward", "--bogus"], "No such option: --bogus"),
]


def _popen(args: list[str], env: dict) -> subprocess.Popen:
    exe = BIN / args[0]
    if not exe.is_file():
        pytest.skip(f"console script {exe} not installed")
    return subprocess.Popen([str(exe), *args[1:]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_usage_errors_print_clicks_message_and_exit_2(tmp_path):
    env = {**os.environ, "CURATE_HOME": str(tmp_path / "w"), "COLUMNS": "200"}
    procs = [(args, want, _popen(args, env)) for args, want in USAGE_ERRORS]  # all at once: startup dominates
    for args, want, proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, err)
        assert "Traceback" not in err and want in err and "Usage:" in err, (args, err)


def test_version_of_both_clis(tmp_path):
    env = {**os.environ, "CURATE_HOME": str(tmp_path / "w")}
    procs = {name: _popen([name, "--version"], env) for name in ("curate", "training")}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == f"{name} {version()}", (out, err)
    assert version()[0].isdigit()


def test_ctrl_c_prints_interrupted_and_exits_130(tmp_path):
    script = (
        "import time\n"
        "from curate.ingest import stage\n"
        "def slow(*args, **kwargs):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(120)\n"
        "stage.ingest = slow\n"
        "from curate.cli import main\n"
        "raise SystemExit(main(['ingest', 'x.jsonl', '--pool', 'p']))\n"
    )
    env = {**os.environ, "CURATE_HOME": str(tmp_path / "w")}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err


# --------------------------------------------------------------------------------------------------- user errors
def test_a_user_error_is_one_line_and_exit_2(ws, capsys):
    assert main(["show", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: pool 'nope' not found") and "Traceback" not in err
    assert main(["ingest", "no-such-file.jsonl", "--pool", "p"]) == 2
    assert "no-such-file.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("bug", [KeyError("column"), ValueError("a bug"), FileNotFoundError("internal")])
def test_a_bug_keeps_its_traceback(ws, monkeypatch, bug):
    from curate.ingest import stage

    def broken(*args, **kwargs):
        raise bug

    monkeypatch.setattr(stage, "ingest", broken)
    with pytest.raises(type(bug)):
        main(["ingest", "x.jsonl", "--pool", "p"])


def test_an_os_error_on_a_named_path_is_one_line(ws, monkeypatch, capsys):
    from curate.ingest import stage

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/data/secret.jsonl")

    monkeypatch.setattr(stage, "ingest", denied)
    assert main(["ingest", "x.jsonl", "--pool", "p"]) == 2
    assert capsys.readouterr().err.strip() == "error: Permission denied: /data/secret.jsonl"


ENOSPC_POLARS = "parquet: File out of specification: underlying IO error: No space left on device (os error 28)"


@pytest.mark.parametrize("where", ["polars", "os"])
def test_a_full_disk_during_curation_is_one_line_and_a_rerun_finishes_the_same(ws, tmp_path, monkeypatch, capsys,
                                                                                where):  # fmt: skip
    """Issue 30.2: a full disk was two 90-line tracebacks. polars reports it as a ComputeError naming no file (what
    it raises on a real full disk), a plain write as ``OSError(ENOSPC)`` without a path: both are one line naming
    the file; after space is freed the same command finishes as an uninterrupted run does."""
    import errno

    import polars as pl

    from curate import io

    source = "gen://arith?n=30&seed=0&max_level=1"
    with monkeypatch.context() as patch:
        if where == "polars":

            def full(*args, **kwargs):
                raise pl.exceptions.ComputeError(ENOSPC_POLARS)

            patch.setattr(pl.DataFrame, "write_parquet", full)
        else:

            def full(path):
                raise OSError(errno.ENOSPC, "No space left on device")

            patch.setattr(io, "_create_temp", full)
        assert main(["ingest", source, "--pool", "p", "--json"]) == 2  # --json: no progress lines beside the error
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert err.startswith(f"error: No space left on device: {ws.root}") and "free some space" in err
    # space freed
    assert main(["ingest", source, "--pool", "p", "--json"]) == 0
    assert main(["ingest", source, "--pool", "p", "--json", "--home", str(tmp_path / "fresh")]) == 0
    fresh = io.Workspace(tmp_path / "fresh")
    assert pl.read_parquet(ws.table("p", "problems")).equals(pl.read_parquet(fresh.table("p", "problems")))


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for this process, as a user's workspace on a read-only mount: chmod for a user, a
    read-only bind mount for root (which chmod does not stop); skips where neither works."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip("root without mount: cannot make a folder read-only")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_every_command_on_a_read_only_workspace_is_one_line(ws, capsys):
    """Issue 30.2: 5 of 6 commands, `curate stats` too, failed with a traceback (the lock file cannot be made)."""
    from training.cli import main as training_main

    assert main(["ingest", "gen://arith?n=20&seed=0&max_level=1", "--pool", "p", "--json"]) == 0
    capsys.readouterr()
    commands = [
        (main, ["stats", "--pool", "p"]), (main, ["score", "--pool", "p", "--no-embeddings"]),
        (main, ["ingest", "gen://arith?n=5", "--pool", "q"]), (main, ["decontaminate", "--pool", "p"]),
        (main, ["select", "--pool", "p", "--size", "5", "--name", "s"]),
        (main, ["run", "--recipe", "datasets/tiny/recipe.yaml"]),
        (training_main, ["run", "--recipe", "training/recipes/tiny/fastcurl.yaml"]),
    ]  # fmt: skip
    with read_only(ws.root):
        for cli, args in commands:
            assert cli(args) == 2, args
            err = capsys.readouterr().err.strip()
            assert "Traceback" not in err and len(err.splitlines()) == 1, (args, err)
            assert err.startswith("error: ") and str(ws.root) in err, (args, err)
    assert main(["show", "p", "--json"]) == 0  # reading needs no write


# --------------------------------------------------------------------------------------------------- weak answers
def test_csv_without_an_answer_column_hints_at_field(ws, tmp_path, capsys):
    src = tmp_path / "q.csv"
    src.write_text("question,solution_text\nWhat is 1+1?,2\nWhat is 2+2?,4\n", encoding="utf-8")
    assert main(["ingest", str(src), "--pool", "p"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "all 2 rows were quarantined as missing_answer" in err and "--field answer=COLUMN" in err
    assert main(["ingest", str(src), "--pool", "p2", "--field", "answer=solution_text", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["admitted"] == 2 and summary["warnings"] == [] and summary["reconciles"]


def test_size_above_the_eligible_count_warns(ws, capsys):
    assert main(["ingest", "gen://mixed?n=30&seed=0", "--pool", "p", "--json"]) == 0
    capsys.readouterr()
    assert main(["select", "--pool", "p", "--by", "level", "--size", "100", "--no-plots"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: size 100 asked for, but only 30 rows pass the filters, so the selection has 30" in err
    assert main(["select", "--pool", "p", "--by", "level", "--size", "10", "--no-plots", "--name", "s", "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["summary"]["warnings"]
    assert not any("asked for" in w for w in warnings)


# --------------------------------------------------------------------------------------------------- progress in logs
def test_tables_keep_their_width_off_a_terminal():
    """Issue 30.10: piped or logged, rich cut every table at 80 columns, wrapping its cells over several lines."""
    from curate.ingest.formats import FORMATS

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = _popen(["curate", "formats"], env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    rows = out.splitlines()
    assert max(len(row) for row in rows) > 80
    for fmt, reads in FORMATS.items():  # each row whole on one line
        assert any(f" {fmt} " in row and reads in row for row in rows), (fmt, out)


def test_progress_prints_rate_and_time_left_when_not_a_terminal(capsys):
    from curate.progress import bar

    with bar(10, "embedding", unit="problems", log_every_s=0) as advance:
        for _ in range(10):
            advance(1, tokens=5)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("embedding: 1/10 problems (") and "/s" in lines[0] and "left" in lines[0]
    assert "tokens/s" in lines[0] and len(lines) == 11
    assert lines[-1].startswith("embedding: 10 problems in ")


def test_embedding_reports_progress_in_logs(capsys):
    import numpy as np

    from curate.embed import EmbedConfig, encode_texts

    class Model:
        def get_embedding_dimension(self):
            return 2

        def encode(self, texts, **kwargs):
            import torch

            return torch.ones(len(texts), 2)

    vectors = encode_texts(Model(), ["a", "bb", "ccc"], EmbedConfig(chunk_size=2), progress=True)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert "embedding: 3 problems in" in capsys.readouterr().err
