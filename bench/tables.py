"""The measured tables of README.md and bench/README.md, rendered from the benchmarks' JSON, so that a figure in the
docs is always one the code printed.

A table sits between two marker comments in a Markdown file::

    <!-- table: methods -->
    ... (written by this script: do not edit by hand)
    <!-- /table: methods -->

and is rendered from a JSON file the benchmark wrote into ``bench/json/``:

=====================  ==================================  ==============================================
table                  JSON                                written by
=====================  ==================================  ==============================================
``curation``           ``bench/json/curation.json``        ``bench_curation.py --json`` (every comparison)
``curation-headroom``  ``bench/json/curation.json``        (before RL: middle, ceiling, suspects, forecast)
``curation-headline``  ``bench/json/curation-quote.json``  ``bench_curation.py --quote`` (the demo quotes it)
``methods``            ``bench/json/methods.json``         ``bench_methods.py --json`` (every arm)
``methods-headline``   ``bench/json/methods.json``
``claims``             ``bench/json/methods.json``         (a row per paper claim, with its verdict)
``generate``           ``bench/json/generate.json``        ``bench_generate.py --json`` (sampling speed)
``frontier``           ``bench/json/frontier.json``        ``bench_frontier.py --json`` (the fair test of RL)
=====================  ==================================  ==============================================

A table whose JSON is not there yet says so, with the command that writes it. Figures measured before the JSON was
kept are in ``bench/HISTORY.md``, with the date and commit they were measured at.

    python bench/tables.py            # rewrite every table block in README.md and bench/README.md
    python bench/tables.py --check    # exit 1, naming the blocks that differ (tests/bench/test_tables.py runs it)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
JSON = ROOT / "bench" / "json"
DOCS = (ROOT / "README.md", ROOT / "bench" / "README.md")
BLOCK = re.compile(r"(<!-- table: ([\w-]+) -->\n)(.*?)(<!-- /table: \2 -->)", re.DOTALL)
SEEDS = "--seeds 0 1 2 3 4"


def _pm(g: Mapping[str, Any] | None, seeds: bool = True) -> str:
    """``+0.039 ± 0.007 (seeds ± 0.039)``: a pooled paired difference, its two errors (``bench_curation.pooled``)."""
    if not g:
        return "-"
    spread = f" (seeds ± {g['seed_stderr']:.3f})" if seeds and g.get("seed_stderr") is not None else ""
    return f"{g['gain']:+.3f} ± {g['stderr']:.3f}{spread}"


def _per_seed(per_seed: Mapping[str, Any]) -> str:
    return ", ".join(f"{g['gain']:+.3f}" for g in per_seed.values() if g)


def _measured(data: Mapping[str, Any]) -> str:
    m = data.get("measured") or {}
    at = f" at commit {m['commit']}" if m.get("commit") else ""
    load = f", load {m['load']}" if m.get("load") is not None else ""
    return f"Measured {m.get('date', '?')}{at}{load}: `{m.get('command', '?')}`."


def curation(data: Mapping[str, Any]) -> list[str]:
    """Every paired comparison of ``bench_curation.py``: pooled at T = 0.6 and 1.0, per seed at T = 0.6."""
    low, high = data["comparisons@T=0.6"], data.get("comparisons@T=1.0") or {}
    how = (
        f"Held-out pass@1 on the {data['test']} test problems; each difference paired on the same problems per "
        "seed, pooled over the seeds (paired SE; the seed-to-seed SE beside it)."
    )
    lines = [_measured(data), "", how, "", "| comparison | T = 0.6, pooled | T = 1.0, pooled | per seed, T = 0.6 |",
             "|---|---:|---:|---|"]  # fmt: skip
    for name, c in low.items():
        if not c["per_seed"]:
            lines.append(f"| {name} | not run in this grid | | |")
            continue
        other = (high.get(name) or {}).get("pooled")
        lines.append(f"| {name} | {_pm(c['pooled'])} | {_pm(other) if other else 'not evaluated'} | "
                     f"{_per_seed(c['per_seed'])} |")  # fmt: skip
    return lines


def curation_headroom(data: Mapping[str, Any]) -> list[str]:
    """Per run that measured its start before RL (``curated``; ``rlopt``, from SFT at its plateau): that starting
    model on the test split, the RL pool's middle and ceiling, the suspected wrong golds against the planted ones,
    the zero-variance forecast from fresh samples against what RL met (``bench_curation.print_headroom``)."""
    lines = [_measured(data), "", "| run | its start, held-out pass@1 (T = 0.6) | RL pool in the middle | ceiling "
             "over it (pass@8 - pass@1) | suspects: wrong golds / flagged (recall of the planted) | zero-variance "
             "forecast | observed | off by |", "|---|---:|---:|---:|---|---:|---:|---:|"]  # fmt: skip
    for run, h in (data.get("headroom") or {}).items():
        if not h:
            continue
        right = sum(r["right"] for r in h["by_reason"].values())
        reasons = ", ".join(f"{k} {r['right']}/{r['flagged']}" for k, r in sorted(h["by_reason"].items()))
        fc, seen = h.get("forecast"), h.get("observed")
        off = f"{seen - fc:+.3f}" if fc is not None and seen is not None else "-"
        fc_txt, seen_txt = (f"{x:.3f}" if x is not None else "-" for x in (fc, seen))
        lines.append(f"| {run} | {h['start']:.3f} | {h['middle']:.1%} of {h['prompts']} | +{h['ceiling']:.3f} | "
                     f"{right}/{h['flagged']} ({reasons}; recall {h['recall'] or 0:.2f} of {h['wrong_golds']}) | "
                     f"{fc_txt} | {seen_txt} | {off} |")  # fmt: skip
    return lines


def curation_headline(quote: Mapping[str, Any]) -> list[str]:
    """One line for README.md from the demo's quote of ``bench_curation.py`` (``--quote``)."""
    parts = "; ".join(f"{name} {_pm(g)}" for name, g in quote["pooled"].items())
    seeds = len(next(iter(quote["per_seed"].values())))
    return [f"**What curation and RL buy** (`{quote['command']}`, {quote['date']}, {seeds} seeds, {quote['test']} "
            f"held-out problems x 4, T = 0.6, paired): {parts}. Every comparison: "
            "[bench/README.md](bench/README.md#bench_curationpy)."]  # fmt: skip


