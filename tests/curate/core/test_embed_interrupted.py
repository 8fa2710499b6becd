"""An interrupted embedding keeps what it encoded, and temp files of killed cache writers are removed (issues 23.15,
24.6).

A small fake transformer-like encoder (deterministic vectors from the text, no torch, no model) is stopped after N
rows: by an exception, by Ctrl-C, or by SIGKILL in a child process. The next run encodes only what was not saved and
gives the vectors an uninterrupted run gives. A writer killed between its temp file and the rename leaves
``.part-*.parquet.*.tmp``: the next run removes it, never the temp file of a writer that is still alive (local files,
no network).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from curate import embed as E
from curate import schema as S


TEXTS = [f"Problem {i}: what is {i} times {'x' * (i % 7)}?" for i in range(40)]
# batch_size 2 -> blocks of 8 texts; chunks of 32: the first chunk is four blocks, the second one block
CFG = E.EmbedConfig(encoder="fake", dtype="float32", device="cpu", batch_size=2, chunk_size=32)


class _Tensor:
    """What ``model.encode(..., convert_to_tensor=True)`` returns, as far as ``curate.embed`` uses it."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def float(self):
        return self

    def cpu(self):
        return self

    def numpy(self) -> np.ndarray:
        return self.array


class FakeEncoder:
    """A transformer-like encoder: the vector of a text depends on the text only. ``stop_after`` rows, it raises
    ``stop`` (an exception class, or a callable that does not return, e.g. a SIGKILL)."""

    def __init__(self, stop_after: int | None = None, stop=RuntimeError) -> None:
        self.stop_after, self.stop, self.encoded = stop_after, stop, 0

    def get_embedding_dimension(self) -> int:
        return 3

    def encode(self, texts, **kwargs):
        if self.stop_after is not None and self.encoded + len(texts) > self.stop_after:
            raise self.stop("stopped on purpose") if isinstance(self.stop, type) else self.stop()
        self.encoded += len(texts)
        return _Tensor(np.array([[len(t), sum(map(ord, t)) % 97 + 1, 1.0] for t in texts], dtype=np.float32))


