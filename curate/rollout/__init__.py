"""Stage 3, rollout: generation backends, the stage (``stage``), the append-only ledger every writer and reader of
samples goes through (``ledger``), pass-rate stats, imported generations."""
