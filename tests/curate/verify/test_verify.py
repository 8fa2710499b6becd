r"""The answer checker (``curate.verify``), its worker pool and ``curate verify``: real math-verify, real processes.

Hand-checked cases come from the gold formats listed in shared/data/ANALYSIS.md §3; adversarial completions must come
back within the bound and never ``correct``. Run: ``.venv/bin/pytest tests/curate/verify/test_verify.py -q``.
"""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

from curate.verify import checker as verify
from curate.verify import fastpath
from curate.verify import numeric as verify_numeric
from curate.verify.checker import VerifyConfig, check, check_batch, equivalent_batch, extract_answer
from curate.verify.pool import Pool


FAST = VerifyConfig(parse_timeout_s=1, verify_timeout_s=1, item_timeout_s=10.0)  # for inputs meant to time out
PATIENT = VerifyConfig(
    parse_timeout_s=30, verify_timeout_s=30, item_timeout_s=120.0
)  # a busy CI box is not a timeout (the first LaTeX parse of a process compiles the grammar: 5 s timed out at load 3)


# --------------------------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"so \boxed{\frac{1}{2}} hence \boxed{ \dfrac{1}{2} }", (r"\frac{1}{2}", "boxed")),
        (r"\boxed{\left(3, \frac{\pi}{2}\right)}", (r"\left(3, \frac{\pi}{2}\right)", "boxed")),
        (r"<think>it is \boxed{7}</think>The answer is \boxed{8}.", ("8", "boxed")),
        (r"<think>it is \boxed{7} and I keep going", (None, "unclosed_think")),
        ("Natalia sold 48/2 = 24 clips.\n#### 1,080", ("1080", "hash")),
        ("She makes 9 * 2 = $18\nA: 18", ("18", "answer_line")),
        ("Thus the answer is $\\frac{3}{4}$. Done.", (r"\frac{3}{4}", "answer_is")),
        ("The answer is 18 dollars.", ("18", "answer_is")),
        ("Final Answer: The final answer is $8$. I hope it is correct.", ("8", "answer_is")),
        (r"We need 4x + \boxed{\phantom{2}} so the answer is \boxed{4}.", ("4", "boxed")),
        (r"either \boxed{3} or \boxed{x = 3}", ("x = 3", "boxed")),
        (r"either \boxed{3} or \boxed{4}", ("4", "hedged")),
        (r"\boxed{\frac{1}{2", (None, "no_answer")),
        ("I think it is 12", (None, "no_answer")),
        ("#### Step 1\nwe add\n#### Step 2\nso 5", (None, "no_answer")),  # markdown headings are not answers
        ("**Answer:** **18**", ("18", "answer_line")),
        ("a: the side\nb: 4", (None, "no_answer")),
        ("a\x00b \\boxed{1}", (None, "invalid_chars")),
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


def test_extract_answer_ignores_prompt_echo_and_bounds_size():
    prompt = "What is 2+3? For example, 1+1 gives \\boxed{2}."
    assert extract_answer(prompt + "\nLet me think.", prompt=prompt) == (None, "no_answer")
    assert extract_answer(prompt + "\nSo \\boxed{5}.", prompt=prompt) == ("5", "boxed")
    assert extract_answer("x" * 300_000 + "\\boxed{5}") == (None, "too_long")
    assert extract_answer("no tag \\boxed{5}", VerifyConfig(require_think=True)) == (None, "no_think")