def methods(data: Mapping[str, Any]) -> list[str]:
    """Every leave-one-out arm of ``bench_methods.py`` against its reference arm, and ScaleRL's fit."""
    kept = [f["kept_group_frac"] for f in data.get("curated") or []]
    ref = f" (the curated arm's own: {sum(kept) / len(kept):.2f})" if kept else ""
    how = (
        "Each arm minus its reference arm, held-out pass@1 at T = 0.6, paired, pooled over the seeds; early: after "
        "10 RL steps unless named; kept groups: the share of RL groups that were not all-equal" + ref + "."
    )
    head = "| method or stage | arm (what replaces it) | against | end | early | per seed, end | kept groups |"
    lines = [_measured(data), "", how, "", head, "|---|---|---|---:|---:|---|---:|"]
    for arm, r in data["arms"].items():
        figs = [f for f in r["per_seed"].values() if f.get("kept_group_frac") is not None]
        kept_arm = f"{sum(f['kept_group_frac'] for f in figs) / len(figs):.2f}" if figs else ""
        early = r["early"]
        named = f" ({early['label']})" if early.get("pooled") and early.get("at") not in (None, "at10") else ""
        lines.append(
            f"| {r['claim']} | {r.get('what', arm)} (`{arm}`) | `{r.get('versus', 'curated')}` | "
            f"{_pm(r['end']['pooled'])} | {_pm(early['pooled'], seeds=False)}{named} | "
            f"{_per_seed(r['end']['per_seed'])} | {kept_arm} |"
        )
        for part in ("leaked", "clean"):
            if part in r:
                lines.append(f"| | the same run, the {part} test problems only | | {_pm(r[part]['pooled'])} | | "
                             f"{_per_seed(r[part]['per_seed'])} | |")  # fmt: skip
    fits = [f for f in data.get("fit") or [] if "prediction" in f]
    if fits:
        errors = ", ".join(f"{f['error']:+.3f}" for f in fits)
        flat = ", ".join(f"{f['flat_error']:+.3f}" for f in fits)
        lines.append(f"| ScaleRL's fit | fitted on the first half of the curated curve | | error against the end: "
                     f"{errors} | | \"no further gain\": {flat} | |")  # fmt: skip
    return lines


