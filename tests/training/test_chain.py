"""Run state and step processes (training.chain): one recipe per run folder, one writer per run folder, a step that
dies with its parent, a failed step as one line. The step processes here are stand-in scripts (``launch``), so
these tests need no model."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from curate.errors import InputError, LockTimeout
from tests.processes import alive, wait_for
from training.chain import HARMLESS, open_run, run_lock
from training.recipe import recipe_from_mapping
from training.step import DiskFull, StepFailed, run_step


RECIPE = {"name": "r", "pool": "p", "train": "x.parquet", "rl": {"loss_type": "cispo"}}
REPO = Path(__file__).resolve().parents[2]


def test_a_changed_recipe_on_a_finished_run_is_refused_and_its_records_stay(tmp_path):
    run = open_run(recipe_from_mapping(RECIPE), home=tmp_path)
    before = (run.run_dir / "recipe.json").read_text()
    with pytest.raises(InputError, match=r"differs in .*seed.*--out"):
        open_run(recipe_from_mapping({**RECIPE, "seed": 1}), home=tmp_path)  # `--set seed=1` on the same folder
    with pytest.raises(InputError, match=r"rl\.learning_rate"):
        open_run(recipe_from_mapping({**RECIPE, "rl": {"loss_type": "cispo", "learning_rate": 1e-4}}), home=tmp_path)
    assert (run.run_dir / "recipe.json").read_text() == before  # never rewritten
    # the same recipe (or one that differs only in placement, like `launch`) reopens the folder
    again = open_run(recipe_from_mapping({**RECIPE, "launch": ["accelerate", "launch"]}), home=tmp_path)
    assert again.run_dir == run.run_dir and (run.run_dir / "recipe.json").read_text() == before
    # so does one that differs in any setting of speed or placement (fields marked ``curate.config.placement``)
    placement = {"eval": {"threads": 1, "device": "cpu"}, "launch": ["accelerate", "launch"], "home": str(tmp_path)}
    assert open_run(recipe_from_mapping({**RECIPE, **placement}), home=tmp_path).run_dir == run.run_dir
    assert sorted(HARMLESS) == [
        "eval.device",
        "eval.threads",
        "home",
        "launch",
        "redistill.sft.report_to",
        "redistill.sft.torch_threads",
        "rft.sft.report_to",
        "rft.sft.torch_threads",
        "rl.report_to",
        "sft.report_to",
        "sft.torch_threads",
    ]
    # the README's three seeds: each in its own folder
    other = open_run(recipe_from_mapping({**RECIPE, "seed": 1}), home=tmp_path, out=tmp_path / "runs" / "seed1")
    assert json.loads((other.run_dir / "recipe.json").read_text())["seed"] == 1


def test_measured_models_are_named_relative_to_the_workspace_and_an_old_absolute_name_is_kept(tmp_path):
    """``measure`` names the SFT model in the ledger by its workspace-relative path (a moved workspace keeps the
    name); a measure begun under the old rule (a ledger folder named after the absolute path) goes on there."""
    run = open_run(recipe_from_mapping(RECIPE), home=tmp_path)
    sft = str(run.run_dir / "sft" / "final")
    assert run.measured_model(sft) == f"runs/{run.run_dir.name}/sft/final"
    assert run.measured_model("Qwen/Qwen2.5-Math-1.5B") == "Qwen/Qwen2.5-Math-1.5B"
    run.ws.ledger_dir(run.recipe.pool, sft).mkdir(parents=True)
    assert run.measured_model(sft) == sft


def test_a_second_writer_of_a_run_folder_waits_then_gives_up_naming_the_holder(tmp_path, monkeypatch, capsys):
    import yaml

    from training.cli import main

    run = open_run(recipe_from_mapping(RECIPE), home=tmp_path)
    ready = tmp_path / "held"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from pathlib import Path
            from training.chain import open_run, run_lock
            from training.recipe import recipe_from_mapping
            run = open_run(recipe_from_mapping({RECIPE!r}), home={str(tmp_path)!r})
            with run_lock(run):
                Path({str(ready)!r}).write_text("1")
                time.sleep(60)
        """)],
        cwd=REPO,
    )  # fmt: skip
    try:
        wait_for(ready)
        with pytest.raises(LockTimeout, match=rf"run folder .*locked by pid {holder.pid}"), run_lock(run, timeout=0.5):
            pass
        # the waiting message advises --lock-timeout: `training run` takes it (issue 30.10)
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump(RECIPE))
        assert main(["run", "--recipe", str(recipe), "--home", str(tmp_path), "--lock-timeout", "0.5"]) == 2
        err = capsys.readouterr().err
        assert "--lock-timeout" in err and f"locked by pid {holder.pid}" in err and "gave up after 0.5 s" in err
    finally:
        holder.kill()
        holder.wait()
    with run_lock(run, timeout=5):  # the kernel released the killed holder's lock
        pass