# --------------------------------------------------------------------------------------------------- hand-checked
# (gold, a correct completion, a wrong completion): the formats of ANALYSIS.md §3.
FORMATS = {
    "integer": ("18", "A: 18", "A: 19"),
    "thousands": ("#### 1,080", "so \\boxed{1080}", "\\boxed{1008}"),
    "zero_padded": ("097", "\\boxed{97}", "\\boxed{79}"),
    "amc_float": (27.0, "\\boxed{27}", "\\boxed{27.5}"),
    "dfrac": ("\\dfrac{14}{3}", "\\boxed{\\frac{28}{6}}", "\\boxed{\\frac{3}{14}}"),
    "interval": ("(-\\infty, -1) \\cup (4, \\infty)", "\\boxed{(-\\infty,-1)\\cup(4,\\infty)}", "\\boxed{(-1, 4)}"),
    "tuple": ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\pi/2)}", "\\boxed{(\\frac{\\pi}{2}, 3)}"),
    "set": ("-71, -27, -11, 9", "\\boxed{9, -11, -27, -71}", "\\boxed{-71, -27, 9}"),
    "pm": ("1 \\pm \\sqrt{19}", "\\boxed{1+\\sqrt{19}, 1-\\sqrt{19}}", "\\boxed{1+\\sqrt{19}}"),
    "matrix": (
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}",
        "\\boxed{\\begin{pmatrix}2\\\\1\\end{pmatrix}}",
    ),
    "degrees": ("30^\\circ", "\\boxed{30}", "\\boxed{60^\\circ}"),
    "units": ("10\\text{ cm}", "\\boxed{10}", "\\boxed{12 \\text{ cm}}"),
    "percent": ("50\\%", "\\boxed{50\\%}", "\\boxed{25\\%}"),
    "text": ("\\text{odd}", "\\boxed{\\text{odd}}", "\\boxed{\\text{even}}"),
    "choice": ("\\text{(C)}", "\\boxed{C}", "\\boxed{D}"),
    "equation": ("x=3", "\\boxed{3}", "\\boxed{x=4}"),
    "sqrt": ("2\\sqrt{5}", "\\boxed{\\sqrt{20}}", "\\boxed{2\\sqrt{3}}"),
    "minerva_alternatives": (["6630.65\n", "6630"], "\\boxed{6630}", "\\boxed{6600}"),
    "dollar_wrapped": ("$\\frac{24}5$", "\\boxed{4.8}", "\\boxed{4.9}"),
}


@pytest.fixture(scope="module")
def format_verdicts():
    names = list(FORMATS)
    golds = [FORMATS[n][0] for n in names] * 2
    completions = [FORMATS[n][1] for n in names] + [FORMATS[n][2] for n in names]
    verdicts = check_batch(completions, golds, PATIENT)
    return {n: (verdicts[i], verdicts[i + len(names)]) for i, n in enumerate(names)}


@pytest.mark.parametrize("name", list(FORMATS))
def test_gold_formats(format_verdicts, name):
    right, wrong = format_verdicts[name]
    assert right.verdict == "correct", right
    assert wrong.verdict == "wrong", wrong
    assert not wrong.correct and right.correct


def test_check_in_main_thread_matches_batch(format_verdicts):
    gold, right, wrong = FORMATS["interval"]  # needs math-verify: runs in this process
    assert check(right, gold, PATIENT) == format_verdicts["interval"][0]
    assert check(wrong, gold, PATIENT) == format_verdicts["interval"][1]
    assert check(wrong, gold, PATIENT).detail == "math_verify"


