"""Decontamination and the ``decontaminate`` stage (curate.decontaminate): planted leaks are found, template siblings
are not, the stage writes filters + quarantine idempotently, and the real MATH-500 leaks in DeepScaleR are found.

Hermetic: real parquet, the real offline encoder (loaded once per session), real math-verify where named.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from curate import io, pipeline
from curate import schema as S
from curate.cli import main
from curate.config import ConfigError, Recipe
from curate.decontaminate.dedup import DedupConfig, answers_compatible
from curate.decontaminate.stage import (
    DecontamConfig,
    decontaminate,
    decontaminate_pool,
    exact_at_ingest,
    load_config,
)
from curate.embed import EmbedConfig, embed_problems
from curate.manifest import read_manifest
from curate.verify import answers as A


TRAINS = "Two trains leave the same station at noon. The first travels east at 60 miles per hour and the second "
BENCH = [  # (problem, answer, source)
    (r"Let $f(x) = \dfrac{x^{2}+1}{x-1}$. Find $f(3)$ given that $x_{1} = 2$.", "5", "math500"),
    (TRAINS + "travels west at 40 miles per hour. After how many hours will they be 300 miles apart?", "3", "math500"),
    ("A rectangle has a length of 12 cm and a width of 5 cm. What is the length of its diagonal?", "13", "amc"),
    (r"What is the remainder when $1 + 2 + 3 + \dots + 10$ is divided by 9?", "1", "math500"),
    ("Determine the number of ways to arrange the letters of the word ELLIPSE.", "1260", "math500"),
    ("Compute the sum of all positive divisors of 48.", "124", "amc"),
]
TRAIN = [  # (problem, answer, what it is)
    (r"Let $f(x)=\frac{x^2+1}{x-1}$.  Find $f(3)$ given that $x_1=2$.", "5", "exact-ish leak of bench 0"),
    (
        TRAINS + "travels west at 40 miles per hour, so after how many hours will the two trains be exactly 300 miles"
        " apart from each other?",
        "3 \\text{ hours}",
        "n-gram leak of bench 1",
    ),
    ("What is the length of the diagonal of a rectangle whose sides measure 12 cm and 5 cm?", "13", "paraphrase"),
    (r"What is the remainder when $1 + 2 + 3 + \dots + 10$ is  divided by 8?", "7", "sibling: other number"),
    ("Determine the number of ways to arrange the letters of the word SUCCESS.", "420", "sibling: other word"),
    ("Compute the sum of all positive divisors of 36.", "91", "sibling: other number"),
    ("Compute the sum of all the positive divisors of 36.", "91", "near duplicate of the previous"),
    ("Alice has 3 apples and buys 4 more. How many apples does she have now?", "7", "unrelated"),
]
LEAKS = {0: "exact", 1: "ngram", 2: "embedding"}
MINILM = EmbedConfig(encoder="minilm", dtype="float32")  # the thresholds these tests pin are MiniLM's
NO_MATH_VERIFY = DecontamConfig(verify_answers=False, embed=MINILM)


def table(rows, split: str, sources=None) -> pl.DataFrame:
    """A schema.PROBLEMS frame (rows sorted by id, as the stage reads them)."""
    recs = []
    for k, (problem, answer, source) in enumerate(rows):
        recs.append(
            {
                S.PROBLEM_ID: S.problem_id(problem),
                S.PROBLEM: problem,
                S.ANSWER: A.normalize_answer(answer),
                S.ANSWER_ALTERNATIVES: [A.normalize_answer(answer)],
                S.ANSWER_RAW: answer,
                S.SPLIT: split,
                S.SOURCE: source if split == "test" else "train-src",
                S.SOURCE_ROW: k,
                S.SOURCES: (sources or {}).get(k, [f"{source}#{k}"]),
            }
        )
    return pl.concat([S.empty(S.PROBLEMS), pl.DataFrame(recs)], how="diagonal_relaxed").sort(S.PROBLEM_ID)


@pytest.fixture(scope="module")
def frames():
    return table([(p, a, "train") for p, a, _ in TRAIN], "train"), table(BENCH, "test")


def kinds_of(train: pl.DataFrame, result: pl.DataFrame) -> dict[int, str | None]:
    """Expected-row index -> contamination kind (None when clean)."""
    by_id = dict(zip(result[S.PROBLEM_ID], result[S.CONTAMINATION_KIND], strict=True))
    return {k: by_id[S.problem_id(p)] for k, (p, _, _) in enumerate(TRAIN)}


def test_text_tests_find_formatting_and_ngram_leaks_but_not_siblings(frames):
    train, bench = frames
    result, ignored = decontaminate(train, bench, DecontamConfig(use_embeddings=False, verify_answers=False))
    assert result[S.PROBLEM_ID].to_list() == train[S.PROBLEM_ID].to_list()
    assert kinds_of(train, result) == {0: "exact", 1: "ngram", 2: None, 3: None, 4: None, 5: None, 6: None, 7: None}
    row = result.filter(pl.col(S.CONTAMINATION_KIND) == "ngram").row(0, named=True)
    assert row[S.CONTAMINATED_BY] == S.problem_id(BENCH[1][0]) and row[S.BENCHMARK] == "math500"
    assert 0.4 <= row[S.CONTAMINATION_SCORE] < 1.0
    siblings = {i["train"] for i in ignored}
    assert {S.problem_id(TRAIN[3][0]), S.problem_id(TRAIN[4][0])} <= siblings  # seen, judged, and kept


def test_embedding_catches_a_paraphrase_and_the_guard_refuses_siblings(frames, ws):
    train, bench = frames
    cfg = DecontamConfig(embed_threshold=0.85, verify_answers=False, embed=MINILM)
    vecs = embed_problems(ws, pl.concat([train, bench]), MINILM)
    t_vecs, b_vecs = vecs[: train.height], vecs[train.height :]
    result, ignored = decontaminate(train, bench, cfg, t_vecs, b_vecs)
    assert {k: v for k, v in kinds_of(train, result).items() if v} == LEAKS
    cosine = result.filter(pl.col(S.CONTAMINATION_KIND) == "embedding")[S.CONTAMINATION_SCORE][0]
    assert cosine >= 0.85
    # "divisors of 36" vs "of 48" is above 0.85 but its numbers differ: refused, listed as a sibling
    assert S.problem_id(TRAIN[5][0]) in {i["train"] for i in ignored}
    off, _ = decontaminate(train, bench, DecontamConfig(embed_threshold=0.85, compatible=False), t_vecs, b_vecs)
    assert off[S.CONTAMINATED].sum() > result[S.CONTAMINATED].sum()  # the guard is what keeps the siblings


def test_short_benchmark_needs_exactly_its_numbers():
    """A generated-style sibling: same boilerplate, one added operand, and (by chance) the same answer."""
    tail = " and express the answer as a fraction in lowest terms."
    bench = table([(r"Compute $\frac{3}{2} - \frac{1}{2}$" + tail, "1", "gen/eval")], "test")
    train = table([(r"Compute $2 - \frac{3}{2} + \frac{1}{2}$" + tail, "1", "t")], "train")
    cfg = DecontamConfig(use_embeddings=False, verify_answers=False)
    assert not decontaminate(train, bench, cfg)[0][S.CONTAMINATED][0]
    loose = DecontamConfig(use_embeddings=False, verify_answers=False, number_slack_tokens=0)
    assert decontaminate(train, bench, loose)[0][S.CONTAMINATED][0]  # the length rule is what keeps it


def test_a_reworded_copy_of_a_short_item_is_found_and_its_siblings_are_not():
    """A benchmark item shorter than one n-gram (``Compute $4 + 10 - 3$.``: 7 tokens) is matched by 3-grams; before,
    its single n-gram was the whole item and a reworded copy escaped. Same numbers and answer still required."""
    bench = table([("Compute $4 + 10 - 3$.", "11", "gen/test")], "test")
    train = table(
        [("What is $4 + 10 - 3$?", "11", "copy"), ("Compute $4 + 10 - 2$.", "12", "other number"),
         ("Compute $4 + 10 - 3 + 5$.", "16", "one more operation"), ("Find the value of $4 + 9 - 3$.", "10", "x")],
        "train",
    )  # fmt: skip
    result, _ = decontaminate(train, bench, DecontamConfig(use_embeddings=False, verify_answers=False))
    flagged = set(result.filter(pl.col(S.CONTAMINATED))[S.PROBLEM_ID])
    assert flagged == {S.problem_id("What is $4 + 10 - 3$?")}
    old, _ = decontaminate(train, bench, DecontamConfig(use_embeddings=False, verify_answers=False, short_ngram_n=8))
    assert not old[S.CONTAMINATED].any()  # the whole item as one n-gram: what missed it


def test_copies_typed_another_way_or_with_a_wrong_gold_are_leaks_and_siblings_are_not():
    """Issue 38.2: a copy typed with a Unicode minus (U+2212), an en dash, a times sign or a middle dot, full-width
    digits or a thin space was missed (bench/bench_leaks.py: 42 of 300 minus copies found before, 300 now); a
    reworded copy whose gold is a typo of the benchmark's was never flagged (0 of 300; now 300), since the answers
    had to agree. It is quarantined with both golds named. Template siblings (another number, another sign) stay."""
    from curate.decontaminate.stage import quarantine_rows, run

    bench = table(
        [("Compute $9 - 2 + 8 - 4$.", "11", "gen/test"), (r"Compute $(9 - 2) \times 6 + 5$.", "47", "gen/test"),
         ("Compute $7 + 3 - 5 + 2 - 1$.", "6", "gen/test")],
        "test",
    )  # fmt: skip
    copies = [
        ("Compute $9 \u2212 2 + 8 \u2212 4$.", "11"),  # U+2212
        ("Compute $\uff19 \u2013 2 + 8\u2009-\u00a04$.", "11"),  # full-width 9, en dash, thin and no-break spaces
        ("Compute $(9 - 2) \u00d7 6 + 5$.", "47"),  # U+00D7
        ("Compute $(9 - 2) \u00b7 6 + 5$.", "47"),  # U+00B7
        (r"Compute $(9 - 2) \cdot 6 + 5$.", "47"),
        ("What is the value of $7 + 3 - 5 + 2 - 1$?", "60"),  # reworded, with a typo'd gold
    ]
    siblings = [  # another number, another sign, one operation fewer
        ("Compute $9 - 2 + 8 - 5$.", "10"), ("Compute $9 + 2 + 8 - 4$.", "15"), ("What is $7 + 3 - 5 + 2$?", "7")
    ]  # fmt: skip
    train = table([(p, a, "t") for p, a in copies + siblings], "train")
    cfg = DecontamConfig(use_embeddings=False, dedup=DedupConfig(enabled=False))
    filters, duplicates, _ = run(train, bench, cfg)
    flagged = set(filters.filter(pl.col(S.CONTAMINATED))[S.PROBLEM_ID])
    assert flagged == {S.problem_id(p) for p, _ in copies}
    q = quarantine_rows(train, filters, duplicates, bench)
    detail = q.filter(pl.col(S.PROBLEM_ID) == S.problem_id(copies[-1][0]))[S.DETAIL].item()
    assert "its gold '60' differs from the benchmark's '6'" in detail
    assert not q.filter(pl.col(S.PROBLEM_ID) == S.problem_id(copies[0][0]))[S.DETAIL].item().count("gold")


def test_the_same_expression_is_a_leak_whatever_its_wording_and_gold():
    """Issue 45.6: ``Work out $8 + 4 - 6 + 1 - 3$.`` (gold 5) against the test item ``Compute $8 + 4 - 6 + 1 - 3$.``
    (gold 4) was a sibling at 0.667 and kept: "work out" is not one of the words that only ask, so the questions
    differed. One expression is one question; problems whose numbers differ stay siblings."""
    from curate.decontaminate.stage import run

    bench = table([("Compute $8 + 4 - 6 + 1 - 3$.", "4", "gen/test")], "test")
    copies = [("Work out $8 + 4 - 6 + 1 - 3$.", "5"), ("Try this one: $8+4-6+1-3$.", "40")]
    siblings = [("Work out $8 + 4 - 6 + 1 - 2$.", "5"), ("Work out $8 + 4 - 6 + 1$.", "7")]
    train = table([(p, a, "t") for p, a in copies + siblings], "train")
    cfg = DecontamConfig(use_embeddings=False, dedup=DedupConfig(enabled=False))
    filters, _, ignored = run(train, bench, cfg)
    flagged = set(filters.filter(pl.col(S.CONTAMINATED))[S.PROBLEM_ID])
    assert flagged == {S.problem_id(p) for p, _ in copies}
    assert {i["train"] for i in ignored} <= {S.problem_id(p) for p, _ in siblings}


def test_near_duplicates_by_text_need_no_encoder():
    """``dedup.text``: the same problem reworded (same numbers, same answer) is one cluster, template siblings are
    not, with the encoder off (a reworded arithmetic chain scores a cosine under MiniLM's 0.95)."""
    from curate.decontaminate.stage import run

    train = table(
        [("Compute $3 + 5 - 2 + 7$.", "13", "a"), ("Evaluate $3 + 5 - 2 + 7$.", "13", "a reworded"),
         ("Compute $3 + 5 - 1 + 7$.", "14", "a sibling"), ("Compute $5 + 3 - 2 + 7$.", "13", "same numbers, order")],
        "train",
    )  # fmt: skip
    bench = table([("Compute $9 - 1$.", "8", "gen/test")], "test")
    cfg = DecontamConfig(use_embeddings=False, verify_answers=False, dedup=DedupConfig(embeddings=False))
    _, dups, _ = run(train, bench, cfg)
    cluster = dups.filter(pl.col(S.CLUSTER_SIZE) > 1)[S.PROBLEM_ID].to_list()
    same = ("Compute $3 + 5 - 2 + 7$.", "Evaluate $3 + 5 - 2 + 7$.")
    assert sorted(cluster) == sorted(S.problem_id(p) for p in same)
    off = DecontamConfig(use_embeddings=False, verify_answers=False, dedup=DedupConfig(embeddings=False, text=False))
    assert (run(train, bench, off)[1][S.CLUSTER_SIZE] == 1).all()


def test_near_duplicate_examples_under_the_cosine_threshold_say_they_are_text_matches():
    """Issue 45.8: the examples showed pairs at similarity 0.81-0.92 under a 0.95 threshold with no word that the
    text test, not the cosine, found them."""
    from curate.decontaminate.dedup import SIMILARITY
    from curate.decontaminate.stage import run, summarize

    train = table(
        [("Compute $3 + 5 - 2 + 7$.", "13", "a"), ("Evaluate $3 + 5 - 2 + 7$.", "13", "a reworded")], "train"
    )
    bench = table([("Compute $9 - 1$.", "8", "gen/test")], "test")
    cfg = DecontamConfig(use_embeddings=False, verify_answers=False, dedup=DedupConfig(embeddings=False))
    filters, dups, ignored = run(train, bench, cfg)
    for sim, said in ((0.87, "text (same words)"), (0.97, "cosine")):
        cosine = dups.with_columns(pl.when(pl.col(S.DUPLICATE_OF).is_not_null()).then(sim).alias(SIMILARITY))
        embedded = replace(cfg, dedup=DedupConfig(threshold=0.95))
        (example,) = summarize(train, bench, filters, cosine, ignored, {}, embedded)["near_duplicate_examples"]
        assert example["similarity"] == sim and example["found_by"] == said


def test_answers_compatible_rules():
    assert answers_compatible(["n=1,2,3,4"], ["1,2,3,4"])
    assert answers_compatible(["(9, 3), (6, 3)"], ["(6,3),(9,3)"])
    assert answers_compatible([r"\left( 3, \frac{\pi}{2} \right)"], [r"(3,\frac{\pi}{2})"])
    assert not answers_compatible(["1260"], ["420"])
    assert not answers_compatible([r"\frac{21}{8}"], ["8"])  # "both contain an 8" is not agreement
    assert not answers_compatible([r"\pi"], ["2"])
    assert not answers_compatible([r"\frac{5}{2}"], [r"\frac{2}{5}"])  # a single value keeps its digits' order


def test_math_verify_decides_equivalent_answers_in_another_form():
    bench = table([(r"Determine the least real number $M$ such that $|ab| \leq M(a^2+b^2)$ for reals $a, b$.",
                    r"\frac{9}{32}\sqrt{2}", "olympiad")], "test")  # fmt: skip
    train = table([(r"Find the least real number $M$ such that $|ab| \leq M(a^{2}+b^{2})$ for all reals $a$, $b$.",
                    r"\frac{9}{16\sqrt{2}}", "t")], "train")  # fmt: skip
    cheap, _ = decontaminate(train, bench, DecontamConfig(use_embeddings=False, verify_answers=False))
    assert not cheap[S.CONTAMINATED][0]
    asked: list = []
    stub, _ = decontaminate(
        train, bench, DecontamConfig(use_embeddings=False), equivalent=lambda p: asked.extend(p) or [True] * len(p)
    )
    assert stub[S.CONTAMINATED][0] and asked == [(r"\frac{9}{16\sqrt{2}}", r"\frac{9}{32}\sqrt{2}")]
    real, _ = decontaminate(train, bench, DecontamConfig(use_embeddings=False))  # real math-verify, worker pool
    assert real[S.CONTAMINATION_KIND][0] == "ngram"


def write_pool(ws, frames, extra_quarantine=True) -> None:
    train, bench = frames
    sources = {k: ["train-src#6", "other#1"] for k in (6,)}  # the second wording has more evidence
    train = table([(p, a, "train") for p, a, _ in TRAIN], "train", sources)
    io.write_parquet(pl.concat([train, bench]).sort(S.PROBLEM_ID), ws.table("p", "problems"), S.PROBLEMS)
    rows = [("train-src", 99, "ingest", "contaminated", "exact match of test problem math500#3")]
    if extra_quarantine:
        rows.append(("train-src", 98, "select", "too_long", "kept by another stage"))
    q = pl.DataFrame(
        [dict(zip([S.SOURCE, S.SOURCE_ROW, S.STAGE, S.DROP_REASON, S.DETAIL], r, strict=True)) for r in rows]
    )
    io.write_parquet(pl.concat([S.empty(S.QUARANTINE), q], how="diagonal_relaxed"), ws.table("p", "quarantine"))


def test_stage_writes_filters_and_replaces_its_quarantine_rows(frames, ws):
    write_pool(ws, frames)
    cfg = DecontamConfig(embed_threshold=0.9, verify_answers=False, embed=MINILM)
    result = decontaminate_pool(ws, "p", cfg)
    s = result.summary
    assert (s["train"], s["contaminated"], s["near_duplicates_dropped"], s["kept"]) == (8, 3, 1, 4)
    assert s["reconciles"] and s["by_kind"] == {"exact": 1, "ngram": 1, "embedding": 1}
    assert s["by_benchmark"] == {"math500": 2, "amc": 1} and s["exact_at_ingest"] == {"math500": 1}
    filters = io.read_parquet(ws.table("p", "filters"), S.FILTERS)
    assert filters.height == 8 and filters[S.PROBLEM_ID].n_unique() == 8
    dup = filters.filter(pl.col(S.DUPLICATE_OF).is_not_null()).row(0, named=True)
    assert dup[S.PROBLEM_ID] == S.problem_id(TRAIN[5][0]) and dup[S.DUPLICATE_OF] == S.problem_id(TRAIN[6][0])
    assert dup[S.CLUSTER_SIZE] == 2

    def quarantine() -> pl.DataFrame:  # every stage's quarantine file (decontaminate owns its own)
        return io.read_quarantine(ws, "p")

    q = quarantine()
    assert q.group_by(S.STAGE, S.DROP_REASON).len().sort(S.STAGE, S.DROP_REASON).rows() == [
        ("decontaminate", "contaminated", 3),
        ("decontaminate", "near_duplicate", 1),
        ("ingest", "contaminated", 1),
        ("select", "too_long", 1),
    ]
    detail = q.filter(pl.col(S.DROP_REASON) == "near_duplicate")[S.DETAIL][0]
    assert S.problem_id(TRAIN[6][0]) in detail
    manifest = read_manifest(ws.table("p", "filters"))
    assert manifest["drops"] == {"contaminated": 3, "near_duplicate": 1} and manifest["rows_out"] == 4

    assert decontaminate_pool(ws, "p", cfg).skipped  # same inputs and config: nothing to do
    assert not decontaminate_pool(ws, "p", cfg, force=True).skipped
    assert quarantine().equals(q)  # re-run replaces its own rows, duplicates nothing, keeps the others


def test_pipeline_stage_and_config(ws, frames):
    assert "decontaminate" in pipeline.stage_names()
    assert pipeline.stage_names().index("decontaminate") == pipeline.stage_names().index("ingest") + 1
    write_pool(ws, frames, extra_quarantine=False)
    recipe = Recipe(
        name="t",
        pool="p",
        stages=("decontaminate",),
        stage_configs={"decontaminate": {"use_embeddings": False, "dedup": {"enabled": False}}},
    )
    cfg = load_config(recipe)
    assert cfg.dedup.enabled is False and cfg.embed == EmbedConfig()
    result = pipeline.run_stage("decontaminate", ws, recipe)
    assert result.summary["by_kind"] == {"exact": 1, "ngram": 1, "embedding": 0}
    with pytest.raises(ConfigError, match="ngram_m"):
        load_config(Recipe(name="t", pool="p", stage_configs={"decontaminate": {"ngram_m": 3}}))
    with pytest.raises(ConfigError):
        load_config(Recipe(name="t", pool="p", stage_configs={"decontaminate": {"embed": {"dtype": "fp8"}}}))


def test_cli_decontaminate_json(ws, frames, capsys):
    write_pool(ws, frames)
    args = ["decontaminate", "--pool", "p", "--no-embeddings", "--no-dedup", "--json"]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["stage"] == "decontaminate" and payload["summary"]["contaminated"] == 2
    assert main(["decontaminate", "--pool", "missing", "--json"]) == 2


def test_exact_at_ingest_parses_ingest_details():
    q = pl.DataFrame(
        {
            S.STAGE: ["ingest", "ingest", "decontaminate"],
            S.DROP_REASON: ["contaminated", "contaminated", "contaminated"],
            S.DETAIL: ["exact match of test problem math500/test#412", "odd", "x"],
        }
    )
    assert exact_at_ingest(q) == {"math500/test": 1, "unknown": 1}


# --------------------------------------------------------------------------------------------------- real data
KNOWN_MATH500_LEAKS = {f"test/intermediate_algebra/{n}.json" for n in (1365, 90, 2146, 1849, 2015, 1791, 582, 1411)}


@pytest.mark.slow
def test_real_math500_leaks_in_deepscaler_are_found(shared_data):
    """Ingest-free: MATH-500 (test) against FastCuRL L1+L3 (= DeepScaleR, train); the n-gram path is enough."""
    math500 = pl.read_ndjson(shared_data / "math500" / "test.jsonl")
    bench = pl.DataFrame(
        {
            S.PROBLEM_ID: [S.problem_id(p) for p in math500["problem"]],
            S.PROBLEM: math500["problem"],
            S.ANSWER: [A.normalize_answer(a) for a in math500["answer"]],
            S.SOURCE: "math500/test",
            S.SOURCE_ROW: np.arange(math500.height),
            "unique_id": math500["unique_id"],
        }
    ).with_columns(
        pl.col(S.ANSWER).map_elements(lambda a: [a], return_dtype=pl.List(pl.String)).alias(S.ANSWER_ALTERNATIVES)
    )
    rows = pl.concat([pl.read_parquet(shared_data / "fastcurl" / f"train_L{k}.parquet") for k in (1, 3)])
    texts = [S.strip_instruction(p[0]["content"]) for p in rows["prompt"]]
    golds = [A.normalize_answer(r["ground_truth"]) for r in rows["reward_model"]]
    train = pl.DataFrame(
        {
            S.PROBLEM_ID: [S.problem_id(t) for t in texts],
            S.PROBLEM: texts,
            S.ANSWER: golds,
            S.ANSWER_ALTERNATIVES: [[g] for g in golds],
            S.SOURCE: "deepscaler",
            S.SOURCE_ROW: np.arange(len(texts)),
        }
    )
    result, _ = decontaminate(train, bench, DecontamConfig(use_embeddings=False, verify_answers=False))
    hit_ids = set(result.filter(pl.col(S.CONTAMINATED))[S.CONTAMINATED_BY])
    found = set(bench.filter(pl.col(S.PROBLEM_ID).is_in(list(hit_ids)))["unique_id"])
    assert found >= KNOWN_MATH500_LEAKS
    assert len(found) <= 20  # a handful of leaks, not a flood of template siblings


def test_pool_without_benchmarks_flags_nothing(ws, frames):
    train, _ = frames
    io.write_parquet(train, ws.table("solo", "problems"), S.PROBLEMS)
    cfg = DecontamConfig(use_embeddings=False, dedup=DedupConfig(enabled=False))
    result = decontaminate_pool(ws, "solo", cfg)
    assert result.summary["contaminated"] == 0 and result.summary["kept"] == train.height
    assert io.read_parquet(ws.table("solo", "filters"), S.FILTERS).height == train.height
    assert io.read_parquet(ws.quarantine_path("solo", "decontaminate"), S.QUARANTINE).height == 0
