"""Figures of the curriculum stage: the plan (``plan.png``) and the replay simulation (``simulation.png``).

matplotlib with the Agg backend, imported inside the functions so ``import curate`` stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


_BAND_COLOURS = {"unsolvable": "#7f7f7f", "solved": "#2ca02c", "unknown": "#d9d9d9"}
_GROUP_COLOURS = ("#d62728", "#ff7f0e", "#bcbd22", "#17becf", "#9467bd", "#8c564b")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def context_label(tokens: int) -> str:
    """A context length for a label: ``8K`` for a multiple of 1024, else the token count (``128 tok``).

    >>> context_label(8192), context_label(24576), context_label(128), context_label(1500)
    ('8K', '24K', '128 tok', '1500 tok')
    """
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens} tok"


def plot_plan(
    plan: dict[str, Any],
    path: str | Path,
    bands: list[str],
    trained: dict[str, dict[str, Any]] | None = None,
    trained_in: str | None = None,
) -> Path:
    """Stages over training steps (top; parallel stages start together) and each stage's size and difficulty mix
    (bottom: stacked rows per difficulty band, labelled with the stage's rows and rollouts per prompt).

    The curriculum stage draws the plan as planned (its preset: FastCuRL's 8K -> 16K -> 24K -> 16K context), and the
    title says so: a training recipe may scale those settings. ``trained``: per stage name, the values a training
    run actually used (``max_response_length``, ``n``, ``steps``; ``training.plots.plot_plan`` reads them from the
    run) drawn instead, the title naming the run ``trained_in``. A plan over pass rates that carry no information
    (``pass_rate_warning`` in the plan: no rollouts) says so under the figure, as ``pass_rate.png`` does, and in
    the PNG's Description.
    """
    plt = _pyplot()
    stages = [{**st, **(trained or {}).get(st["stage"], {})} for st in plan["stages"]]
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(10, 3 + 0.5 * len(stages)), constrained_layout=True)
    start = 0
    for i, st in enumerate(stages):
        left = 0 if st.get("parallel") else start
        skipped = trained is not None and st["stage"] not in trained  # a run that did not train this stage
        ax_t.barh(i, st["steps"], left=left, color="#c7c7c7" if skipped else "#1f77b4", alpha=0.8)
        label = f"{st['split']} · {context_label(st['max_response_length'])} · n={st['n']} · {st['steps']} steps"
        label = f" not trained (planned: {label})" if skipped else f" {label}"
        ax_t.text(left + st["steps"], i, label, ha="left", va="center", fontsize=8)
        start = left + st["steps"]
    ax_t.set_yticks(range(len(stages)), [st["stage"] for st in stages])
    ax_t.invert_yaxis()
    ax_t.set_xlabel("training steps")
    ax_t.set_xlim(0, max([1, start, *(st["steps"] for st in stages)]) * 1.35)
    total = sum(st["steps"] for st in stages if not st.get("parallel")) + max(
        (st["steps"] for st in stages if st.get("parallel")), default=0
    )
    head = f"curriculum {plan['name']} ({plan['plan']}): {plan['kept']} problems, {total} steps"
    if trained:
        what = f"context, n and steps as trained in {trained_in}" if trained_in else "context, n and steps as trained"
    else:
        what = "context, n and steps as planned (the preset); a training recipe may scale them"
    ax_t.set_title(f"{head}\n{what}", fontsize=10)

    colours = dict(_BAND_COLOURS)
    groups = [b for b in bands if b not in colours]
    colours.update({g: _GROUP_COLOURS[i % len(_GROUP_COLOURS)] for i, g in enumerate(groups)})
    x = range(len(stages))
    bottom = [0] * len(stages)
    for band in bands:
        values = [st["difficulty_mix"].get(band, 0) for st in stages]
        if any(values):
            ax_m.bar(x, values, bottom=bottom, color=colours[band], label=band)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, st in enumerate(stages):
        ax_m.text(i, bottom[i], f"{st['rows']} · n={st['n']}", ha="center", va="bottom", fontsize=8)
    ax_m.set_xticks(list(x), [st["stage"] for st in stages])
    ax_m.set_ylabel("problems")
    ax_m.set_ylim(0, max([1, *bottom]) * 1.15)
    ax_m.legend(title="pass-rate band", fontsize=7, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    note = plan.get("pass_rate_warning")
    if note:
        import textwrap

        ax_m.set_xlabel("\n".join(textwrap.wrap(f"Warning: {note}.", 110)), color="firebrick", fontsize=8)
    fig.savefig(path, dpi=110, metadata={"Description": note} if note else None)
    plt.close(fig)
    return Path(path)


def plot_simulation(result: dict[str, Any], path: str | Path) -> Path:
    """Per policy: the simulated mean pass-rate curve, the fraction of groups with gradient signal, and the share of
    rollouts wasted on all-equal groups."""
    plt = _pyplot()
    policies = result["policies"]
    names = list(policies)
    fig, (ax_c, ax_s, ax_w) = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for name in names:
        steps, rates = zip(*policies[name]["curve"], strict=True) if policies[name]["curve"] else ((), ())
        ax_c.plot(steps, rates, label=name)
    ax_c.set_xlabel("step")
    ax_c.set_ylabel("mean pass rate (simulated)")
    ax_c.legend(fontsize=8)
    ax_s.bar(names, [policies[n]["signal_fraction"] for n in names], color="#1f77b4")
    ax_s.set_ylim(0, 1)
    ax_s.set_title("groups with gradient signal")
    ax_w.bar(names, [policies[n]["wasted_fraction"] for n in names], color="#d62728")
    ax_w.set_ylim(0, 1)
    ax_w.set_title("rollouts wasted (all-equal groups)")
    for ax in (ax_s, ax_w):
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle(f"replay simulation of {result['curriculum']} ({result['steps']} steps, seed {result['seed']})")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
