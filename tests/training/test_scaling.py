"""ScaleRL's sigmoid fit: parameter recovery, extrapolation, the advice, fit.json/fit.png and `training fit`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from training.plots import fit_run
from training.scaling import KEEP_GOING, NEAR, FitConfig, advise, extrapolate, fit_sigmoid, sigmoid


# (A, B, C_mid, R0, compute points): ScaleRL 8B and MoE (GPU-hours, METHODS.md 4.5), a tiny CPU run in steps with
# pass rates 0.05-0.3, and a slow curve in tokens.
CURVES = {
    "scalerl-8b": (0.61, 1.92, 2542.0, 0.30, np.arange(0.0, 16001.0, 400.0)),
    "scout-moe": (0.71, 1.65, 4242.0, 0.35, np.arange(0.0, 30001.0, 750.0)),
    "tiny-cpu-steps": (0.30, 1.20, 60.0, 0.05, np.arange(0.0, 301.0, 10.0)),
    "tokens-slow": (0.45, 0.80, 1e6, 0.10, np.arange(0.0, 2e7 + 1, 5e5)),
}


def _curve(name: str, noise: float = 0.0, seed: int = 0):
    A, B, M, R0, C = CURVES[name]
    R = sigmoid(C, A, B, M, R0)
    if noise:
        R = R + np.random.default_rng(seed).normal(0.0, noise, len(C))
        R[0] = R0  # the initial policy's pass rate is measured, not fitted
    return C, R, (A, B, M)


@pytest.mark.parametrize("name", list(CURVES))
def test_fit_recovers_noiseless_curves_within_grid_resolution(name):
    C, R, (A, B, M) = _curve(name)
    fit = fit_sigmoid(C, R, FitConfig(skip_frac=0.1))
    assert abs(fit.A - A) <= fit.resolution["A"] + 1e-9
    assert abs(math.log(fit.C_mid / M)) <= math.log(fit.resolution["C_mid_ratio"])
    assert abs(fit.B - B) / B < 0.05
    assert R[0] == fit.R0
    fitted = np.greater_equal(C, 0.1 * C.max())
    assert fit.n_fit == int(fitted.sum())


@pytest.mark.parametrize("name", list(CURVES))
def test_fit_on_lightly_noisy_curves_keeps_truth_in_band(name):
    C, R, (A, B, M) = _curve(name, noise=0.005)
    fit = fit_sigmoid(C, R, FitConfig(skip_frac=0.1))
    assert abs(fit.A - A) <= 0.02  # ScaleRL's noise level for A
    assert fit.band is not None and not fit.band_at_edge
    step, ratio = fit.resolution["A"], fit.resolution["C_mid_ratio"]
    assert fit.band["A"][0] - step <= A <= fit.band["A"][1] + step
    assert fit.band["C_mid"][0] / ratio <= M <= fit.band["C_mid"][1] * ratio
    assert fit.band["B"][0] * 0.9 <= B <= fit.band["B"][1] * 1.1


def test_vectorized_b_is_the_least_squares_b_curve_fit_finds():
    """The grid's B solver returns, cell by cell, an SSE no worse than scipy's curve_fit (the paper's method)."""
    from scipy.optimize import curve_fit

    from training.scaling import _solve_b

    C, R, _ = _curve("scalerl-8b", noise=0.005)
    c, y, r0 = C[C > 0], R[C > 0], float(R[0])
    a_grid = np.array([0.58, 0.61, 0.65, 0.8])
    m_grid = np.geomspace(300, 60000, 9)
    dlog = (np.log(m_grid)[:, None] - np.log(c)[None, :])[None]
    b, sse = _solve_b(a_grid[:, None, None], dlog, y[None, None, :], r0, 0.05, 20.0)
    checked = 0
    for i, a in enumerate(a_grid):
        for j, m in enumerate(m_grid):
            (b_cf,), _ = curve_fit(lambda cc, bb, a=a, m=m: r0 + (a - r0) / (1 + (m / cc) ** bb), c, y, p0=[1.0])
            sse_cf = float(np.sum((r0 + (a - r0) / (1 + (m / c) ** b_cf) - y) ** 2))
            if 0.05 < b_cf < 20:  # B > 0 by definition; curve_fit, unbounded, wanders below 0 where C_mid > C
                assert sse[i, j] <= sse_cf * (1 + 1e-6) + 1e-12
                assert b[i, j] == pytest.approx(b_cf, rel=1e-3)
                checked += 1
    assert checked >= 25


def test_extrapolation_from_first_half_predicts_the_end():
    """ScaleRL's protocol: fit on half the budget, extrapolate to the full budget."""
    C, R, (A, B, M) = _curve("scalerl-8b")
    half = C <= 8000
    fit = fit_sigmoid(C[half], R[half], FitConfig(skip_frac=0.1))
    assert extrapolate(fit, 16000.0) == pytest.approx(sigmoid(16000.0, A, B, M, R[0]), abs=0.01)
    Cn, Rn, _ = _curve("tiny-cpu-steps", noise=0.005)
    half = Cn <= 150
    fit = fit_sigmoid(Cn[half], Rn[half], FitConfig(skip_frac=0.1))
    assert extrapolate(fit, 300.0) == pytest.approx(sigmoid(300.0, 0.30, 1.20, 60.0, 0.05), abs=0.02)


def test_advice_flips_when_the_asymptote_is_near():
    A, B, M, R0 = 0.30, 1.2, 60.0, 0.05
    late = np.arange(0.0, 3001.0, 100.0)  # 50x C_mid: the curve has flattened
    fit = fit_sigmoid(late, sigmoid(late, A, B, M, R0), FitConfig(skip_frac=0.05))
    adv = advise(fit)
    assert adv["verdict"] == NEAR and adv["gap_to_A"] < 0.02 and adv["gain_4x"] < 0.02
    early = np.arange(0.0, 121.0, 5.0)  # up to 2x C_mid: still rising
    fit = fit_sigmoid(early, sigmoid(early, A, B, M, R0), FitConfig(skip_frac=0.1))
    adv = advise(fit)
    assert adv["verdict"] == KEEP_GOING and adv["gain_2x"] > 0.02
    assert adv["at_4x"] > adv["at_2x"] > adv["fitted_now"]
    assert advise(fit, margin=0.5)["verdict"] == NEAR  # the margin is the user's


def test_unbent_curve_says_the_asymptote_is_not_pinned():
    C = np.arange(0.0, 31.0, 2.0)  # only up to half of C_mid: no bend yet
    R = sigmoid(C, 0.3, 1.2, 60.0, 0.05) + np.random.default_rng(1).normal(0, 0.005, len(C))
    fit = fit_sigmoid(C, R, FitConfig(skip_frac=0.1))
    assert "A" in fit.band_at_edge
    assert any("not pinned down" in w for w in fit.warnings)
    assert advise(fit)["verdict"] == KEEP_GOING


def test_advice_agrees_with_its_numbers_and_says_when_the_fit_is_uninformative():
    """Issue 23: the demo's four points put B at its bound and A's band at 0.515-1.0; the advice said "keep going"
    while predicting +0.000. Now it says the fit is uninformative, and "keep going" always comes with a predicted
    gain of at least the margin."""
    from training.scaling import LITTLE_GAIN, UNINFORMATIVE

    demo = fit_sigmoid([8e4, 1.7e5, 2.5e5, 338644.0], [0.514, 0.530, 0.534, 0.521], FitConfig(compute_unit="tokens"))
    adv = advise(demo)
    assert adv["verdict"] == UNINFORMATIVE and abs(adv["gain_4x"]) < 0.02
    assert any(r.startswith("B at its bound") for r in adv["uninformative"])
    assert adv["summary"].startswith("fit uninformative: A=0.530 [0.515, 1.000]; 4x the compute (1.35M tokens)")
    for name in CURVES:
        C, R, _ = _curve(name, noise=0.01, seed=3)
        for frac in (0.25, 1.0):
            keep = np.less_equal(C, frac * C.max())
            adv = advise(fit_sigmoid(C[keep], R[keep], FitConfig(skip_frac=0.1)))
            if adv["verdict"] == KEEP_GOING:
                assert adv["gain_4x"] >= adv["margin"]
                assert not adv["uninformative"] or adv["gain_4x_band"][0] > 0  # a loose fit: every curve rises
            elif adv["verdict"] in (NEAR, LITTLE_GAIN):
                assert adv["gain_4x"] < adv["margin"]


def test_fit_run_writes_json_and_png_and_cli_prints_parameters(tmp_path, capsys):
    from training.cli import main

    C, R, (A, _, _) = _curve("tiny-cpu-steps", noise=0.005)
    csv = tmp_path / "curve.csv"
    pl.DataFrame({"compute": C, "pass_at_1": R}).write_csv(csv)
    assert main(["fit", str(csv), "--skip-frac", "0.1", "--extrapolate", "600", "--unit", "steps"]) == 0
    out = capsys.readouterr().out
    for key in ("A     =", "B     =", "C_mid =", "R(600) =", "keep going"):
        assert key in out
    saved = json.loads((tmp_path / "fit.json").read_text())
    assert abs(saved["fit"]["A"] - A) <= 0.02
    assert saved["fit"]["compute_unit"] == "steps"
    assert any(p["compute"] == 600 for p in saved["predictions"])
    assert (tmp_path / "fit.png").stat().st_size > 10_000
    assert f"A     = {saved['fit']['A']:.4f}" in out

    assert main(["fit", str(csv), "--skip-frac", "0.1", "--json", "--no-plot"]) == 0
    assert json.loads(capsys.readouterr().out)["advice"]["verdict"] == KEEP_GOING
    bad = tmp_path / "bad.csv"
    pl.DataFrame({"step": [1, 2], "reward": [0.1, 0.2]}).write_csv(bad)
    assert main(["fit", str(bad)]) == 2
    assert "pass_at_1" in capsys.readouterr().err


def test_plots_from_a_run_folder_tolerate_missing_columns(tmp_path):
    from training.plots import plot_eval, plot_training

    run = tmp_path / "run"
    run.mkdir()
    assert plot_training(run) is None  # no metrics.parquet
    pl.DataFrame({"step": [1, 2, 3], "loss": [1.0, 0.9, 0.8]}).write_parquet(run / "metrics.parquet")
    assert plot_training(run) is None  # neither reward nor kept_group_frac
    pl.DataFrame({"step": [1, 2, 3], "reward": [0.1, None, 0.3]}).write_parquet(run / "metrics.parquet")
    C, R, _ = _curve("tiny-cpu-steps")
    pl.DataFrame({"step": C.astype(int), "compute": C, "pass_at_1": R, "stderr": [0.01] * len(C)}).write_parquet(
        run / "eval.parquet"
    )
    fit = fit_run(run, FitConfig(skip_frac=0.1))  # what ``training run`` draws (``outcome.fit_and_plot``)
    written = [plot_training(run), plot_eval(run), Path(fit["plot"])]
    assert [p.name for p in written] == ["training.png", "eval.png", "fit.png"]
    assert all(p.stat().st_size > 5_000 for p in written)
    assert fit["fit"]["n_points"] == len(C)
