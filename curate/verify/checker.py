r"""The one answer checker: find a completion's final answer and judge it against the gold answer.

Curation (pass rates) and training (``training/rewards.py``) both call this module, so the pass rates we select on
and the rewards we train on cannot disagree (DESIGN.md, "One answer checker"). It is the only module that imports
``math_verify``. Model output is untrusted input: nothing in it is evaluated or executed, and every check is bounded
in size and time.

How one completion is judged:

1. Screen. A completion with NUL bytes, or longer than ``max_completion_chars``, is not read (``unparseable``).
2. Extract (``extract_answer``). Verbatim echoes of the prompt are removed (pass ``prompt=``); only the text after the
   last ``</think>`` counts, and an unclosed ``<think>`` has no answer. Then the last non-empty ``\boxed{}`` (nested
   braces balanced); without one, the latest of ``#### n``, an ``A: n`` / ``Answer: n`` line and "the answer is ...".
   Several *different* boxed answers are a hedge and are ``wrong``, never ``correct``.
3. Judge. Fast paths first (curate.verify.fastpath): equal answer keys, "no solution" and its synonyms, exact
   numbers, numeric LaTeX, values with units, ``x = 12`` assignments and expressions in variables that clearly differ
   are settled without math-verify; gold forms joined by an upper-case ``OR`` are alternatives. The rest goes to
   math-verify: the gold is parsed once per problem (cached in each worker), the candidate once per distinct answer,
   and any gold alternative may match.

Verdicts (``schema.VERDICTS``), each with a ``detail``: ``correct``; ``wrong`` (also hedges); ``no_answer`` (nothing
extracted); ``unparseable`` (unreadable completion or answer, or a gold answer math-verify cannot read: detail
``gold_unparseable``); ``timeout`` (math-verify's or the per-item time bound ran out); ``truncated``; ``error`` (the
worker died on this item). **Truncation rule:** ``truncated`` means ``finish_reason == "length"`` *and* no final answer
was extracted; a truncated completion that did state an answer is graded like any other.

Time bounds count CPU time, not the wall clock, so a verdict does not depend on how busy the machine is (on the wall
clock, a loaded box turned the same right answer into ``timeout``). math-verify runs with its own ``SIGALRM`` timeouts
off and inside ``cpu_limit`` (a ``SIGPROF`` timer on the process's CPU time); signals work only in a main thread, so
``check_batch`` runs math-verify in worker processes (``spawn``), and the parent also kills a worker that overruns
``item_timeout_s`` (a C-level hang no signal can stop), not counting the time the worker waited for a CPU
(``curate.verify.pool``): that item is marked, the worker replaced, the rest of the batch continues. The pool is
created lazily (``check_batch`` starts it at its first math-verify task, so that the workers' imports overlap the
screening of the rest of the batch), kept for later calls, and shut down at exit. ``check`` runs in-process in the
main thread and through the pool elsewhere. Most of the speed comes from deduplicating identical
(gold, answer) pairs and from the fast paths, which never reach math-verify. Scripts that call the pool need the
usual ``if __name__ == "__main__":`` guard (spawn re-imports the main module).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from curate import config as config_mod
from curate.verify import fastpath
from curate.verify.answers import ANSWER_IS, ANSWER_LINE, find_boxed, normalize_answer


# --------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class VerifyConfig:
    """Bounds, extraction switches and reward values of the answer checker (recipe key ``verify``).

    Timeouts: ``parse_timeout_s`` / ``verify_timeout_s`` bound one math-verify parse / one comparison (both
    directions when symmetric) in CPU seconds (``cpu_limit``); ``item_timeout_s`` is the bound per item the parent
    enforces by killing the worker: wall seconds less the time the worker waited for a CPU (``curate.verify.pool``).
    ``workers``: worker processes for ``check_batch``; 0 means one per CPU core.
    ``max_distinct_boxed``: more different boxed answers than this is a hedge (``wrong``).
    ``require_think``: a completion without ``think_tag`` has no answer (for reasoning models whose template opens
    ``<think>`` in the prompt).
    """

    parse_timeout_s: int = 2
    verify_timeout_s: int = 2
    item_timeout_s: float = 10.0
    max_completion_chars: int = 200_000
    max_answer_chars: int = 1_000
    boxed: bool = True
    gsm8k_hash: bool = True  # "#### 42"
    answer_line: bool = True  # "A: 42" / "Answer: 42" / "Final Answer: ..." at the start of a line
    answer_is: bool = True  # "the answer is 42"
    think_tag: str = "</think>"
    require_think: bool = False
    max_distinct_boxed: int = 1
    reward_correct: float = 1.0
    reward_wrong: float = 0.0
    workers: int = 0
    chunk_size: int = 64
    worker_memory_mb: int = 4096  # address-space limit of a worker (0: none); an item past it is an ``error``


def load_config(recipe: Any) -> VerifyConfig:
    """The recipe's ``verify:`` mapping as a ``VerifyConfig`` (unknown keys are an error)."""
    return config_mod.from_mapping(VerifyConfig, recipe.stage_config("verify"), "verify")


