r"""ScaleRL's sigmoid compute-performance curve (METHODS.md 4.2): fit, error band, extrapolation, advice.

The curve, for a fixed model and training data (ScaleRL Eq. 1)::

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

A is the asymptotic pass rate, B the scaling exponent (efficiency), C_mid the compute at which half of the gain
A - R0 is reached, R0 the initial policy's pass rate. C is whatever unit the run logs (GPU-hours, tokens, steps).

The fit follows the paper (A.5): a grid over A and C_mid, the least-squares B at every grid point, and the grid point
with the smallest sum of squared residuals wins. Points before ``skip_frac`` of the largest compute are left out
(the paper drops the first ~1.5k of 50k GPU-hours: early reward rises almost linearly). The grid follows the data
instead of the paper's fixed A in [0.45, 0.80] and C_mid in [100, 40000] GPU-hours, so a tiny CPU run whose pass
rates lie in 0.05-0.3 and whose compute is in steps fits too: A runs from 0.05 below the best fitted pass rate (noise
can put a point above the asymptote) to 1.0 in steps of 0.005, C_mid over 200 log-spaced values from a quarter of the
smallest compute to 10x the largest.

B at each grid point is found for the whole grid at once (a vectorized Levenberg-Marquardt on log B, started from the
best of a coarse B grid) instead of one ``scipy.optimize.curve_fit`` call per point: same least-squares B
(tests/training/test_scaling.py compares it with curve_fit cell by cell) and the same winner, ~30x faster (a tiny
run's 157 x 200 grid: 0.5 s of CPU against 15.2 s for a curve_fit call per cell). ``curve_fit`` then polishes B
at the winning grid point and gives its standard error.

Error band: the grid points whose SSE is within the profile-likelihood threshold of the best,
``SSE <= SSE_min * (1 + F(level; 1, n - 3) / (n - 3))``, the usual confidence interval for one parameter of a
nonlinear least-squares fit; each parameter's band is its range over those points. A band that reaches the grid edge
(A = 1.0, or C_mid beyond the grid) means the curve has not bent yet and A is not pinned down. With noiseless data the
band shrinks to the grid resolution, reported beside it. ScaleRL treats differences in A below 0.02 as noise (three
repeated runs varied by +-0.015), which is the default margin of the advice.

The advice (``advise``) judges by what the fit predicts at 4x the compute and by its band, and never contradicts its
numbers: "keep going" only with a predicted gain of at least the margin; a fit with a parameter at its grid edge or
a band over most of [0, 1] (``uninformative``) is called "fit uninformative" unless every curve in its band agrees.
``summary_line`` is the one line ``training run`` and ``training show`` print. The fit of a run folder (``fit.json``)
and its figure, which draws no band for an uninformative fit, are ``training.plots.fit_run`` / ``fit_figure``.

Worked example (METHODS.md 4.5, ScaleRL 8B): A=0.610, B=1.92, C_mid=2542 GPU-h with R0=0.3 gives 0.579 at 8k and
0.601 at 16k GPU-h. Fitted (skip_frac 0.1) on that curve sampled every 400 GPU-h up to 8k, the grid gives A=0.615,
B=1.87, C_mid=2601 and predicts 0.605 at 16k.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from curate.errors import InputError


COMPUTE = "compute"
PASS_AT_1 = "pass_at_1"
NEAR = "asymptote near"
KEEP_GOING = "keep going"
LITTLE_GAIN = "little gain"
UNINFORMATIVE = "fit uninformative"
WIDE = 0.5  # a band at least this wide on the pass-rate scale [0, 1] says nothing (``uninformative``)


# --------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class FitConfig:
    """How the sigmoid is fitted.

    skip_frac: leave out points with compute below this fraction of the largest compute (ScaleRL: ~0.03 of 50k
    GPU-h; for short runs 0.25 keeps the early, almost linear rise out). ``min_compute``, when set, replaces it.
    r0: the initial pass rate; default the pass rate measured at the smallest compute (the initial policy).
    a_min / a_max / a_step: the A grid; ``a_min`` defaults to ``max(R0, best fitted pass rate - a_slack) + a_step``
    (noise can put a measured point above the true asymptote, hence the slack).
    c_mid_points / c_mid_below / c_mid_above: the C_mid grid, log-spaced from ``smallest positive compute /
    c_mid_below`` to ``largest compute * c_mid_above``.
    b_min / b_max: the range B may take.
    band_level: confidence level of the error band.
    near_margin: the advice says "asymptote near" when A minus the current (fitted) pass rate is below this.
    min_points: fewest points left after skipping; if skipping leaves fewer, the last ``min_points`` are used and a
    warning says so.
    compute_unit: label of the compute axis (GPU-hours, tokens, steps) for reports and plots.
    """

    skip_frac: float = 0.25
    min_compute: float | None = None
    r0: float | None = None
    a_min: float | None = None
    a_max: float = 1.0
    a_step: float = 0.005
    a_slack: float = 0.05
    c_mid_points: int = 200
    c_mid_below: float = 4.0
    c_mid_above: float = 10.0
    b_min: float = 0.05
    b_max: float = 20.0
    band_level: float = 0.95
    near_margin: float = 0.02
    min_points: int = 4
    compute_unit: str = "compute"


@dataclass
class Fit:
    """A fitted curve: the parameters, their band, the data it came from and how it went."""

    A: float
    B: float
    C_mid: float
    R0: float
    sse: float
    B_stderr: float | None
    band: dict[str, list[float]] | None  # {"A": [lo, hi], "B": [lo, hi], "C_mid": [lo, hi]} at ``band_level``
    band_level: float
    band_at_edge: list[str]
    resolution: dict[str, float]
    n_points: int
    n_fit: int
    skip_below: float
    grid: dict[str, Any]
    runtime_s: float
    compute_unit: str
    warnings: list[str] = field(default_factory=list)
    compute: list[float] = field(default_factory=list, repr=False)
    pass_at_1: list[float] = field(default_factory=list, repr=False)
    band_params: np.ndarray | None = field(default=None, repr=False)  # (m, 3) rows of (A, B, C_mid) in the band

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the band's grid points are summarised, not listed)."""
        out = {k: v for k, v in asdict(self).items() if k != "band_params"}
        out["n_band_points"] = 0 if self.band_params is None else len(self.band_params)
        return out


