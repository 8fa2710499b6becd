"""One run's RL rollouts never feed the next run's curation unless the recipe says so (score.evidence)."""

from __future__ import annotations

import datetime as dt

import polars as pl

from curate import schema as S
from curate.rollout import ledger
from curate.score.evidence import EvidenceConfig, ledger_evidence, target_model, usable


def _rows(model: str, backend: str, day: int, correct: list[bool]) -> pl.DataFrame:
    values = {S.VERDICT: ["correct" if c else "wrong" for c in correct], S.REWARD: [float(c) for c in correct],
              S.SAMPLE_IDX: list(range(len(correct)))}  # fmt: skip
    when = dt.datetime(2026, 1, day, tzinfo=dt.UTC)
    return ledger.build_rows(model, ["p1"] * len(correct), values, backend=backend, run_id=model, created_at=when)


def test_training_rollouts_are_not_evidence_by_default():
    measured = _rows("sft-model", "hf", 1, [True, False, False, False])  # curate rollout of the SFT model
    trained = _rows("other-run-01-stage1", "trl", 2, [True, True, True, True])  # a later run's RL stage
    both = pl.concat([measured, trained])
    default = usable(both, EvidenceConfig())
    assert target_model(default, None) == "sft-model"  # the newest model, but never a training run's
    assert ledger_evidence(default, EvidenceConfig())[S.N_CORRECT].to_list() == [1]
    opted = EvidenceConfig(training_rollouts=True)
    assert target_model(usable(both, opted), None) == "other-run-01-stage1"  # the recipe's choice, stated
    named = EvidenceConfig(model="other-run-01-stage1")  # naming a training model always counts
    assert target_model(usable(both, named), named.model) == "other-run-01-stage1"


def test_a_training_runs_measurement_of_its_own_model_is_a_training_rollout():
    """``training run``'s measure step samples its SFT model with ``curate rollout`` (run_tag ``chain``): the next
    run's curation must not read it by default either."""
    measured = _rows("sft-model", "hf", 1, [True, False])
    chain = _rows("runs/a/sft/final", "hf", 2, [True, True]).with_columns(pl.lit("chain-1a2b3c").alias(S.RUN_ID))
    both = pl.concat([measured, chain])
    assert target_model(usable(both, EvidenceConfig()), None) == "sft-model"
    named = EvidenceConfig(model="runs/a/sft/final")  # the run's own measure step names it
    assert target_model(usable(both, named), named.model) == "runs/a/sft/final"
