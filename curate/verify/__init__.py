"""The one answer checker (DESIGN.md, "One answer checker"): curation's pass rates and training's rewards.

``checker`` judges completions against gold answers (the only module that imports math-verify), ``answers``
extracts and normalizes gold answers, ``numeric`` decides numeric LaTeX exactly, ``pool`` runs math-verify in
bounded spawn workers. The names below are the checker's public API: ``from curate import verify;
verify.check_batch(...)``.
"""

from curate.verify.checker import (
    DEFAULT,
    GOLD_UNPARSEABLE,
    Verdict,
    VerifyConfig,
    check,
    check_batch,
    equivalent_batch,
    extract_answer,
    load_config,
    reward_of,
    shutdown,
)


__all__ = [
    "DEFAULT",
    "GOLD_UNPARSEABLE",
    "Verdict",
    "VerifyConfig",
    "check",
    "check_batch",
    "equivalent_batch",
    "extract_answer",
    "load_config",
    "reward_of",
    "shutdown",
]