def claims(data: Mapping[str, Any]) -> list[str]:
    """A row per paper claim (``bench_methods.CLAIMS``): the paper's number, ours at the end and early with both
    SEs, and the verdict ``bench_methods.verdict`` gave, with its reasons; a row without its measurement says why."""
    if "claims" not in data:
        return [_measured(data), "", "_This report has no claims table: `python bench/bench_methods.py "
                "--report-only --json bench/json/methods.json`, then `python bench/tables.py`._"]  # fmt: skip
    how = (
        "Ours: the method minus its absence, held-out pass@1 at T = 0.6, paired on the same problems per seed and "
        "pooled: ± the problems' paired SE (seeds ± the seed-to-seed SE). The verdict's rule "
        "(`bench_methods.verdict`): a difference is real when |z| >= 2 on the paired SE and every seed has its "
        "sign; a claim that the method is better reproduces when the difference is real and positive."
    )
    head = "| claim | the paper (METHODS.md) | our test | ours, end | ours, early | verdict | why |"
    lines = [_measured(data), "", how, "", head, "|---|---|---|---:|---:|---|---|"]
    for r in data["claims"]:
        ours = _pm(r.get("end")) if r.get("end") else ("not measured: " + r["why"] if r["verdict"] == "not measured"
                                                        else "-")  # fmt: skip
        early = f"{_pm(r['early'])} ({r['early_label']})" if r.get("early") else "-"
        why = "; ".join(x for x in (r["why"] if r.get("end") else "", r["reason"]) if x)
        lines.append(f"| {r['claim']} | {r['paper']} | {r['test']} | {ours} | {early} | {r['verdict']} | {why} |")
    return lines


def methods_headline(data: Mapping[str, Any]) -> list[str]:
    """One line for README.md: each arm's end difference against its reference arm."""
    arms = data["arms"].items()
    parts = "; ".join(f"{r['claim']} (`{arm}` - `{r.get('versus', 'curated')}`) "
                      f"{_pm(r['end']['pooled'], seeds=False)}" for arm, r in arms)  # fmt: skip
    m = data.get("measured") or {}
    return [f"**What each method buys** (`{m.get('command', 'bench_methods.py')}`, {m.get('date', '?')}; each part "
            f"left out, end minus its reference arm, paired): {parts}. Every arm: "
            "[bench/README.md](bench/README.md#bench_methodspy)."]  # fmt: skip


def generate(data: Mapping[str, Any]) -> list[str]:
    """Sampling speed (``bench_generate.py``): generate, the engine, the matmul bound, the samplers' agreement and
    the RL step, each with its CPU-seconds and load."""
    sp, m = data.get("speed") or {}, data.get("measured") or {}
    lines = [f"{_measured(data)} CPU: {m.get('cpu', '?')}; one torch thread.", "",
             "| sampler | tokens | wall s | CPU-s | tokens per CPU-s | vs generate | load |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    names = {"generate": "transformers `generate` (static batches, as the chain batched before)",
             "engine": "rollout engine (KV cache, continuous batching)",
             "matmul_bound": "matrix products alone (the linear layers, same tokens)"}  # fmt: skip
    base = (sp.get("generate") or {}).get("tokens_per_cpu_s")
    for key, label in names.items():
        r = sp.get(key)
        if r:
            ratio = f"{r['tokens_per_cpu_s'] / base:.2f}x" if base else "-"
            lines.append(f"| {label} | {r['tokens']:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{r['tokens_per_cpu_s']:,.0f} | {ratio} | {r['load']:.2f} |")  # fmt: skip
    agree = data.get("agreement") or {}
    if agree:
        lines += ["", "| T | engine pass@1 | generate pass@1 | engine - generate (paired SE) | problems x k |",
                  "|---:|---:|---:|---:|---:|"]  # fmt: skip
        for t, a in agree.items():
            lines.append(f"| {t} | {a['engine']:.3f} | {a['generate']:.3f} | {a['difference']:+.3f} ± "
                         f"{a['paired_se']:.3f} | {a['n_problems']} x {a['k']} |")  # fmt: skip
    rl = data.get("rl_step") or {}
    if rl:
        lines += ["", f"RL step ({rl['hf']['steps']} steps of 32 prompts x 8 rollouts, CISPO, process CPU including "
                  f"the model load): TRL's `generate` {rl['hf']['cpu_s_per_step']} CPU-s per step (load "
                  f"{rl['hf']['load']}), the engine {rl['auto']['cpu_s_per_step']} (load {rl['auto']['load']}): "
                  f"{rl['ratio']}x."]  # fmt: skip
    return lines