# --------------------------------------------------------------------------------------------------- curve
def sigmoid(c: Any, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), vectorized; R(0) = R0."""
    from scipy.special import expit

    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        x = B * (math.log(C_mid) - np.log(np.where(c > 0, c, np.nan)))
    return np.where(c > 0, R0 + (A - R0) * expit(-np.nan_to_num(x, nan=0.0)), R0)


def extrapolate(fit: Fit, c: Any) -> np.ndarray | float:
    """The fitted pass rate at compute ``c`` (a number or an array)."""
    out = sigmoid(c, fit.A, fit.B, fit.C_mid, fit.R0)
    return float(out) if np.ndim(c) == 0 else out


def extrapolate_band(fit: Fit, c: Any) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest prediction at ``c`` over the grid points in the error band (the fit itself without one)."""
    c = np.atleast_1d(np.asarray(c, dtype=float))
    if fit.band_params is None or not len(fit.band_params):
        mid = sigmoid(c, fit.A, fit.B, fit.C_mid, fit.R0)
        return mid, mid
    p = fit.band_params
    preds = np.stack([sigmoid(c, a, b, m, fit.R0) for a, b, m in p]) if len(p) <= 64 else _band_preds(fit, c)
    return preds.min(axis=0), preds.max(axis=0)


def _band_preds(fit: Fit, c: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    p = fit.band_params
    logc = np.log(np.where(c > 0, c, 1.0))[None, :]
    x = p[:, 1:2] * (np.log(p[:, 2:3]) - logc)
    pred = fit.R0 + (p[:, 0:1] - fit.R0) * expit(-x)
    return np.where(c[None, :] > 0, pred, fit.R0)


# --------------------------------------------------------------------------------------------------- fit
def _solve_b(
    A: np.ndarray, dlog: np.ndarray, y: np.ndarray, r0: float, b_min: float, b_max: float, iters: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares B for every (A, C_mid) cell at once; returns (B, SSE) of shape (nA, nC).

    A: (nA, 1, 1); dlog = log C_mid - log C: (1, nC, n); y: (1, 1, n). Works on u = log B (keeps B positive): a coarse
    grid of B picks each cell's start, then Levenberg-Marquardt steps, accepted only where they lower the SSE, on the
    cells not yet converged (step below 1e-9 in log B, or a damping so large that no step helps).
    """
    from scipy.special import expit

    n_a, n_c, n = A.shape[0], dlog.shape[1], dlog.shape[2]
    amp = np.broadcast_to(A[:, :, 0] - r0, (n_a, n_c)).reshape(-1, 1)
    ll = np.broadcast_to(dlog, (n_a, n_c, n)).reshape(-1, n)
    yy = y.reshape(1, n)

    def curve(u: np.ndarray, idx: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """(1 / (1 + (C_mid / C)^B), SSE) of the cells ``idx`` at B = exp(u)."""
        s = expit(-np.exp(u)[:, None] * ll[idx])
        r = r0 + amp[idx] * s - yy
        return s, np.einsum("cn,cn->c", r, r)

    lo, hi = math.log(b_min), math.log(b_max)
    cells = n_a * n_c
    u = np.zeros(cells)
    sse = np.full(cells, np.inf)
    s_cur = np.zeros((cells, n))
    for u0 in np.linspace(lo, hi, 16):
        s0, sse0 = curve(np.full(cells, u0), slice(None))
        better = sse0 < sse
        u[better], sse[better], s_cur[better] = u0, sse0[better], s0[better]
    lam = np.full(cells, 1e-3)
    active = np.arange(cells)
    for _ in range(iters):
        if not len(active):
            break
        ua, la, ama, s = u[active], ll[active], amp[active], s_cur[active]
        r = r0 + ama * s - yy
        jac = -ama * s * (1.0 - s) * la * np.exp(ua)[:, None]  # d model / d u
        g = np.einsum("cn,cn->c", jac, r)
        h = np.einsum("cn,cn->c", jac, jac)
        step = -g / (h * (1.0 + lam[active]) + 1e-300)
        pinned = ((ua <= lo) & (step <= 0)) | ((ua >= hi) & (step >= 0))  # the optimum lies past a bound of B
        u_new = np.clip(ua + step, lo, hi)
        sse_old = sse[active]
        s_new, sse_new = curve(u_new, active)
        ok = sse_new < sse_old
        small = (np.abs(u_new - ua) < 1e-8) | (sse_old - sse_new <= 1e-13 * sse_old)
        done = pinned | np.where(ok, small, lam[active] > 1e6)
        u[active] = np.where(ok, u_new, ua)
        sse[active] = np.where(ok, sse_new, sse_old)
        s_cur[active[ok]] = s_new[ok]
        lam[active] = np.where(ok, lam[active] / 3.0, lam[active] * 10.0)
        active = active[~done]
    return np.exp(u).reshape(n_a, n_c), sse.reshape(n_a, n_c)


def fit_sigmoid(compute: Any, pass_at_1: Any, cfg: FitConfig = FitConfig()) -> Fit:
    """Fit R(C) to measured (compute, pass rate) points as ScaleRL does (grid over A and C_mid, least-squares B)."""
    t0 = time.perf_counter()
    c, y, r0, keep, threshold, notes = _fit_points(compute, pass_at_1, cfg)
    cf, yf = c[keep], y[keep]
    a_grid = _a_grid(r0, yf, cfg)
    cmax = float(c.max())
    m_grid = np.geomspace(float(c[c > 0].min()) / cfg.c_mid_below, cmax * cfg.c_mid_above, cfg.c_mid_points)

    logc = np.log(cf)
    dlog = (np.log(m_grid)[:, None] - logc[None, :])[None, :, :]
    b_grid, sse = _solve_b(a_grid[:, None, None], dlog, yf[None, None, :], r0, cfg.b_min, cfg.b_max)
    ia, im = np.unravel_index(int(np.argmin(sse)), sse.shape)
    A, C_mid, B, best = float(a_grid[ia]), float(m_grid[im]), float(b_grid[ia, im]), float(sse[ia, im])
    B, best, b_se = _polish_b(cf, yf, A, B, C_mid, r0, best, cfg)
    band, at_edge, band_params = _band(sse, ia, a_grid, b_grid, m_grid, len(cf), cfg, notes)
    return Fit(
        A=A,
        B=B,
        C_mid=C_mid,
        R0=r0,
        sse=best,
        B_stderr=b_se,
        band=band,
        band_level=cfg.band_level,
        band_at_edge=at_edge,
        resolution={"A": cfg.a_step, "C_mid_ratio": float(m_grid[1] / m_grid[0])},
        n_points=len(c),
        n_fit=len(cf),
        skip_below=float(threshold),
        grid={
            "A": [float(a_grid[0]), float(a_grid[-1]), len(a_grid)],
            "C_mid": [float(m_grid[0]), float(m_grid[-1]), len(m_grid)],
        },
        runtime_s=time.perf_counter() - t0,
        compute_unit=cfg.compute_unit,
        warnings=notes,
        compute=c.tolist(),
        pass_at_1=y.tolist(),
        band_params=band_params,
    )


def _fit_points(
    compute: Any, pass_at_1: Any, cfg: FitConfig
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, float, list[str]]:
    """The points ``fit_sigmoid`` fits: finite ones sorted by compute (c, y), R0, the mask of those fitted (compute
    above ``skip_frac`` of the largest, else the last ``min_points`` with compute > 0), its threshold and the
    warnings so far. Raises ``InputError`` for fewer than 2 points, or fewer than 3 to fit."""
    c = np.asarray(compute, dtype=float)
    y = np.asarray(pass_at_1, dtype=float)
    ok = np.isfinite(c) & np.isfinite(y) & (c >= 0)
    c, y = c[ok], y[ok]
    order = np.argsort(c, kind="stable")
    c, y = c[order], y[order]
    notes: list[str] = []
    if len(c) < 2:
        raise InputError(f"need at least 2 (compute, pass rate) points to fit a curve, got {len(c)}")
    r0 = float(cfg.r0) if cfg.r0 is not None else float(y[0])
    threshold = cfg.min_compute if cfg.min_compute is not None else cfg.skip_frac * float(c.max())
    keep = (c >= threshold) & (c > 0)
    if keep.sum() < cfg.min_points:
        positive = np.flatnonzero(c > 0)
        keep = np.zeros_like(keep)
        keep[positive[-cfg.min_points :]] = True
        threshold = float(c[keep].min()) if keep.any() else threshold
        notes.append(
            f"skipping points below {cfg.skip_frac:g} of the largest compute left fewer than {cfg.min_points}; "
            f"fitted the last {int(keep.sum())} points with compute > 0 instead"
        )
    n_fit = int(keep.sum())
    if n_fit < 3:
        raise InputError(f"need at least 3 points with compute > 0 to fit A, B and C_mid, got {n_fit}")
    if n_fit <= 3:
        notes.append(f"only {n_fit} points fitted for 3 parameters: the curve goes through them, no error band")
    if y[keep].max() <= r0:
        notes.append(f"no fitted point is above R0={r0:.4f}: the run has not improved, the fit is meaningless")
    return c, y, r0, keep, threshold, notes


def _a_grid(r0: float, yf: np.ndarray, cfg: FitConfig) -> np.ndarray:
    """The grid of A: multiples of ``a_step`` from just above max(R0, best point - slack) (the paper's 0.450,
    0.455, ...) or ``a_min``, to ``a_max``, above R0."""
    if cfg.a_min is not None:
        a_lo = cfg.a_min
    else:
        a_lo = (math.floor(max(r0, float(yf.max()) - cfg.a_slack) / cfg.a_step + 1e-9) + 1) * cfg.a_step
    n_a = math.floor((cfg.a_max - a_lo) / cfg.a_step + 1e-9) + 1
    a_grid = np.round(a_lo + cfg.a_step * np.arange(max(n_a, 0)), 10)
    a_grid = a_grid[a_grid > r0]
    if not len(a_grid):
        raise InputError(f"empty A grid: R0={r0} is not below a_max={cfg.a_max}")
    return a_grid


def _polish_b(
    cf: np.ndarray, yf: np.ndarray, A: float, B: float, C_mid: float, r0: float, best: float, cfg: FitConfig
) -> tuple[float, float, float | None]:
    """curve_fit polishes B at the winning grid point (and gives its standard error), as the paper fits B there:
    (B, its SSE, its standard error or None)."""
    from scipy.optimize import curve_fit

    b_se = None
    lm = math.log(C_mid) - np.log(cf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            popt, pcov = curve_fit(
                lambda _c, b: r0 + (A - r0) / (1.0 + np.exp(np.clip(b * lm, -700, 700))), cf, yf, p0=[B]
            )
            b_cf = float(popt[0])
            sse_cf = float(np.sum((sigmoid(cf, A, b_cf, C_mid, r0) - yf) ** 2))
            if cfg.b_min <= b_cf <= cfg.b_max and sse_cf <= best:
                B, best = b_cf, sse_cf
            if np.isfinite(pcov[0, 0]) and len(cf) > 3:
                b_se = float(math.sqrt(pcov[0, 0]))
        except (RuntimeError, ValueError):
            pass
    return B, best, b_se


def _band(
    sse: np.ndarray,
    ia: int,
    a_grid: np.ndarray,
    b_grid: np.ndarray,
    m_grid: np.ndarray,
    n_fit: int,
    cfg: FitConfig,
    notes: list[str],
) -> tuple[dict[str, list[float]] | None, list[str], np.ndarray | None]:
    """The joint error band (an F-test on the SSE over the grid, at ``band_level``): (ranges of A, B and C_mid,
    the parameters that reach a grid edge or bound, the band's parameter triples); a warning in ``notes`` when A's
    band reaches the grid edge. No band without a degree of freedom (3 points)."""
    from scipy import stats

    band, at_edge, band_params = None, [], None
    dof = n_fit - 3
    if dof > 0:
        ins = sse <= float(sse.min()) * (1.0 + stats.f.ppf(cfg.band_level, 1, dof) / dof)
        ai, mi = np.nonzero(ins)
        band_params = np.column_stack([a_grid[ai], b_grid[ai, mi], m_grid[mi]])
        band = {
            "A": [float(a_grid[ai].min()), float(a_grid[ai].max())],
            "B": [float(b_grid[ins].min()), float(b_grid[ins].max())],
            "C_mid": [float(m_grid[mi].min()), float(m_grid[mi].max())],
        }
        if ai.max() == len(a_grid) - 1:
            at_edge.append("A")
        if mi.max() == len(m_grid) - 1 or mi.min() == 0:
            at_edge.append("C_mid")
        if np.any(b_grid[ins] >= cfg.b_max * 0.999) or np.any(b_grid[ins] <= cfg.b_min * 1.001):
            at_edge.append("B")
        if "A" in at_edge:
            notes.append(
                f"the band of A reaches the grid edge ({cfg.a_max:g}): the curve has not bent yet, the asymptote is "
                "not pinned down; train further before trusting A"
            )
    if ia == len(a_grid) - 1 and "A" not in at_edge:
        at_edge.append("A")
    return band, at_edge, band_params


# --------------------------------------------------------------------------------------------------- advice
def uninformative(fit: Fit, cfg: FitConfig = FitConfig()) -> list[str]:
    """Why the fit cannot be trusted, one short reason each (empty: it can): no error band, a parameter whose band
    reaches its grid edge or range bound, an A band or a 4x prediction band spanning most of [0, 1] (``WIDE``), or
    no fitted point above R0."""
    reasons = []
    if fit.band is None:
        reasons.append(f"no error band ({fit.n_fit} points for 3 parameters)")
    band = fit.band or {}
    if "A" in fit.band_at_edge:
        reasons.append(f"A's band hits the grid edge ({cfg.a_max:g})")
    if "B" in fit.band_at_edge or not cfg.b_min * 1.001 < fit.B < cfg.b_max * 0.999:
        reasons.append(f"B at its bound ({fit.B:.3g}; range {cfg.b_min:g}-{cfg.b_max:g})")
    if "C_mid" in fit.band_at_edge:
        reasons.append("C_mid's band hits the grid edge")
    if "A" in band and band["A"][1] - band["A"][0] >= WIDE:
        reasons.append(f"A's {fit.band_level:.0%} band [{band['A'][0]:.3f}, {band['A'][1]:.3f}] spans most of [0, 1]")
    elif fit.band_params is not None and fit.compute:
        lo, hi = extrapolate_band(fit, 4 * max(fit.compute))
        if float(hi[0] - lo[0]) >= WIDE:
            reasons.append(f"the 4x prediction band [{float(lo[0]):.3f}, {float(hi[0]):.3f}] spans most of [0, 1]")
    fitted = [y for c, y in zip(fit.compute, fit.pass_at_1, strict=True) if c >= fit.skip_below and c > 0]
    if fitted and max(fitted) <= fit.R0:
        reasons.append(f"no fitted point above R0={fit.R0:.3f}")
    return reasons


def advise(fit: Fit, margin: float | None = None, cfg: FitConfig = FitConfig()) -> dict[str, Any]:
    """Whether more compute is worth it, judged by what the fit predicts at 4x the compute so far (and its band).

    - "keep going": 4x the compute is predicted to gain at least ``margin`` over the fitted pass rate now, and either
      the fit is informative (``uninformative`` gives no reason against it) or every curve in its band rises (a curve
      that has not bent yet: the trend is clear, A is not);
    - "asymptote near": the predicted gain is below ``margin`` and A lies within ``margin`` of the fitted pass rate
      (or, for a fit that is otherwise uninformative, every curve in the band gains less than ``margin``);
    - "little gain": the predicted gain is below ``margin`` although A lies further above (the curve rises too
      slowly for 4x the compute to show);
    - "fit uninformative": the band straddles the margin and the fit cannot be trusted (the reasons are listed).

    The verdict never contradicts the numbers beside it: "keep going" always comes with a predicted gain of at least
    ``margin``. ``summary`` is the one-line report (``training run`` prints it after ``[chain] fit:``).
    """
    margin = cfg.near_margin if margin is None else margin
    c_now = max(fit.compute) if fit.compute else fit.C_mid
    now = float(extrapolate(fit, c_now))
    at2, at4 = float(extrapolate(fit, 2 * c_now)), float(extrapolate(fit, 4 * c_now))
    lo4, hi4 = (float(v[0]) for v in extrapolate_band(fit, 4 * c_now))
    gain, gain_lo, gain_hi = at4 - now, min(lo4, at4) - now, max(hi4, at4) - now
    gap = fit.A - now
    reasons = uninformative(fit, cfg)
    banded = fit.band_params is not None and len(fit.band_params) > 0
    unit = fit.compute_unit
    where = f"fitted pass rate {now:.3f} at {human(c_now)} {unit}"
    if gain >= margin and (not reasons or (banded and gain_lo > 0)):
        verdict = KEEP_GOING
        message = (
            f"keep going: {where}; predicted {at2:.3f} at 2x ({at2 - now:+.3f}) and {at4:.3f} at 4x ({gain:+.3f}, "
            f"band {gain_lo:+.3f} to {gain_hi:+.3f}), A={fit.A:.3f}."
        )
        if reasons:
            message += (
                f" Every curve in the band rises, but the fit is loose ({'; '.join(reasons)}): trust the trend, not A."
            )
    elif gain < margin and (not reasons or (banded and gain_hi < margin)):
        verdict = NEAR if gap < margin or reasons else LITTLE_GAIN
        if verdict == NEAR:
            message = (
                f"asymptote near: {where} is within {max(gap, 0.0):.3f} of A={fit.A:.3f}; 4x the compute buys "
                f"{gain:+.3f} (band {gain_lo:+.3f} to {gain_hi:+.3f}), below the margin {margin:g}. Change what "
                "moves A (loss, batch size, generation length, data) rather than adding compute."
            )
        else:
            message = (
                f"little gain: {where}; 4x the compute buys only {gain:+.3f} (below the margin {margin:g}) although "
                f"A={fit.A:.3f} lies {gap:.3f} above: the curve rises too slowly (B={fit.B:.3g}, "
                f"C_mid={human(fit.C_mid)} {unit}). Change what moves the efficiency rather than adding compute."
            )
    else:
        verdict = UNINFORMATIVE
        message = (
            f"fit uninformative: {'; '.join(reasons)}. {where[0].upper() + where[1:]}, 4x the compute predicts "
            f"{gain:+.3f} (band {gain_lo:+.3f} to {gain_hi:+.3f}): the data do not say whether more compute helps. "
            "Evaluate more often (eval.every) or train further before reading A or the advice."
        )
    advice = {
        "verdict": verdict,
        "message": message,
        "uninformative": reasons,
        "compute_now": c_now,
        "fitted_now": now,
        "gap_to_A": gap,
        "margin": margin,
        "at_2x": at2,
        "at_4x": at4,
        "gain_2x": at2 - now,
        "gain_4x": gain,
        "gain_4x_band": [gain_lo, gain_hi],
        "compute_unit": unit,
    }
    advice["summary"] = summary_line(advice, fit.to_dict())
    return advice


def human(x: float) -> str:
    """A compute amount for people: ``338644`` -> ``339K``, ``1.35e6`` -> ``1.35M``, ``60`` -> ``60``.

    >>> _human(338644.0), _human(1354576.0), _human(60.0), _human(2.5e10)
    ('339K', '1.35M', '60', '25G')
    """
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def summary_line(advice: Mapping[str, Any], fit: Mapping[str, Any]) -> str:
    """One readable line of a fit and its advice (``fit.json``'s ``advice`` and ``fit``): the verdict, A with its
    band, the predicted gain at 4x the compute with its band, and where "now" is.

    >>> advice = {"verdict": "keep going", "fitted_now": 0.41, "compute_now": 2.5e6, "gain_4x": 0.052,
    ...           "gain_4x_band": [0.031, 0.07]}
    >>> line = summary_line(advice, {"A": 0.5, "band": {"A": [0.47, 0.55]}, "compute_unit": "tokens"})
    >>> line[:67]
    'keep going: A=0.500 [0.470, 0.550]; 4x the compute (10M tokens) pre'
    >>> line[67:]
    'dicts +0.052 [+0.031, +0.070] over 0.410 now (2.5M tokens)'
    """
    band_a = (fit.get("band") or {}).get("A")
    a = f"A={fit['A']:.3f}" + (f" [{band_a[0]:.3f}, {band_a[1]:.3f}]" if band_a else " (no band)")
    unit = fit.get("compute_unit") or advice.get("compute_unit") or "compute"
    c_now = float(advice["compute_now"])
    gain = f"{advice['gain_4x']:+.3f}"
    if advice.get("gain_4x_band"):
        lo, hi = advice["gain_4x_band"]
        gain += f" [{lo:+.3f}, {hi:+.3f}]"
    line = (
        f"{advice['verdict']}: {a}; 4x the compute ({human(4 * c_now)} {unit}) predicts {gain} over "
        f"{advice['fitted_now']:.3f} now ({human(c_now)} {unit})"
    )
    if advice.get("uninformative"):
        loose = "" if advice["verdict"] == UNINFORMATIVE else "loose fit: "
        line += f"; {loose}{', '.join(advice['uninformative'])}"
    return line


# --------------------------------------------------------------------------------------------------- I/O
