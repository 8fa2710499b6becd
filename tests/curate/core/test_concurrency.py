"""Safe concurrent writers (issue 10 part 5, issue 11 item 2): workspace locks, all-or-nothing outputs, crash litter,
rollout claims, file modes.

Real processes: the `curate` console script (or a small Python script for a SIGKILL at an exact point) on one
workspace, generated sources (``gen://``) and the tiny local model. To make two writers really meet, the test holds
the contended lock itself until both processes report that they wait for it, then lets go.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.config import IngestConfig, SourceSpec
from curate.errors import LockTimeout
from curate.ingest import stage as ingest_stage
from curate.manifest import file_hash, read_manifest
from curate.rollout import ledger, stats
from curate.rollout import stage as rollout
from curate.rollout.backends import HFOptions
from curate.select import stage as select_stage
from curate.stage_wrapper import StageResult
from tests.tiny_model import problems_frame, shared_tiny_model


CLI = str(Path(sys.executable).with_name("curate"))
SRC_A, SRC_B = "gen://mixed?n=300&seed=0", "gen://mixed?n=200&seed=5"


def env_for(ws: io.Workspace, **extra: str) -> dict[str, str]:
    return {**os.environ, "CURATE_HOME": str(ws.root), "OMP_NUM_THREADS": "1", **extra}


def start(args: list[str], ws: io.Workspace, log: Path, **extra: str) -> subprocess.Popen:
    """A `curate` process with stdout and stderr in ``log`` (.out / .err)."""
    out, err = open(log.with_suffix(".out"), "wb"), open(log.with_suffix(".err"), "wb")  # noqa: SIM115
    return subprocess.Popen([CLI, *args], env=env_for(ws, **extra), stdout=out, stderr=err)


def wait_for_text(paths: list[Path], text: str, procs: list[subprocess.Popen], timeout: float = 120) -> None:
    """Until every file in ``paths`` contains ``text``, whitespace normalized (the console wraps long lines);
    fails early if a process exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.is_file() and text in " ".join(p.read_text(errors="replace").split()) for p in paths):
            return
        for proc in procs:
            if proc.poll() is not None:
                texts = [p.read_text(errors="replace")[-2000:] for p in paths if p.is_file()]
                raise AssertionError(f"a process exited ({proc.returncode}) before waiting: {texts}")
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {paths}")


def finish(proc: subprocess.Popen, log: Path, timeout: float = 240) -> dict:
    """Wait for a `curate ... --json` process; assert exit 0; its JSON output."""
    rc = proc.wait(timeout=timeout)
    err = log.with_suffix(".err").read_text(errors="replace")
    assert rc == 0, err[-3000:]
    return json.loads(log.with_suffix(".out").read_text())