@dataclass(frozen=True)
class Verdict:
    """The judgement of one completion: a verdict from ``schema.VERDICTS``, the answer read, and why."""

    verdict: str
    correct: bool
    extracted: str | None
    detail: str = ""


GOLD_UNPARSEABLE = "gold_unparseable"  # detail of verdicts whose gold answer is missing or unreadable
DEFAULT = VerifyConfig()


def reward_of(v: Verdict, cfg: VerifyConfig = DEFAULT) -> float:
    """The training reward of a verdict: ``reward_correct`` if correct, else ``reward_wrong``."""
    return cfg.reward_correct if v.correct else cfg.reward_wrong


# --------------------------------------------------------------------------------------------------- extraction
_HASH = re.compile(r"####[ \t]*([-+$\\(.\d][^\n]{0,300})")  # "#### 42", not a markdown "#### Step 1"
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\s+(?:because|since|so|which|as)\b")
# A number followed by unit words ("18 dollars", "$5 each"): the number.
_NUMBER_WORDS = re.compile(r"^\\?\$?\s*([-+]?\d[\d,]*(?:\.\d+)?)\s*(?:(?!pi\b)[A-Za-z]{2,}[A-Za-z .]*)?$")
_ASSIGN = re.compile(r"^[A-Za-z]\s*=\s*")
# Boxes that hold no answer: empty, spacing, "?" or a placeholder such as the problem's own \boxed{\phantom{2}}.
_PLACEHOLDER = re.compile(r"(?:\s|\?|\\[ ,;:!]|\\q?quad|\\square|\\Box|\\phantom\{[^{}]*\}|\\text\{\s*\})*")


def _strip_echo(text: str, prompt: str) -> str:
    """Remove verbatim copies of the prompt, and of its longer lines, from ``text``."""
    p = prompt.strip()
    if not p:
        return text
    text = text.replace(p, "\n")
    lines = {ln.strip() for ln in p.splitlines() if len(ln.strip()) >= 8}
    if lines:
        text = "\n".join(ln for ln in text.split("\n") if ln.strip() not in lines)
    return text


def _clean_inline(raw: str) -> str:
    r"""An answer written in running text (``#### n``, ``A: n``, "the answer is ..."), cut to the answer itself."""
    s = raw.replace("\\$", "").strip().strip("*").strip()  # no currency signs; markdown bold "**Answer:** **18**"
    boxed = find_boxed(s)
    if boxed:
        return boxed[-1].strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.find(right, len(left)) > 0:
            return s[len(left) : s.find(right, len(left))].strip()
    s = _SENTENCE_END.split(s, maxsplit=1)[0].strip().rstrip(".,;")
    m = _NUMBER_WORDS.match(s)  # "18 dollars", "$18", "5 cm." -> the number
    return m.group(1) if m else s


