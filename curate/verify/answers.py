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