STAND_IN = """
import os, signal, sys, time
from pathlib import Path
spec = Path(sys.argv[-1])
(spec.parent / "child.pid").write_text(str(os.getpid()))
print("stand-in step started", flush=True)
if os.environ.get("STAND_IN") == "die":
    os.kill(os.getpid(), signal.SIGKILL)
if os.environ.get("STAND_IN") == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
if os.environ.get("STAND_IN") == "full":  # a full disk while saving, and again while handling it
    print("sft step 5/10: loss=0.1", flush=True)
    try:
        raise OSError(28, "No space left on device", str(spec.parent / "checkpoint-5" / "model.safetensors"))
    except OSError:
        raise OSError(28, "No space left on device", str(spec.parent / "checkpoint-5" / "trainer_state.json"))
if os.environ.get("STAND_IN") == "done":
    spec.with_name("step_result.json").write_text('{"ok": true}')
    sys.exit(0)
time.sleep(120)
"""


def test_a_step_leaves_no_temp_file_of_a_killed_step_behind(tmp_path, monkeypatch):
    """A step killed while writing leaves ``.step_result.json.<hex>.tmp``; the next run of the step removes it (issue
    30.3: a retrained ``sft/`` kept one)."""
    script = tmp_path / "step.py"
    script.write_text(STAND_IN)
    out = tmp_path / "sft"
    out.mkdir()
    left = out / ".step_result.json.1a2b3c4d.tmp"
    left.write_text('{"ok"')
    monkeypatch.setenv("STAND_IN", "done")
    assert run_step({"kind": "sft", "out": str(out)}, launch=[sys.executable, str(script)]) == {"ok": True}
    assert not left.exists() and not list(out.glob(".*.tmp"))


def test_a_failed_step_is_one_line_with_its_exit_code_and_log(tmp_path, monkeypatch, capsys):
    script = tmp_path / "step.py"
    script.write_text(STAND_IN)
    monkeypatch.setenv("STAND_IN", "die")
    with pytest.raises(StepFailed) as err:
        run_step({"kind": "sft", "out": str(tmp_path / "sft")}, launch=[sys.executable, str(script)])
    message = str(err.value)
    assert "training step sft" in message and "killed by SIGKILL" in message and "\n" not in message
    log = tmp_path / "sft" / "step.log"
    assert f"its log: {log}" in message and "stand-in step started" in log.read_text()
    assert "stand-in step started" in capsys.readouterr().err  # the step's output on stderr, never stdout
    assert err.value.exit_code == 1  # the CLI prints the line and exits 1 (not a user error)


def test_a_full_disk_in_a_step_is_one_line_and_its_tracebacks_stay_in_the_log(tmp_path, monkeypatch, capsys):
    """Issue 38.7: a full disk during a step echoed its two tracebacks (38-44 lines) above the one clear line. Now
    the terminal gets the step's own lines and that one line, which says the disk is full (exit 2, issue 45.3);
    step.log keeps both tracebacks."""
    script = tmp_path / "step.py"
    script.write_text(STAND_IN)
    monkeypatch.setenv("STAND_IN", "full")
    with pytest.raises(DiskFull) as err:
        run_step({"kind": "sft", "out": str(tmp_path / "sft")}, launch=[sys.executable, str(script)])
    assert str(err.value).startswith(f"No space left on device: training step sft could not write {tmp_path / 'sft'}")
    assert "free some space" in str(err.value) and err.value.exit_code == 2
    assert capsys.readouterr().err == "stand-in step started\nsft step 5/10: loss=0.1\n"
    log = (tmp_path / "sft" / "step.log").read_text()
    assert log.count("Traceback (most recent call last):") == 2 and "During handling of the above" in log


