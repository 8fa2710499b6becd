"""Stage 4, score: ScalingRL DES (``des``), ledger evidence (``evidence``) and the stage (``stage``)."""
