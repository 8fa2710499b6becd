"""Stage 3, rollout: generation backends, the append-only ledger (``stage``), pass-rate stats, imported generations."""
