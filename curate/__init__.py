"""curate-rl: data-centric curation and curricula for RL post-training of reasoning LLMs.

The library behind the ``curate`` CLI. Stages are modules with pure functions on polars frames plus one I/O
wrapper (``run_stage``); ``curate.schema`` is the contract between them. This package never imports
``flows``, ``training``, ``prefect``, ``trl`` or ``vllm`` (import-linter enforces it; the one vLLM backend is
an explicit, documented exception in pyproject.toml).
"""

__version__ = "0.1.0"