def frontier(data: Mapping[str, Any]) -> list[str]:
    """``bench_frontier.py``: the SFT band per seed, RL's learning curve on validation, and RL minus its start and
    each same-information baseline on the test split (overall, on 3-8 operations, at the frontier) at T = 0.6 and
    1.0; an arm not run yet is said to be."""
    lines = [_measured(data), "", "SFT to its plateau (the early stop; validation pass@1 on 150 problems x 2, the "
             "chosen model on the test split's 500 x 4 at T = 0.6):", "",
             "| seed | patience | chosen step | steps run | validation pass@1 | test pass@1 | why it stopped |",
             "|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for seed, b in (data.get("band") or {}).items():
        test = "-" if b.get("test") is None else f"{b['test']:.3f}"
        lines.append(f"| {seed} | {b.get('patience') or '-'} | {b['chosen_step']} | {b['steps']} | "
                     f"{b['pass_at_1']:.3f} ± {b['stderr']:.3f} | {test} | {b['stopped'] or '-'} |")  # fmt: skip
    curve = data.get("curve") or {}
    lines += ["", "RL's learning curve from that model (validation, 500 problems x 4; frontier: 9-12 operations):", ""]
    if not any(len(pts) > 1 for pts in curve.values()):
        lines.append("_No RL point evaluated yet: the rl arm's stage is evaluated when it ends._")
    else:
        lines += ["| seed | RL step | rollouts | CPU-s | pass@1, T = 0.6 | frontier, T = 0.6 | pass@1, T = 1.0 | "
                  "frontier, T = 1.0 |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        val = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        for seed, pts in curve.items():
            for p in pts:
                lines.append(f"| {seed} | {p['step']} | {p['rollouts']:,.0f} | {p['cpu_s']:,.0f} | "
                             f"{val(p['pass@0.6'])} | {val(p['frontier@0.6'])} | {val(p['pass@1'])} | "
                             f"{val(p['frontier@1'])} |")  # fmt: skip
    for label in ("T=0.6", "T=1.0"):
        comps = data.get(f"comparisons@{label}") or {}
        parts = next(iter(comps.values()), {})
        lines += ["", f"On the test split at {label.replace('=', ' = ')} (500 problems x 4; paired per seed, pooled "
                  "over seeds: ± the paired SE, seeds ± the seed-to-seed SE):", "",
                  "| comparison | " + " | ".join(parts) + " |", "|---|" + "---:|" * len(parts)]  # fmt: skip
        for name, by_part in comps.items():
            cells = [_pm(c["pooled"]) if c["per_seed"] else "not run yet" for c in by_part.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


# name -> (JSON file in bench/json/, renderer, the command that writes the JSON)
TABLES: dict[str, tuple[str, Callable[[Any], list[str]], str]] = {
    "curation": ("curation.json", curation, f"python bench/bench_curation.py {SEEDS} --json bench/json/curation.json"),
    "curation-headroom": ("curation.json", curation_headroom,
                          f"python bench/bench_curation.py {SEEDS} --json bench/json/curation.json"),
    "curation-headline": ("curation-quote.json", curation_headline,
                          f"python bench/bench_curation.py {SEEDS} --quote bench/json/curation-quote.json"),
    "methods": ("methods.json", methods, "python bench/bench_methods.py --seeds 0 1 2 --json bench/json/methods.json"),
    "methods-headline": ("methods.json", methods_headline,
                         "python bench/bench_methods.py --seeds 0 1 2 --json bench/json/methods.json"),
    "claims": ("methods.json", claims, "python bench/bench_methods.py --seeds 0 1 2 --json bench/json/methods.json"),
    "frontier": ("frontier.json", frontier, f"python bench/bench_frontier.py {SEEDS} --json bench/json/frontier.json"),
    "generate": ("generate.json", generate, "python bench/bench_generate.py --home workspace --model "
                 "workspace/runs/tiny-fastcurl/sft/best --json bench/json/generate.json"),
}  # fmt: skip


def render(name: str, folder: Path = JSON) -> str:
    """The Markdown of table ``name`` (its lines, each ending in a newline)."""
    if name not in TABLES:
        raise SystemExit(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    file, renderer, command = TABLES[name]
    path = folder / file
    if not path.is_file():
        lines = [f"_Not measured on the current default yet: `{command}`, then `python bench/tables.py`. The figures "
                 "measured before are in [bench/HISTORY.md](bench/HISTORY.md)._"]  # fmt: skip
    else:
        lines = renderer(json.loads(path.read_text()))
    return "".join(f"{line}\n" for line in lines)


def update(text: str, folder: Path = JSON, in_bench: bool = False) -> str:
    """``text`` with every table block rendered afresh; ``in_bench``: the file is in bench/ (its links are relative
    to it)."""

    def block(m: re.Match) -> str:
        body = render(m.group(2), folder)
        return m.group(1) + (body.replace("](bench/", "](") if in_bench else body) + m.group(4)

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is not what its JSON says")
    args = ap.parse_args(argv)
    stale = []
    for doc in DOCS:
        text = doc.read_text()
        new = update(text, in_bench=doc.parent.name == "bench")
        if new != text:
            stale.append(str(doc.relative_to(ROOT)))
            if not args.check:
                doc.write_text(new)
    if args.check and stale:
        print(f"tables out of date in {', '.join(stale)}: run python bench/tables.py", file=sys.stderr)
        return 1
    print(("rewrote " + ", ".join(stale)) if stale and not args.check else "every table is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