FULL_STEP = """
import sys
from pathlib import Path
from training.step import child_main

def save(spec):
    print("rl step 5/10: reward=0.1", flush=True)
    if sys.argv[-2] == "torch":  # what torch.save's zip writer raises on a full disk, then again on closing
        try:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 5242944 vs 5242832")
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc:858] . PytorchStreamWriter failed writing file")
    try:  # the RL step's: a write fails, and so does the cleanup that handles it
        raise OSError(28, "No space left on device")
    except OSError:
        raise OSError(28, "No space left on device", str(spec.parent / "sampler_state.json"))

child_main(Path(sys.argv[-1]), save)
"""


@pytest.mark.parametrize("how", ["torch", "oserror"])
def test_a_full_disk_is_one_line_exit_2_with_nothing_above_it(tmp_path, capsys, how):
    """Issue 45.3: during SFT the one line was torch's ``RuntimeError: [enforce fail at inline_container.cc:672] .
    unexpected pos ...`` (exit 1), during RL three lines (``OSError ...``, ``During handling ...``) came before it.
    The step's process (``child_main``) knows a full disk in either's words: the terminal gets the step's own lines
    and one line that says so, exit 2 from ``training run``; the traceback is in step.log."""
    script = tmp_path / "step.py"
    script.write_text(FULL_STEP)
    out = tmp_path / "rl"
    with pytest.raises(DiskFull) as err:
        run_step({"kind": "rl", "out": str(out)}, launch=[sys.executable, str(script), how])
    assert capsys.readouterr().err == "rl step 5/10: reward=0.1\n"  # nothing of the tracebacks
    assert str(err.value).startswith(f"No space left on device: training step rl could not write {out} (free some")
    assert "\n" not in str(err.value) and err.value.exit_code == 2
    assert "Traceback (most recent call last):" in (out / "step.log").read_text()


