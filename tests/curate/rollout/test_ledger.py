"""The rollout ledger module: names and the one glob rule, numbering, reads, atomic writes, temp clean-up, old parts.

Literal frames in a tmp workspace; no model, no network. The killed writer is a real process (plain Python holding
an ``flock`` on its temp file, as ``write_part`` does), killed with SIGKILL.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.rollout import ledger


POOL = "p"
MODEL = "org/policy"


def rows(pids: list[str], *, run_id: str = "rl-a", step: int | None = 1, **values) -> pl.DataFrame:
    """Unnumbered training-style rows for ``pids`` (one sample each)."""
    base = {S.COMPLETION: [f"{p} ({run_id}, step {step})" for p in pids], S.VERDICT: "correct", S.STEP: step}
    return ledger.build_rows(MODEL, pids, base | values, backend="trl", run_id=run_id)


def keys(ws, model: str = MODEL) -> list[tuple[str, int]]:
    """Every key in every part, duplicates included (no dedupe)."""
    frame = ledger.scan_files(ledger.files(ws, POOL, model), [S.PROBLEM_ID, S.SAMPLE_IDX]).collect()
    return sorted(frame.iter_rows())


# --------------------------------------------------------------------------------------------------- names
def test_names_and_the_one_glob_rule(ws, tmp_path):
    assert ledger.model_key("Qwen/Qwen2.5-Math-1.5B") == "Qwen__Qwen2.5-Math-1.5B"
    assert ledger.folder(ws, POOL, MODEL) == ws.pool_dir(POOL) / "rollouts" / "org__policy"
    a = ledger.append(ws, POOL, MODEL, rows(["x"]), part=ledger.part_name("rl-a", "step0000001"))
    b = ledger.append(ws, POOL, "other", rows(["x"], run_id="rl-b"), part=ledger.part_name("rl-b", "step0000001"))
    assert a == ledger.part_path(ws, POOL, MODEL, "part-rl-a-step0000001")
    d = ledger.folder(ws, POOL, MODEL)
    (d / "manifest.json").write_text("{}")
    (d / "notes.parquet").write_bytes(b"not a part")
    (d / ".part-rl-a-step0000002.parquet.0badc0de.tmp").write_bytes(b"half a file")
    assert ledger.files(ws, POOL, MODEL) == [a]
    assert ledger.files(ws, POOL) == sorted([a, b])
    assert ledger.files(ws, POOL, run_id="rl-b") == [b] and ledger.files(ws, POOL, run_id="rl-c") == []
    # a location a user gives (training redistill --ledger): a file, a model folder, the rollouts folder, a glob
    assert ledger.files_at(a) == [a]
    assert ledger.files_at(d) == [a]
    assert ledger.files_at(ledger.folder(ws, POOL)) == sorted([a, b])
    assert ledger.files_at(f"{ledger.folder(ws, POOL)}/oth*") == [b]
    assert ledger.files_at(tmp_path / "nothing-here") == []


# --------------------------------------------------------------------------------------------------- numbering
def test_two_writers_never_collide(ws):
    pids = ["a", "b", "c"]
    # a rollout run holds a claim on a's indices 0..1 while it generates them
    held = ledger.claim(ws, POOL, MODEL, {"a": (0, 1)}, run_id="r-1")
    assert held is not None and held.keys == {"a": (0, 1)}
    second = ledger.claim(ws, POOL, MODEL, {"a": (0, 1, 2)}, run_id="r-2")
    assert second.keys == {"a": (2,)}  # only the free one

    def writer(run_id: str) -> None:
        for step in range(1, 6):
            part = ledger.part_name(run_id, f"step{step:07d}")
            ledger.append(ws, POOL, MODEL, rows(pids * 2, run_id=run_id, step=step), part=part)

    threads = [threading.Thread(target=writer, args=(rid,)) for rid in ("rl-a", "rl-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = keys(ws)
    assert len(got) == len(set(got)) == 2 * 5 * 6  # two writers x 5 steps x 6 rows, every key once
    per_problem = {p: sorted(i for q, i in got if q == p) for p in pids}
    assert per_problem["a"] == list(range(3, 23))  # 0..1 claimed by the live rollout, 2 by the second claim
    assert per_problem["b"] == per_problem["c"] == list(range(20))  # the lowest free indices, no holes
    held.release()
    with ws.lock("ledger", f"{POOL}/{MODEL}"):
        assert ledger.taken(ws, POOL, MODEL, ["a"]) == {"a": set(range(2, 23))}  # a released claim frees its indices
    second.release()


def test_a_part_written_and_its_claim_released_meanwhile_is_never_missed(ws, monkeypatch):
    """A claim holder writes its part (no ledger lock) and then releases its claim. If that happens while another
    writer is reading what is taken, the reader must see the claim or the part: claims are read before the parts
    are listed. (Read the other way round, the samples were claimed again and generated twice.)"""
    held = ledger.claim(ws, POOL, MODEL, {"a": (0, 1)}, run_id="r-1")
    numbered = rows(["a", "a"], run_id="r-1").with_columns(pl.Series(S.SAMPLE_IDX, [0, 1], dtype=pl.Int32))
    real_files = ledger.files

    def files_then_the_holder_finishes(*args, **kwargs):  # the listing happens, then the holder writes and releases
        listed = real_files(*args, **kwargs)
        if held.record.is_file():
            ledger.write_part(numbered, ledger.part_path(ws, POOL, MODEL, ledger.part_name("r-1", "000000")))
            held.release()
        return listed

    monkeypatch.setattr(ledger, "files", files_then_the_holder_finishes)
    assert ledger.claim(ws, POOL, MODEL, {"a": (0, 1, 2)}, run_id="r-2").keys == {"a": (2,)}
    monkeypatch.undo()
    assert keys(ws) == [("a", 0), ("a", 1)]


def test_resumed_write_does_not_duplicate(ws):
    first = ledger.append(ws, POOL, MODEL, rows(["a", "a", "b"], step=1), part="part-rl-a-step0000001")
    ledger.append(ws, POOL, MODEL, rows(["a", "b"], step=2), part="part-rl-a-step0000002")
    before = ledger.read(ws, POOL, MODEL).sort(S.STEP, S.PROBLEM_ID, S.SAMPLE_IDX)
    assert before[S.SAMPLE_IDX].to_list() == [0, 1, 0, 2, 1]
    # the run resumes from a checkpoint before step 2: step 2 is generated and written again
    ledger.append(ws, POOL, MODEL, rows(["a", "b"], step=2), part="part-rl-a-step0000002")
    after = ledger.read(ws, POOL, MODEL).sort(S.STEP, S.PROBLEM_ID, S.SAMPLE_IDX)
    assert after.select(S.PROBLEM_ID, S.SAMPLE_IDX, S.STEP).equals(before.select(S.PROBLEM_ID, S.SAMPLE_IDX, S.STEP))
    assert len(keys(ws)) == 5 and len(ledger.files(ws, POOL, MODEL)) == 2
    # a rollout-style writer (fixed indices below its target) finds its samples done and claims nothing
    assert ledger.free_indices({0, 1, 2}, below=3) == ()
    assert ledger.claim(ws, POOL, MODEL, {"a": (0, 1, 2)}, run_id="r-1") is None
    assert first.is_file()


# --------------------------------------------------------------------------------------------------- reads
def test_a_damaged_part_is_named_with_the_command_that_sets_it_aside(ws, capsys):
    """Issue 30.2: polars' "File out of specification" named no file and blocked `curate stats`, `curate score` and
    every run. The error is one line naming the part and a command; once it is run, the counts reconcile without the
    part's rows."""
    from curate.cli import main

    assert main(["ingest", "gen://arith?n=6&seed=0&max_level=1", "--pool", POOL, "--json"]) == 0
    pids = pl.read_parquet(ws.table(POOL, "problems"))[S.PROBLEM_ID].to_list()
    parts = [ledger.append(ws, POOL, MODEL, rows(pids, step=k), part=f"part-rl-a-step{k:07d}") for k in (1, 2, 3)]
    raw = bytearray(parts[1].read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 32] = bytes(range(200, 232))  # damaged in place: same size
    parts[1].write_bytes(bytes(raw))
    capsys.readouterr()

    for verb in (["stats"], ["score", "--no-embeddings"]):
        assert main([*verb, "--pool", POOL]) == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert f"ledger part {parts[1]} is damaged" in err
    command = shlex.split(re.search(r"(mv \S+ \S+)", err).group(1))
    subprocess.run(command, check=True)  # what the user is told to run
    assert not parts[1].exists() and parts[1].with_name(f"damaged-{parts[1].name}").is_file()

    assert main(["stats", "--pool", POOL, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["models"][0]["samples"] == ledger.read(ws, POOL, MODEL).height == 2 * len(pids)


def test_reads_dedupe_on_the_key_first_file_wins(ws):
    one = rows(["a", "b"]).with_columns(pl.Series(S.SAMPLE_IDX, [0, 0], dtype=pl.Int32))
    ledger.write_part(one, ledger.part_path(ws, POOL, MODEL, "part-r-1-000000"))
    dup = one.with_columns(pl.lit("copy").alias(S.COMPLETION))  # the same keys again (a part written twice)
    ledger.write_part(dup, ledger.part_path(ws, POOL, MODEL, "part-r-2-000000"))
    other = one.head(1).with_columns(pl.lit("m2").alias(S.MODEL))  # another model: another key
    ledger.write_part(other, ledger.part_path(ws, POOL, "m2", "part-r-3-000000"))
    assert ledger.scan_files(ledger.files(ws, POOL, MODEL)).collect().height == 4  # raw: not deduplicated
    led = ledger.read(ws, POOL, MODEL, columns=[S.COMPLETION], file_column="file")
    assert led.height == 2 and "copy" not in led[S.COMPLETION].to_list()
    assert set(led["file"].to_list()) == {"rollouts/org__policy/part-r-1-000000.parquet"}
    assert led.columns == [S.COMPLETION, S.PROBLEM_ID, S.MODEL, S.SAMPLE_IDX, "file"]  # the key is always read
    assert ledger.read(ws, POOL).height == 3  # every model
    assert ledger.read(ws, POOL, MODEL, run_id="r-2")[S.COMPLETION].to_list() == ["copy", "copy"]
    assert ledger.read(ws, POOL, "nobody").schema == S.ROLLOUTS  # no ledger: an empty, typed frame


def test_old_format_parts_still_read(ws):
    d = ledger.folder(ws, POOL, MODEL)
    d.mkdir(parents=True)
    # training's old numbering: base + (step - 1) x batch_rows + row, through io.write_parquet
    old_rl = rows(["a", "b"], run_id="rl-old").with_columns(pl.Series(S.SAMPLE_IDX, [40, 41], dtype=pl.Int32))
    io.write_parquet(old_rl, d / "part-rl-old-step0000001.parquet", S.ROLLOUTS)
    # the sampler's completion-less rows (max + 1 per problem), and a hand-made part: Int64 index, columns missing
    sampler = ledger.build_rows(MODEL, ["a"], {S.SAMPLE_IDX: [0], S.REWARD: [1.0]}, backend="sampler", run_id="")
    io.write_parquet(sampler, d / "part-sampler-0123456789abcdef.parquet", S.ROLLOUTS)
    pl.DataFrame({S.PROBLEM_ID: ["c"], S.MODEL: [MODEL], S.SAMPLE_IDX: [7], "note": ["extra"]}).write_parquet(
        d / "part-00000.parquet"
    )
    led = ledger.read(ws, POOL, MODEL).sort(S.PROBLEM_ID, S.SAMPLE_IDX)
    assert led.schema == S.ROLLOUTS
    assert led.select(S.PROBLEM_ID, S.SAMPLE_IDX).rows() == [("a", 0), ("a", 40), ("b", 41), ("c", 7)]
    assert led.filter(pl.col(S.PROBLEM_ID) == "c")[S.STEP].to_list() == [None]
    # new rows take the lowest free indices around the old ones
    ledger.append(ws, POOL, MODEL, rows(["a", "a", "b", "c"], run_id="rl-new"), part="part-rl-new-step0000001")
    new = ledger.read(ws, POOL, MODEL, run_id="rl-new")
    assert new.select(S.PROBLEM_ID, S.SAMPLE_IDX).rows() == [("a", 1), ("a", 2), ("b", 0), ("c", 0)]


# --------------------------------------------------------------------------------------------------- writes
def test_build_rows_and_write_part_check_their_input(ws):
    f = ledger.build_rows(MODEL, ["a"], {S.REWARD: [float("nan")], S.TEMPERATURE: 0.7}, backend="x", run_id="r")
    assert f.schema == S.ROLLOUTS and f[S.REWARD].to_list() == [None] and f[S.CORRECT].to_list() == [None]
    assert f[S.CREATED_AT][0] <= dt.datetime.now(dt.UTC)
    with pytest.raises(ValueError, match="not columns"):
        ledger.build_rows(MODEL, ["a"], {"colour": ["red"]}, backend="x", run_id="r")
    with pytest.raises(ValueError, match="2 values"):
        ledger.build_rows(MODEL, ["a"], {S.STEP: [1, 2]}, backend="x", run_id="r")
    with pytest.raises(ValueError, match="without a sample_idx"):
        ledger.write_part(f, ledger.part_path(ws, POOL, MODEL, "part-x"))
    assert ledger.files(ws, POOL, MODEL) == []


def test_stale_temps_of_a_killed_writer_are_removed(ws):
    d = ledger.folder(ws, POOL, MODEL)
    d.mkdir(parents=True)
    live = d / ".part-rl-a-step0000001.parquet.00000001.ledger.tmp"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.write(fd, b'half a part')\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(live),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        legacy_young = d / ".part-rl-b-step0000001.parquet.0badc0de.tmp"  # io.write_parquet's, not locked
        legacy_old = d / ".part-rl-b-step0000002.parquet.0badc0df.tmp"
        other = d / ".manifest.json.12345678.tmp"  # not a part's temp: not the ledger's to remove
        for p in (legacy_young, legacy_old, other):
            p.write_bytes(b"half a file")
        hour_ago = time.time() - 3600
        os.utime(legacy_old, (hour_ago, hour_ago))
        ledger.append(ws, POOL, MODEL, rows(["a"]), part="part-rl-c-step0000001")  # a write cleans first
        assert live.exists() and legacy_young.exists() and other.exists() and not legacy_old.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert ledger.read(ws, POOL, MODEL).height == 1  # a read cleans too: the killed writer's temp goes
    assert not live.exists() and legacy_young.exists() and other.exists()


def test_a_temp_taken_by_a_cleaner_before_its_lock_is_replaced(ws, monkeypatch):
    import fcntl

    path = ledger.part_path(ws, POOL, MODEL, "part-rl-a-step0000001")
    path.parent.mkdir(parents=True)
    real, calls = fcntl.flock, []

    def flock(fd, op):
        if not calls:  # a cleaner got there between the writer's create and its lock, and removed the temp
            calls.append(op)
            for p in path.parent.glob(".*.ledger.tmp"):
                p.unlink()
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    fd, tmp = ledger._locked_temp(path)
    try:
        assert calls and tmp.exists() and os.stat(tmp).st_ino == os.fstat(fd).st_ino  # a fresh temp, ours
        monkeypatch.setattr(fcntl, "flock", real)
        assert ledger.clean_temps(path.parent) == []  # locked by a live writer: kept
    finally:
        os.close(fd)  # the writer dies: its lock is freed
    assert ledger.clean_temps(path.parent) == [tmp.name]
