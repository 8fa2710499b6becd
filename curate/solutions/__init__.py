"""Stage ``solutions`` (DESIGN.md stage 7): K distinct verified solutions per problem for SFT and re-distillation.

``stage`` gathers candidates (reference solutions, imported generations, rollouts, a teacher), re-checks them with
``curate.verify``, drops wrong, truncated, answer-only, over-long and (near-)duplicate ones, and assigns CoScale-RL
pools; ``distinct`` decides when two solutions count once; ``export`` writes the TRL SFT dataset with its card and
lineage. CLI: ``curate solutions``.
"""
