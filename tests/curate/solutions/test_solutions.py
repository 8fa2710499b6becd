r"""The solutions stage (issue 13): K distinct verified solutions per problem, CoScale-RL pools, the SFT export.

- Ledger candidates with duplicates, near-duplicates, stale ``correct`` flags, truncations, answer-only and
  over-long completions: each dropped with its reason, the rest kept and exported exactly as ``prompts.sft_row``.
- The teacher against a real OpenAI-compatible HTTP server on 127.0.0.1 (stdlib ``http.server``), scripted: it
  answers "Compute a + b." with one of a few phrasings (one an exact repeat, one a bare ``\boxed{}``), and answers
  wrongly when a is odd, so those problems spend their budget and land in ``failed``.
- A SIGKILL during the teacher loop (a subprocess killed after its first shards) resumes without duplicate ledger
  keys and ends where an uninterrupted run ends.
- The generator's reference solutions are distinct under the stage's own rule and all verify.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
import pytest

from curate import io, prompts, verify
from curate import schema as S
from curate.ingest import generate
from curate.rollout import ledger, stats
from curate.rollout.backends import OpenAIOptions
from curate.solutions import distinct as D
from curate.solutions import stage as st
from curate.solutions.config import TeacherConfig
from tests.conftest import REPO
from tests.tiny_model import problems_frame


# --------------------------------------------------------------------------------------------------- helpers
def ledger_frame(rows: list[dict], model: str = "student") -> pl.DataFrame:
    """schema.ROLLOUTS rows from a few fields (the rest defaulted as a rollout would write them)."""
    full = []
    for i, r in enumerate(rows):
        full.append(
            {
                S.MODEL: model,
                S.SAMPLE_IDX: i,
                S.FINISH_REASON: "stop",
                S.CORRECT: True,
                S.VERDICT: "correct",
                S.BACKEND: "hf",
                S.RUN_ID: "r-test",
                **r,
            }
        )
    return pl.DataFrame([{c: r.get(c) for c in S.ROLLOUTS} for r in full], schema=S.ROLLOUTS)


def write_part(ws: io.Workspace, pool: str, model: str, name: str, rows: list[dict]) -> None:
    io.write_parquet(ledger_frame(rows, model), ws.ledger_dir(pool, model) / f"part-{name}.parquet", S.ROLLOUTS)


def write_pool(ws: io.Workspace, pool: str, problems: list[tuple[str, str]], solutions: dict | None = None) -> None:
    df = problems_frame(problems)
    if solutions:
        df = df.with_columns(pl.col(S.PROBLEM).replace_strict(solutions, default=None).alias(S.SOLUTION))
    io.write_parquet(df, ws.table(pool, "problems"), S.PROBLEMS)


GOOD = "We add the two numbers: 12 plus 7 makes 19. So the answer is \\boxed{19}."
OTHER = "Start from 12 and count up by 7 to reach 19. Therefore \\boxed{19}."
THIRD = "Let x be the sum. Evaluating 12 + 7 carefully gives x = 19, hence \\boxed{19}."


# --------------------------------------------------------------------------------------------------- pure parts
def test_distinctness_rule_and_solution_ids():
    annotated = "Natalia sold 48/2 = <<48/2=24>>24 clips.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    plain = "Natalia  sold 48/2 = 24 clips. She sold 48+24 = 72 clips. #### 72"
    assert D.solution_id("p1", annotated) == D.solution_id("p1", plain) != D.solution_id("p2", plain)
    near = GOOD.replace("the two numbers", "both numbers")
    assert D.DEFAULT_THRESHOLD <= D.similarity(GOOD, near) < 1.0
    assert D.similarity(GOOD, OTHER) < 0.1
    got = D.distinct([GOOD, GOOD.replace(" ", "  "), near, OTHER])
    assert [(m.keep, m.reason, m.similar_to) for m in got] == [
        (True, None, None),
        (False, "duplicate", 0),
        (False, "near_duplicate", 0),
        (True, None, None),
    ]
    assert D.reasoning_words("\\boxed{19}") == 0 and D.reasoning_words(GOOD) >= 10
    assert D.reasoning_words("Janet sells 16 - 3 - 4 = 9 eggs.\n#### 9") == 7  # words before the "####" line


def test_the_answer_starts_where_the_checker_reads_it():
    """One "Answer:" rule (``curate.verify.answers``): a line the checker reads an answer from is where the solution's
    reasoning ends, and a line it does not read ("a: 9", lowercase, is a variable) is reasoning."""
    from curate.verify.checker import extract_answer

    for line, read in (("Answer: 9", True), ("FINAL ANSWER: 9", True), ("A: 9", True), ("a: 9", False)):
        text = f"She sells 16 - 7 = 9 eggs.\n{line}"
        assert (extract_answer(text)[1] == "answer_line") == read
        assert D.answer_position(text) == (text.index(line) if read else len(text))


def test_problem_pools_from_pass_rates_and_budget():
    ids = pl.DataFrame({S.PROBLEM_ID: list("abcdef")})
    kept = pl.DataFrame({S.PROBLEM_ID: ["a", "b", "b", "c", "c", "c", "d", "d", "d"]})
    rates = pl.DataFrame({S.PROBLEM_ID: list("abcde"), S.PASS_RATE: [0.0, 0.04, 0.05, 0.7, 0.71]})
    spent = pl.DataFrame(
        {S.PROBLEM_ID: ["a", "f"], S.TEACHER_SAMPLES: [8, 3]}, schema_overrides={S.TEACHER_SAMPLES: pl.Int32}
    )
    cfg = st.SolutionsConfig(k=3, teacher=TeacherConfig(model="t", budget=8))
    pools = st.problem_pools(ids, kept, rates, spent, cfg)
    assert pools[S.COSCALE_POOL].to_list() == ["failed", "unsolvable", "solvable", "solvable", "solved", "unsolvable"]
    assert pools[S.N_SOLUTIONS].to_list() == [1, 2, 3, 3, 0, 0] and pools[S.TEACHER_SAMPLES].to_list()[0] == 8
    no_teacher = st.problem_pools(ids, kept, rates, spent, st.SolutionsConfig(k=3))
    assert no_teacher[S.COSCALE_POOL][0] == "unsolvable"  # "failed" needs a teacher budget
    with pytest.raises(st.config_mod.ConfigError, match="student"):
        st.SolutionsConfig(student="m", teacher=TeacherConfig(model="m"))


def test_generator_reference_solutions_are_distinct_and_verify():
    problems = [
        generate.generate_problem(i, seed=3, family=fam, level=lvl)
        for i in range(6)
        for fam in generate.FAMILIES
        for lvl in (1, 3, 5)
    ]
    texts, golds = [], []
    for p in problems:
        sols = p["solutions"]
        assert len(sols) == 4 and sols[0] == p["solution"]
        assert all(m.keep for m in D.distinct(sols)), p  # K distinct under the stage's own rule
        assert max(D.similarity(a, b) for a, b in itertools.combinations(sols, 2)) < D.DEFAULT_THRESHOLD
        assert all(D.reasoning_words(s) >= 5 for s in sols)
        texts += sols
        golds += [p["answer"]] * len(sols)
    verdicts = verify.check_batch(texts, golds, workers=1)
    assert all(v.correct for v in verdicts), [t for t, v in zip(texts, verdicts, strict=True) if not v.correct][:2]


# --------------------------------------------------------------------------------------------------- ledger path
def test_ledger_solutions_filtered_deduplicated_exported(ws):
    problems = [("Compute 12 + 7.", "19"), ("Compute 5 + 5.", "10"), ("Compute 3 + 4.", "7")]
    p19, p10, p7 = (S.problem_id(q) for q, _ in problems)
    write_pool(ws, "p", problems, solutions={"Compute 3 + 4.": "Three plus four is seven in total.\n#### 7"})
    near = GOOD.replace("the two numbers", "both numbers")
    write_part(
        ws,
        "p",
        "student",
        "a",
        [
            {S.PROBLEM_ID: p19, S.COMPLETION: GOOD},
            {S.PROBLEM_ID: p19, S.COMPLETION: GOOD.replace(". So", ".\n\nSo")},  # duplicate
            {S.PROBLEM_ID: p19, S.COMPLETION: near},  # near-duplicate
            {S.PROBLEM_ID: p19, S.COMPLETION: OTHER},
            {S.PROBLEM_ID: p19, S.COMPLETION: "So the sum is 12 + 7 = 18, giving \\boxed{18}."},  # stale flag
            {S.PROBLEM_ID: p19, S.COMPLETION: "Let me think. " * 60 + THIRD},  # over max_chars
            {S.PROBLEM_ID: p19, S.COMPLETION: THIRD, S.FINISH_REASON: "length"},  # truncated
            {S.PROBLEM_ID: p19, S.COMPLETION: "\\boxed{19}"},  # answer leak
            {S.PROBLEM_ID: p19, S.COMPLETION: "I guess 20", S.CORRECT: False},  # not a candidate at all
            {S.PROBLEM_ID: p10, S.COMPLETION: "5 + 5 = 10 because five and five make ten. \\boxed{10}"},
            {S.PROBLEM_ID: p10, S.COMPLETION: "x", S.CORRECT: False},
        ],
    )
    write_part(  # an imported generation (GSM8K style answer line): rechecked and boxed for SFT
        ws,
        "p",
        "gsm8k/x",
        "b",
        [{S.PROBLEM_ID: p19, S.COMPLETION: THIRD.replace(", hence \\boxed{19}.", ".\nA: 19"), S.BACKEND: "import"}],
    )
    cfg = st.SolutionsConfig(k=3, max_chars=400, student="student", verify_workers=1)
    result = st.solutions(ws, "p", cfg)
    kept = io.read_parquet(ws.solution_set_dir("p", "p") / "solutions.parquet", S.SOLUTIONS)
    drops = io.read_parquet(ws.solution_set_dir("p", "p") / "solutions_quarantine.parquet", S.SOLUTIONS_QUARANTINE)
    by_problem = kept.group_by(S.PROBLEM_ID).agg(pl.col(S.TEXT), pl.col(S.ORIGIN)).rows_by_key(S.PROBLEM_ID)
    texts19, origins19 = by_problem[p19][0]
    assert origins19 == ["imported", "ledger", "ledger"] and texts19[1:] == [GOOD, OTHER]
    assert texts19[0].endswith("A: 19\n\nThe final answer is $\\boxed{19}$.")  # boxed line appended
    reasons = dict(zip(drops[S.TEXT].to_list(), drops[S.DROP_REASON].to_list(), strict=True))
    assert reasons[near] == "near_duplicate" and reasons["\\boxed{19}"] == "answer_leak"
    assert reasons[GOOD.replace(". So", ".\n\nSo")] == "duplicate"
    assert reasons["So the sum is 12 + 7 = 18, giving \\boxed{18}."] == "wrong_answer"
    assert reasons[THIRD] == "truncated" and reasons["Let me think. " * 60 + THIRD] == "too_long"
    assert "I guess 20" not in reasons and drops.height == 6
    dup = drops.filter(pl.col(S.DROP_REASON) == "near_duplicate").row(0, named=True)
    assert dup[S.SIMILAR_TO] == D.solution_id(p19, GOOD) and dup[S.SIMILARITY] >= D.DEFAULT_THRESHOLD
    assert kept[S.SOLUTION_ID].n_unique() == kept.height and kept[S.VERDICT].unique().to_list() == ["correct"]
    s = result.summary
    assert s["solutions_per_problem"] == {"1": 2, "3": 1} and s["problems_with_k"] == 1
    assert s["drops"] == {
        "answer_leak": 1,
        "duplicate": 1,
        "near_duplicate": 1,
        "too_long": 1,
        "truncated": 1,
        "wrong_answer": 1,
    }
    # pools from the student's pass rate: p19 8/9 correct flags (solved), p10 1/2 (solvable), p7 no rows (unsolvable)
    pools = dict(
        io.read_parquet(ws.solution_set_dir("p", "p") / "solution_pools.parquet")
        .select(S.PROBLEM_ID, S.COSCALE_POOL)
        .iter_rows()
    )
    assert pools == {p19: "solved", p10: "solvable", p7: "unsolvable"} and s["pass_rate_source"] == "ledger:student"

    # the export: one row per kept solution (K = 3), prompts exactly as the RL prompts, lineage and card
    out = ws.root / "solutions" / "p"
    sft = pl.read_parquet(out / "sft.parquet")
    assert sft.height == kept.height == 5
    texts = dict(zip(problems_frame(problems)[S.PROBLEM_ID], problems_frame(problems)[S.PROBLEM], strict=True))
    for row in sft.iter_rows(named=True):
        solution = row["completion"][0]["content"]
        assert {k: row[k] for k in ("prompt", "completion")} == prompts.sft_row(texts[row[S.PROBLEM_ID]], solution)
    lineage = json.loads((out / "lineage.json").read_text())
    assert {f["file"] for f in lineage["ledger_files"]} == {
        "rollouts/student/part-a.parquet",
        "rollouts/gsm8k__x/part-b.parquet",
    }
    assert lineage["rows_by_origin"] == {"imported": 1, "ledger": 3, "reference": 1} and lineage["selection"] is None
    assert "K = 3" in (out / "README.md").read_text()
    # no path of this machine: the tables by their place in the workspace (issue 38.13)
    assert str(ws.root) not in (out / "lineage.json").read_text()
    assert lineage["problems"]["path"] == "pools/p/problems.parquet"
    assert lineage["solutions_table"]["path"] == "pools/p/solutions/p/solutions.parquet"

    # re-running is a no-op; a smaller K exports fewer rows from the same table
    before = {
        p: p.stat().st_mtime_ns for p in [ws.solution_set_dir("p", "p") / "solutions.parquet", out / "sft.parquet"]
    }
    again = st.solutions(ws, "p", cfg)
    assert again.skipped and again.summary["kept"] == s["kept"]
    assert {p: p.stat().st_mtime_ns for p in before} == before
    small = st.solutions(ws, "p", st.SolutionsConfig(k=1, max_chars=400, name="k1", verify_workers=1))
    assert pl.read_parquet(ws.root / "solutions" / "k1" / "sft.parquet").height == 3 and not small.skipped


def test_card_states_what_was_checked_and_the_measured_share_of_wrong_answers(ws):
    """``recheck: false`` exports wrong answers: the card must not call them verified or say wrong answers were
    dropped; it gives the measured share (issue 30.5: the demo's card said "verified ... Dropped: wrong answers"
    while 50% of its rows boxed a wrong answer). With the re-check, every row is correct and the card says so. Both
    cards are Hugging Face dataset cards with licence, language and size metadata."""
    from huggingface_hub import DatasetCard

    problems = [("Compute 12 + 7.", "19"), ("Compute 5 + 5.", "10")]
    p19, p10 = (S.problem_id(q) for q, _ in problems)
    write_pool(ws, "p", problems)
    wrong = "So the sum is 12 + 7 = 18, giving \\boxed{18}."
    write_part(ws, "p", "teacher", "a", [
        {S.PROBLEM_ID: p19, S.COMPLETION: GOOD}, {S.PROBLEM_ID: p19, S.COMPLETION: wrong},
        {S.PROBLEM_ID: p10, S.COMPLETION: "5 + 5 = 10 because five and five make ten. \\boxed{10}"},
        {S.PROBLEM_ID: p10, S.COMPLETION: "Five and five: 5 + 5 = 11, so \\boxed{11}."},
    ])  # fmt: skip
    kept = st.solutions(ws, "p", st.SolutionsConfig(k=4, recheck=False, name="raw", verify_workers=1))
    assert kept.summary["kept"] == 4
    card = DatasetCard.load(ws.root / "solutions" / "raw" / "README.md")
    assert "verified SFT solutions" not in card.text and "Dropped: wrong answers" not in card.text
    assert "NOT re-checked" in card.text and "2 of the 4 rows (50.0%) box an answer" in card.text
    assert (card.data.license, card.data.language, card.data.size_categories) == ("unknown", ["en"], ["n<1K"])
    assert "unverified" in card.data.tags
    sft = pl.read_parquet(ws.root / "solutions" / "raw" / "sft.parquet")
    assert sorted(sft[S.VERDICT].to_list()) == ["correct", "correct", "wrong", "wrong"]  # for the model cards
    lineage = json.loads((ws.root / "solutions" / "raw" / "lineage.json").read_text())
    assert lineage["answers"] == {"rechecked": False, "rows": 4, "verdicts": {"correct": 2, "wrong": 2}}

    st.solutions(ws, "p", st.SolutionsConfig(k=4, name="checked", verify_workers=1))
    card = DatasetCard.load(ws.root / "solutions" / "checked" / "README.md")
    assert "verified SFT solutions" in card.text and "2 of the 2 rows box the gold answer" in card.text
    assert "Dropped: wrong answers" in card.text and "None" not in card.text


def test_two_recipes_on_one_pool_keep_their_own_solution_sets(ws, capsys):
    """Issue 38.1: `curate run -r datasets/tiny/raw.yaml` replaced the curated recipe's pool tables (`curate show`
    then reported the raw, unverified set). Each set has its own tables: the curated one is untouched (its re-run
    is skipped), `curate show` lists both, and a third recipe that reuses a set's name for another export is
    refused with one line."""
    from curate import config, pipeline
    from curate.cli import main
    from curate.errors import InputError

    problems = [("Compute 12 + 7.", "19"), ("Compute 5 + 5.", "10")]
    p19, p10 = (S.problem_id(q) for q, _ in problems)
    write_pool(ws, "p", problems)
    write_part(ws, "p", "teacher", "a", [
        {S.PROBLEM_ID: p19, S.COMPLETION: GOOD},
        {S.PROBLEM_ID: p10, S.COMPLETION: "Five and five: 5 + 5 = 11, so \\boxed{11}."},
    ])  # fmt: skip

    def recipe(name: str, solutions: dict) -> config.Recipe:
        return config.recipe_from_mapping(
            {"name": name, "pool": "p", "stages": ["solutions"], "verify": {"workers": 1}, "solutions": solutions}
        )

    curated = recipe("curated", {"k": 1})
    first = pipeline.run_stage("solutions", ws, curated)
    pipeline.run_stage("solutions", ws, recipe("raw", {"k": 1, "recheck": False, "name": "p-raw"}))
    curated_table = ws.solution_set_dir("p", "p") / "solutions.parquet"
    assert io.read_parquet(curated_table, S.SOLUTIONS)[S.PROBLEM_ID].to_list() == [p19]  # the wrong trace is out
    assert io.read_parquet(ws.solution_set_dir("p", "p-raw") / "solutions.parquet").height == 2
    again = pipeline.run_stage("solutions", ws, curated)
    assert again.skipped and again.summary["kept"] == first.summary["kept"] == 1
    lineage = json.loads((ws.root / "solutions" / "p" / "lineage.json").read_text())
    assert lineage["solutions_table"]["path"] == str(curated_table.relative_to(ws.root))  # the set's own table

    capsys.readouterr()
    assert main(["show", "p", "--json"]) == 0
    shown = {s["set"]: s["solutions"] for s in json.loads(capsys.readouterr().out)["solution_sets"]}
    assert shown == {"p": 1, "p-raw": 2}

    elsewhere = recipe("other", {"k": 1, "name": "p-raw", "export": str(ws.root / "elsewhere")})
    with pytest.raises(InputError, match=r"solution set 'p-raw' of pool 'p' was exported to .*solutions.name"):
        pipeline.run_stage("solutions", ws, elsewhere)
    assert io.read_parquet(ws.solution_set_dir("p", "p-raw") / "solutions.parquet").height == 2  # untouched


def test_selection_scope_cli_and_show(ws, capsys):
    from curate.cli import main

    assert main(["ingest", "gen://mixed?n=40&seed=0", "--pool", "g"]) == 0
    pool = pl.read_parquet(ws.table("g", "problems"))
    ids = pool[S.PROBLEM_ID].sort().head(10)
    sel = ws.selection_dir("few")
    io.write_parquet(pl.DataFrame({S.PROBLEM_ID: ids}), sel / "selection.parquet")
    capsys.readouterr()
    assert main(["solutions", "--pool", "g", "--selection", "few", "--k", "2", "--workers", "1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    summary = payload["summary"]
    assert summary["problems"] == 10 and summary["excluded"]["not_selected"] == pool.height - 10
    assert summary["solutions_per_problem"] == {"4": 10} and summary["candidates"] == {"reference": 40}
    sft = pl.read_parquet(ws.root / "solutions" / "few" / "sft.parquet")
    assert sft.height == 20 and sft[S.PROBLEM_ID].n_unique() == 10  # the first K = 2 of each
    assert main(["show", "g", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    (few,) = shown["solution_sets"]
    assert (
        few["set"] == "few"
        and few["solutions_per_problem"] == {"4": 10}
        and few["coscale_pools"] == {"unsolvable": 10}
    )
    assert main(["solutions", "--pool", "g", "--selection", "nope"]) == 2
    assert "not found" in capsys.readouterr().err

    # the same stage from a recipe (curate run): its section is typed and validated when the recipe loads
    from curate import config, pipeline

    recipe = config.recipe_from_mapping(
        {"name": "r", "pool": "g", "stages": ["solutions"], "verify": {"workers": 1}, "solutions": {"k": 1}}
    )
    pipeline.validate(recipe)
    result = pipeline.run_stage("solutions", ws, recipe)
    assert result.summary["problems"] == pool.height and result.summary["problems_with_k"] == pool.height
    assert pl.read_parquet(ws.root / "solutions" / "g" / "sft.parquet").height == pool.height
    bad = config.recipe_from_mapping({"name": "r", "pool": "g", "stages": ["solutions"], "solutions": {"kk": 1}})
    with pytest.raises(config.ConfigError, match="kk"):
        pipeline.validate(bad)


# --------------------------------------------------------------------------------------------------- teacher
TEMPLATES = (
    "We add the two numbers: {a} plus {b} makes {c}. So the answer is \\boxed{{{c}}}.",
    "Start from {a} and count up by {b} to reach {c}. Therefore \\boxed{{{c}}}.",
    "Let x be the sum. Evaluating {a} + {b} carefully gives x = {c}, hence \\boxed{{{c}}}.",
    "Adding {b} to {a}: first the tens, then the ones, {a} + {b} = {c}. Final: \\boxed{{{c}}}.",
    "We add the two numbers:  {a} plus {b} makes {c}.\nSo the answer is \\boxed{{{c}}}.",  # a repeat of the first
    "\\boxed{{{c}}}",  # an answer without reasoning
)


class Teacher:
    """An OpenAI-compatible chat server on 127.0.0.1 with scripted answers (right when a is even, else wrong)."""

    def __init__(self, delay_s: float = 0.0):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.delay_s = delay_s
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                time.sleep(outer.delay_s)
                data = json.dumps(outer.answer(body)).encode()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @staticmethod
    def answer(body: dict) -> dict:
        a, b = map(int, re.search(r"Compute (\d+) \+ (\d+)\.", body["messages"][-1]["content"]).groups())
        c = a + b if a % 2 == 0 else a + b + 1
        choices = [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": TEMPLATES[(body["seed"] + i) % len(TEMPLATES)].format(a=a, b=b, c=c),
                },
                "finish_reason": "stop",
            }
            for i in range(body["n"])
        ]
        return {
            "object": "chat.completion",
            "choices": choices,
            "usage": {"prompt_tokens": 20, "completion_tokens": 10 * body["n"]},
        }

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


TEACHER_PROBLEMS = [
    (f"Compute {a} + {b}.", str(a + b)) for a, b in ((12, 7), (20, 5), (33, 4), (48, 6), (51, 2), (64, 9))
]


def teacher_cfg(url: str, shard_size: int = 1) -> st.SolutionsConfig:
    teacher = TeacherConfig(
        model="teacher", backend="openai", budget=8, per_round=2, shard_size=shard_size,
        openai=OpenAIOptions(base_url=url, concurrency=2, backoff_s=0.01, timeout_s=30.0),
    )  # fmt: skip
    return st.SolutionsConfig(k=3, teacher=teacher, verify_workers=1)


def raw_keys(ws: io.Workspace, pool: str) -> list[tuple]:
    """Every ledger key in every part file, duplicates included (no dedupe, unlike ledger.read)."""
    files = ledger.files(ws, pool)
    return [k for f in files for k in pl.read_parquet(f, columns=ledger.KEY).iter_rows()]


def test_teacher_fills_to_k_and_spent_budget_fails(ws):
    write_pool(ws, "p", TEACHER_PROBLEMS, solutions={"Compute 12 + 7.": "Twelve and seven: 12 + 7 = 19.\n#### 19"})
    with Teacher() as server:
        result = st.solutions(ws, "p", teacher_cfg(server.url, shard_size=64))
        n_requests = len(server.requests)
        again = st.solutions(ws, "p", teacher_cfg(server.url, shard_size=64))
        assert again.skipped and len(server.requests) == n_requests  # re-running asks the teacher for nothing
    pools = io.read_parquet(ws.solution_set_dir("p", "p") / "solution_pools.parquet", S.SOLUTION_POOLS)
    rows = {S.problem_id(q): q for q, _ in TEACHER_PROBLEMS}
    reached = 0
    for pid, n_sol, spent, pool in pools.select(
        S.PROBLEM_ID, S.N_SOLUTIONS, S.TEACHER_SAMPLES, S.COSCALE_POOL
    ).iter_rows():
        odd = int(re.search(r"Compute (\d+)", rows[pid]).group(1)) % 2 == 1
        if odd:  # the teacher is always wrong here: the whole budget is spent, nothing kept
            assert (n_sol, spent, pool) == (0, 8, "failed"), rows[pid]
        elif n_sol >= 3:  # K reached within the budget; no pass rate known for it: unsolvable
            assert spent <= 8 and pool == "unsolvable", rows[pid]
            reached += 1
        else:  # the scripted teacher repeated itself until the budget ran out
            assert spent == 8 and pool == "failed", rows[pid]
    assert reached >= 3
    keys = raw_keys(ws, "p")
    assert len(keys) == len(set(keys)) == int(pools[S.TEACHER_SAMPLES].sum())
    led = ledger.read(ws, "p", "teacher")
    assert led[S.RUN_ID].str.starts_with("teacher-").all() and set(led[S.BACKEND]) == {"openai"}
    drops = io.read_parquet(ws.solution_set_dir("p", "p") / "solutions_quarantine.parquet")
    assert drops.height and set(drops[S.DROP_REASON]) <= {"duplicate", "answer_leak"}  # the scripted repeats
    s = result.summary
    assert s["coscale_pools"]["failed"] == 6 - reached and s["teacher"]["samples_total"] == len(keys)
    assert s["kept_by_origin"]["reference"] == 1  # the reference counts toward K
    kept = io.read_parquet(ws.solution_set_dir("p", "p") / "solutions.parquet", S.SOLUTIONS)
    assert kept.filter(pl.col(S.ORIGIN) == "teacher")[S.MODEL].unique().to_list() == ["teacher"]
    lineage = json.loads((ws.root / "solutions" / "p" / "lineage.json").read_text())
    assert lineage["teacher"]["run_id"] == st.teacher_run_id(teacher_cfg("x")) and lineage["teacher"]["budget"] == 8
    assert stats.read_stats(ws, "p").filter(pl.col(S.MODEL) == "teacher").height == 6  # stats refreshed


KILL_SCRIPT = """
import sys
from curate.io import Workspace
from curate.solutions import stage as st
from tests.curate.solutions.test_solutions import teacher_cfg