def problems(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame({S.PROBLEM_ID: [S.problem_id(t) for t in texts], S.PROBLEM: texts})


def _use(monkeypatch, model) -> None:
    monkeypatch.setattr(E, "get_encoder", lambda ws, cfg, progress=False: model)


def _cached(ws) -> int:
    return E.cache_summary(ws, CFG)["cached"]


def _resume_encodes_only_the_rest(ws, monkeypatch, saved: int) -> None:
    healthy = FakeEncoder()
    _use(monkeypatch, healthy)
    resumed = E.embed_problems(ws, problems(TEXTS), CFG)
    assert healthy.encoded == len(TEXTS) - saved
    expected = E.encode_texts(FakeEncoder(), TEXTS, CFG)
    assert np.allclose(resumed, expected, atol=1e-6)


# --------------------------------------------------------------------------------------------------- 23.15
@pytest.mark.parametrize("stop", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_chunk_keeps_its_finished_blocks(ws, monkeypatch, stop):
    _use(monkeypatch, FakeEncoder(stop_after=20, stop=stop))  # blocks of 8: 16 rows done, the third block stops
    with pytest.raises(stop, match="on purpose"):
        E.embed_problems(ws, problems(TEXTS), CFG)
    assert _cached(ws) == 16  # before: 0, the whole 32-row chunk was lost
    _resume_encodes_only_the_rest(ws, monkeypatch, saved=16)


KILLED_WHILE_ENCODING = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
from curate import embed as E, io
from tests.curate.core.test_embed_interrupted import CFG, TEXTS, FakeEncoder, problems
E.SAVE_EVERY_S = 0  # save after every block (on a real CPU: after this many seconds of unsaved work)
kill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: what kill -9 or the OOM killer does
E.get_encoder = lambda ws, cfg, progress=False: FakeEncoder(stop_after=20, stop=kill)
E.embed_problems(io.Workspace.resolve(sys.argv[1]), problems(TEXTS), CFG)
"""


def test_a_killed_embedding_loses_at_most_the_block_it_was_encoding(ws, monkeypatch):
    proc = _child(KILLED_WHILE_ENCODING, ws)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert _cached(ws) == 16
    _resume_encodes_only_the_rest(ws, monkeypatch, saved=16)


def test_unsaved_work_is_written_every_save_every_s(monkeypatch):
    saved: list[int] = []
    monkeypatch.setattr(E, "SAVE_EVERY_S", 0.0)
    E.encode_texts(FakeEncoder(), TEXTS, CFG, on_chunk=lambda pos, vecs: saved.append(len(pos)))
    assert saved == [8, 8, 8, 8, 8]
    monkeypatch.setattr(E, "SAVE_EVERY_S", 3600.0)
    saved.clear()
    E.encode_texts(FakeEncoder(), TEXTS, CFG, on_chunk=lambda pos, vecs: saved.append(len(pos)))
    assert saved == [32, 8]  # a fast encoder: one part per chunk


# --------------------------------------------------------------------------------------------------- 24.6
KILLED_WHILE_WRITING = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
import polars as pl
from curate import embed as E, io
from tests.curate.core.test_embed_interrupted import CFG, TEXTS, FakeEncoder, problems
real = pl.DataFrame.write_parquet
def write_then_die(self, path, *args, **kwargs):
    real(self, path, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # between the temp file and its rename
pl.DataFrame.write_parquet = write_then_die
E.get_encoder = lambda ws, cfg, progress=False: FakeEncoder()
E.embed_problems(io.Workspace.resolve(sys.argv[1]), problems([t + sys.argv[3] for t in TEXTS]), CFG)
"""


def _temps(ws) -> list[str]:
    folder = ws.embeddings_dir(E.encoder_key(CFG))
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) if folder.is_dir() else []


def test_the_next_run_removes_temp_files_of_killed_cache_writers(ws, monkeypatch):
    proc = _child(KILLED_WHILE_WRITING, ws, "")
    assert proc.returncode == -9, proc.stderr[-2000:]
    [temp] = _temps(ws)
    assert temp.startswith(".part-") and temp.endswith(".tmp")
    _use(monkeypatch, FakeEncoder())
    E.embed_problems(ws, problems(TEXTS), CFG)
    assert _temps(ws) == []
    # also when the rerun has nothing left to encode
    assert _child(KILLED_WHILE_WRITING, ws, " (new)").returncode == -9 and len(_temps(ws)) == 1
    E.embed_problems(ws, problems(TEXTS[:3]), CFG)
    assert _temps(ws) == []


def test_a_live_writers_temp_file_is_left_alone(ws, monkeypatch):
    folder = ws.embeddings_dir(E.encoder_key(CFG))
    folder.mkdir(parents=True)
    live = folder / ".part-live.parquet.0000.tmp"
    held, seen = threading.Event(), []

    def writer() -> None:  # a writer in the middle of a part: its temp file exists while it holds the cache lock
        with E.cache_lock(ws, E.encoder_key(CFG)):
            live.write_bytes(b"half a part")
            held.set()
            time.sleep(0.5)
            seen.append(live.exists())
            live.unlink()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(10)
    _use(monkeypatch, FakeEncoder())
    E.embed_problems(ws, problems(TEXTS[:3]), CFG)  # waits for the writer, then tidies
    thread.join(10)
    assert seen == [True]


def _child(script: str, ws, *extra: str) -> subprocess.CompletedProcess:
    repo = str(Path(__file__).resolve().parents[3])
    args = [sys.executable, "-c", textwrap.dedent(script), str(ws.root), repo, *extra]
    return subprocess.run(args, env=os.environ.copy(), capture_output=True, text=True, timeout=120)
