"""``training.sampler_bridge``: TRL's RepeatSampler layout over the curriculum, reward feedback, exact resume.

No trainer here: the bridge is driven the way GRPOTrainer drives it (chunks drawn through the sampler's iterator,
rewards fed per generation batch, checkpoint state taken after N chunks trained with one chunk prefetched).
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from trl.trainer.utils import RepeatSampler

from curate.curriculum.sampler import CurriculumSampler, SamplerConfig
from training.sampler_bridge import CurriculumRepeatSampler, chunk_layout, pad_chunk, state_hash


IDS = [f"p{i:02d}" for i in range(10)]
INDEX_OF = {pid: 100 + 7 * i for i, pid in enumerate(reversed(IDS))}  # dataset rows in another order than the ids
ROW_TO_ID = {v: k for k, v in INDEX_OF.items()}


def _bridge(ids=IDS, cfg=None, g=3, k=2, repeat=2, short="pad"):
    cur = CurriculumSampler(ids, cfg or SamplerConfig(seed=0))
    return CurriculumRepeatSampler(
        cur, INDEX_OF, num_generations=g, prompts_per_chunk=k, repeat_count=repeat, short_batch=short
    )


def _relabel(chunk):
    """Dataset rows of one chunk renamed 0, 1, ... in order of first appearance (RepeatSampler without shuffle)."""
    names: dict[int, int] = {}
    return [names.setdefault(x, len(names)) for x in chunk]


def test_layout_is_trls_repeat_sampler_layout():
    g, k, repeat = 3, 2, 2
    bridge = _bridge(g=g, k=k, repeat=repeat)
    per_chunk = g * k * repeat
    got = list(itertools.islice(iter(bridge), 3 * per_chunk))
    trl_first = list(
        RepeatSampler(list(range(k)), mini_repeat_count=g, batch_size=k, repeat_count=repeat, shuffle=False)
    )
    assert trl_first == [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1]
    seen = []
    for c in range(3):
        chunk = got[c * per_chunk : (c + 1) * per_chunk]
        assert _relabel(chunk) == trl_first  # each prompt G times in a row, the chunk repeated, never shifted
        ids = [ROW_TO_ID[x] for x in chunk[: g * k : g]]  # rows map back to problem ids through index_of
        assert len(set(ids)) == k
        seen += ids
    assert bridge.chunks_drawn == 3 and len(set(seen)) == 6  # uniform policy: an epoch is a permutation


def test_short_batch_is_padded_with_whole_groups_or_ends_the_stage():
    g, k = 2, 4
    bridge = _bridge(ids=IDS[:3], g=g, k=k, repeat=1)  # the pool cannot fill a chunk of 4 distinct prompts
    chunk = list(itertools.islice(iter(bridge), g * k))
    groups = [chunk[i : i + g] for i in range(0, len(chunk), g)]
    assert all(len(set(grp)) == 1 for grp in groups)  # padding repeats whole groups: no group straddles
    firsts = [grp[0] for grp in groups]
    assert len(set(firsts)) == 3 and firsts[3] == firsts[0] and bridge.padded_chunks == 1
    assert pad_chunk(["a", "b", "c"], 5) == ["a", "b", "c", "a", "b"]

    stop = _bridge(ids=IDS[:3], g=g, k=k, repeat=1, short="stop")
    assert list(stop) == [] and stop.exhausted
    assert list(stop) == []  # a later epoch of the Trainer finds the stage over too


def test_curriculum_that_retires_everything_ends_the_stage():
    cfg = SamplerConfig(seed=0, no_positive_resampling=True)  # pass rate >= 0.9 retires from the next epoch on
    bridge = _bridge(ids=IDS[:4], cfg=cfg, g=2, k=2, repeat=1)
    it = iter(bridge)
    served = []
    for _ in range(2):  # epoch 0: every prompt once, all solved
        chunk = [next(it) for _ in range(4)]
        ids = [ROW_TO_ID[x] for x in chunk]
        bridge.feed(ids, [1.0] * 4, step=len(served) + 1)
        served += ids[::2]
    assert sorted(served) == IDS[:4]
    assert list(it) == [] and bridge.exhausted


def test_feed_reports_whole_groups_and_rejects_a_shifted_batch():
    bridge = _bridge(g=2, k=2, repeat=1)
    fed = bridge.feed(["p00", "p00", "p01", "p01", "p02", "p02"], [1.0, 0.0, math.nan, math.nan, 1.0, math.nan], 1)
    assert fed == 2  # p01 had no scorable completion: not reported
    tracker = bridge.curriculum.state_dict()["counts"]
    assert tracker["groups"] == 2 and tracker["rollouts"] == 3
    with pytest.raises(RuntimeError, match="not in groups"):
        bridge.feed(["p00", "p01", "p01", "p02"], [1.0, 0.0, 1.0, 0.0], 2)
    with pytest.raises(ValueError):
        bridge.feed(["p00"], [1.0], 3)


def _reward(pid: str, step: int, j: int) -> float:
    return float((int(pid[1:]) + step + j) % 3 == 0)


def test_checkpoint_state_resumes_exactly_where_the_run_was():
    """Trainer timeline: chunk c is trained (its rewards fed) while chunk c+1 is already drawn (prefetch).

    A checkpoint after 2 chunks holds the curriculum state and the prefetched chunk; a fresh bridge loaded from it
    serves that chunk first and then draws exactly the chunks the uninterrupted run drew.
    """
    cfg = SamplerConfig(policy="scalingrl", seed=3, size=6, epochs=3, zero_variance_skip=True)
    g, k = 2, 3

    def run(bridge, chunks, start_chunk=0, save_after=None):
        out, saved = [], None
        nxt = bridge.next_chunk()
        for c in range(start_chunk, chunks):
            cur, nxt = nxt, bridge.next_chunk()  # prefetch the next chunk before training this one
            out.append(cur)
            rows = [pid for pid in cur for _ in range(g)]
            bridge.feed(rows, [_reward(pid, c, j % g) for j, pid in enumerate(rows)], step=c + 1)
            if save_after == c + 1:
                saved = json.loads(json.dumps(bridge.checkpoint_state(c + 1)))  # through JSON, as on disk
        return out, saved

    full, saved = run(_bridge(cfg=cfg, g=g, k=k, repeat=1), 6, save_after=2)
    assert saved["chunks_trained"] == 2 and saved["carry"] == [full[2]]
    resumed = _bridge(cfg=cfg, g=g, k=k, repeat=1)
    resumed.load_checkpoint_state(saved)
    rest, _ = run(resumed, 6, start_chunk=2)
    assert rest == full[2:]  # same chunks, same order: nothing drawn twice, nothing skipped
    assert resumed.curriculum.state_dict()["counts"]["groups"] == 6 * k

    other = _bridge(cfg=cfg, g=g, k=k + 1, repeat=1)
    with pytest.raises(ValueError, match="layout"):
        other.load_checkpoint_state(saved)


def test_state_hash_is_canonical():
    a = _bridge().curriculum.state_dict()
    assert state_hash(a) == state_hash(json.loads(json.dumps(a)))
    assert list(chunk_layout([5, 9], 2, 2)) == [5, 5, 9, 9, 5, 5, 9, 9]