@pytest.mark.parametrize("words", [
    "[enforce fail at inline_container.cc:672] . unexpected pos 5242944 vs 5242832",  # torch.save's zip writer
    'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
])  # fmt: skip
def test_a_full_disk_in_a_library_s_words_is_one_line_in_the_cli(capsys, words):
    """Issue 45.3: a verb that saves in its own process (``training sft``) printed torch's or safetensors' words for
    a full disk with a traceback, exit 1. ``run_app`` (both CLIs' error path) knows them: one line, exit 2."""
    import typer

    from curate.console import run_app

    app = typer.Typer()

    @app.command()
    def save() -> None:
        raise RuntimeError(words)

    assert run_app(app, []) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: No space left on device (free some space") and len(err.splitlines()) == 1


def test_a_step_ended_by_ctrl_c_is_an_interrupt_not_a_failure(tmp_path, monkeypatch):
    """Ctrl-C reaches the step too: if it dies of SIGINT before the parent sees its own, the parent still reports an
    interrupt (``training run`` prints one line and exits 130), not a failed step (exit 1; issue 30.7)."""
    script = tmp_path / "step.py"
    script.write_text(STAND_IN)
    monkeypatch.setenv("STAND_IN", "sigint")
    with pytest.raises(KeyboardInterrupt):
        run_step({"kind": "sft", "out": str(tmp_path / "sft")}, launch=[sys.executable, str(script)])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_chain_leaves_no_step_running(tmp_path, sig):
    script = tmp_path / "step.py"
    script.write_text(STAND_IN)
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from training.step import run_step
            run_step({{"kind": "rl", "out": {str(tmp_path / "rl")!r}}}, launch=[sys.executable, {str(script)!r}])
        """)],
        cwd=REPO, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        child = int(wait_for(tmp_path / "rl" / "child.pid"))
        assert alive(child)
        parent.send_signal(sig)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), f"step {child} outlived its parent ({sig.name})"
    finally:
        parent.kill()
        with_child = tmp_path / "rl" / "child.pid"
        if with_child.is_file():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(with_child.read_text()), signal.SIGKILL)


PROGRESS = """
import sys, time
from pathlib import Path
spec = Path(sys.argv[-1])
for step in (1, 2, 3):
    print(f"rl step {step}/10: reward=0.5", flush=True)
    time.sleep(0.3)
(spec.parent / "printed").write_text("1")
while not (spec.parent / "go").exists():
    time.sleep(0.05)
spec.with_name("step_result.json").write_text('{"ok": true}')
"""


def test_show_of_a_running_step_says_step_n_of_m_and_the_time_left(tmp_path):
    """Issue 38.9: the step's output reached ``step.log`` through an unflushed buffer (SFT showed step 760 while
    the step was at 940) and ``training show`` gave no time left. Each line is in the log as it arrives, and the
    run's status file holds the step, the total and the time left."""
    import threading

    from curate.progress import status_file
    from training.step import RUNNING, running_line

    script = tmp_path / "step.py"
    script.write_text(PROGRESS)
    out = tmp_path / "rl" / "01-stage1"
    done = {}
    with status_file(tmp_path / RUNNING, step="rl:stage1"):
        spec, launch = {"kind": "rl", "out": str(out)}, [sys.executable, str(script)]
        step = threading.Thread(target=lambda: done.update(run_step(spec, launch=launch)))
        step.start()
        try:
            wait_for(out / "printed")
            deadline = time.monotonic() + 10
            while "training step 3 of" not in (running_line(tmp_path) or "") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "rl step 3/10" in (out / "step.log").read_text()  # while the step still runs
            line = running_line(tmp_path)
            assert re.search(r"rl:stage1 for \d+ s; training step 3 of 10, ~\d+ s left \(step\.log: ", line), line
        finally:
            (out / "go").write_text("1")
            step.join(timeout=30)
    assert done == {"ok": True}


def test_chain_json_names_the_run_s_folders_relative_to_it_and_a_copied_workspace_reads_its_own(tmp_path):
    """Issue 45.7: ``chain.json`` of a copied workspace kept the absolute paths of the original. Paths in the run
    folder or the workspace are written relative to the run folder and read back under the folder as it is now;
    names (ledger models, hub ids) stay as they are, and a record of the old code (absolute paths) reads as it is."""
    import shutil

    from curate import io
    from training.chain import CHAIN, Chain, Run

    home = tmp_path / "ws"
    run_dir = home / "runs" / "r"
    (run_dir / "sft" / "best").mkdir(parents=True)
    (home / "curricula" / "c").mkdir(parents=True)
    run = Run(recipe_from_mapping({"name": "r", "pool": "p", "train": "t.parquet"}), io.Workspace(home), run_dir)
    chain = run.chain()
    chain.put({"step": "sft", "model": str(run_dir / "sft" / "best"), "ledger_model": "runs/r/sft/best"})
    chain.set_lineage({"curriculum": str(home / "curricula" / "c"), "base": "Qwen/Qwen2.5-Math-1.5B"})
    text = (run_dir / CHAIN).read_text()
    assert str(tmp_path) not in text and '"./sft/best"' in text and '"../../curricula/c"' in text
    copy = tmp_path / "copy"
    shutil.copytree(home, copy)
    moved = Chain(copy / "runs" / "r", copy)
    assert moved.get("sft") == {"step": "sft", "model": str(copy / "runs" / "r" / "sft" / "best"),
                                "ledger_model": "runs/r/sft/best"}  # fmt: skip
    assert moved.lineage == {"curriculum": str(copy / "curricula" / "c"), "base": "Qwen/Qwen2.5-Math-1.5B"}
    old = {"steps": [{"step": "init", "model": "/elsewhere/runs/r/init"}]}  # written by the old code
    (run_dir / CHAIN).write_text(json.dumps(old))
    assert Chain(run_dir).steps == old["steps"]
