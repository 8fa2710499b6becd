r"""Gold-answer extraction and normalization: pure string functions, no math-verify.

Sources ship gold answers in many containers (ANALYSIS.md §3): ``#### 72`` after a GSM8K worked solution,
``A: 18`` in GSM8K's model-solution file, bare LaTeX (MATH), ``$...$``-wrapped or still ``\boxed{}``-wrapped
strings (DeepScaleR), JSON floats (``142.0``, AMC), zero-padded AIME answers (``097``), thousands separators
(``1,080``) and lists of acceptable alternatives (Minerva, OlympiadBench). ``normalize_answer`` maps all of them
to one light normal form that is still a readable, valid LaTeX answer (it is what training files carry);
``answer_key`` is the stricter key used for fast equality tests (whitespace and sizing commands removed).

>>> normalize_answer("#### 1,080")
'1080'
>>> normalize_answer(r"\[ \boxed{\dfrac{1}{2}} \]")
'\\frac{1}{2}'
>>> normalize_answer("097"), normalize_answer(142.0), normalize_answer("$2\\sqrt{5}$")
('97', '142', '2\\sqrt{5}')
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any


MAX_SCAN = 200_000  # characters scanned for \boxed{} in one text: bounds the work on untrusted input
_BOX_CMDS = ("\\boxed", "\\fbox")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_LATEX_THOUSANDS = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
PLAIN_NUMBER = re.compile(r"^[-+]?\d+(\.\d+)?$")
_WS = re.compile(r"\s+")
_MONEY = re.compile(r"^\\?\$\s?-?[\d,]*\.?\d+$")
_MULTI_DOLLAR = re.compile(r"\$[^$]*\$(\s*,\s*\$[^$]*\$)+")
# The one rule for an answer written out in words (the checker extracts group 1; ``curate.solutions.distinct`` finds
# where the answer starts): a line "Answer: ..." / "Final answer: ..." in any case, or "A: ..." with a capital A
# (GSM8K's solution files; a lowercase "a:" is usually a variable), and "the answer is ...".
ANSWER_LINE = re.compile(r"(?m)^[ \t*#]*(?:(?i:final\s+answer|answer)|A)[ \t*]*[:：][ \t*]*([^\n]{1,300})")
ANSWER_IS = re.compile(r"(?i)\banswer\s+is\s*[:：]?\s*([^\n]{1,300})")


def find_boxed(text: str, limit: int = MAX_SCAN) -> list[str]:
    r"""Contents of every ``\boxed{...}`` / ``\fbox{...}`` in ``text``, in order, with nested braces balanced.

    Unbalanced boxes are skipped; only the last ``limit`` characters are scanned.

    >>> find_boxed(r"so \boxed{\frac{1}{2}} or \boxed{3}")
    ['\\frac{1}{2}', '3']
    """
    if len(text) > limit:
        text = text[-limit:]
    out = []
    i = 0
    while True:
        hits = [(text.find(cmd, i), cmd) for cmd in _BOX_CMDS]
        hits = [(pos, cmd) for pos, cmd in hits if pos >= 0]
        if not hits:
            return out
        pos, cmd = min(hits)
        j = pos + len(cmd)
        while j < len(text) and text[j] == " ":
            j += 1
        if j >= len(text) or text[j] != "{":
            i = j
            continue
        depth = 0
        k = j
        while k < len(text):
            c = text[k]
            if c == "\\" and k + 1 < len(text):
                k += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if depth != 0:
            return out
        out.append(text[j + 1 : k])
        i = k + 1


def _unwrap_once(s: str) -> str:
    s = s.strip()
    for left, right in (("\\[", "\\]"), ("\\(", "\\)"), ("$$", "$$")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            return s[len(left) : len(s) - len(right)].strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$" and s.count("$") == 2:
        return s[1:-1].strip()
    if _MULTI_DOLLAR.fullmatch(s):  # OlympiadBench multi-answers: "$6764$,$10945$"
        return ", ".join(part.strip() for part in re.findall(r"\$([^$]*)\$", s))
    for cmd in _BOX_CMDS:
        if s.startswith(cmd):
            boxed = find_boxed(s)
            if len(boxed) == 1 and s.rstrip(" .").endswith("}"):
                inner = boxed[0]
                rebuilt = f"{cmd}{{{inner}}}"
                if s.replace(" ", "").rstrip(".") == rebuilt.replace(" ", ""):
                    return inner.strip()
    if s.startswith("\\text{") and s.endswith("}") and s.count("{") == 1:
        return s  # keep text answers as they are
    return s


def _normalize_number(s: str) -> str:
    """``27.0`` -> ``27``, ``097`` -> ``97``, ``2.50`` -> ``2.5``, ``-0`` -> ``0``; other strings unchanged."""
    if not PLAIN_NUMBER.match(s):
        return s
    try:
        d = Decimal(s)
    except InvalidOperation:
        return s
    if d == 0:
        return "0"
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def normalize_answer(raw: Any) -> str:
    r"""One gold answer in light normal form (see module docstring). ``None`` and empty input give ``""``."""
    if raw is None:
        return ""
    if isinstance(raw, bool):
        return str(raw)
    if isinstance(raw, int | float):
        if isinstance(raw, float) and (math.isnan(raw) or math.isinf(raw)):
            return ""
        if isinstance(raw, float) and raw.is_integer():
            return str(int(raw))
        return _normalize_number(repr(raw))
    s = str(raw).replace("\r", "").strip()
    if "####" in s:
        s = s.rsplit("####", 1)[1].strip()
    else:
        last = s.rsplit("\n", 1)[-1].strip()
        if last.startswith("A:") and "\n" in s:
            s = last[2:].strip()
    if s.endswith(("$.", "}.", "].")):  # a sentence period outside the wrapper
        s = s[:-1]
    for _ in range(4):  # nested wrappers: \[ \boxed{ $x$ } \]
        unwrapped = _unwrap_once(s)
        if unwrapped == s:
            break
        s = unwrapped
    if _MONEY.match(s):  # a dollar amount, "$30" or "\\$2.60": the number is the answer
        s = s.lstrip("\\").lstrip("$").strip()
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _WS.sub(" ", s).strip()
    s = s.rstrip(".").strip() if not s.endswith("..") else s
    s = _LATEX_THOUSANDS.sub("", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return _normalize_number(s)


def normalize_alternatives(raw: Any) -> list[str]:
    """All acceptable answers, normalized, deduplicated, primary first. Lists are alternatives, not tuples.

    >>> normalize_alternatives(["9.6\\n", "9.60"])
    ['9.6']
    """
    items = list(raw) if isinstance(raw, list | tuple) else [raw]
    out: list[str] = []
    for item in items:
        norm = normalize_answer(item)
        if norm and norm not in out:
            out.append(norm)
    return out


def raw_answer_text(raw: Any) -> str | None:
    """The raw answer as stored beside the normalized one: strings as they are, anything else as JSON."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return raw
    return json.dumps(raw, ensure_ascii=False)