# (gold, candidate): the numeric fast path must decide these, and exactly as math-verify does.
NUMERIC = [
    ("\\frac{1}{2}", "0.5"),
    ("2\\sqrt{5}", "\\sqrt{20}"),
    ("(8,-3)", "(9,-3)"),
    ("(8,-3)", "(8, -3.0)"),
    ("(8,-3)", "(-3, 8)"),
    ("-71, -27, -11, 9", "9, -11, -27, -71"),
    ("-71, -27, -11, 9", "9, -11, -27, -72"),
    ("2\\frac{1}{2}", "\\frac{5}{2}"),
    ("3\\frac{\\pi}{2}", "\\frac{3\\pi}{2}"),
    ("\\frac12", "0.5"),
    ("\\sqrt[3]{8}", "2"),
    ("10^{-3}", "0.001"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("0.333", "\\frac{1}{3}"),
    ("\\pi", "3.14"),
    ("\\frac{24}{5}", "4.8"),
    ("\\frac{1}{3}", "\\frac{2}{3}"),
    ("2^{10}", "1024"),
    ("-\\frac{2}{3}", "\\frac{-2}{3}"),
]


def test_numeric_fast_path_agrees_with_math_verify():
    for gold, cand in NUMERIC:
        fast = verify_numeric.compare((gold,), cand)
        slow, _ = verify._judge(((gold,), cand, False), PATIENT, {})  # math-verify itself, in this process
        assert fast == slow, (gold, cand, fast, slow)
    # Too close to call, or not numeric: left to math-verify.
    for gold, cand in [("\\frac{2}{3}", "0.666667"), ("x+1", "1+x"), ("50\\%", "0.5"), ("2^34", "2^{34}")]:
        assert verify_numeric.compare((gold,), cand) is None


# (gold, candidate): the fast paths past plain numbers (assignments, expressions in variables, percent, degrees,
# ratios, based numbers, matrices, sets, intervals, ln, e, factorials, binomials) must decide these like math-verify.
FORMS = [
    ("3x-2", "2x-2"),
    ("x^4+4", "x^5+4"),
    ("\\frac{10m}{m-10}", "\\frac{20m}{m-10}"),
    ("(k+1, k, k)", "(k+2, k, k)"),
    ("N = 2", "n = 3"),
    ("x = \\frac{1}{2}", "X = 0.5"),
    ("12", "x = 12"),
    ("x = 12", "13"),
    ("13.04\\%", "23.04\\%"),
    ("50\\%", "50.0\\%"),
    ("10^\\circ", "20^{\\circ}"),
    ("16:3", "26:3"),
    ("1:2", "2:4"),
    ("1000111_2", "2000111_2"),
    ("\\begin{pmatrix} 1 & 0 \\\\ 2018 & 1 \\end{pmatrix}", "\\begin{pmatrix} 2 & 0 \\\\ 2018 & 1 \\end{pmatrix}"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} \\frac{2}{2} \\\\ 2 \\end{pmatrix}"),
    ("\\{4,5,7\\}", "\\{7,5,4\\}"),
    ("[-1,2]", "[-2,2]"),
    ("3-\\ln 2", "4-\\ln 2"),
    ("\\ln 4", "2\\ln 2"),
    ("\\frac{1}{e}", "\\frac{2}{e}"),
    ("\\binom{5}{2}", "10"),
    ("(5!)^3", "(6!)^3"),
]
# Left to math-verify: it differs from plain arithmetic here (sets drop repeats, e is Euler's number, an empty
# interval equals every other one), or floats cannot tell (a difference of 10^4 next to 10^60).
TO_MATH_VERIFY = [
    ("5, 5, 7", "5, 7, 7"),
    ("e=5", "e=6"),
    ("(x+1, x)", "(x+2, x)"),
    ("14849-\\frac{9999}{200}\\binom{200}{99}", "24849-\\frac{9999}{200}\\binom{200}{99}"),
    ("10^{17}+1-10^{17}", "0"),
    ("f(x) = x + 1", "f(x) = x + 2"),
    ("\\ln 2x", "\\ln 3x"),
]


def test_form_fast_paths_agree_with_math_verify():
    for gold, cand in FORMS:
        fast, task = verify._screen(f"\\boxed{{{cand}}}", fastpath.gold_forms(gold), PATIENT, None, None)
        assert task is None and fast is not None, (gold, cand)
        slow, _ = verify._judge((fastpath.gold_forms(gold), cand, False), PATIENT, {})
        assert fast.verdict == slow, (gold, cand, fast, slow)
    for gold, cand in TO_MATH_VERIFY:
        fast, task = verify._screen(f"\\boxed{{{cand}}}", fastpath.gold_forms(gold), PATIENT, None, None)
        assert fast is None and task is not None, (gold, cand, fast)
    assert check("\\boxed{5, 7, 7}", "5, 5, 7", PATIENT).verdict == "correct"  # math-verify's sets: {5, 7} both
    assert check("\\boxed{12}", "12 m", PATIENT).verdict == "correct"  # a unit is not a variable m


def test_truncation_rule_and_gold_problems():
    assert check("I was still computing 3+", "7", finish_reason="length").verdict == "truncated"
    graded = check("\\boxed{7} and then I kept", "7", finish_reason="length")  # an answer was given: graded
    assert graded.verdict == "correct"
    assert check("\\boxed{7}", "").detail == verify.GOLD_UNPARSEABLE
    assert verify.reward_of(graded) == 1.0
    assert verify.reward_of(check("\\boxed{8}", "7"), VerifyConfig(reward_wrong=-1.0)) == -1.0


def test_equivalent_batch_on_conflicting_duplicates():
    pairs = [
        ("$2\\sqrt{5}$", "2\\sqrt{5}"),
        ("$\\frac{24}5$", "\\frac{24}{5}"),
        ("97", "097"),
        ("\\mathbf{2340}", "2340"),
        ("0.5", "\\frac{1}{2}"),
        ("25", "20"),
        ("0", "2"),
        ("8181", "9000"),
        ("\\frac{1}{2}", "\\frac{2}{3}"),
    ]
    assert equivalent_batch(pairs, PATIENT) == [True] * 5 + [False] * 4


# --------------------------------------------------------------------------------------------------- untrusted input
ADVERSARIAL = {
    "huge_exponent": "so \\boxed{9^{9^{9^9}}}",
    "nested_braces": "\\boxed{" + "{" * 10_000 + "5" + "}" * 10_000 + "}",
    "five_megabytes": "5 " * 2_500_000 + "\\boxed{5}",
    "unbalanced": "\\boxed{\\frac{5}{1}" + "{" * 500,
    "nul_bytes": "\x00\\boxed{5}\x00",
    "hedge": "\\boxed{1} \\boxed{2} \\boxed{3} \\boxed{4} \\boxed{5}",
    "many_candidates": " ".join(f"The answer is {i}." for i in range(100_000)),
    "prompt_echo": "What is 2+3? Example: \\boxed{5}",
}


def test_adversarial_completions_are_bounded_and_never_correct():
    names = list(ADVERSARIAL)
    prompts = ["What is 2+3? Example: \\boxed{5}"] * len(names)
    t0 = time.monotonic()
    verdicts = check_batch([ADVERSARIAL[n] for n in names], ["5"] * len(names), FAST, prompts=prompts)
    assert time.monotonic() - t0 < 30
    got = {n: (v.verdict, v.detail) for n, v in zip(names, verdicts, strict=True)}
    assert not any(v.correct for v in verdicts), got
    assert got["huge_exponent"][0] in ("timeout", "wrong")
    assert got["hedge"] == ("wrong", "hedged")
    assert got["prompt_echo"] == ("no_answer", "no_answer")
    assert got["five_megabytes"] == got["many_candidates"] == ("unparseable", "too_long")


def test_checks_from_threads_keep_their_timeouts():
    jobs = [
        ("\\boxed{10^{10^{10}}}", "5", VerifyConfig(parse_timeout_s=1, verify_timeout_s=1, item_timeout_s=5.0)),
        ("\\boxed{\\frac{2}{4}}", "0.5", PATIENT),
        ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", PATIENT),
    ]
    t0 = time.monotonic()
    with ThreadPoolExecutor(3) as ex:
        results = list(ex.map(lambda job: check(*job), jobs))
    assert time.monotonic() - t0 < 20
    assert results[0].verdict == "timeout"  # the CPU-time limit fired: in a worker, not this thread
    assert [r.verdict for r in results[1:]] == ["correct", "correct"]


@pytest.mark.slow
def test_a_hung_worker_is_killed_and_the_batch_survives():
    # the CPU-time limits (10 s) are longer than the per-item bound (3 s): the parent must kill the worker. Its
    # detail says which bound ended the item ("parse" / "verify" for the worker's own limits); no wall-clock bound
    # here: the 3 s are the worker's time on a CPU, so at load 8 the kill comes later by the wall clock, rightly.
    cfg = VerifyConfig(parse_timeout_s=10, verify_timeout_s=10, item_timeout_s=3.0)
    completions = ["\\boxed{\\frac{3}{6}}", "\\boxed{10^{10^{10}}}", "\\boxed{\\sqrt{4}}", "\\boxed{2^{-1}}"]
    golds = ["0.5", "7", "2", "0.5"]
    verdicts = check_batch(completions, golds, cfg, workers=2)
    assert verdicts[1].verdict == "timeout" and verdicts[1].detail == "killed after 3s"
    assert [verdicts[i].verdict for i in (0, 2, 3)] == ["correct"] * 3


LOADED = (  # answers only math-verify settles, each 0.05-0.3 CPU-s in a warm worker (sympy caches what it has seen)
    (["\\boxed{x^2+2x+1}", "\\boxed{\\frac{x^2-1}{x-1}}", "\\boxed{\\sin(\\pi/3)}", "\\boxed{(x-1)^3}"],
     ["(x+1)^2", "x+1", "\\frac{\\sqrt{3}}{2}", "x^3-3x^2+3x-1"])
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/schedstat").is_file(), reason="needs Linux's per-process CPU wait figures")
def test_a_verdict_does_not_depend_on_the_load_of_the_machine():
    """The worker gets a thirteenth of a core (twelve busy loops pinned to its core, as on a 2-core box at load 20+),
    and still gives each answer its verdict. Before, every time bound was wall-clock (math-verify's SIGALRM, the
    parent's kill), so under load a right answer came back ``timeout`` (issue 38.17: a resumed rollout's verdicts
    differed from an uninterrupted run's)."""
    import subprocess

    cfg = VerifyConfig(parse_timeout_s=1, verify_timeout_s=1, item_timeout_s=2.0, workers=1)
    verify.shutdown()
    warm = check_batch(["\\boxed{2x+2}"], ["2(x+1)"], cfg)  # a worker with its LaTeX grammar compiled
    assert warm[0].verdict == "correct"
    (worker,) = verify._POOL.workers
    core = min(os.sched_getaffinity(0))
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(12)]
    try:
        for pid in [worker.proc.pid] + [p.pid for p in loops]:
            os.sched_setaffinity(pid, {core})
        completions, golds = LOADED
        loaded = [(v.verdict, v.detail) for v in check_batch(completions, golds, cfg)]
    finally:
        for p in loops:
            p.kill()
            p.wait()
        verify.shutdown()
    assert loaded == [("correct", "math_verify")] * len(golds), loaded


# The generic pool with a handler that hangs or dies on command: importable module-level functions (spawn).
def _init():
    return None


def _handle(state, cfg, item):
    if item == "hang":
        time.sleep(60)
    if item == "die":
        os._exit(3)
    return ("ok", item * 2)


@pytest.mark.slow
def test_pool_replaces_dead_and_hung_workers():
    pool = Pool(2, _init, _handle)
    try:
        items = ["a", "hang", "b", "die", "c", "d", "e"]
        done = []
        results = pool.run(items, None, item_timeout_s=1.5, chunk_size=3, on_done=done.append)
        assert results == [
            ("ok", "aa"),
            ("timeout", "killed after 1.5s"),
            ("ok", "bb"),
            ("error", "worker died"),
            ("ok", "cc"),
            ("ok", "dd"),
            ("ok", "ee"),
        ]
        assert sorted(done) == list(range(len(items)))
        assert len(pool.workers) == 2 and all(w.proc.is_alive() for w in pool.workers)
        assert pool.run(["f"], None, item_timeout_s=5) == [("ok", "ff")]  # the replacements work
        pool.workers[0].proc.kill()  # a worker killed while idle is replaced on the next run
        pool.workers[0].proc.join()
        assert pool.run(["g", "h"], None, item_timeout_s=30) == [("ok", "gg"), ("ok", "hh")]
    finally:
        pool.close()


CTRL_C = """
import time
if __name__ == "__main__":
    from curate.verify.checker import check_batch
    check_batch(["\\\\boxed{x^2+2x+1}"], ["(x+1)^2"])  # only math-verify settles it: the worker pool starts
    try:
        print("ready", flush=True)
        time.sleep(120)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        time.sleep(2)  # a caller that cleans up after Ctrl-C: its workers are still there meanwhile
"""


@pytest.mark.slow
def test_ctrl_c_leaves_the_workers_quiet(tmp_path):
    """Ctrl-C reaches the whole process group: the checker's workers ignore it and the caller handles it, so the
    user sees the caller's one line, not a KeyboardInterrupt traceback per worker (issue 30.7: 35 lines)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "main.py"
    script.write_text(CTRL_C)
    repo = Path(verify.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=env)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.strip() == "interrupted", out


def test_only_curate_verify_imports_math_verify():
    repo = Path(verify.__file__).resolve().parents[2]
    importers = sorted(
        str(p.relative_to(repo))
        for package in ("curate", "training", "flows")
        for p in (repo / package).rglob("*.py")
        if re.search(r"^\s*(from|import)\s+math_verify\b", p.read_text(encoding="utf-8"), re.M)
    )
    assert importers == ["curate/verify/checker.py"]


# --------------------------------------------------------------------------------------------------- CLI
ROWS = [
    {"answer": "18", "completion": "A: 18", "ok": True},
    {"answer": ["6630.65", "6630"], "completion": "so \\boxed{6630}", "ok": True},
    {"answer": "\\frac{1}{2}", "completion": "\\boxed{0.5}", "ok": False},
    {"answer": "3", "completion": "no idea", "ok": False},
]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_cli_verify_writes_verdicts_and_summary(tmp_path, monkeypatch, capsys, fmt):
    from curate import cli  # imported here: spawned pool workers re-import this module, keep it light

    monkeypatch.chdir(tmp_path)
    src = tmp_path / f"pairs.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    else:
        as_lists = [{**r, "answer": r["answer"] if isinstance(r["answer"], list) else [r["answer"]]} for r in ROWS]
        pl.DataFrame(as_lists).write_parquet(src)  # a list column of alternatives
    assert cli.main(["verify", str(src), "--label-col", "ok", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 4
    assert summary["verdicts"]["correct"] == 3 and summary["verdicts"]["no_answer"] == 1
    assert summary["accuracy"] == 0.75
    assert summary["agreement"] == {
        "labelled": 4,
        "agree": 3,
        "rate": 0.75,
        "ours_correct_label_wrong": 1,
        "ours_wrong_label_correct": 0,
    }
    out = pl.read_parquet(tmp_path / "pairs.verified.parquet")
    assert out["verdict"].to_list() == ["correct", "correct", "correct", "no_answer"]
    assert out["extracted_answer"].to_list() == ["18", "6630", "0.5", None]
    assert out.columns[:3] == ["answer", "completion", "ok"]


def test_cli_verify_explodes_samples_and_reads_struct_fields(tmp_path, monkeypatch, capsys):
    from curate import cli

    monkeypatch.chdir(tmp_path)  # the default --out lands in the current folder
    src = tmp_path / "nested.jsonl"
    rows = [{"gt": "4", "code": ["\\boxed{4}", "\\boxed{5}"], "m": {"solution": "A: 4"}}]
    src.write_text(json.dumps(rows[0]) + "\n")
    dst = tmp_path / "o.parquet"
    assert cli.main(["verify", str(src), "--gold-col", "gt", "--completion-col", "code", "--out", str(dst)]) == 0
    assert pl.read_parquet(dst)["correct"].to_list() == [True, False]
    assert cli.main(["verify", str(src), "--gold-col", "gt", "--completion-col", "m.solution", "--json"]) == 0
    assert "rows" in capsys.readouterr().out
    assert (tmp_path / "nested.verified.parquet").is_file()
    assert cli.main(["verify", str(src), "--completion-col", "missing"]) == 2


def test_real_gsm8k_labels_agree(shared_data):
    path = shared_data / "gsm8k" / "example_model_solutions.jsonl"
    df = pl.read_ndjson(path, n_rows=300)
    from curate.cli.verify import verify_frame

    _, summary = verify_frame(
        df, "ground_truth", "175b_verification.solution", label_col="175b_verification.is_correct"
    )
    assert summary["agreement"]["rate"] >= 0.99
