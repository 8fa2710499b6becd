"""The run figures say what a reader needs (issue 23, item 12): eval.png has the init and SFT baselines, the RL
stages and the compute unit; training.png has the stage boundaries; fit.png draws no band for an uninformative fit
and says so; plan.png of a run shows the contexts it trained with. Figures are built from a literal, demo-shaped
run folder (tests/training/demo_run.py) and inspected as matplotlib objects (in-memory, no network).
"""

from __future__ import annotations

import json

from tests.training.demo_run import write_demo_run


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_eval_figure_has_baselines_stages_and_compute_unit(tmp_path):
    from training.plots import eval_figure, plot_eval

    run = write_demo_run(tmp_path / "ws")
    (ax,) = eval_figure(run).axes
    labels = ax.get_legend_handles_labels()[1]
    assert any(label.startswith("sft: 0.534 ± 0.022 (n=297)") for label in labels)
    assert any(label.startswith("init: 0.000") for label in labels)
    assert "tokens" in ax.get_xlabel()  # recipe.json's fit.compute_unit
    assert _texts(ax) == ["stage1 · 128 tok", "stage2 · 256 tok", "stage3 · 384 tok", "stage4 · 256 tok"]
    assert ax.get_ylim()[0] >= -0.02  # a pass rate: the axis does not run far below 0
    assert plot_eval(run).stat().st_size > 10_000


def test_training_figure_marks_stage_boundaries(tmp_path):
    from training.plots import training_figure

    run = write_demo_run(tmp_path / "ws")
    fig = training_figure(run)
    for ax in fig.axes:
        assert _texts(ax) == ["stage1 · 128 tok", "stage2 · 256 tok", "stage3 · 384 tok", "stage4 · 256 tok"]
        boundaries = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--")
        assert boundaries == [15.5, 30.5, 45.5]  # where stage2, stage3 and stage4 start


def test_fit_figure_of_an_uninformative_fit_draws_no_band_and_says_why(tmp_path):
    from matplotlib.collections import PolyCollection

    from training.plots import fit_figure, fit_run
    from training.scaling import FitConfig, advise, fit_sigmoid

    run = write_demo_run(tmp_path / "ws")
    result = fit_run(run, FitConfig(compute_unit="tokens"))
    assert result["advice"]["verdict"] == "fit uninformative"
    fit = fit_sigmoid(*_curve(run), FitConfig(compute_unit="tokens"))
    (ax,) = fit_figure(fit, advice=advise(fit)).axes
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no fill_between band
    assert any("uninformative" in label for label in ax.get_legend_handles_labels()[1])
    assert any("B at its bound" in text.replace("\n", " ") for text in _texts(ax))
    assert "fit uninformative" in ax.get_title()

    informative = [0.05, 0.12, 0.18, 0.22, 0.25, 0.27, 0.28, 0.29]  # a curve that bends: the band is drawn
    fit = fit_sigmoid([0, 20, 40, 60, 80, 100, 120, 140], informative, FitConfig(skip_frac=0.1))
    (ax,) = fit_figure(fit).axes
    assert [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_plan_figure_of_a_run_shows_the_trained_contexts(tmp_path, monkeypatch):
    from training.plots import plot_plan

    ws = tmp_path / "ws"
    run = write_demo_run(ws)
    names = ["stage1", "stage2", "stage3", "stage4"]
    stages = [{"stage": s, "split": "L1", "rows": 500, "n": 8, "steps": 20, "max_response_length": 8192 * (1 + i % 3),
               "difficulty_mix": {"solved": 500}} for i, s in enumerate(names)]  # fmt: skip
    plan = {"name": "tiny", "plan": "fastcurl", "kept": 2000, "total_steps": 82, "stages": stages}
    (ws / "curricula" / "tiny").mkdir(parents=True)
    (ws / "curricula" / "tiny" / "plan.json").write_text(json.dumps(plan))
    captured = {}

    def draw(plan, path, bands, trained=None, trained_in=None):
        captured.update(trained=trained, trained_in=trained_in)
        return path

    with monkeypatch.context() as m:
        m.setattr("curate.curriculum.plots.plot_plan", draw)
        assert plot_plan(run) == run / "plan.png"
    assert {k: v["max_response_length"] for k, v in captured["trained"].items()} == {
        "stage1": 128, "stage2": 256, "stage3": 384, "stage4": 256
    }  # fmt: skip
    assert captured["trained_in"] == "run tiny-fastcurl"
    assert plot_plan(run).stat().st_size > 10_000


def test_curate_figures_keep_pass_rates_on_0_1_and_log_ticks_apart(tmp_path):
    import numpy as np

    from curate.curriculum.plots import context_label
    from curate.select.plots import compare_histogram, histogram_bins, log_ticks

    bins = histogram_bins(np.array([0.9] * 10), bounds=(0.0, 1.0))  # a constant pass rate: the axis stays [0, 1]
    assert (bins[0], bins[-1]) == (0.0, 1.0)
    assert histogram_bins(np.array([3.0, 3.0]))[0] < 3.0 < histogram_bins(np.array([3.0, 3.0]))[-1]
    assert log_ticks(20, 27) == [20.0, 22.0, 24.0, 26.0]  # under a decade: a few plain labels, no 2x10^1 pile-up
    path = compare_histogram(
        np.array([20.0, 21, 24, 25]), np.array([20.0, 24]), "length", tmp_path / "l.png", log=True
    )
    assert path.stat().st_size > 5_000
    assert (context_label(16384), context_label(128)) == ("16K", "128 tok")  # 128 // 1024 used to print "0K"


def _curve(run):
    import polars as pl

    df = pl.read_parquet(run / "eval.parquet")
    return df["compute"].to_numpy(), df["pass_at_1"].to_numpy()
