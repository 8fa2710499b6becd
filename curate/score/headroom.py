r"""What RL can still sharpen, known before any RL step: the headroom report of a model on a pool.

RL turns pass@k into pass@1 where a model already has a skill (arXiv 2504.13837), helps where the base accuracy is
neither 0 nor 1 (ReLIFT, arXiv 2506.07527), and adds capability only at the edge of competence (arXiv
2512.07783). So the question before spending rollouts is where the model's measured pass rates sit. From ``n``
rollouts of each prompt (the ledger: ``curate rollout``, or ``training run``'s ``measure``) the report gives, per
band (a column or ``meta.<key>`` of the problems, e.g. ``meta.ops``, the built-in chains' length; ``des`` in
bins of 0.1 for real pools; or no band) and per pass-rate bucket:

- pass@1 (the mean pass rate) and pass@k (the unbiased estimator ``1 - C(n - c, k) / C(n, k)``, Chen et al. 2021);
- the share of prompts in the **middle** (``0 < c < n``): the only ones whose groups carry an advantage;
- the ceiling: the mean of pass@k - pass@1, what RL could gain if it turned every pass@k into pass@1;
- the share of all-equal groups at ``n`` (what RL would waste drawing these prompts uniformly);
- where each prompt belongs: **SFT** (``p = 0`` and a verified solution: the pool's reference solution agrees with
  the gold), **RL** (the middle), **nowhere** (``p = 1``: already solved), or unsolved without any solution.

Suspected wrong golds (quarantined by ``curate select`` with the reason, ``SUSPECT_REASONS``): a wrong gold that is
a slip the model itself makes rewards the slip, and ``measure``'s zero-variance filter only removes the ones the
model never matches. Two tests, each cheap:

- ``gold_consensus``: ``p = 0``, at least three quarters of the samples agree on one other answer, **and** the model is
  reliable on problems of that kind: its mean pass rate over the other prompts of the same band (the report's ``--by``,
  e.g. ``meta.ops``; the whole pool without one) is at least ``RELIABLE`` (0.75). A model that keeps failing a problem
  with a right gold scatters its answers or slips the same way less often, but a model with no skill on a kind fails it
  the same way every time (on the built-in pool the one-operation chains, shorter than any trace, were 46 of 48 flagged
  with all their golds right); agreement says the gold is wrong only where the model is otherwise right;
- ``gold_vs_reference``: the pool's reference solution (its ``solution`` column, a second source of the answer)
  concludes another answer, by the same checker; for a gold that matches a common slip of the model, the model's
  samples cannot tell, the reference can (and it is the second source that confirms a consensus where the model is
  not reliable). Rows without a reference solution are not tested.

The zero-variance forecast for a selection must come from rollouts that did not choose it (the selection keeps
prompts its own rollouts saw mixed, a selection bias: a forecast from them measured 2.2-2.7x low).
``fresh_forecast`` uses the samples drawn after the selection (sample_idx >= the measured ``n``; ``curate rollout
--selection NAME --n 2n`` draws them), ``curate.score.forecast`` on them.

>>> round(pass_at_k(8, 2, 8), 3), round(pass_at_k(8, 2, 1), 3)
(1.0, 0.25)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from curate import schema as S


SUSPECT_REASONS = ("gold_consensus", "gold_vs_reference")
RELIABLE = 0.75  # a band's pass rate from which the model's agreement on another answer is evidence against a gold
RELIABLE_MIN = 4  # the other prompts a band needs for its pass rate to count
BUCKETS = ((0.0, 0.0, "p = 0"), (0.0, 0.25, "0 < p <= 0.25"), (0.25, 0.5, "0.25 < p <= 0.5"),
           (0.5, 0.75, "0.5 < p <= 0.75"), (0.75, 1.0, "0.75 < p < 1"), (1.0, 1.0, "p = 1"))  # fmt: skip
ALL = "all"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a prompt with ``c`` correct of ``n`` samples (``k <= n``)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def band_values(problems: pl.DataFrame, by: str | None) -> pl.DataFrame:
    """(problem_id, band) for ``by``: a column of ``problems`` (``level``, ``subject``, ``des``: numbers in [0, 1]
    fall into bins of 0.1), ``meta.<key>`` (a field of the JSON ``meta``), or None (one band, ``all``). Raises
    ``ValueError`` naming ``by`` when no problem has it. The grouping is ``curate.schema.field_groups``, which
    ``training.evaluate.groups`` (``eval.by``'s per-group breakdown) uses too, without the bins."""
    if by is None:
        return problems.select(S.PROBLEM_ID, pl.lit(ALL).alias("band"))
    return S.field_groups(problems, by, "band", bins=True)


def prompt_counts(samples: pl.DataFrame, n: int | None = None) -> pl.DataFrame:
    """Per prompt of ledger ``samples`` (problem_id, sample_idx, correct, extracted_answer), using the samples with
    ``sample_idx < n`` (all when None): ``n_samples``, ``n_correct``, ``pass_rate``, and the most common answer
    among the wrong samples (``other_answer``, ``other_count``; null when none was extracted)."""
    rows = samples if n is None else samples.filter(pl.col(S.SAMPLE_IDX) < n)
    rows = rows.with_columns(pl.col(S.CORRECT).fill_null(False))
    counts = rows.group_by(S.PROBLEM_ID).agg(
        pl.len().cast(pl.Int64).alias(S.N_SAMPLES), pl.col(S.CORRECT).cast(pl.Int64).sum().alias(S.N_CORRECT)
    )
    other = (
        rows.filter(~pl.col(S.CORRECT) & pl.col(S.EXTRACTED_ANSWER).is_not_null())
        .group_by(S.PROBLEM_ID, S.EXTRACTED_ANSWER)
        .agg(pl.len().cast(pl.Int64).alias("other_count"))
        .sort([S.PROBLEM_ID, "other_count", S.EXTRACTED_ANSWER], descending=[False, True, False])
        .group_by(S.PROBLEM_ID, maintain_order=True)
        .first()
        .rename({S.EXTRACTED_ANSWER: "other_answer"})
    )
    out = counts.join(other, on=S.PROBLEM_ID, how="left").with_columns(
        pl.col("other_count").fill_null(0), (pl.col(S.N_CORRECT) / pl.col(S.N_SAMPLES)).alias(S.PASS_RATE)
    )
    return out.sort(S.PROBLEM_ID)


def suspects(
    prompts: pl.DataFrame, reference_ok: pl.DataFrame | None = None, bands: pl.DataFrame | None = None
) -> pl.DataFrame:
    """(problem_id, reason, detail) of the prompts whose gold answer is suspect (module docstring). ``prompts``:
    ``prompt_counts`` (only these are judged); ``reference_ok``: (problem_id, reference_ok) from
    ``reference_verdicts`` (True: the reference solution agrees with the gold; null: no reference solution);
    ``bands``: (problem_id, band) from ``band_values``, the kinds the model's reliability is measured on (None: one
    band, the whole of ``prompts``)."""
    band = (
        prompts.join(bands.select(S.PROBLEM_ID, "band"), on=S.PROBLEM_ID, how="left").with_columns(
            pl.col("band").fill_null(ALL)
        )
        if bands is not None
        else prompts.with_columns(pl.lit(ALL).alias("band"))
    )
    others = pl.len().over("band") - 1  # the band's pass rate without the prompt itself
    band = band.with_columns(
        others.alias("_others"),
        ((pl.col(S.PASS_RATE).sum().over("band") - pl.col(S.PASS_RATE)) / pl.max_horizontal(others, 1)).alias(
            "_reliability"
        ),
    )
    consensus = band.filter(
        (pl.col(S.N_CORRECT) == 0)
        & (pl.col("other_count") >= 2)
        & (4 * pl.col("other_count") >= 3 * pl.col(S.N_SAMPLES))
        & (pl.col("_others") >= RELIABLE_MIN)
        & (pl.col("_reliability") >= RELIABLE)
    ).select(
        S.PROBLEM_ID,
        pl.lit("gold_consensus").alias("reason"),
        pl.format(
            "{} of {} samples answer {}, none the gold, where the model passes {} of band {}'s other prompts",
            "other_count",
            S.N_SAMPLES,
            "other_answer",
            pl.col("_reliability").round(2),
            "band",
        ).alias("detail"),
    )
    frames = [consensus]
    if reference_ok is not None:
        frames.append(
            reference_ok.filter(pl.col("reference_ok").not_().fill_null(False))
            .join(prompts.select(S.PROBLEM_ID), on=S.PROBLEM_ID, how="semi")  # judged on the reported prompts only
            .join(consensus.select(S.PROBLEM_ID), on=S.PROBLEM_ID, how="anti")
            .select(
                S.PROBLEM_ID,
                pl.lit("gold_vs_reference").alias("reason"),
                pl.lit("the pool's reference solution concludes another answer").alias("detail"),
            )
        )
    return pl.concat(frames).sort(S.PROBLEM_ID)


def reference_verdicts(problems: pl.DataFrame, check: Any) -> pl.DataFrame:
    """(problem_id, reference_ok): whether each problem's reference ``solution`` reaches its gold answer, judged by
    ``check(texts, golds) -> [Verdict]`` (``curate.verify.check_batch``); null where there is no solution."""
    has = problems.filter(pl.col(S.SOLUTION).is_not_null() & (pl.col(S.SOLUTION).str.len_chars() > 0))
    verdicts = check(has[S.SOLUTION].to_list(), has[S.ANSWER].to_list()) if has.height else []
    judged = pl.DataFrame(
        {S.PROBLEM_ID: has[S.PROBLEM_ID], "reference_ok": [bool(v.correct) for v in verdicts]},
        schema={S.PROBLEM_ID: pl.String, "reference_ok": pl.Boolean},
    )
    return problems.select(S.PROBLEM_ID).join(judged, on=S.PROBLEM_ID, how="left")


BELONGS = ("rl", "sft", "nowhere", "unsolved", "suspect")


def classify(
    prompts: pl.DataFrame, k: int, reference_ok: pl.DataFrame | None = None, suspected: pl.DataFrame | None = None
) -> pl.DataFrame:
    """``prompts`` with ``pass_at_k`` (at ``k``), ``middle``, ``bucket`` (``BUCKETS``) and ``belongs``
    (``BELONGS``): a suspected wrong gold (``suspected``, from ``suspects``) belongs nowhere until it is fixed
    (``suspect``), a prompt at p = 0 belongs in SFT when its reference solution is verified."""
    ok = reference_ok if reference_ok is not None else prompts.select(S.PROBLEM_ID, pl.lit(None, pl.Boolean).alias(
        "reference_ok"))  # fmt: skip
    out = prompts.join(ok, on=S.PROBLEM_ID, how="left").with_columns(
        pl.struct(S.N_SAMPLES, S.N_CORRECT)
        .map_elements(lambda r: pass_at_k(r[S.N_SAMPLES], r[S.N_CORRECT], min(k, r[S.N_SAMPLES])), pl.Float64)
        .alias("pass_at_k"),
        ((pl.col(S.N_CORRECT) > 0) & (pl.col(S.N_CORRECT) < pl.col(S.N_SAMPLES))).alias("middle"),
    )
    p = pl.col(S.PASS_RATE)
    bucket = pl.lit(BUCKETS[-1][2])
    for lo, hi, name in reversed(BUCKETS[:-1]):
        bucket = pl.when((p == 0) if hi == 0 else (p > lo) & (p <= hi) & (p < 1)).then(pl.lit(name)).otherwise(bucket)
    suspect_ids = suspected[S.PROBLEM_ID].to_list() if suspected is not None else []
    belongs = (
        pl.when(pl.col(S.PROBLEM_ID).is_in(suspect_ids))
        .then(pl.lit("suspect"))
        .when(pl.col("middle"))
        .then(pl.lit("rl"))
        .when(pl.col(S.N_CORRECT) == pl.col(S.N_SAMPLES))
        .then(pl.lit("nowhere"))
        .when(pl.col("reference_ok").fill_null(False))
        .then(pl.lit("sft"))
        .otherwise(pl.lit("unsolved"))
    )
    return out.with_columns(bucket.alias("bucket"), belongs.alias("belongs"))


def summarize_groups(classified: pl.DataFrame, by: str) -> pl.DataFrame:
    """One row per value of ``by`` (``band`` or ``bucket``) and an ``all`` row: prompts, pass@1, pass@k, the middle's
    share, the ceiling (mean pass@k - pass@1), the share of all-equal groups, and the count of each ``belongs``."""
    aggs = [
        pl.len().alias("prompts"),
        pl.col(S.PASS_RATE).mean().alias("pass_at_1"),
        pl.col("pass_at_k").mean().alias("pass_at_k"),
        pl.col("middle").mean().alias("middle_share"),
        (pl.col("pass_at_k") - pl.col(S.PASS_RATE)).mean().alias("ceiling"),
        pl.col("middle").not_().mean().alias("all_equal_share"),
        *((pl.col("belongs") == b).sum().alias(b) for b in BELONGS),
    ]
    parts = classified.group_by(by).agg(aggs)
    order = [b[2] for b in BUCKETS] if by == "bucket" else None
    if order is not None:
        parts = parts.with_columns(pl.col(by).cast(pl.Enum(order))).sort(by).with_columns(pl.col(by).cast(pl.String))
    else:
        parts = parts.sort(pl.col(by).cast(pl.Int64, strict=False), by, nulls_last=True)
    total = classified.select(pl.lit(ALL).alias(by), *aggs)
    return pl.concat([parts.cast(total.schema), total])


def verdict(total: dict[str, Any], k: int, n: int, rl_ceiling: float | None, fewer: int = 0) -> str:
    """The one line, in the README's words: how much of the pool RL can sharpen and its ceiling; where the rest
    belongs; and, when some measured prompts have fewer than ``n`` samples (``fewer``), that they are left out."""
    prompts = total["prompts"]
    rl = total["rl"]
    ceiling = (
        f"ceiling +{rl_ceiling:.3f} (mean pass@{k} - pass@1 over them)" if rl_ceiling is not None else "no ceiling"
    )
    kept = f" (only the prompts with {n} samples: {fewer} measured prompts with fewer are left out)" if fewer else ""
    return (
        f"RL can sharpen {rl} of {prompts} prompts{kept} ({rl / prompts:.0%}: 0 < p < 1 at {n} rollouts), "
        f"{ceiling}; {total['sft']} belong in SFT (p = 0, a verified solution), {total['nowhere']} nowhere (p = 1), "
        f"{total['unsolved']} unsolved without a solution, {total['suspect']} suspected wrong golds"
    )


def report(
    samples: pl.DataFrame,
    problems: pl.DataFrame,
    *,
    n: int,
    k: int | None = None,
    by: str | None = None,
    reference_ok: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """The headroom report (module docstring) of ledger ``samples`` over ``problems`` (the prompts to report on),
    from the first ``n`` samples of each prompt, pass@k at ``k`` (default ``n``; 1..n). Returns ``prompts`` (one row
    per prompt: counts, band, bucket, belongs), ``bands`` and ``buckets`` (``summarize_groups``), ``suspects``,
    ``verdict`` and ``totals``. Raises ``ValueError`` when no prompt has ``n`` samples or ``k`` is outside 1..n
    (pass@k of n samples needs k <= n: a larger k would print pass@n's values under its name)."""
    if n < 2:
        raise ValueError(f"the headroom report needs n >= 2 rollouts per prompt (a middle needs two), got {n}")
    if k is not None and not 1 <= k <= n:
        raise ValueError(f"--k {k} is outside 1..{n}: pass@k of {n} rollouts per prompt (--n) needs 1 <= k <= {n}")
    k = n if k is None else k
    ids = problems.select(S.PROBLEM_ID)
    counts = prompt_counts(samples.join(ids, on=S.PROBLEM_ID, how="semi"), n)
    measured = counts.height
    counts = counts.filter(pl.col(S.N_SAMPLES) >= n)
    if counts.height == 0:
        raise ValueError(f"no prompt has {n} samples in the ledger for these problems")
    bands_of = band_values(problems, by)
    suspected = suspects(counts, reference_ok, bands_of)
    classified = classify(counts, k, reference_ok, suspected).join(bands_of, on=S.PROBLEM_ID, how="left")
    bands, buckets = summarize_groups(classified, "band"), summarize_groups(classified, "bucket")
    totals = bands.filter(pl.col("band") == ALL).to_dicts()[0]
    rl = classified.filter(pl.col("middle"))
    rl_ceiling = float((rl["pass_at_k"] - rl[S.PASS_RATE]).mean()) if rl.height else None
    fewer = measured - counts.height
    return {
        "n": n,
        "k": k,
        "by": by,
        "prompts": classified,
        "bands": bands,
        "buckets": buckets,
        "suspects": suspected,
        "totals": {
            **totals,
            "rl_ceiling": rl_ceiling,
            "unmeasured": problems.height - counts.height,
            "fewer_samples": fewer,
        },
        "verdict": verdict(totals, k, n, rl_ceiling, fewer),
    }


def fresh_forecast(samples: pl.DataFrame, selection: Sequence[str], after: int, sizes: Sequence[int]) -> dict:
    """The zero-variance share RL will meet on ``selection``, forecast from its samples drawn after it was chosen
    (``sample_idx >= after``), at each group size in ``sizes`` (``curate.score.forecast.forecast``). Each entry
    also holds the share of all-equal groups among the fresh samples themselves (``observed``, at their count)."""
    from curate.score.forecast import forecast

    fresh = prompt_counts(samples.filter(pl.col(S.SAMPLE_IDX) >= after).filter(
        pl.col(S.PROBLEM_ID).is_in(list(selection))))  # fmt: skip
    if fresh.height == 0:
        return {"fresh_prompts": 0}
    m, c = fresh[S.N_SAMPLES].to_list(), fresh[S.N_CORRECT].to_list()
    observed = sum(1 for a, b in zip(m, c, strict=True) if b in (0, a)) / len(m)
    out: dict[str, Any] = {"fresh_prompts": fresh.height, "fresh_samples": int(sum(m)), "observed": observed}
    for size in sizes:
        out[str(size)] = forecast(m, c, size)
    return out


# --------------------------------------------------------------------------------------------------- I/O
LEDGER_COLUMNS = [S.PROBLEM_ID, S.MODEL, S.SAMPLE_IDX, S.CORRECT, S.EXTRACTED_ANSWER]


def pool_report(
    ws: Any,
    pool: str,
    model: str,
    *,
    n: int,
    k: int | None = None,
    by: str | None = None,
    sources: Sequence[str] | None = None,
    verify_config: Any = None,
) -> dict[str, Any]:
    """``report`` of ``model``'s ledger rows on ``pool``'s train problems (of ``sources`` when given); the reference
    solutions of the measured problems are checked with ``curate.verify`` (``verify_config``). Raises
    ``InputError`` (one line, exit 2 on the CLI) for an unknown model, an empty ledger, ``n < 2`` or a bad ``by``."""
    from curate import io, verify
    from curate.errors import InputError
    from curate.rollout import ledger

    model = ws.model_name(model)  # a model folder inside the workspace is named by its relative path
    problems = pl.read_parquet(ws.require_pool(pool))
    problems = problems.filter(~pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS))
    if sources is not None:
        problems = problems.filter(pl.col(S.SOURCE).is_in(list(sources)))
    folder = ws.ledger_dir(pool)
    models = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if io.model_key(model) not in models:
        known = ", ".join(models) or "none"
        raise InputError(f"model {model!r} has no rollouts on pool {pool!r} (ledger models: {known}); run `curate "
                         f"rollout --pool {pool} --model {model}` first")  # fmt: skip
    samples = ledger.read(ws, pool, model, columns=LEDGER_COLUMNS)
    if samples.height == 0:
        raise InputError(f"the ledger of {model!r} on pool {pool!r} is empty")
    measured = problems.join(samples.select(S.PROBLEM_ID).unique(), on=S.PROBLEM_ID, how="semi")
    cfg = verify_config or verify.VerifyConfig()
    reference_ok = reference_verdicts(measured, lambda texts, golds: verify.check_batch(texts, golds, cfg))
    try:
        out = report(samples, problems, n=n, k=k, by=by, reference_ok=reference_ok)
    except ValueError as exc:
        raise InputError(f"headroom: {exc}") from exc
    return {**out, "pool": pool, "model": model}


# the report's files in its folder (``write_report``, ``read_report``): its tables, its summary and its figure
TABLES = {"bands": "headroom.parquet", "buckets": "headroom-buckets.parquet", "prompts": "headroom-prompts.parquet",
          "suspects": "headroom-suspects.parquet"}  # fmt: skip
SUMMARY, FIGURE = "headroom.json", "headroom.png"


def write_report(rep: dict[str, Any], out_dir: Any) -> dict[str, str]:
    """The report's tables (``headroom.parquet``: bands, ``headroom-buckets.parquet``, ``headroom-prompts.parquet``,
    ``headroom-suspects.parquet``), ``headroom.json`` (totals, verdict, settings) and ``headroom.png`` in
    ``out_dir``, atomically each. Returns the files written. ``read_report`` reads them back."""
    from pathlib import Path

    from curate import io

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {key: io.write_parquet(rep[key], out / name) for key, name in TABLES.items()}
    files["summary"] = io.write_json(out / SUMMARY, summary(rep))
    files["figure"] = plot(rep, out / FIGURE)
    return {k: str(v) for k, v in files.items()}


def read_report(out_dir: Any) -> dict[str, Any] | None:
    """The report ``write_report`` left in ``out_dir``: ``summary`` (``headroom.json``: settings, totals, verdict,
    suspects by reason, bands and buckets as rows) and each table by its key (``bands``, ``buckets``, ``prompts``,
    ``suspects``; None where its file is missing). None without ``headroom.json``."""
    from pathlib import Path

    from curate import io

    out = Path(out_dir)
    if not (out / SUMMARY).is_file():
        return None
    tables = {key: pl.read_parquet(out / name) if (out / name).is_file() else None for key, name in TABLES.items()}
    return {"summary": io.read_json(out / SUMMARY), **tables}


def summary(rep: dict[str, Any]) -> dict[str, Any]:
    """What ``headroom.json`` and ``--json`` hold: settings, totals, verdict, the suspects by reason, and the bands
    and buckets as rows."""
    return {
        **{key: rep.get(key) for key in ("pool", "model", "n", "k", "by")},
        "verdict": rep["verdict"],
        "totals": rep["totals"],
        "suspects": summary_suspects(rep["suspects"]),
        "bands": rep["bands"].to_dicts(),
        "buckets": rep["buckets"].to_dicts(),
    }


def lines(rep: dict[str, Any], buckets: bool = True) -> list[str]:
    """The report as plain text: the verdict, one line per band and (``buckets``) per pass-rate bucket (prompts,
    pass@1, pass@k, middle, ceiling, where they belong), the suspects by reason; the tables fit 80 columns.
    ``curate headroom`` prints it all, ``training run``'s ``measure`` the bands (the buckets are in the run folder's
    ``headroom-buckets.parquet``)."""
    k = rep["k"]
    head = (f"{'':<15} {'prompts':>7} {'pass@1':>6} {f'pass@{k}':>7} {'middle':>6} {'ceiling':>7}"
            f"{'rl':>5}{'sft':>5}{'none':>5}{'unsol':>6}{'susp':>5}")  # fmt: skip
    out = [rep["verdict"], f"by {rep.get('by') or 'band'}:", head]
    parts = [("band", rep["bands"], "band")] + ([("bucket", rep["buckets"], "bucket")] if buckets else [])
    for title, frame, col in parts:
        if title == "bucket":
            out += ["by pass rate:", head]
        for r in frame.to_dicts():
            out.append(f"{r[col]:<15} {r['prompts']:>7} {r['pass_at_1']:>6.3f} {r['pass_at_k']:>7.3f} "
                       f"{r['middle_share']:>6.1%} {r['ceiling']:>+7.3f}{r['rl']:>5}{r['sft']:>5}{r['nowhere']:>5}"
                       f"{r['unsolved']:>6}{r['suspect']:>5}")  # fmt: skip
    out.append("where they belong: rl, sft, none (p = 1), unsol (no solution), susp (suspect)")
    reasons = summary_suspects(rep["suspects"])
    out.append("suspected wrong golds: " + (", ".join(f"{n} {r}" for r, n in reasons.items()) or "none"))
    return out


def summary_suspects(suspected: pl.DataFrame) -> dict[str, int]:
    """Suspected wrong golds by reason."""
    return dict(suspected.group_by("reason").len().sort("reason").rows())


def plot(rep: dict[str, Any], path: Any) -> Any:
    """``headroom.png``: per band, the share of prompts that belong in RL, in SFT, nowhere or unsolved (bars), with
    pass@1 and pass@k (lines): where RL has something to sharpen at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bands = rep["bands"].filter(pl.col("band") != ALL)
    labels = bands["band"].to_list()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(labels) + 2), 3.6))
    bottom = [0.0] * len(labels)
    colours = {"rl": "#1f77b4", "sft": "#ff7f0e", "nowhere": "#2ca02c", "unsolved": "#7f7f7f", "suspect": "#d62728"}
    for part, colour in colours.items():
        share = [v / p for v, p in zip(bands[part].to_list(), bands["prompts"].to_list(), strict=True)]
        ax.bar(labels, share, bottom=bottom, color=colour, alpha=0.55, label=f"{part} (share of prompts)")
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.plot(labels, bands["pass_at_1"].to_list(), "k-o", label="pass@1")
    ax.plot(labels, bands["pass_at_k"].to_list(), "k--s", label=f"pass@{rep['k']}")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(rep.get("by") or "band")
    ax.set_title(f"headroom of {rep.get('model', 'the model')} ({rep['n']} rollouts per prompt)", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