if __name__ == "__main__":
    st.solutions(Workspace.resolve(sys.argv[1]), "p", teacher_cfg(sys.argv[2]))
"""


@pytest.mark.slow
def test_sigkill_during_teacher_loop_resumes_without_duplicates(tmp_path):
    killed, clean = io.Workspace.resolve(tmp_path / "killed"), io.Workspace.resolve(tmp_path / "clean")
    for w in (killed, clean):
        write_pool(w, "p", TEACHER_PROBLEMS)
    script = tmp_path / "teacher_job.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CURATE_HOME": str(killed.root)}
    with Teacher(delay_s=0.3) as server:
        proc = subprocess.Popen([sys.executable, str(script), str(killed.root), server.url], env=env)
        deadline = time.monotonic() + 60
        while len(ledger.files(killed, "p", "teacher")) < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, "the teacher job ended before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        written = len(ledger.files(killed, "p", "teacher"))
        table = killed.solution_set_dir("p", "p") / "solutions.parquet"
        assert written >= 3 and not table.is_file()  # killed mid-loop
        server.delay_s = 0.0
        st.solutions(killed, "p", teacher_cfg(server.url))
        st.solutions(clean, "p", teacher_cfg(server.url))
    keys = raw_keys(killed, "p")
    assert len(keys) == len(set(keys))  # no sample drawn twice
    assert sorted(keys) == sorted(raw_keys(clean, "p"))  # the same samples as a run never killed
    tables = [io.read_parquet(w.solution_set_dir("p", "p") / "solutions.parquet") for w in (killed, clean)]
    assert tables[0].equals(tables[1])