def extract_answer(completion: str, cfg: VerifyConfig = DEFAULT, prompt: str | None = None) -> tuple[str | None, str]:
    r"""The final answer of a completion and how it was found, or ``None`` and why not.

    The second item is ``boxed``, ``hash``, ``answer_line`` or ``answer_is`` when an answer was found, ``hedged``
    when several different boxed answers were given (the last is returned), else ``invalid_chars``, ``too_long``,
    ``unclosed_think``, ``no_think`` or ``no_answer``.

    >>> extract_answer(r"<think>maybe \boxed{3}</think> So \boxed{\dfrac{1}{2}}.")
    ('\\frac{1}{2}', 'boxed')
    >>> extract_answer("She pays 3 + 4 = 7 dollars.\n#### 7")
    ('7', 'hash')
    """
    if "\x00" in completion:
        return None, "invalid_chars"
    if len(completion) > cfg.max_completion_chars:
        return None, "too_long"
    text = _strip_echo(completion, prompt) if prompt else completion
    if cfg.think_tag:
        if cfg.think_tag in text:
            text = text.rsplit(cfg.think_tag, 1)[1]
        elif cfg.think_tag.replace("</", "<", 1) in text:
            return None, "unclosed_think"
        elif cfg.require_think:
            return None, "no_think"
    if cfg.boxed:
        echoed = set(find_boxed(prompt)) if prompt else set()
        boxed = [b.strip() for b in find_boxed(text, limit=cfg.max_completion_chars) if b not in echoed]
        boxed = [b for b in boxed if not _PLACEHOLDER.fullmatch(b)]
        if boxed:
            distinct = set(boxed)
            if len(distinct) > cfg.max_distinct_boxed:  # compare the answers, not their spelling
                distinct = {fastpath.key(_ASSIGN.sub("", normalize_answer(b))) for b in distinct}
            return fastpath.normalize(boxed[-1]), ("hedged" if len(distinct) > cfg.max_distinct_boxed else "boxed")
    found: list[tuple[int, str, str]] = []
    for on, pattern, how in (
        (cfg.gsm8k_hash, _HASH, "hash"),
        (cfg.answer_line, ANSWER_LINE, "answer_line"),
        (cfg.answer_is, ANSWER_IS, "answer_is"),
    ):
        if on:
            hits = list(pattern.finditer(text))
            if hits:
                found.append((hits[-1].start(), hits[-1].group(1), how))
    if found:
        _, raw, how = max(found)
        answer = fastpath.normalize(_clean_inline(raw))
        if answer:
            return answer, how
    return None, "no_answer"


# --------------------------------------------------------------------------------------------------- judging
_MV: Any = None


