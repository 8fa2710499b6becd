r"""What real pools hold, for the built-in generator: wrong gold answers, copies, leaks and a teacher's slips.

The generator (``curate.ingest.generate``) draws clean problems: every gold answer right, no two alike, nothing
copied from an evaluation set. Real pools are not like that, and curation can only show its worth on a pool with
something to remove. This module adds, deterministically by seed and index, what a measured pool holds.
Each knob is a generator option (``gen://arith?...&wrong_gold=0.05``, or the source's ``gen:`` mapping in a recipe);
the built-in recipe (``datasets/tiny/recipe.yaml``) puts the source of each rate beside it.

- ``wrong_gold``: a share of the problems carry a wrong gold answer, of three kinds drawn equally (arithmetic chains;
  other families get ``slip`` and ``typo`` only): ``early`` (the value before the last operation: a reference
  solution that stopped early), ``slip`` (the true answer off by one: an arithmetic slip in the reference), ``typo``
  (a transcription error: the digits reversed, or a digit added when there is one). The first two are answers a
  model's own slips produce, so a reward on them is *active* noise that RL reinforces; the third is *inactive*:
  no rollout ever earns it, the problem only wastes rollouts (Yang et al., arXiv 2604.03993).
- ``duplicates``: after a problem, with this probability, an exact copy of an earlier problem (or itself);
  ``conflicts`` of those copies carry another gold answer (a ``typo`` of the first's), as DeepScaleR's duplicate
  groups with different answers do. ``near_duplicates``: the same for a reworded copy (same numbers, same answer).
- ``leak``: reworded copies of an evaluation stream's problems (the stream ``leak_seed``, ``leak_n`` problems, with
  this source's family, levels and operators, and chains of ``leak_min_ops``-``leak_max_ops`` operations, by
  default this source's: what the recipe's test source draws), a copy for exactly this share of them (rounded),
  spread through the source.
- ``teacher_error``: the source's solutions are teacher traces (instead of the generator's reference solutions;
  ``solution`` too, as in a distilled set), and this share of them is wrong, each trace on its own draw, of its
  method's kinds (``METHOD_KINDS``; arithmetic chains only): ``slip`` (one step's result off by one, carried to
  the end: a computing error), ``skip`` (one operation left out: a reasoning leap), ``early`` (stopped one
  operation early, the intermediate value boxed: a premature answer) and, for the method that rewrites the
  expression, ``copy`` (an operand miscopied while rewriting, the rest computed with it: a transcription error).
- ``teacher_methods`` (1-4) and ``teacher_k`` (1 to ``teacher_methods``): the teacher writes in the first
  ``teacher_methods`` of the generator's arithmetic methods (``METHODS``: the step list, a running total in words,
  the expression rewritten one operation at a time, one paragraph of sentences), ``teacher_k`` traces per problem,
  each in a different method drawn at random, each wrong on its own draw. A distilled set with several solutions
  per problem (CoScale-RL's K) is such a teacher; so is a teacher whose traces mix styles, which a small student
  executes with different reliability (arXiv 2502.12143). The defaults (1, 1) are one step list per problem.

What each row is, is recorded in ``waste`` (its kinds, the true answer of a wrong gold, the copied problem's id):
ground truth for measuring what curation removed (``bench/bench_curation.py``). No stage reads it.

>>> w = Waste(wrong_gold=1.0)
>>> rows = list(apply(w, [{"problem": "Compute $2 + 3$.", "answer": "5", "family": "arith", "level": 1,
...     "solution": "Start with $2$.\nAdd $3$: $2 + 3 = 5$.\nThe result is $\\boxed{5}$.", "ops": 1}], 0, None))
>>> rows[0]["answer"] != "5" and rows[0]["waste"]["gold"]["true"] == "5"
True
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields

from curate.errors import InputError
from curate.ingest import arith_text


GOLD_KINDS = ("early", "slip", "typo")
TRACE_KINDS = ("slip", "skip", "early")
METHODS = ("steps", "total", "rewrite", "prose")  # the generator's arith solutions, in its order (arith_text)
METHOD_KINDS = {"steps": TRACE_KINDS, "total": TRACE_KINDS, "rewrite": ("slip", "copy", "early"),
                "prose": TRACE_KINDS}  # fmt: skip
REWORDINGS = ("Evaluate ${e}$.", "What is ${e}$?", "Find the value of ${e}$.", "Calculate ${e}$.")
_STEP = re.compile(r"^(Add|Subtract|Multiply by) \$(\d+)\$: ")
_START = re.compile(r"^Start with \$(-?\d+)\$\.$")


@dataclass(frozen=True)
class Waste:
    """The knobs (module docstring); all off by default, when the stream is exactly the generator's."""

    wrong_gold: float = 0.0
    duplicates: float = 0.0
    near_duplicates: float = 0.0
    conflicts: float = 0.0
    leak: float = 0.0
    leak_seed: int = 1
    leak_n: int = 0
    leak_min_ops: int | None = None
    leak_max_ops: int | None = None
    teacher_error: float = 0.0
    teacher_methods: int = 1
    teacher_k: int = 1

    def __post_init__(self) -> None:
        for name in ("wrong_gold", "duplicates", "near_duplicates", "conflicts", "leak", "teacher_error"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InputError(f"{name} must be a share in [0, 1], got {getattr(self, name)}")
        if not 1 <= self.teacher_methods <= len(METHODS):
            raise InputError(f"teacher_methods must be 1-{len(METHODS)} (of {', '.join(METHODS)}), "
                             f"got {self.teacher_methods}")  # fmt: skip
        if not 1 <= self.teacher_k <= self.teacher_methods:
            raise InputError(f"teacher_k must be 1-teacher_methods ({self.teacher_methods}): each of a problem's "
                             f"traces is in another method, got {self.teacher_k}")  # fmt: skip
        if self.leak_n < 0:
            raise InputError(f"leak_n must be >= 0, got {self.leak_n}")
        if self.leak and not self.leak_n:
            raise InputError("leak needs leak_n (and leak_seed): the evaluation stream whose problems are copied")

    @property
    def teacher(self) -> bool:
        """Whether the solutions are teacher traces (``_with_teacher``) rather than the generator's references."""
        return bool(self.teacher_error) or self.teacher_methods > 1 or self.teacher_k > 1

    @property
    def active(self) -> bool:
        shares = (f.name for f in fields(self) if not f.name.startswith(("leak_", "teacher_")))
        return any(getattr(self, name) for name in shares) or self.teacher


OPTIONS = {f.name for f in fields(Waste)}


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


# --------------------------------------------------------------------------------------------------- step lists
def steps(solution: str) -> tuple[int, list[tuple[str, int]]] | None:
    """(start, [(op, operand)]) of a generator step list (``Start with $v$.`` / ``Add $b$: ...``), else None."""
    lines = solution.split("\n")
    start = _START.match(lines[0]) if lines else None
    ops = [_STEP.match(line) for line in lines[1:-1]]
    if start is None or not all(ops):
        return None
    sym = {"Add": "+", "Subtract": "-", "Multiply by": "*"}
    return int(start.group(1)), [(sym[m.group(1)], int(m.group(2))) for m in ops]


def _values(start: int, ops: list[tuple[str, int]], slip: tuple[int, int] | None = None) -> list[int]:
    """The running values of ``start`` and ``ops`` (``values[0] == start``); ``slip = (k, d)`` adds ``d`` to step
    ``k``'s result and carries it on (a computing error)."""
    values = [start]
    for k, (op, b) in enumerate(ops):
        value = values[-1]
        new = value * b if op == "*" else value + b if op == "+" else value - b
        values.append(new + (slip[1] if slip is not None and slip[0] == k else 0))
    return values


def step_list(start: int, ops: list[tuple[str, int]], slip: tuple[int, int] | None = None) -> tuple[str, int]:
    """The generator's step list for ``start`` and ``ops`` (same wording, ``arith_text.steps``), and its final value;
    ``slip = (k, d)`` adds ``d`` to step ``k``'s result and carries it on (a computing error)."""
    values = _values(start, ops, slip)
    return render("steps", start, ops, values), values[-1]


def render(method: str, start: int, ops: list[tuple[str, int]], values: list[int]) -> str:
    """A trace in ``method`` (``METHODS``) that claims ``values`` for ``start`` and ``ops``: the generator's own
    wording (``curate.ingest.arith_text``), byte for byte when the values are right."""
    if method != "steps":
        return arith_text.alternatives(start, ops, values)[METHODS.index(method) - 1]
    return arith_text.steps(start, ops, values)


def method_trace(start: int, ops: list[tuple[str, int]], method: str, kind: str | None, rng: random.Random) -> str:
    """A teacher's trace in ``method``: right when ``kind`` is None, else wrong in that way (``METHOD_KINDS``).
    A wrong rewrite still opens with the problem's own expression: its error comes in the rewriting."""
    k = rng.randrange(len(ops)) if kind else 0
    used, slip = list(ops), None
    if kind == "slip":
        slip = (k, rng.choice((-1, 1)))
    elif kind == "skip" and len(ops) > 1:
        used = ops[:k] + ops[k + 1 :]
    elif kind == "copy":  # operand k miscopied (off by one, never 0) from the line that rewrites step k on
        op, b = ops[k]
        used[k] = (op, b + 1 if b <= 2 or rng.random() < 0.5 else b - 1)
    elif kind is not None:  # early (and a 1-operation skip): the value before the last operation
        used = ops[:-1]
    text = render(method, start, used, _values(start, used, slip))
    if method == "rewrite" and kind is not None:  # the second line is the expression as the problem writes it
        lines = text.split("\n")
        lines[1] = render("rewrite", start, ops, _values(start, ops)).split("\n")[1]
        text = "\n".join(lines)
    return text


# --------------------------------------------------------------------------------------------------- answers
def wrong_answer(row: dict, kind: str, rng: random.Random) -> str:
    """A wrong gold answer of ``kind`` (``GOLD_KINDS``) for ``row``; never equal to the true one."""
    true = row["answer"]
    if kind == "early":
        parsed = steps(row["solution"])
        if parsed is not None:
            start, ops = parsed
            return str(step_list(start, ops[:-1])[1])
        kind = "slip"
    m = re.fullmatch(r"(-?)(\d+)", true) or re.fullmatch(r"(-?)\\frac\{(\d+)\}\{\d+\}", true)
    if m is None:  # not an integer or a plain fraction: a transcription error that appends a digit
        return true + "1"
    if kind == "slip":
        delta = rng.choice((-1, 1))
        return true[: m.start(2)] + str(int(m.group(2)) + (delta if int(m.group(2)) > 0 else 1)) + true[m.end(2) :]
    digits = m.group(2)
    typo = str(int(digits[::-1])) if len(set(digits)) > 1 else digits + str(rng.randrange(1, 10))
    return true[: m.start(2)] + typo + true[m.end(2) :]


def reworded(problem: str, rng: random.Random) -> str:
    """The same problem in other words (numbers, expression and answer unchanged): ``Compute $E$.`` becomes
    ``What is $E$?`` and the like; other problems get a short lead-in."""
    m = re.fullmatch(r"Compute \$(.+)\$\.", problem)
    if m is not None:
        return rng.choice(REWORDINGS).format(e=m.group(1))
    return rng.choice(("Solve this problem. ", "Question: ", "Try this one. ")) + problem


# --------------------------------------------------------------------------------------------------- the stream
def _with_gold(row: dict, rng: random.Random, kinds: tuple[str, ...]) -> dict:
    """``row`` with a wrong gold answer of one of ``kinds`` (other families than arith: slip or typo)."""
    kind = rng.choice(kinds if row.get("family") == "arith" else tuple(k for k in kinds if k != "early") or ("typo",))
    true = row.get("waste", {}).get("gold", {}).get("true", row["answer"])
    wrong = wrong_answer({**row, "answer": true}, kind, rng)
    return {**row, "answer": wrong, "waste": {**row.get("waste", {}), "gold": {"kind": kind, "true": true}}}


def _with_teacher(row: dict, waste: Waste, rng: random.Random) -> dict:
    """The teacher's ``teacher_k`` traces of a problem, each in another of its first ``teacher_methods`` methods
    (the step list alone by default), each wrong with chance ``teacher_error`` in one of its method's ways. Other
    families than arith keep their reference solution (the teacher's errors are arithmetic ones)."""
    parsed = steps(row["solution"])
    if parsed is None:
        return {**row, "solutions": [row["solution"]]}
    methods = list(METHODS[: waste.teacher_methods])
    if waste.teacher_methods > 1 or waste.teacher_k > 1:
        methods = rng.sample(methods, waste.teacher_k)
    traces, kinds = [], []
    for method in methods:
        kind = rng.choice(METHOD_KINDS[method]) if rng.random() < waste.teacher_error else None
        trace = method_trace(*parsed, method, kind, rng)
        if kind and trace == method_trace(*parsed, method, None, rng):
            kind = None  # a 1-operation skip of nothing: the trace came out right
        traces.append(trace)
        kinds.append(kind)
    out = {**row, "solution": traces[0], "solutions": traces}  # a distilled set's solution column is the teacher's
    extra: dict = {"methods": methods} if len(METHODS[: waste.teacher_methods]) > 1 else {}
    if any(kinds):
        extra["trace"] = kinds[0] if len(kinds) == 1 else kinds
    if extra:
        out["waste"] = {**row.get("waste", {}), **extra}
    return out


def _copy(row: dict, kind: str, problem: str | None = None) -> dict:
    """A copy of ``row`` (reworded when ``problem`` is given), recording the id of the problem it copies."""
    from curate import schema as S

    waste = {**row.get("waste", {}), "copy": {"kind": kind, "of": S.problem_id(row["problem"])}}
    return {**row, **({"problem": problem} if problem else {}), "waste": waste}


def _leaks(
    waste: Waste, seed: int, n: int, leak_stream: Callable[[int], Iterator[dict]] | None
) -> dict[int, list[dict]]:
    """Reworded copies of exactly ``round(leak * leak_n)`` evaluation problems, by the row they follow (of ``n``)."""
    assert leak_stream is not None
    r = _rng("leak", seed, waste.leak_seed)
    chosen = set(r.sample(range(waste.leak_n), round(waste.leak * waste.leak_n)))
    leaks: dict[int, list[dict]] = {}
    for k, item in enumerate(leak_stream(waste.leak_n)):
        if k in chosen:
            leaks.setdefault(r.randrange(n), []).append(_copy(item, "leak", reworded(item["problem"], r)))
    return leaks


def apply(
    waste: Waste, rows: Iterable[dict], seed: int, leak_stream: Callable[[int], Iterator[dict]] | None
) -> Iterator[dict]:
    """``rows`` (the generator's clean stream of seed ``seed``, in index order) with ``waste`` added: wrong golds and
    teacher traces on the rows themselves, copies and leaks after them. ``leak_stream(n)`` draws the evaluation
    stream the leaks copy (``waste.leak_seed``). Each knob draws from its own random stream, so turning one on
    changes nothing the others do."""
    base = list(rows)
    leaks = _leaks(waste, seed, len(base), leak_stream) if waste.leak and base else {}

    def teach(row: dict, key: object) -> dict:
        return _with_teacher(row, waste, _rng("teacher", seed, key)) if waste.teacher else row

    clean: list[dict] = []
    for i, row in enumerate(base):
        r = _rng("gold", seed, i)
        if r.random() < waste.wrong_gold:
            row = _with_gold(row, r, GOLD_KINDS)
        clean.append(row)
        yield teach(row, i)
        r = _rng("copies", seed, i)
        for share, kind in ((waste.duplicates, "duplicate"), (waste.near_duplicates, "near_duplicate")):
            if r.random() < share:
                j = r.randrange(len(clean))
                copy = _copy(clean[j], kind, reworded(clean[j]["problem"], r) if kind == "near_duplicate" else None)
                if kind == "duplicate" and r.random() < waste.conflicts:
                    copy = _with_gold(copy, r, ("typo",))
                yield teach(copy, f"{i}:{kind}")
        for k, leak in enumerate(leaks.get(i, [])):
            yield teach(leak, f"{i}:leak{k}")
