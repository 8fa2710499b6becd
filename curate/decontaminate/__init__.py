"""Stage 2, decontaminate: leaks against eval sets and near-duplicate clusters (``stage``, ``dedup``)."""