_KEY_DROP = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\:|\\ |~|\s")


def answer_key(answer: str) -> str:
    r"""Strict comparison key: normal form minus whitespace, ``\left``/``\right`` and spacing commands.

    Two answers with equal keys are the same answer; unequal keys may still be equivalent (that is math-verify's
    job, see ``curate.verify``).

    >>> answer_key(r"\left( 3, \frac{\pi}{2} \right)") == answer_key(r"(3,\frac{\pi}{2})")
    True
    """
    return _KEY_DROP.sub("", normalize_answer(answer)).rstrip(".")


# --------------------------------------------------------------------------------------------------- answer kinds
# What the checker can and cannot judge, as pure string tests: a value followed by a unit, "no solution"
# and its synonyms, and gold answers it cannot verify at all (prose, several values joined in a sentence), which
# ingest flags ``unverifiable_answer`` and selection leaves out of RL sets by default.
_TEXT_CMD = re.compile(r"\\(?:text|textrm|textbf|textit|mbox|mathrm|operatorname)\s*\{([^{}]*)\}")
_ENV = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}")
UNIT_WORDS = frozenset(
    """
    m cm mm km nm um dm kg g mg lb lbs oz ton tons t s sec secs second seconds ms min mins minute minutes h hr hrs
    hour hours day days week weeks month months year years yr yrs l ml liter liters litre litres gallon gallons
    cup cups ft feet foot in inch inches yd yard yards mi mile miles mph kmh kph km/h m/s cm/s ft/s mi/h deg
    degree degrees rad radian radians dollar dollars cent cents euro euros pound pounds unit units sq square
    cubic cu meter meters metre metres centimeter centimeters kilometer kilometers millimeter millimeters
    gram grams kilogram kilograms kcal cal calorie calories j kj joule joules w kw watt watts v volt volts
    amp amps newton newtons pa kpa hz khz mhz kelvin people students person times
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
_UNIT_TAIL = re.compile(r"^(?P<value>.*?[\d}])\s+(?P<unit>(?:[A-Za-z]+(?:\s*\^\s*\{?-?\d+\}?)?(?:\s*/\s*|\s+|$))+)$")
_NUMERIC_VALUE = re.compile(r"^[-+]?[\d.,\s{}()^/*+-]*$")
_NUMERIC_CMDS = re.compile(r"\\(?:d?frac|tfrac|sqrt|pi|cdot|times|left|right|,|!|;|:)")
_NO_SOLUTION = re.compile(
    r"^(?:there\s+(?:is|are)\s+)?(?:no|not\s+any)\s+(?:real\s+|integer\s+|positive\s+|rational\s+|such\s+)?"
    r"(?:solutions?|roots?|values?|answers?|numbers?)(?:\s+exists?)?$"
    r"|^(?:none|dne|does\s+not\s+exist|the\s+empty\s+set|empty\s+set|\\emptyset|\\varnothing|\\\{\s*\\\})$"
)
_CONNECTOR = re.compile(r"(?i)(?:^|\s|\})(?:and|or)(?:\s|\\|$)")
_TEXT_TAIL = re.compile(r"\\(?:text|textrm|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z ]*\}\s*$")
_LOWER_WORD = re.compile(r"(?<![\\A-Za-z])[a-z]{3,}(?![A-Za-z])")
_ALTERNATIVES = re.compile(r"\\text\s*\{\s*OR\s*\}|\s+OR\s+")
_MATH_WORDS = frozenset(
    ("sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "max", "min", "gcd", "lcm", "mod", "arg", "det", "lim",
     "inf", "sup")
)  # fmt: skip


def _plain(answer: str) -> str:
    """The answer with ``\\text{...}``-like wrappers opened and LaTeX spacing as spaces (``\\%`` is math-verify's)."""
    s = _TEXT_CMD.sub(lambda m: f" {m.group(1)} ", answer)
    s = re.sub(r"\\[ ,;:!]|~|\\q?quad", " ", s)
    return _WS.sub(" ", s).strip()


def split_unit(answer: str) -> tuple[str, str] | None:
    r"""``(value, unit)`` when ``answer`` is a numeric value followed only by unit words, else ``None``.

    Units are words from ``UNIT_WORDS`` (with ``/`` and integer powers), in plain text or ``\text{}``. The value
    must be numeric LaTeX (digits, ``\frac``, ``\sqrt``, ``\pi``): a variable before a word is not a value.

    >>> split_unit("12 km/h"), split_unit(r"100\text{ square units}"), split_unit(r"5\text{ cm}^2")
    (('12', 'km/h'), ('100', 'square units'), ('5', 'cm^2'))
    >>> split_unit("3 x"), split_unit("12"), split_unit("7 minutes and 5 seconds")
    (None, None, None)
    """
    s = _plain(answer)
    m = _UNIT_TAIL.match(s)
    if not m:
        return None
    value, unit = m.group("value").strip(), _WS.sub(" ", m.group("unit")).strip()
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", unit)]
    compact = unit.replace(" ", "").lower()
    labelled = bool(_TEXT_TAIL.search(answer))  # "7 \text{ distinct integers}": a counted noun, as good as a unit
    if not words or not (labelled or all(w in UNIT_WORDS or compact in UNIT_WORDS for w in words)):
        return None
    bare = _NUMERIC_CMDS.sub(" ", value)
    if not re.search(r"\d", bare) or not _NUMERIC_VALUE.match(bare):
        return None
    return value, re.sub(r"\s*([/^])\s*", r"\1", unit)


def same_unit(a: str, b: str) -> bool:
    """Whether two unit strings name the same unit (case, spaces and a plural ``s`` ignored).

    >>> same_unit("km/h", "km / h"), same_unit("cm", "cms"), same_unit("m/s", "km/h")
    (True, True, False)
    """

    def key(u: str) -> str:
        return "/".join(w.rstrip("s") if len(w) > 2 else w for w in u.replace(" ", "").lower().split("/"))

    return key(a) == key(b)


def is_no_solution(answer: str) -> bool:
    r"""Whether an answer says that there is no solution: ``no real solution``, ``\text{None}``, ``\emptyset``, ...

    >>> is_no_solution(r"\text{no real solutions}"), is_no_solution(r"\varnothing"), is_no_solution("0")
    (True, True, False)
    """
    s = _plain(normalize_answer(answer)).strip(" .").lower()
    return bool(_NO_SOLUTION.match(s))


def unverifiable_reason(answer: str) -> str | None:
    r"""Why the checker cannot verify a gold answer (``prose``, ``several values in a sentence``), or ``None``.

    Values with units and "no solution" answers are verifiable (the checker handles them); a single word such as
    ``\text{odd}`` is compared as a string. Flagged: several values joined by "and"/"or" in text, and answers with
    two or more words of prose.

    >>> unverifiable_reason("12 km/h and 15 km/h"), unverifiable_reason("no real solution")
    ('several values in a sentence', None)
    >>> unverifiable_reason(r"\text{The sequence diverges}"), unverifiable_reason(r"\frac{1}{2}")
    ('prose', None)
    """
    s = join_enumeration(normalize_answer(answer))
    forms = split_alternatives(s)
    if len(forms) > 1:  # "0.09 \text{ OR } \frac{9}{100}": equivalent forms, each checked on its own
        return unverifiable_alternatives(forms)
    if not s or is_no_solution(s) or split_unit(s) is not None:
        return None
    plain = _ENV.sub(" ", _plain(s))
    pieces = [p for p in _CONNECTOR.split(plain) if p.strip(" ,.;")]
    if len(pieces) >= 2:
        return "several values in a sentence"
    texts = " ".join(m.group(1) for m in _TEXT_CMD.finditer(s))
    words = re.findall(r"[A-Za-z]{2,}", texts) + _LOWER_WORD.findall(_ENV.sub(" ", _TEXT_CMD.sub(" ", s)))
    words = [w for w in words if w.lower() not in UNIT_WORDS | _MATH_WORDS]
    return "prose" if len(words) >= 2 else None


_OXFORD_AND = re.compile(r",\s*(?:\\text\s*\{\s*and\s*\}|and)\s*|\s*\\text\s*\{\s*,\s*and\s*\}\s*")


def join_enumeration(answer: str) -> str:
    r"""An enumeration written with a serial comma, as a plain comma list: ``2, 3, 	ext{ and } 4`` -> ``2, 3, 4``.

    Only "a, b, and c" (a comma before "and") is an enumeration; "9 and -7" or "12 km/h and 15 km/h" stay as
    they are (``unverifiable_reason`` flags them).

    >>> join_enumeration(r"2, 3, \text{ and } 4"), join_enumeration(r"6, 8\text{, and }10")
    ('2, 3, 4', '6, 8, 10')
    >>> join_enumeration("9 and -7")
    '9 and -7'
    """
    if "and" not in answer or "," not in answer:
        return answer
    return _OXFORD_AND.sub(", ", answer).strip()


def split_alternatives(answer: str) -> list[str]:
    r"""A gold written as equivalent forms joined by an upper-case ``OR`` (DeepScaleR's convention), as a list.

    Lower-case "or" joins *different* values (two roots) and is not split.

    >>> split_alternatives(r"0.09 \text{ OR } \frac{9}{100}"), split_alternatives("4 or -1")
    (['0.09', '\\frac{9}{100}'], ['4 or -1'])
    """
    parts = [p.strip() for p in _ALTERNATIVES.split(answer) if p.strip()]
    return parts if len(parts) > 1 else [answer]


def unverifiable_alternatives(alternatives: list[str] | tuple[str, ...]) -> str | None:
    """``unverifiable_reason`` of a problem's gold answers: a reason only when *no* alternative is verifiable."""
    reasons = [unverifiable_reason(a) for a in alternatives or ()]
    return reasons[0] if reasons and all(reasons) else None


def unbalanced_reason(raw: Any, alternatives: list[str] | tuple[str, ...]) -> str | None:
    r"""Why a gold answer cannot be parsed at all: an unclosed ``\boxed{``, or braces that do not balance.

    Such a gold makes every completion look wrong (the problem looks hard to scoring and selection); ingest
    quarantines it as ``unparseable_answer``. Escaped braces (``\{``, ``\}``) do not count.

    >>> unbalanced_reason(r"\boxed{6", ["\\boxed{6"]), unbalanced_reason("}", ["}"]), unbalanced_reason("6", ["6"])
    ('unclosed \\boxed{', 'unbalanced braces', None)
    """
    texts = [raw] if isinstance(raw, str) else []
    texts += [a for a in alternatives or () if isinstance(a, str)]
    for text in texts:
        if any(cmd in text for cmd in _BOX_CMDS) and not find_boxed(text) and "{" in text:
            return "unclosed \\boxed{"
    for text in alternatives or ():
        depth = 0
        for c in re.sub(r"\\[{}]", "", text):
            depth += 1 if c == "{" else -1 if c == "}" else 0
            if depth < 0:
                break
        if depth != 0:
            return "unbalanced braces"
    return None
