"""The stats table: hand-computed rows, the Beta posterior, dedupe, and incremental == full (in-memory + tmp parquet).

No model, no network: ledger frames are literal.
"""

from __future__ import annotations

import datetime as dt
import math

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from curate import io
from curate import schema as S
from curate.manifest import Manifest, read_manifest, write_manifest
from curate.rollout import stats


POOL = "p"


def ledger(rows: list[tuple], model: str = "m") -> pl.DataFrame:
    """(problem_id, sample_idx, correct, completion_tokens, finish_reason, step) tuples as ledger rows."""
    data = {name: [] for name in S.ROLLOUTS}
    for pid, idx, correct, tokens, finish, step in rows:
        values = {
            S.PROBLEM_ID: pid,
            S.MODEL: model,
            S.SAMPLE_IDX: idx,
            S.CORRECT: correct,
            S.VERDICT: "correct" if correct else "wrong",
            S.COMPLETION_TOKENS: tokens,
            S.FINISH_REASON: finish,
            S.STEP: step,
            S.CREATED_AT: dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        }
        for name in S.ROLLOUTS:
            data[name].append(values.get(name))
    return pl.DataFrame(data, schema=S.ROLLOUTS)


def test_hand_computed_row():
    led = ledger(
        [
            ("a", 0, True, 10, "stop", None),
            ("a", 1, True, 20, "stop", 3),
            ("a", 2, True, 30, "stop", 7),
            ("a", 3, False, 41, "length", None),
        ]
    )
    row = stats.compute_stats(led).row(0, named=True)
    assert (row[S.N_SAMPLES], row[S.N_CORRECT], row[S.PASS_RATE]) == (4, 3, 0.75)
    assert (row[S.ALPHA], row[S.BETA]) == (4.0, 2.0)
    assert row[S.PASS_RATE_MEAN] == pytest.approx(0.6667, abs=1e-4)
    assert row[S.PASS_RATE_LO] < row[S.PASS_RATE_MEAN] < row[S.PASS_RATE_HI]
    assert (row[S.MEAN_TOKENS_CORRECT], row[S.MEAN_TOKENS_INCORRECT], row[S.TRUNCATION_RATE]) == (20.0, 41.0, 0.25)
    assert row[S.LAST_STEP] == 7


def test_posterior_quantiles_closed_form_and_prior():
    # one correct sample, Beta(1,1) prior -> Beta(2,1): CDF x^2, so the q-quantile is sqrt(q)
    one = stats.compute_stats(ledger([("a", 0, True, 5, "stop", None)])).row(0, named=True)
    assert one[S.PASS_RATE_LO] == pytest.approx(math.sqrt(0.05))
    assert one[S.PASS_RATE_HI] == pytest.approx(math.sqrt(0.95))
    # one wrong sample, Beta(1,1) -> Beta(1,2): the q-quantile is 1 - sqrt(1 - q)
    zero = stats.compute_stats(ledger([("b", 0, False, 5, "stop", None)])).row(0, named=True)
    assert zero[S.PASS_RATE_HI] == pytest.approx(1 - math.sqrt(0.05))
    assert zero[S.MEAN_TOKENS_CORRECT] is None and zero[S.MEAN_TOKENS_INCORRECT] == 5.0
    # a Beta(2, 8) prior: 1/1 correct -> alpha 3, beta 8, mean 3/11
    prior = stats.compute_stats(ledger([("a", 0, True, 5, "stop", None)]), prior=(2.0, 8.0)).row(0, named=True)
    assert (prior[S.ALPHA], prior[S.BETA]) == (3.0, 8.0) and prior[S.PASS_RATE_MEAN] == pytest.approx(3 / 11)
    with pytest.raises(ValueError, match="positive"):
        stats.compute_stats(ledger([("a", 0, True, 5, "stop", None)]), prior=(0.0, 1.0))


def test_duplicates_nulls_and_models():
    led = pl.concat(
        [
            ledger([("a", 0, True, None, None, None), ("a", 1, False, 8, "stop", None)]),
            ledger([("a", 0, False, 99, "length", None)]),  # same key again: the first row wins
            ledger([("a", 0, False, 4, "stop", None)], model="other"),
        ]
    )
    out = stats.compute_stats(led)
    assert out[S.MODEL].to_list() == ["m", "other"]
    m = out.row(0, named=True)
    assert (m[S.N_SAMPLES], m[S.N_CORRECT], m[S.TRUNCATION_RATE]) == (2, 1, 0.0)
    assert m[S.MEAN_TOKENS_CORRECT] is None  # the correct sample has no token count (an import without tokenizer)
    assert out.schema == S.STATS


