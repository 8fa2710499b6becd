"""Ingest: adapters on the real shared files, cleaning and quarantine, reconciliation, idempotence (local files)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from curate import schema as S
from curate.config import IngestConfig, SourceSpec
from curate.ingest.stage import clean, ingest, merge, raw_frame
from curate.io import read_parquet
from curate.manifest import read_manifest


def _ingest(ws, pool, *paths, **kw):
    specs = tuple(p if isinstance(p, SourceSpec) else SourceSpec(path=str(p)) for p in paths)
    return ingest(ws, pool, IngestConfig(sources=specs, **kw))


def _reconciles(summary):
    assert summary["read"] == summary["admitted"] + summary["merged"] + summary["quarantined"]
    for src in summary["sources"]:
        assert src["read"] == src["admitted"] + src["merged"] + src["quarantined"]
        assert src["quarantined"] == sum(src["drops"].values())


def _problems(ws, pool):
    return read_parquet(ws.table(pool, "problems"), S.PROBLEMS)


def _quarantine(ws, pool):
    return read_parquet(ws.table(pool, "quarantine"), S.QUARANTINE)


# --------------------------------------------------------------------------------------------------- real data
@pytest.mark.slow
def test_gsm8k_train_test_and_solutions(ws, shared_data):
    r = _ingest(
        ws,
        "g",
        shared_data / "gsm8k/train.jsonl",
        shared_data / "gsm8k/test.jsonl",
        shared_data / "gsm8k/example_model_solutions.jsonl",
    )
    s = r.summary
    _reconciles(s)
    assert s["read"] == 7473 + 1319 + 1319
    assert s["splits"] == {"train": 7473, "test": 1319}  # example solutions are the test problems, merged
    assert s["merged"] == 1319 and s["quarantined"] == 0
    df = _problems(ws, "g")
    natalia = df.filter(pl.col(S.PROBLEM).str.starts_with("Natalia sold clips")).row(0, named=True)
    assert natalia[S.ANSWER] == "72" and natalia[S.SPLIT] == "train" and "####" in natalia[S.ANSWER_RAW]
    assert natalia[S.SOLUTION].startswith("Natalia sold 48/2")
    thousands = df.filter(pl.col(S.ANSWER_RAW).str.contains(r"#### \d{1,3},\d{3}$"))
    assert thousands.height >= 79 and thousands[S.ANSWER].str.contains(",").sum() == 0
    janet = df.filter(pl.col(S.PROBLEM).str.starts_with("Janet’s ducks")).row(0, named=True)
    assert janet[S.ANSWER] == "18" and sorted(janet[S.SOURCES])[0].startswith("gsm8k/example_model_solutions#")


def test_eval_sets_answers(ws, shared_data):
    d = shared_data / "deepscaler/test"
    r = _ingest(
        ws,
        "e",
        shared_data / "math500/test.jsonl",
        d / "aime.json",
        d / "amc.json",
        d / "math.json",
        d / "minerva.json",
        d / "olympiad_bench.json",
    )
    _reconciles(r.summary)
    assert r.summary["splits"] == {"test": 500 + 30 + 83 + 272 + 675}
    assert r.summary["merged"] == 500  # deepscaler/test/math is MATH-500 again
    df = _problems(ws, "e")
    by_src = {s: df.filter(pl.col(S.SOURCE) == s) for s in df[S.SOURCE].unique().to_list()}
    amc = by_src["deepscaler/test/amc"]
    assert amc.filter(pl.col(S.ANSWER_RAW) == "142.0")[S.ANSWER].to_list() == ["142"]
    minerva = by_src["deepscaler/test/minerva"]
    assert minerva[S.ANSWER_ALTERNATIVES].list.len().max() >= 2  # lists of acceptable alternatives are kept
    assert minerva[S.ANSWER].str.ends_with("\n").sum() == 0
    olymp = by_src["deepscaler/test/olympiad_bench"]
    # $...$ wrappers removed; two gold answers stay as they are (a sentence with inline math, and '$221,$8$')
    assert olymp[S.ANSWER].str.starts_with("$").sum() == 2
    m500 = (
        by_src["math500/test"]
        .filter(pl.col(S.PROBLEM).str.starts_with("Convert the point $(0,3)$"))
        .row(0, named=True)
    )
    assert m500[S.ANSWER] == r"\left( 3, \frac{\pi}{2} \right)" and m500[S.LEVEL] == 2
    assert m500[S.SUBJECT] == "Precalculus" and json.loads(m500[S.META])["unique_id"].startswith("test/precalculus")


@pytest.mark.slow
def test_deepscaler_pool_conflicts_and_reconciliation(ws, shared_data):
    r = _ingest(ws, "ds", shared_data / "fastcurl/train_L1.parquet", shared_data / "fastcurl/train_L3.parquet")
    s = r.summary
    _reconciles(s)
    assert s["read"] == 40315
    assert s["drops"]["missing_answer"] == 6  # 6 empty ground truths in L3 (ANALYSIS.md)
    assert 0 < s["drops"]["duplicate_conflict"] < 600
    q = _quarantine(ws, "ds")
    conflict = q.filter(pl.col(S.DROP_REASON) == "duplicate_conflict")
    # every row of a conflicting problem is quarantined, none of them is admitted
    assert set(conflict[S.PROBLEM_ID]).isdisjoint(_problems(ws, "ds")[S.PROBLEM_ID].to_list())
    assert conflict.group_by(S.PROBLEM_ID).len()["len"].min() >= 2
    # answers that differ only in format are merged, not conflicts: '$2\sqrt{5}$' vs '2\sqrt{5}'
    df = _problems(ws, "ds")
    # what is left is real prose in the gold (e.g. '$-5 \le x \le 1$ or $3 \le x \le 9$', 'n=\boxed {1,3}')
    assert df[S.ANSWER].str.starts_with("$").sum() <= 5
    assert df[S.ANSWER].str.contains(r"\\boxed").sum() <= 2
    assert df[S.PROBLEM].str.ends_with("within \\boxed{}.").sum() == 0  # instruction suffix stripped


def test_limr_pool_and_disk_folder(ws, shared_data):
    r = _ingest(ws, "l", shared_data / "limr/math.8k.json", shared_data / "limr/limr_train")
    _reconciles(r.summary)
    by = {s["source"]: s for s in r.summary["sources"]}
    assert by["limr/math.8k"]["read"] == 8523 and by["limr/limr_train"]["read"] == 1389
    assert by["limr/limr_train"]["merged"] == 1389  # the selection is a subset of the pool
    assert by["limr/math.8k"]["drops"] == {"missing_answer": 2}


def test_simplerl_and_aime_metadata(ws, shared_data):
    r = _ingest(ws, "m", shared_data / "simplerl/math_cot_100.jsonl", shared_data / "deepscaler/train/aime.json")
    _reconciles(r.summary)
    df = _problems(ws, "m")
    simple = df.filter(pl.col(S.SOURCE) == "simplerl/math_cot_100")
    assert simple.height == 100 and set(simple[S.SPLIT]) == {"test"} and simple[S.LEVEL].is_null().sum() == 0
    aime = df.filter(pl.col(S.SOURCE) == "deepscaler/train/aime")
    assert json.loads(aime.filter(pl.col(S.ANSWER) == "60").row(0, named=True)[S.META])["year"] == 1983


# --------------------------------------------------------------------------------------------------- malformed
def test_malformed_jsonl_rows_are_quarantined_not_lost(ws, tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"problem": "What is 1+1?", "answer": "2"}
    lines = [
        json.dumps(good).encode(),
        b'{"problem": "truncated", "answ',  # truncated line
        json.dumps({"problem": 12, "answer": "3"}).encode(),  # wrong type
        b'{"problem": "caf\xe9 \xff", "answer": "1"}',  # not UTF-8
        json.dumps({"problem": "x" * 1_000_001, "answer": "5"}).encode(),  # 1 MB problem
        json.dumps({"problem": "What is 2+2?"}).encode(),  # missing answer field
        json.dumps({"problem": "What is 3+3?", "answer": None}).encode(),  # null answer
        json.dumps({"problem": "   ", "answer": "4"}).encode(),  # empty problem
        json.dumps({"problem": "What is 4+4?", "answer": {"nested": 1}}).encode(),  # wrong answer type
        b"[1, 2]",  # not an object
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    r = _ingest(ws, "bad", SourceSpec(path=str(path), format="generic"))
    s = r.summary
    _reconciles(s)
    assert s["read"] == len(lines) and s["admitted"] == 1
    q = _quarantine(ws, "bad").sort(S.SOURCE_ROW)
    assert q[S.DROP_REASON].to_list() == [
        "malformed",
        "malformed",
        "undecodable",
        "too_long",
        "missing_answer",
        "missing_answer",
        "empty_problem",
        "malformed",
        "malformed",
    ]
    assert q[S.SOURCE_ROW].to_list() == list(range(1, len(lines)))
    assert q[S.DETAIL].null_count() == 0 and "line 2" in q[S.DETAIL][0]


def test_empty_and_broken_files_give_clear_errors(ws, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        _ingest(ws, "x", empty)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"problem": "a", "answer": "1"}, {"problem": ')
    with pytest.raises(ValueError, match="invalid JSON at line 1"):
        _ingest(ws, "x", broken)
    with pytest.raises(FileNotFoundError):
        _ingest(ws, "x", tmp_path / "nope.jsonl")
    assert not ws.table("x", "problems").exists()


def test_generic_field_mapping_csv(ws, tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("q,gt,lvl\nWhat is 6*7?,42,2\nHalf of 3?,1.50,1\n")
    spec = SourceSpec(path=str(path), fields={"problem": "q", "answer": "gt", "level": "lvl"}, split="test")
    r = _ingest(ws, "csv", spec)
    df = _problems(ws, "csv").sort(S.SOURCE_ROW)
    assert r.summary["admitted"] == 2 and df[S.ANSWER].to_list() == ["42", "1.5"] and df[S.LEVEL].to_list() == [2, 1]
    assert set(df[S.SPLIT]) == {"test"}


def test_hub_name_fails_clearly_offline(ws, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError, match="Hugging Face hub"):
        _ingest(ws, "hub", "hf://openai/gsm8k:main@test")


# --------------------------------------------------------------------------------------------------- semantics
def _frame(rows):
    raw = [
        {
            "source_row": i,
            "problem": p,
            "answer_raw": a,
            "answers": [a],
            "solution": None,
            "level": None,
            "difficulty": None,
            "subject": None,
            "split": sp,
            "meta": {},
            "error": None,
            "error_detail": None,
        }
        for i, (p, a, sp) in enumerate(rows)
    ]
    return clean(raw_frame("t", raw, None), IngestConfig())


def test_merge_conflicts_and_contamination_rules():
    rows = _frame(
        [
            ("What is 1+1?", "2", "train"),
            ("what is  1+1? ", "$2$", "train"),  # same problem, same answer after normalization: merged
            ("Find x.", "25", "train"),
            ("find x.", "20", "train"),  # same problem, different answer: conflict
            ("Eval item", "7", "test"),
            ("Eval item", "7", "train"),  # train copy of a test problem: contaminated
            ("Half?", "\\frac{1}{2}", "train"),
            ("half?", "0.5", "train"),  # equivalent per the checker: merged
        ]
    )
    equivalent = lambda pairs: [{a, b} == {"\\frac{1}{2}", "0.5"} for a, b in pairs]  # noqa: E731
    problems, quarantine, outcome = merge(rows, IngestConfig(), equivalent=equivalent)
    assert outcome == [
        "admitted",
        "merged",
        "duplicate_conflict",
        "duplicate_conflict",
        "admitted",
        "contaminated",
        "admitted",
        "merged",
    ]
    assert problems.height == 3 and quarantine.height == 3
    half = problems.filter(pl.col(S.ANSWER) == "\\frac{1}{2}").row(0, named=True)
    assert half[S.ANSWER_ALTERNATIVES] == ["\\frac{1}{2}", "0.5"] and half[S.SOURCES] == ["t#6", "t#7"]
    assert "exact match of test problem t#4" in quarantine.filter(pl.col(S.DROP_REASON) == "contaminated")[S.DETAIL][0]


def test_ids_stable_reingest_is_noop_and_adds_only_new(ws, tmp_path):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text("\n".join(json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1)}) for i in range(5)))
    b.write_text("\n".join(json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1)}) for i in range(3, 8)))
    first = _ingest(ws, "p", a)
    ids = _problems(ws, "p")[S.PROBLEM_ID].to_list()
    assert ids == sorted(S.problem_id(f"What is {i}+1?") for i in range(5))
    again = _ingest(ws, "p", a)
    assert again.skipped and not first.skipped
    assert _problems(ws, "p")[S.PROBLEM_ID].to_list() == ids
    added = _ingest(ws, "p", b)
    assert [s.rsplit("/", 1)[-1] for s in added.summary["new_sources"]] == ["b"]  # only the new source was read
    assert added.summary["admitted"] == 8 and added.summary["merged"] == 2
    assert read_manifest(ws.table("p", "problems"))["rows_in"] == 10
    # the manifest records inputs with content hashes, config and versions
    m = read_manifest(ws.table("p", "problems"))
    assert m["inputs"] and all(len(h) == 64 for h in m["inputs"].values()) and "polars" in m["versions"]


def test_quarantine_rows_of_other_stages_survive_reingest(ws, tmp_path):
    """Each stage owns its quarantine file: a re-ingest replaces only ingest's, and readers see every stage's."""
    from curate.io import read_quarantine, write_parquet

    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"problem": "Q1", "answer": "1"}) + "\n" + json.dumps({"problem": "Q2"}) + "\n")
    _ingest(ws, "p", a)
    q = _quarantine(ws, "p")
    extra = pl.DataFrame(
        [
            {
                S.SOURCE: "a",
                S.SOURCE_ROW: 0,
                S.STAGE: "decontaminate",
                S.DROP_REASON: "contaminated",
                S.DETAIL: "x",
                S.PROBLEM_ID: "id",
                S.PROBLEM: "Q1",
                S.ANSWER_RAW: "1",
            }
        ],
        schema=S.QUARANTINE,
    )
    assert q[S.STAGE].to_list() == ["ingest"]
    write_parquet(extra, ws.quarantine_path("p", "decontaminate"), S.QUARANTINE)
    _ingest(ws, "p", a, max_problem_chars=10_000)  # config change forces a rebuild
    assert _quarantine(ws, "p")[S.STAGE].to_list() == ["ingest"]
    assert sorted(read_quarantine(ws, "p")[S.STAGE].to_list()) == ["decontaminate", "ingest"]