def litter(folder: Path) -> list[str]:
    """Temp files, temp folders and commit journals anywhere under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*") if p.name != ".gitignore")


def ingest(ws: io.Workspace, pool: str, *paths: str) -> StageResult:
    specs = tuple(SourceSpec(path=p) for p in paths)
    return ingest_stage.ingest(ws, pool, IngestConfig(sources=specs))


# --------------------------------------------------------------------------------------------------- locks
@pytest.mark.slow
def test_two_ingests_into_one_pool_at_once_keep_both_sources(ws, tmp_path):
    """The lost update of issue 10: two `curate ingest` of different sources into one pool at once."""
    logs = [tmp_path / "a", tmp_path / "b"]
    with ws.lock("pool", "p"):  # both processes meet at this lock, then race for it when it is let go
        procs = [
            start(["ingest", src, "--pool", "p", "--json"], ws, log)
            for src, log in zip((SRC_A, SRC_B), logs, strict=True)
        ]
        wait_for_text([log.with_suffix(".err") for log in logs], "waiting for the pool 'p' lock", procs)
    outs = [finish(proc, log) for proc, log in zip(procs, logs, strict=True)]

    state = json.loads((ws.pool_dir("p") / "sources.json").read_text())
    assert sorted(s["name"] for s in state) == sorted(["gen/mixed_n=300_seed=0", "gen/mixed_n=200_seed=5"])
    last = max(outs, key=lambda o: o["summary"]["read"])["summary"]  # the second to commit saw both sources
    assert last["read"] == 500 and last["reconciles"]
    assert last["read"] == last["admitted"] + last["merged"] + last["quarantined"]
    # the same pool as ingesting both one after the other
    reference = io.Workspace.resolve(tmp_path / "reference")
    ingest(reference, "p", SRC_A, SRC_B)
    got, want = (io.read_parquet(w.table("p", "problems"), S.PROBLEMS) for w in (ws, reference))
    assert sorted(got[S.PROBLEM_ID].to_list()) == sorted(want[S.PROBLEM_ID].to_list())
    assert got[S.SOURCES].list.len().sum() + io.read_quarantine(ws, "p").height == 500
    assert litter(ws.pool_dir("p")) == []


def test_a_waiting_writer_says_who_holds_the_lock_and_gives_up_after_lock_timeout(ws):
    ingest(ws, "p", SRC_B)
    with ws.lock("pool", "p"):
        t0 = time.monotonic()
        proc = subprocess.run(
            [CLI, "ingest", SRC_A, "--pool", "p", "--lock-timeout", "1"], env=env_for(ws), capture_output=True
        )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "waiting for the pool 'p' lock" in err and f"pid {os.getpid()}" in err
    assert "gave up after 1 s" in err and "Traceback" not in err
    assert time.monotonic() - t0 < 60
    assert [s["name"] for s in json.loads((ws.pool_dir("p") / "sources.json").read_text())] == [
        "gen/mixed_n=200_seed=5"
    ]


def test_a_lock_held_by_a_sigkilled_process_does_not_block(ws):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from curate import io; ws = io.Workspace.resolve(sys.argv[1])\n"
            "with ws.lock('pool', 'p'):\n    print('held', flush=True); time.sleep(120)",
            str(ws.root),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"held"
        expected = rf"pool 'p' is locked by pid {holder.pid} .*gave up after 0.3 s"
        with pytest.raises(LockTimeout, match=expected), ws.lock("pool", "p", timeout=0.3):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    t0 = time.monotonic()
    with ws.lock("pool", "p", timeout=5):  # the kernel released the flock with the process
        owner = json.loads(ws.lock_path("pool", "p").with_name("pool-p.lock.owner").read_text())
        assert owner["pid"] == os.getpid()
    assert time.monotonic() - t0 < 1.0


def test_locks_are_reentrant_and_exclusive_between_threads(ws):
    import threading

    got = []
    with ws.lock("pool", "p"):
        with ws.lock("pool", "p", timeout=0):  # the same thread again: no self-deadlock
            pass

        def other():
            try:
                with ws.lock("pool", "p", timeout=0.2):
                    got.append("acquired")
            except LockTimeout:
                got.append("timeout")

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert got == ["timeout"]


# --------------------------------------------------------------------------------------------------- all or nothing
def test_multi_source_ingest_failing_on_a_later_source_leaves_the_pool_as_it_was(ws, tmp_path):
    ingest(ws, "p", SRC_B)
    pool_dir = ws.pool_dir("p")

    def snapshot() -> dict[str, str]:
        return {str(p.relative_to(pool_dir)): file_hash(p) for p in sorted(pool_dir.rglob("*")) if p.is_file()}

    before = snapshot()
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError):  # the second source fails after the first was read
        ingest(ws, "p", SRC_A, str(missing))
    assert snapshot() == before

    def broken_merge(*args, **kwargs):  # a failure after the new raw table was written
        raise RuntimeError("merge failed")

    original = ingest_stage.merge
    ingest_stage.merge = broken_merge
    try:
        with pytest.raises(RuntimeError, match="merge failed"):
            ingest(ws, "p", SRC_A)
    finally:
        ingest_stage.merge = original
    assert snapshot() == before
    assert ingest(ws, "p", SRC_A).summary["read"] == 500  # and the pool still takes the source afterwards


def test_commit_is_rolled_forward_and_temp_files_removed_by_the_next_writer(ws):
    ingest(ws, "p", SRC_B)
    pool_dir = ws.pool_dir("p")
    # a writer killed after its commit journal was written, before its renames
    staged = io.Commit(pool_dir)
    staged.json(pool_dir / "a.json", {"v": 1})
    staged.json(pool_dir / "b.json", {"v": 2})
    io.write_json(pool_dir / io.JOURNAL, [[t.name, p.name] for p, t in staged.moves.items()])
    # and temp files of writers killed mid-write
    (pool_dir / ".problems.parquet.0badc0de.tmp").write_bytes(b"half a file")
    (ws.raw_dir("p") / ".x.parquet.12345678.tmp").write_bytes(b"half a file")
    assert litter(pool_dir)
    with ws.lock("pool", "p"):  # what every pool writer takes first
        assert json.loads((pool_dir / "a.json").read_text()) == {"v": 1}
        assert json.loads((pool_dir / "b.json").read_text()) == {"v": 2}
        assert litter(pool_dir) == []
    # a commit that raises writes nothing
    with pytest.raises(ValueError), io.commit(pool_dir) as c:
        c.json(pool_dir / "c.json", {})
        raise ValueError("stop")
    assert not (pool_dir / "c.json").exists() and litter(pool_dir) == []


def test_show_and_the_dataset_card_read_every_stage_quarantine_file(ws):
    ingest(ws, "p", SRC_A)
    own = io.read_parquet(ws.quarantine_path("p"), S.QUARANTINE)
    problems = io.read_parquet(ws.table("p", "problems"), S.PROBLEMS).head(2)
    rows = problems.select(S.SOURCE, S.SOURCE_ROW, S.PROBLEM_ID, S.PROBLEM, S.ANSWER_RAW).with_columns(
        pl.lit("decontaminate").alias(S.STAGE),
        pl.lit("contaminated").alias(S.DROP_REASON),
        pl.lit("x").alias(S.DETAIL),
    )
    io.write_parquet(rows.select(list(S.QUARANTINE)), ws.quarantine_path("p", "decontaminate"), S.QUARANTINE)
    summary = ingest_stage.pool_summary(ws, "p", detailed=True)
    assert summary["quarantined"] == own.height + 2 and summary["drops"]["decontaminate:contaminated"] == 2
    select_stage.select_pool(ws, "p", select_stage.SelectConfig(by="level", size=20, plots=False), name="A")
    card = (ws.selection_dir("A") / "README.md").read_text()
    assert "| decontaminate: contaminated | 2 |" in card


# --------------------------------------------------------------------------------------------------- selections
def select_args(name: str = "A", *extra: str) -> list[str]:
    return ["select", "--pool", "p", "--name", name, "--by", "level", "--size", "40", "--no-plots", "--json", *extra]


def assert_complete(folder: Path, rows: int = 40) -> None:
    assert {"selection.parquet", "trl.parquet", "verl.parquet", "drops.parquet", "hf", "README.md"} <= {
        p.name for p in folder.iterdir()
    }
    assert pl.read_parquet(folder / "selection.parquet").height == rows
    assert read_manifest(folder) is not None


@pytest.mark.slow
def test_two_selects_of_one_name_at_once_both_succeed_and_the_folder_is_complete(ws, tmp_path):
    ingest(ws, "p", SRC_A)
    logs = [tmp_path / "s1", tmp_path / "s2"]
    with ws.lock("selection", "A"):
        procs = [start(select_args("A", "--force"), ws, log) for log in logs]
        wait_for_text([log.with_suffix(".err") for log in logs], "waiting for the selection 'A' lock", procs)
    for proc, log in zip(procs, logs, strict=True):
        assert finish(proc, log)["summary"]["selected"] == 40
    assert_complete(ws.selection_dir("A"))
    assert sorted(p.name for p in ws.selection_dir("A").parent.iterdir()) == ["A"]


KILL_SCRIPT = textwrap.dedent(
    """
    import os, shutil, signal, sys
    from curate import io

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if sys.argv[1] == "between-renames":  # the fallback of file systems without an atomic exchange
        io._exchange = lambda a, b: False
        rename = os.rename

        def rename_then_die(src, dst, *args, **kwargs):
            rename(src, dst, *args, **kwargs)
            if str(dst).endswith(".old"):  # the old folder moved aside, the new one not yet in place
                die()

        os.rename = rename_then_die
    else:  # after the exchange, before the old folder is removed
        rmtree = shutil.rmtree

        def rmtree_or_die(path, *args, **kwargs):
            if os.path.basename(str(path)).startswith(".A."):
                die()
            return rmtree(path, *args, **kwargs)

        shutil.rmtree = rmtree_or_die

    if __name__ == "__main__":
        from curate.cli import main

        sys.exit(main(sys.argv[2:]))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["between-renames", "after-exchange"])