def write_part(ws, name: str, frame: pl.DataFrame, model: str = "m"):
    return io.write_parquet(frame, ws.ledger_dir(POOL, model) / f"part-{name}.parquet", S.ROLLOUTS)


def test_incremental_equals_full(ws):
    write_part(ws, "a", ledger([("a", 0, True, 10, "stop", None), ("b", 0, False, 12, "length", None)]))
    assert stats.refresh_stats(ws, POOL)["mode"] == "full"
    assert stats.refresh_stats(ws, POOL)["mode"] == "up_to_date"
    first = stats.read_stats(ws, POOL)
    write_part(ws, "b", ledger([("a", 1, False, 20, "stop", 2), ("c", 0, True, 5, "stop", None)]))
    write_part(ws, "c", ledger([("a", 0, True, 10, "stop", None)]))  # a key already counted: ignored
    write_part(ws, "d", ledger([("a", 0, True, 3, "stop", None)], model="n"))
    refreshed = stats.refresh_stats(ws, POOL)
    assert refreshed == {"mode": "incremental", "new_files": 3, "new_rows": 3, "rows": 4}
    incremental = stats.read_stats(ws, POOL)
    # rows no new sample touched keep their updated_at
    untouched = incremental.filter(pl.col(S.PROBLEM_ID) == "b")
    assert untouched[S.UPDATED_AT].to_list() == first.filter(pl.col(S.PROBLEM_ID) == "b")[S.UPDATED_AT].to_list()
    assert stats.refresh_stats(ws, POOL, force=True)["mode"] == "full"
    full = stats.read_stats(ws, POOL)
    assert_frame_equal(incremental.drop(S.UPDATED_AT), full.drop(S.UPDATED_AT))
    a = full.filter((pl.col(S.PROBLEM_ID) == "a") & (pl.col(S.MODEL) == "m")).row(0, named=True)
    assert (a[S.N_SAMPLES], a[S.N_CORRECT], a[S.LAST_STEP]) == (2, 1, 2)
    # a changed prior re-finalizes every row from the stored sums
    assert stats.refresh_stats(ws, POOL, prior=(2.0, 2.0))["mode"] == "incremental"
    assert stats.read_stats(ws, POOL)[S.ALPHA].min() >= 2.0
    # tables written but the manifest not (a crash in between): never counted twice, a full recompute
    write_part(ws, "e", ledger([("d", 0, True, 3, "stop", None)]))
    manifest = read_manifest(ws.table(POOL, "stats"))
    stats.refresh_stats(ws, POOL)
    write_manifest(
        ws.table(POOL, "stats"), Manifest(**{k: manifest[k] for k in ("stage", "inputs", "config", "extra")})
    )
    assert stats.refresh_stats(ws, POOL)["mode"] == "full"
    assert stats.read_stats(ws, POOL).filter(pl.col(S.PROBLEM_ID) == "d")[S.N_SAMPLES].to_list() == [1]
    # a removed part file cannot be subtracted: full recompute
    (ws.ledger_dir(POOL, "m") / "part-b.parquet").unlink()
    assert stats.refresh_stats(ws, POOL)["mode"] == "full"
    assert stats.read_stats(ws, POOL).filter(pl.col(S.PROBLEM_ID) == "c").height == 0


def test_summary_and_histogram():
    led = ledger(
        [("a", i, i < 2, 5, "stop", None) for i in range(4)]
        + [("b", i, True, 5, "stop", None) for i in range(4)]
        + [("c", i, False, 5, "stop", None) for i in range(4)]
    )
    (m,) = stats.summarize(stats.compute_stats(led), bins=4)["models"]
    assert (m["problems"], m["samples"], m["correct"], m["all_correct"], m["none_correct"]) == (3, 12, 6, 1, 1)
    assert m["mean_pass_rate"] == 0.5 and m["zero_variance"] == pytest.approx(0.6667, abs=1e-4)
    assert [h["problems"] for h in m["histogram"]] == [1, 0, 1, 1]  # 0.0, 0.5 and 1.0 (last bin closed)
    lines = stats.histogram_lines(m["histogram"], width=4)
    assert lines[0] == "0.00-0.25 #### 1" and lines[1].endswith(" 0")