def _mv() -> Any:
    """Import math-verify once, with its per-item log lines (which quote the whole input) silenced."""
    global _MV
    if _MV is None:
        import logging

        import math_verify

        for name in ("math_verify", "latex2sympy2_extended"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        _MV = math_verify
    return _MV


# A mixed number before a percent sign: math-verify 0.9 drops its integer part (33\frac{1}{3}\% -> 1/300).
_MIXED_PERCENT = re.compile(r"(?<![\d.}])(\d{1,9})\s*\\frac\{(\d{1,9})\}\{(\d{1,9})\}(?=\s*\\?%)")


@contextlib.contextmanager
def cpu_limit(seconds: float) -> Iterator[list[bool]]:
    """Raise math-verify's ``TimeoutException`` once this process has spent ``seconds`` of CPU time in the block
    (``ITIMER_PROF``: CPU time, so a busy machine does not make an answer time out). Yields a list that holds
    ``True`` once the limit was hit (math-verify's ``parse`` swallows the exception and returns ``[]``). Main thread
    only; the caller's own ``SIGPROF`` handler and timer are put back afterwards."""
    from math_verify.errors import TimeoutException

    fired: list[bool] = []

    def handler(signum: int, frame: Any) -> None:
        fired.append(True)
        raise TimeoutException(f"over {seconds:g} CPU-s")

    previous = signal.signal(signal.SIGPROF, handler)
    timer = signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield fired
    finally:
        try:
            signal.setitimer(signal.ITIMER_PROF, 0)
        finally:  # even when the limit fires on the way out
            signal.signal(signal.SIGPROF, previous)
            if timer[0] > 0:
                signal.setitimer(signal.ITIMER_PROF, *timer)


def _parse(text: str, cfg: VerifyConfig) -> tuple[list, bool]:
    """math-verify's parse of one answer (wrapped in ``\\boxed{}``), and whether it ran out of time."""
    mv = _mv()
    text = _MIXED_PERCENT.sub(lambda m: f"\\frac{{{int(m[1]) * int(m[3]) + int(m[2])}}}{{{m[3]}}}", text)
    with cpu_limit(cfg.parse_timeout_s) as fired:
        parsed = mv.parse("\\boxed{" + text + "}", parsing_timeout=None)  # bounded by cpu_limit instead
    return parsed, bool(fired) and not parsed


def _verify(gold: list, cand: list, cfg: VerifyConfig) -> tuple[bool, bool]:
    """math-verify's comparison of parsed answers, and whether it ran out of time."""
    with cpu_limit(cfg.verify_timeout_s) as fired:
        ok = _mv().verify(gold, cand, timeout_seconds=None)  # bounded by cpu_limit instead
    return ok, bool(fired) and not ok


def _judge(task: tuple[tuple[str, ...], str, bool], cfg: VerifyConfig, cache: dict) -> tuple[str, str]:
    """(verdict, detail) of one (golds, candidate, symmetric) task through math-verify. Runs in a worker."""
    golds, cand, symmetric = task
    gold_parsed = cache.get(golds)
    if gold_parsed is None:
        gold_parsed = []
        for g in golds:
            gold_parsed.extend(_parse(g, cfg)[0])
        if len(cache) > 4096:
            cache.clear()
        cache[golds] = gold_parsed
    if not gold_parsed:
        return "unparseable", GOLD_UNPARSEABLE
    cand_parsed, timed_out = _parse(cand, cfg)
    if timed_out:
        return "timeout", "parse"
    if not cand_parsed:
        return "unparseable", "answer"
    ok, timed_out = _verify(gold_parsed, cand_parsed, cfg)
    if not ok and symmetric:
        ok, timed_out = _verify(cand_parsed, gold_parsed, cfg)
    if ok:
        return "correct", "math_verify"
    if timed_out:
        return "timeout", "verify"
    if all(isinstance(p, str) for p in cand_parsed):
        return "unparseable", "answer"
    return "wrong", "math_verify"


def _judge_safely(task: tuple, cfg: VerifyConfig, cache: dict) -> tuple[str, str]:
    """``_judge`` that always returns a verdict (it runs in a worker, or in the main thread for ``check``)."""
    from math_verify.errors import TimeoutException

    try:
        return _judge(task, cfg, cache)
    except TimeoutException:  # a BaseException: math-verify lets it escape in a few paths
        return "timeout", "math_verify"
    except Exception as exc:  # MemoryError past worker_memory_mb, RecursionError on deep nesting, sympy bugs
        return "error", type(exc).__name__


def _judge_here(task: tuple, cfg: VerifyConfig) -> tuple[str, str]:
    """``_judge_safely`` in this process (main thread only; ``cpu_limit`` keeps any timer the caller had armed)."""
    return _judge_safely(task, cfg, _LOCAL_CACHE)


_LOCAL_CACHE: dict = {}


# --------------------------------------------------------------------------------------------------- worker pool
def _worker_init() -> dict:
    """Per-worker state: math-verify imported (quietly) and an empty cache of parsed gold answers."""
    _mv()
    return {}


def _worker_task(cache: dict, cfg: VerifyConfig, task: tuple) -> tuple[str, str]:
    return _judge_safely(task, cfg, cache)


_POOL: Any = None
_POOL_LOCK = threading.Lock()


@atexit.register
def shutdown() -> None:
    """Stop the worker processes (also runs at interpreter exit); the next batch starts new ones."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None


def _pool(cfg: VerifyConfig, workers: int | None) -> Any:
    """The module's pool (call with ``_POOL_LOCK`` held), created on first use and again after a fork or a change
    of size. Creating it only starts the worker processes: they import math-verify while the caller goes on."""
    global _POOL
    from curate.verify.pool import Pool

    n = max(1, workers or cfg.workers or os.cpu_count() or 1)
    if _POOL is not None and (
        _POOL.pid != os.getpid() or (len(_POOL.workers), _POOL.memory_mb) != (n, cfg.worker_memory_mb)
    ):
        if _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None
    if _POOL is None:
        _POOL = Pool(n, _worker_init, _worker_task, cfg.worker_memory_mb)
    return _POOL


def _start_pool(cfg: VerifyConfig, workers: int | None) -> None:
    """Start the workers now (``check_batch`` calls this at its first math-verify task, so that their start-up
    overlaps the screening of the rest of the batch). A no-op when the pool is busy in another thread."""
    if _POOL_LOCK.acquire(blocking=False):
        try:
            _pool(cfg, workers)
        finally:
            _POOL_LOCK.release()


def _run_tasks(
    tasks: list, cfg: VerifyConfig, workers: int | None, on_done: Callable[[int], None]
) -> list[tuple[str, str]]:
    """Judge tasks in the module's pool (see ``_pool``)."""
    global _POOL
    if not tasks:
        return []
    with _POOL_LOCK:
        _pool(cfg, workers)
        try:
            return _POOL.run(tasks, cfg, item_timeout_s=cfg.item_timeout_s, chunk_size=cfg.chunk_size, on_done=on_done)
        except BaseException:  # interrupted, or a worker could not start: never reuse workers in an unknown state
            _POOL.close()
            _POOL = None
            raise


# --------------------------------------------------------------------------------------------------- public API
def _as_text(value: Any) -> str:
    """A completion or prompt as text: a string, or the contents of chat messages (``[{"role", "content"}]``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n".join(m.get("content") or "" if isinstance(m, dict) else str(m) for m in value)
    return "" if value is None else str(value)


def _screen(
    completion: Any, golds: tuple[str, ...], cfg: VerifyConfig, finish_reason: str | None, prompt: Any
) -> tuple[Verdict | None, tuple | None]:
    """Everything short of math-verify: a final ``Verdict``, or the math-verify task still to run."""
    answer, how = extract_answer(_as_text(completion), cfg, _as_text(prompt) if prompt is not None else None)
    if answer is None:
        if finish_reason == "length":
            return Verdict("truncated", False, None, how), None
        verdict = "no_answer" if how in ("no_answer", "unclosed_think", "no_think") else "unparseable"
        return Verdict(verdict, False, None, how), None
    if how == "hedged":
        return Verdict("wrong", False, answer, "hedged"), None
    if len(answer) > cfg.max_answer_chars:
        return Verdict("unparseable", False, None, "answer_too_long"), None
    if not golds:
        return Verdict("unparseable", False, answer, GOLD_UNPARSEABLE), None
    fast = fastpath.decide(golds, answer)
    if fast is None and (unitless := fastpath.without_units(golds, answer)) is not None:
        golds, cand = unitless  # the values alone, also for math-verify (which does not read "km/h")
        fast = fastpath.decide(golds, cand)
        if fast is None:
            return None, (golds, cand, False)
    elif fast is None:
        fast = fastpath.decide_forms(golds, answer)
    if fast is not None:
        return Verdict(fast, fast == "correct", answer, how), None
    return None, (golds, answer, False)


def _verdict(result: tuple[str, str], answer: str) -> Verdict:
    verdict, detail = result
    return Verdict(verdict, verdict == "correct", answer, detail)


def check(
    completion: str,
    gold: str | Sequence[str],
    cfg: VerifyConfig = DEFAULT,
    *,
    finish_reason: str | None = None,
    prompt: str | None = None,
) -> Verdict:
    """Judge one completion against a gold answer (a string, or a list of acceptable alternatives).

    ``completion`` and ``prompt`` are strings or chat messages (``[{"role": ..., "content": ...}]``, contents joined).
    In the main thread math-verify runs in this process with its own timeouts; in any other thread (Prefect task
    runners, TRL's async rewards) the check goes through the worker pool, where the timeouts work.
    """
    verdict, task = _screen(completion, fastpath.gold_forms(gold), cfg, finish_reason, prompt)
    if verdict is not None:
        return verdict
    if threading.current_thread() is threading.main_thread():
        return _verdict(_judge_here(task, cfg), task[1])
    return _verdict(_run_tasks([task], cfg, None, lambda _: None)[0], task[1])


def check_batch(
    completions: Sequence[str],
    golds: Sequence[str | Sequence[str]],
    cfg: VerifyConfig = DEFAULT,
    *,
    finish_reasons: Sequence[str | None] | None = None,
    prompts: Sequence[str | None] | None = None,
    workers: int | None = None,
    progress: bool = False,
) -> list[Verdict]:
    """Judge many completions; same verdicts as ``check``, in the same order, safe from any thread.

    Completions and prompts are strings or chat messages, as in ``check``. Identical (gold, answer) pairs are judged
    once; pairs the fast paths cannot settle run in the worker pool.
    ``workers`` overrides ``cfg.workers``; ``progress`` shows a progress bar on stderr.
    """
    n = len(completions)
    if len(golds) != n or (finish_reasons is not None and len(finish_reasons) != n):
        raise ValueError(f"check_batch: {n} completions but {len(golds)} golds / finish reasons")
    if prompts is not None and len(prompts) != n:
        raise ValueError(f"check_batch: {n} completions but {len(prompts)} prompts")
    out: list[Verdict | None] = [None] * n
    unique: dict[tuple, list[int]] = {}
    gold_memo: dict[Any, tuple[str, ...]] = {}
    for i in range(n):
        g = golds[i]
        key = g if isinstance(g, str) else None
        gs = gold_memo.get(key) if key is not None else None
        if gs is None:
            gs = fastpath.gold_forms(g)
            if key is not None:
                gold_memo[key] = gs
        fr = finish_reasons[i] if finish_reasons is not None else None
        pr = prompts[i] if prompts is not None else None
        verdict, task = _screen(completions[i], gs, cfg, fr, pr)
        if verdict is not None:
            out[i] = verdict
        else:
            if not unique:
                _start_pool(cfg, workers)  # the workers import math-verify while the rest is screened
            unique.setdefault(task, []).append(i)
    tasks = sorted(unique)  # same gold side by side: parsed once per chunk and cached in the worker
    from curate.progress import bar  # here, not at the top: spawn workers import this module

    with bar(n, "verify", enabled=progress, unit="completions") as advance:
        advance(n - sum(len(v) for v in unique.values()))
        results = _run_tasks(tasks, cfg, workers, lambda tid: advance(len(unique[tasks[tid]])))
    for task, result in zip(tasks, results, strict=True):
        for i in unique[task]:
            out[i] = _verdict(result, task[1])
    return out  # type: ignore[return-value]


def equivalent_batch(pairs: Sequence[tuple[str, str]], cfg: VerifyConfig = DEFAULT) -> list[bool]:
    r"""For each pair of gold answers, whether they are the same answer (for ingest's duplicate-conflict check).

    Normalized-string and exact-number equality first; otherwise math-verify in the worker pool, accepting either
    direction (a as reference and b as candidate, or the reverse). Timeouts and unreadable answers count as *not*
    equivalent. ``$2\sqrt{5}$`` vs ``2\sqrt{5}``: True; ``25`` vs ``20``: False.
    """
    out: list[bool | None] = [None] * len(pairs)
    unique: dict[tuple, list[int]] = {}
    for i, (a, b) in enumerate(pairs):
        ga, gb = fastpath.gold_forms(a), fastpath.gold_forms(b)
        if not ga or not gb:
            out[i] = ga == gb
            continue
        fast = fastpath.decide(ga, gb[0])
        if fast is not None:
            out[i] = fast == "correct"
        else:
            unique.setdefault((ga, gb[0], True), []).append(i)
    tasks = sorted(unique)
    for task, (verdict, _) in zip(tasks, _run_tasks(tasks, cfg, None, lambda _: None), strict=True):
        for i in unique[task]:
            out[i] = verdict == "correct"
    return out  # type: ignore[return-value]