def test_select_force_killed_mid_swap_is_repaired_by_the_next_run(ws, tmp_path, where):
    ingest(ws, "p", SRC_A)
    select_stage.select_pool(ws, "p", select_stage.SelectConfig(by="level", size=30, plots=False), name="A")
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), where, *select_args("A", "--force")], env=env_for(ws), capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    folder = ws.selection_dir("A")
    if where == "after-exchange":  # readers find the new folder, whole; the old one is left beside it
        assert_complete(folder)
    else:  # the one crash window left by a two-rename swap: no folder until the next run
        assert not folder.exists()
    assert [p for p in folder.parent.iterdir() if p.name.startswith(".A.")]

    rerun = subprocess.run([CLI, *select_args("A")], env=env_for(ws), capture_output=True)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    assert_complete(folder)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["A"]


# --------------------------------------------------------------------------------------------------- rollout
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return shared_tiny_model(tmp_path_factory)


def rollout_args(model: Path, shard_size: int) -> list[str]:
    args = ["rollout", "--pool", "tiny", "--model", str(model), "--n", "2", "--max-tokens", "8"]
    return [*args, "--shard-size", str(shard_size), "--batch-size", "16", "--workers", "1", "--threads", "1", "--json"]


def test_run_id_covers_every_setting_that_changes_samples():
    base = rollout.RolloutConfig(model="m")
    changed = [
        {"hf": HFOptions(batch_size=8)},
        {"hf": HFOptions(dtype="bfloat16")},
        {"hf": HFOptions(device="cpu")},
        {"hf": HFOptions(threads=1)},
        {"shard_size": 8},
        {"n": 4},
        {"seed": 1},
        {"temperature": 0.5},
        {"instruction": "Answer."},
    ]
    ids = {rollout.run_id(base)} | {rollout.run_id(rollout.RolloutConfig(model="m", **kw)) for kw in changed}
    assert len(ids) == len(changed) + 1
    assert rollout.run_id(base) == rollout.run_id(rollout.RolloutConfig(model="m", verify_workers=3, limit=5))


