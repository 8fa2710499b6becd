"""The headroom report (``curate.score.headroom``, issue 36): on a synthetic ledger whose pass rates are known, the
bands and buckets say where each prompt belongs, suspected wrong golds are named with their reason, and the
zero-variance forecast from fresh samples of a selection lands on the truth where the selection's own rollouts miss
it."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest

from curate import schema as S
from curate.score import headroom
from curate.score.forecast import forecast


def _ledger(rates: dict[str, float], n: int, seed: int = 0, wrong: dict[str, str] | None = None) -> pl.DataFrame:
    """``n`` samples of each prompt, right with its rate; a wrong sample answers ``wrong[pid]`` (a consensus) or a
    scattered number."""
    rng = random.Random(seed)
    rows = []
    for pid, p in rates.items():
        for j in range(n):
            ok = rng.random() < p
            other = (wrong or {}).get(pid) or str(rng.randrange(1000))
            rows.append({S.PROBLEM_ID: pid, S.SAMPLE_IDX: j, S.CORRECT: ok, S.EXTRACTED_ANSWER: "1" if ok else other})
    return pl.DataFrame(rows)


def _problems(ops: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            S.PROBLEM_ID: list(ops),
            S.ANSWER: ["1"] * len(ops),
            S.SOLUTION: ["reference"] * len(ops),
            S.META: [json.dumps({"ops": v}) for v in ops.values()],
        }
    )


def test_bands_and_buckets_of_known_pass_rates():
    rates = {f"a{i}": 1.0 for i in range(10)} | {f"m{i}": 0.5 for i in range(20)} | {f"z{i}": 0.0 for i in range(10)}
    ops = {pid: 1 if pid[0] == "a" else 4 if pid[0] == "m" else 8 for pid in rates}
    problems = _problems(ops)
    ok = problems.select(S.PROBLEM_ID, pl.Series("reference_ok", [pid != "z0" for pid in rates]))
    rep = headroom.report(_ledger(rates, 16), problems, n=8, by="meta.ops", reference_ok=ok)
    bands = {r["band"]: r for r in rep["bands"].to_dicts()}
    assert bands["1"]["pass_at_1"] == bands["1"]["pass_at_k"] == 1.0 and bands["1"]["nowhere"] == 10
    assert bands["8"]["pass_at_1"] == bands["8"]["pass_at_k"] == 0.0
    assert bands["8"]["sft"] == 9 and bands["8"]["unsolved"] == 0  # p = 0: SFT only with a verified solution ...
    assert bands["8"]["suspect"] == 1  # ... and z0's reference disagrees with its gold: a suspect, not SFT
    middle = bands["4"]
    assert middle["middle_share"] == 1.0 and middle["rl"] == 20  # 0.5 at 8 samples: never all-equal here
    assert 0.3 < middle["pass_at_1"] < 0.7 and middle["pass_at_k"] == 1.0
    assert middle["ceiling"] == pytest.approx(middle["pass_at_k"] - middle["pass_at_1"])
    assert bands["all"]["prompts"] == 40 and bands["all"]["middle_share"] == 0.5
    buckets = {r["bucket"]: r["prompts"] for r in rep["buckets"].to_dicts()}
    assert buckets["p = 0"] == 10 and buckets["p = 1"] == 10 and sum(v for k, v in buckets.items() if k != "all") == 40
    assert rep["verdict"].startswith("RL can sharpen 20 of 40 prompts (50%")
    assert "9 belong in SFT" in rep["verdict"] and "10 nowhere" in rep["verdict"]


def test_pass_at_k_is_the_unbiased_estimator():
    assert headroom.pass_at_k(8, 0, 8) == 0.0 and headroom.pass_at_k(8, 1, 8) == 1.0
    assert headroom.pass_at_k(8, 4, 1) == 0.5
    assert headroom.pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3, 2) / C(4, 2)


def test_suspected_wrong_golds_consensus_and_reference():
    rates = {"slip": 0.0, "hard": 0.0, "fine": 0.6, "reftypo": 0.7} | {f"easy{i}": 1.0 for i in range(6)}
    samples = _ledger(rates, 8, wrong={"slip": "41"})  # every sample of "slip" answers 41; "hard" scatters
    samples = pl.concat([samples.filter(pl.col(S.PROBLEM_ID) != "hard"),  # 5 of 8 agree on 7: not three quarters
                         _ledger({"hard": 0.0}, 5, wrong={"hard": "7"}), _ledger({"hard": 0.0}, 3, seed=9)
                         .with_columns(pl.col(S.SAMPLE_IDX) + 5)])  # fmt: skip
    problems = _problems(dict.fromkeys(rates, 3))
    ok = problems.select(S.PROBLEM_ID, pl.Series("reference_ok", [pid != "reftypo" for pid in rates]))
    bands = headroom.band_values(problems, "meta.ops")
    got = {r["problem_id"]: r for r in headroom.suspects(headroom.prompt_counts(samples), ok, bands).to_dicts()}
    assert set(got) == {"slip", "reftypo"}
    assert got["slip"]["reason"] == "gold_consensus" and "answer 41" in got["slip"]["detail"]
    assert got["reftypo"]["reason"] == "gold_vs_reference"


def test_a_consensus_where_the_model_has_no_skill_is_not_a_suspect():
    """Issue 45: a model with no skill on a kind of problem (the one-operation chains, shorter than any trace) fails
    each the same way every time; their golds are right. Agreement on another answer flags a gold only in a band
    the model otherwise passes (pass rate of its other prompts >= 0.75); the reference solution still flags a wrong
    gold anywhere."""
    one = {f"one{i}": 0.0 for i in range(12)}  # band 1: always wrong, always the same wrong answer, golds right
    solved = {f"ok{i}": 1.0 for i in range(12)} | {"planted": 0.0}  # band 3: solved, one planted wrong gold
    rates = one | solved
    samples = _ledger(rates, 8, wrong={pid: "99" for pid in [*one, "planted"]})
    problems = _problems({pid: 1 if pid.startswith("one") else 3 for pid in rates})
    found = headroom.suspects(headroom.prompt_counts(samples), None, headroom.band_values(problems, "meta.ops"))
    assert found[S.PROBLEM_ID].to_list() == ["planted"]  # the old rule flagged all 13
    assert "passes 1.0 of band 3's other prompts" in found["detail"][0]
    ok = problems.select(S.PROBLEM_ID, pl.Series("reference_ok", [pid != "one3" for pid in rates]))
    rep = headroom.report(samples, problems, n=8, by="meta.ops", reference_ok=ok)
    assert dict(rep["suspects"].select(S.PROBLEM_ID, "reason").rows()) == {
        "one3": "gold_vs_reference",
        "planted": "gold_consensus",
    }
    assert rep["totals"]["suspect"] == 2 and rep["verdict"].endswith("2 suspected wrong golds")
    assert headroom.lines(rep)[-1] == "suspected wrong golds: 1 gold_consensus, 1 gold_vs_reference"


def test_bad_input_is_one_clear_error():
    problems = _problems({"a": 1})
    with pytest.raises(ValueError, match="n >= 2"):
        headroom.report(_ledger({"a": 0.5}, 8), problems, n=1)
    with pytest.raises(ValueError, match="no prompt has 8 samples"):
        headroom.report(_ledger({"a": 0.5}, 4), problems, n=8)
    with pytest.raises(ValueError, match=r"meta\.depth"):
        headroom.band_values(problems, "meta.depth")


def test_the_forecast_from_fresh_samples_hits_what_a_selection_meets_where_its_own_rollouts_miss():
    """A pool like a real one: most prompts near 0 or 1, some in the middle. Selecting the prompts whose 8 rollouts
    were mixed keeps lucky near-0 and near-1 prompts, so a forecast from those same rollouts is too low (the
    selection bias); 8 fresh samples of the selection forecast the truth."""
    rng = random.Random(1)
    rates = {f"p{i}": rng.choice([0.02, 0.03, 0.97, 0.98, 0.3, 0.5, 0.7]) for i in range(3000)}
    measured = _ledger(rates, 16, seed=2)
    first = headroom.prompt_counts(measured, 8)
    chosen = first.filter((pl.col(S.N_CORRECT) > 0) & (pl.col(S.N_CORRECT) < 8))[S.PROBLEM_ID].to_list()
    truth = sum(rates[p] ** 8 + (1 - rates[p]) ** 8 for p in chosen) / len(chosen)
    own = forecast(
        first.filter(pl.col(S.PROBLEM_ID).is_in(chosen))[S.N_SAMPLES].to_list(),
        first.filter(pl.col(S.PROBLEM_ID).is_in(chosen))[S.N_CORRECT].to_list(),
        8,
    )
    fresh = headroom.fresh_forecast(measured, chosen, after=8, sizes=[8])
    assert fresh["fresh_prompts"] == len(chosen) and fresh["fresh_samples"] == 8 * len(chosen)
    assert abs(fresh["8"]["share"] - truth) < 0.05
    assert abs(fresh["observed"] - truth) < 0.05  # the fresh groups themselves, at their own size
    assert truth - own["share"] > 0.1  # the selection's own rollouts under-forecast the waste


def _workspace(tmp_path, samples: pl.DataFrame | None):
    """A pool of 20 train problems (reference solutions right but for p3's) and, when given, a ledger of model m."""
    from curate import io
    from curate.rollout import ledger

    ws = io.Workspace(tmp_path / "ws")
    ids = [f"p{i}" for i in range(20)]
    frame = pl.DataFrame({S.PROBLEM_ID: ids, S.PROBLEM: [f"Compute ${i} + 1$." for i in range(20)],
                          S.ANSWER: [str(i + 1) for i in range(20)], S.SPLIT: ["train"] * 20,
                          S.SOURCE: ["s"] * 20, S.META: [json.dumps({"ops": 1 + i % 4}) for i in range(20)],
                          S.SOLUTION: [f"$\\boxed{{{i + 1 + (i == 3)}}}$" for i in range(20)]})  # fmt: skip
    io.write_parquet(frame, ws.table("p", "problems"))
    if samples is not None:
        rows = samples.with_columns(pl.lit("m").alias(S.MODEL), pl.col(S.SAMPLE_IDX).cast(pl.Int32))
        rows = rows.with_columns(pl.lit(None).alias(c) for c in S.ROLLOUTS if c not in rows.columns)
        ledger.write_part(rows.select(list(S.ROLLOUTS)), ledger.part_path(ws, "p", "m", "part-r-test-000000.parquet"))
    return ws


def test_the_verb_reports_writes_its_files_and_bad_input_is_one_line_exit_2(tmp_path, capsys):
    """``curate headroom`` (issue 36.1): the verdict, the bands and the suspects on the terminal, the tables, JSON
    and figure with ``--out``; an unknown model, an empty ledger and n < 2 are one line each, exit 2."""
    from curate.cli import main

    rates = {f"p{i}": (1.0, 0.5, 0.0, 0.5)[i % 4] for i in range(20)}
    samples = _ledger(rates, 8).with_columns(pl.col(S.EXTRACTED_ANSWER))
    ws = _workspace(tmp_path, samples)
    home = ["--home", str(ws.root)]
    assert (
        main(["headroom", "--pool", "p", "--model", "m", "--by", "meta.ops", "--out", str(tmp_path / "h"), *home]) == 0
    )
    out = capsys.readouterr().out
    assert "RL can sharpen 9 of 20 prompts (45%" in out and "suspected wrong golds: 1 gold_vs_reference" in out  # p3
    assert {p.name for p in (tmp_path / "h").iterdir()} >= {"headroom.parquet", "headroom.json", "headroom.png"}
    assert json.loads((tmp_path / "h" / "headroom.json").read_text())["totals"]["suspect"] == 1
    back = headroom.read_report(tmp_path / "h")  # the reader beside the writer: what was written, read back
    assert back["summary"]["totals"]["suspect"] == 1 and back["suspects"].height == 1
    assert back["prompts"].height == 20 and headroom.read_report(tmp_path / "none") is None
    for args, said in ((["--model", "other"], "model 'other' has no rollouts on pool 'p'"),
                       (["--model", "m", "--n", "1"], "n >= 2"),
                       (["--model", "m", "--n", "16"], "no prompt has 16 samples")):  # fmt: skip
        assert main(["headroom", "--pool", "p", *args, *home]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    empty = _workspace(tmp_path / "e", None)
    assert main(["headroom", "--pool", "p", "--model", "m", "--home", str(empty.root)]) == 2
    assert "has no rollouts" in capsys.readouterr().err


def test_k_outside_1_to_n_is_one_line_and_n_says_which_prompts_it_kept(tmp_path, capsys):
    """Issue 45.4: ``--k`` above n (pass@5 of 2 rollouts would print pass@2's values), 0 (once taken as n) and -1
    (once polars internals) are one line, exit 2. ``--n`` larger than most prompts' samples says what it kept, and
    the verdict's suspect count is the table's (the reference suspects of prompts left out are not counted)."""
    from curate.cli import main

    rates = {f"p{i}": (1.0, 0.5, 0.0, 0.5)[i % 4] for i in range(20)}
    samples = _ledger(rates, 8)
    resampled = _ledger({f"p{i}": 0.5 for i in range(8, 14)}, 16, seed=3).filter(pl.col(S.SAMPLE_IDX) >= 8)
    ws = _workspace(tmp_path, pl.concat([samples, resampled]))
    home = ["--home", str(ws.root)]
    for k in ("5", "0", "-1", "9"):
        n = "2" if k == "5" else "8"
        assert main(["headroom", "--pool", "p", "--model", "m", "--n", n, "--k", k, *home]) == 2
        err = capsys.readouterr().err
        assert f"--k {k} is outside 1..{n}" in err and len(err.strip().splitlines()) == 1, err
    assert main(["headroom", "--pool", "p", "--model", "m", "--n", "2", "--k", "2", *home]) == 0
    assert "pass@2" in capsys.readouterr().out
    assert main(["headroom", "--pool", "p", "--model", "m", "--n", "16", *home]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "RL can sharpen" in out[0] and "of 6 prompts (only the prompts with 16 samples: 14 measured" in out[0]
    assert out[0].endswith("0 suspected wrong golds") and out[-1] == "suspected wrong golds: none"  # p3 left out
    assert main(["headroom", "--pool", "p", "--model", "m", "--by", "meta.ops", *home]) == 0
    out = capsys.readouterr().out.splitlines()
    wide = [line for line in out if len(line) > 80 and not line.startswith(("RL can", "0 suspected"))]
    assert not wide and any("0.25 < p <= 0.5" in line for line in out), wide  # the tables fit 80 columns


def test_curate_score_marks_suspects_by_the_band_it_is_given():
    """``curate score``'s suspect golds (``score.evidence.suspect_band``; ``training run``'s ``measure`` sets its
    ``eval.by``) use the same rule: a consensus in a band the model fails is no suspect, one in a band it passes
    is; a band no problem has is one ``ConfigError``."""
    from curate.config import ConfigError
    from curate.score.evidence import EvidenceConfig, suspect_golds

    rates = {f"one{i}": 0.0 for i in range(6)} | {f"ok{i}": 1.0 for i in range(6)} | {"planted": 0.0}
    samples = _ledger(rates, 8, wrong={pid: "99" for pid in rates}).with_columns(
        pl.lit("m").alias(S.MODEL), pl.lit(None, pl.Datetime).alias(S.CREATED_AT), pl.lit("hf").alias(S.BACKEND)
    )
    problems = _problems({pid: 1 if pid.startswith("one") else 3 for pid in rates})
    reference = problems.with_columns(pl.lit(None, pl.String).alias(S.SOLUTION))  # no reference solutions

    def check(texts, golds):
        return []

    found = suspect_golds(samples, reference, EvidenceConfig(model="m", suspect_band="meta.ops"), check)
    assert found.rows() == [("planted", "gold_consensus")]
    assert suspect_golds(samples, reference, EvidenceConfig(model="m"), check).height == 0  # the pool: 0.5
    with pytest.raises(ConfigError, match=r"score\.evidence\.suspect_band: 'meta\.depth'"):
        suspect_golds(samples, reference, EvidenceConfig(model="m", suspect_band="meta.depth"), check)
