"""``training.choose``: which SFT checkpoint the chain keeps, and when it says that checkpoint is no optimum."""

from __future__ import annotations

from training.choose import best_point, still_rising


def _points(*rates: float, every: int = 500) -> list[dict]:
    return [{"step": every * (i + 1), "pass_at_1": r, "stderr": 0.03} for i, r in enumerate(rates)]


def test_the_best_checkpoint_is_the_highest_and_the_later_on_a_tie():
    assert best_point(_points(0.3, 0.6, 0.6, 0.5))["step"] == 1500


def test_a_validation_curve_still_rising_at_the_last_step_is_named_and_a_plateau_is_not():
    """Measured: seed 1's curve 0.53, 0.59, 0.62 at 2,000-3,000 steps was still rising (continued SFT took it to
    0.76), so the chain warns; a curve that peaked earlier, or is flat at its end, does not."""
    rising = _points(0.04, 0.07, 0.26, 0.53, 0.59, 0.62)
    assert still_rising(rising, 500)["step"] == 2500
    assert still_rising(_points(0.04, 0.53, 0.70, 0.62), 500) is None  # peaked before the end
    assert still_rising(_points(0.04, 0.53, 0.62, 0.62), 500) is None  # flat at the end
    assert still_rising(_points(0.5, 0.6), 500) is None  # too few points to call it a trend
    final = [*rising, {"step": 3001, "pass_at_1": 0.63, "stderr": 0.03}]  # the final model, a step after a checkpoint
    assert still_rising(final, 500)["step"] == 2500