def test_claims_skip_live_runs_and_take_over_killed_ones(ws, tmp_path):
    io.write_parquet(
        problems_frame([(f"Compute {i} + 1.", str(i + 1)) for i in range(6)]), ws.table("tiny", "problems")
    )
    cfg = rollout.RolloutConfig(model="some/model", n=2, shard_size=3)
    first, second = rollout.plan_shards(ws, "tiny", cfg)
    script = tmp_path / "claim.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from curate import io
            from curate.rollout import stage as rollout
            ws = io.Workspace.resolve(sys.argv[1])
            cfg = rollout.RolloutConfig(model="some/model", n=2, shard_size=3)
            claim = rollout.claim_shard(ws, "tiny", cfg, rollout.plan_shards(ws, "tiny", cfg)[0])
            print(claim.shard.name, flush=True)
            time.sleep(120)
            """
        )
    )
    holder = subprocess.Popen([sys.executable, str(script), str(ws.root)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().decode().strip() == first.name
        assert rollout.claim_shard(ws, "tiny", cfg, first) is None  # being generated by a live run: skipped
        other = rollout.claim_shard(ws, "tiny", cfg, second)
        assert other is not None and other.shard == second
        # another shard size overlapping the claimed samples takes only the free ones
        wide = rollout.plan_shards(ws, "tiny", rollout.RolloutConfig(model="some/model", n=3, shard_size=6))[0]
        other.release()
        part = rollout.claim_shard(ws, "tiny", cfg, wide)
        assert {i.problem_id for i in part.shard.items} == {i.problem_id for i in wide.items}
        taken = {i.problem_id for i in first.items}
        assert all(i.sample_idxs == ((2,) if i.problem_id in taken else (0, 1, 2)) for i in part.shard.items)
        part.release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    took_over = rollout.claim_shard(ws, "tiny", cfg, first)  # its holder died: the claim is stale
    assert took_over is not None and took_over.shard == first
    took_over.release()
    assert list(rollout.claims_dir(ws, "tiny", "some/model").iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("sizes", [(2, 2), (2, 3)], ids=["same-config", "other-shard-size"])
def test_two_rollouts_of_one_model_at_once_generate_each_sample_once(ws, tmp_path, tiny, sizes):
    path, problems = tiny
    io.write_parquet(problems_frame(problems[:8]), ws.table("tiny", "problems"), S.PROBLEMS)
    logs = [tmp_path / "r1", tmp_path / "r2"]
    lock = f"ledger 'tiny/{path}'"
    with ws.lock("ledger", f"tiny/{path}"):  # both planned; they meet at their first claim
        procs = [start(rollout_args(path, size), ws, log) for size, log in zip(sizes, logs, strict=True)]
        wait_for_text([log.with_suffix(".err") for log in logs], f"waiting for the {lock} lock", procs)
    outs = [finish(proc, log) for proc, log in zip(procs, logs, strict=True)]

    files = ledger.files(ws, "tiny")
    keys = pl.concat([pl.read_parquet(f, columns=ledger.KEY) for f in files])
    assert keys.height == 16 and keys.is_unique().all()  # 8 problems x 2 samples, none generated twice
    assert sum(o["summary"]["samples_generated"] for o in outs) == 16
    assert all(o["summary"]["ledger_rows"] == 16 for o in outs)  # each run returned with the job complete
    if sizes[0] == sizes[1]:  # same plan: each planned shard was written once, whole, by one of the two runs
        cfg = rollout.RolloutConfig(
            model=str(path), n=2, max_tokens=8, shard_size=2, hf=HFOptions(batch_size=16, threads=1)
        )
        io.write_parquet(problems_frame(problems[:8]), tmp_path / "fresh" / "pools/tiny/problems.parquet")
        plan = rollout.plan_shards(io.Workspace.resolve(tmp_path / "fresh"), "tiny", cfg)
        assert sorted(f.name for f in files) == sorted(f"{s.name}.parquet" for s in plan)
    assert stats.read_stats(ws, "tiny")[S.N_SAMPLES].to_list() == [2] * 8
    assert not [p for p in ws.ledger_dir("tiny", str(path)).iterdir() if p.name.startswith(".")]


# --------------------------------------------------------------------------------------------------- file modes
def test_workspace_files_honor_the_umask(ws):
    old = os.umask(0o022)
    try:
        ingest(ws, "p", SRC_A)
        select_stage.select_pool(ws, "p", select_stage.SelectConfig(by="level", size=20, plots=False), name="A")
    finally:
        os.umask(old)
    modes = {}
    for p in ws.root.rglob("*"):
        modes[str(p.relative_to(ws.root))] = stat.S_IMODE(p.stat().st_mode)
    files = {k: v for k, v in modes.items() if (ws.root / k).is_file()}
    dirs = {k: v for k, v in modes.items() if (ws.root / k).is_dir()}
    assert "selections/A/trl.parquet" in files and "pools/p/problems.parquet" in files
    assert {oct(v) for v in files.values()} == {"0o644"}, {k: oct(v) for k, v in files.items() if v != 0o644}
    assert {oct(v) for v in dirs.values()} == {"0o755"}, {k: oct(v) for k, v in dirs.items() if v != 0o755}
