"""Drive TRL's GRPOTrainer from the curriculum: a ``torch.utils.data.Sampler`` over ``CurriculumSampler``.

Why a bridge: GRPOTrainer reads prompts through a sampler with the layout of its ``RepeatSampler``
(``trl/trainer/utils.py``): a chunk of ``generation_batch_size / num_generations`` prompts, each prompt index
``num_generations`` times in a row, the whole chunk emitted ``num_iterations x steps_per_generation`` times
(``_prepare_inputs`` generates once per chunk and reuses the completions for the repeats). Rewards are later
reshaped ``(-1, num_generations)``, so a chunk that came back short would silently shift every later group across
generation batches. This bridge keeps that layout with prompts chosen online by ``curate.curriculum.sampler``:

- each chunk is ``curriculum.next_batch(k)``; a short batch is padded by cycling its own prompts (``pad``) or ends
  the stage (``stop``); an empty batch (every prompt retired) always ends it;
- ``feed`` takes the gathered rewards of a generation batch (every rank sees the same ones) and reports each group
  with ``curriculum.update``, so every rank's curriculum stays identical;
- ``checkpoint_state(chunks_trained)`` is what goes into each checkpoint: the curriculum's state plus the chunks
  already drawn but not yet trained (the data loader prefetches one). ``load_checkpoint_state`` restores it and
  serves those chunks first, so a resumed run continues exactly as the uninterrupted one would have;
  ``continue_state`` does the same for the next segment of a stage (a rung of CoScale's rollout ladder, whose group
  size differs).

The sampler has no length on purpose: the Trainer then runs to ``max_steps`` (or until the curriculum ends), and
with ``ignore_data_skip=True`` a resume does not "skip" batches by drawing (and so burning) curriculum chunks.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import Sampler  # this module is imported only when training starts

from curate.curriculum.sampler import CurriculumSampler


SHORT_BATCH = ("pad", "stop")
STATE_VERSION = 1


class CurriculumRepeatSampler(Sampler[int]):
    """RepeatSampler's layout over a curriculum (see the module docstring).

    curriculum: the online curriculum (same config and seed on every rank). index_of: problem_id -> dataset row.
    num_generations: completions per prompt (G). prompts_per_chunk: generation_batch_size / G.
    repeat_count: num_iterations x steps_per_generation. short_batch: ``pad`` or ``stop``.
    """

    def __init__(
        self,
        curriculum: CurriculumSampler,
        index_of: Mapping[str, int],
        *,
        num_generations: int,
        prompts_per_chunk: int,
        repeat_count: int = 1,
        short_batch: str = "pad",
    ) -> None:
        if short_batch not in SHORT_BATCH:
            raise ValueError(f"short_batch must be one of {SHORT_BATCH}, got {short_batch!r}")
        if num_generations < 1 or prompts_per_chunk < 1 or repeat_count < 1:
            raise ValueError("num_generations, prompts_per_chunk and repeat_count must be >= 1")
        missing = [pid for pid in curriculum.ids if pid not in index_of]
        if missing:
            raise ValueError(f"{len(missing)} curriculum prompt(s) have no dataset row, e.g. {missing[0]!r}")
        self.curriculum = curriculum
        self.index_of = dict(index_of)
        self.num_generations = num_generations
        self.prompts_per_chunk = prompts_per_chunk
        self.repeat_count = repeat_count
        self.short_batch = short_batch
        self.chunks_drawn = 0  # chunks handed to the loader since the start of the run (resumes included)
        self.drawn: dict[int, list[str]] = {}  # chunk number -> problem ids, for the chunks not yet known trained
        self.carry: deque[list[str]] = deque()  # chunks to serve before drawing new ones (after a resume)
        self.padded_chunks = 0
        self.exhausted = False

    # ------------------------------------------------------------------ drawing
    def next_chunk(self) -> list[str] | None:
        """The next chunk of exactly ``prompts_per_chunk`` problem ids, or None when the stage is over."""
        if self.carry:
            ids = self.carry.popleft()
        else:
            ids = self.curriculum.next_batch(self.prompts_per_chunk)
            if not ids or (len(ids) < self.prompts_per_chunk and self.short_batch == "stop"):
                return None
            if len(ids) < self.prompts_per_chunk:
                ids = pad_chunk(ids, self.prompts_per_chunk)
                self.padded_chunks += 1
        self.drawn[self.chunks_drawn] = list(ids)
        self.chunks_drawn += 1
        return ids

    def __iter__(self) -> Iterator[int]:
        while not self.exhausted:
            ids = self.next_chunk()
            if ids is None:
                self.exhausted = True
                return
            yield from chunk_layout([self.index_of[pid] for pid in ids], self.num_generations, self.repeat_count)

    # ------------------------------------------------------------------ feedback
    def feed(self, problem_ids: Sequence[str], rewards: Sequence[float], step: int) -> int:
        """Report a generation batch's gathered rewards, group by group, to the curriculum; returns groups fed.

        ``problem_ids`` and ``rewards`` are in the gathered (global) order, G consecutive rows per group. A group
        whose rows name different prompts means the layout shifted: that is a bug, so it raises. NaN rewards
        (unscorable completions) are left out of their group; a group with none left is not reported.
        """
        g = self.num_generations
        if len(problem_ids) != len(rewards) or len(rewards) % g:
            raise ValueError(f"feed: {len(problem_ids)} ids / {len(rewards)} rewards for groups of {g}")
        fed = 0
        for start in range(0, len(rewards), g):
            group = problem_ids[start : start + g]
            if any(pid != group[0] for pid in group):
                raise RuntimeError(f"generation batch is not in groups of {g} (rows {start}..): {list(group)}")
            values = [float(r) for r in rewards[start : start + g] if not math.isnan(float(r))]
            if values:
                self.curriculum.update(group[0], values, step)
                fed += 1
        return fed

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self, chunks_trained: int) -> dict[str, Any]:
        """State to save with a checkpoint taken after ``chunks_trained`` chunks were trained on.

        Chunks drawn beyond that (the loader's prefetch) are saved as ``carry`` and served first after a resume;
        the curriculum state already accounts for having drawn them, so nothing is drawn or trained twice.
        """
        if chunks_trained > self.chunks_drawn:
            raise ValueError(f"{chunks_trained} chunks trained but only {self.chunks_drawn} drawn")
        for k in [k for k in self.drawn if k < chunks_trained]:
            del self.drawn[k]
        carry = [self.drawn[k] for k in range(chunks_trained, self.chunks_drawn)]
        return {
            "version": STATE_VERSION,
            "chunks_trained": chunks_trained,
            "carry": carry + [list(c) for c in self.carry],
            "padded_chunks": self.padded_chunks,
            "layout": self.layout(),
            "curriculum": self.curriculum.state_dict(),
        }

    def load_checkpoint_state(self, state: Mapping[str, Any]) -> None:
        """Restore ``checkpoint_state`` output; refuses a state saved with another batch layout."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"sampler_state version {state.get('version')} != {STATE_VERSION}")
        if state["layout"] != self.layout():
            raise ValueError(f"sampler_state layout {state['layout']} != this run's {self.layout()}")
        self.curriculum.load_state_dict(state["curriculum"])
        self.carry = deque(list(c) for c in state["carry"])
        self.chunks_drawn = int(state["chunks_trained"])
        self.drawn = {}
        self.padded_chunks = int(state.get("padded_chunks", 0))
        self.exhausted = False

    def continue_state(self, state: Mapping[str, Any]) -> None:
        """Start a new segment where another one stopped (its ``checkpoint_state`` at its last step): the same
        curriculum, its drawn-but-untrained chunks served first. The group size may differ (CoScale's rollout
        ladder doubles it between segments, ``training.ladder``); the prompts per chunk may not."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"sampler_state version {state.get('version')} != {STATE_VERSION}")
        if state["layout"]["prompts_per_chunk"] != self.prompts_per_chunk:
            raise ValueError(
                f"sampler_state has {state['layout']['prompts_per_chunk']} prompts per chunk, this "
                f"segment {self.prompts_per_chunk}: a segment continues with the same prompts per step"
            )
        self.curriculum.load_state_dict(state["curriculum"])
        self.carry = deque(list(c) for c in state["carry"])
        self.chunks_drawn, self.drawn, self.padded_chunks, self.exhausted = 0, {}, 0, False

    def layout(self) -> dict[str, int]:
        return {
            "num_generations": self.num_generations,
            "prompts_per_chunk": self.prompts_per_chunk,
            "repeat_count": self.repeat_count,
        }


def chunk_layout(indices: Sequence[int], num_generations: int, repeat_count: int) -> Iterator[int]:
    """RepeatSampler's order for one chunk: the chunk ``repeat_count`` times, each index ``num_generations`` times."""
    for _ in range(repeat_count):
        for index in indices:
            for _ in range(num_generations):
                yield index


def pad_chunk(ids: Sequence[str], size: int) -> list[str]:
    """Fill a short chunk to ``size`` by cycling its own ids (whole groups: the layout never shifts)."""
    if not ids:
        raise ValueError("cannot pad an empty chunk")
    return [ids[i % len(ids)] for i in range(size)]


def state_hash(state: Mapping[str, Any]) -> str:
    """sha256 of a state as canonical JSON: equal on every rank when the curricula agree."""
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()
