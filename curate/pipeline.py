"""The ordered stages of a curation recipe and the one way to run them.

Each stage lives in its own module and exposes the same two functions:

- ``load_config(recipe) -> <Stage>Config``: validate the recipe's settings for the stage (raises ``ConfigError``);
- ``run_stage(ws, recipe, force=False) -> StageResult``: the I/O wrapper. It reads the stage's inputs from the
  workspace, calls the stage's pure functions, writes outputs atomically with a manifest, and returns a summary.
  It skips the work when the manifest shows the same inputs and config (``force`` re-runs).

The CLI verb, ``curate run`` and the Prefect task all call ``run_stage``, so they cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from curate.config import ConfigError, Recipe
from curate.curriculum import stage as curriculum
from curate.decontaminate import stage as decontaminate
from curate.ingest import stage as ingest
from curate.io import StageResult, Workspace
from curate.rollout import stage as rollout
from curate.score import stage as score
from curate.select import stage as select


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its recipe-section validator and its I/O entry point."""

    name: str
    load_config: Callable[[Recipe], Any]
    run_stage: Callable[..., StageResult]


# Explicit and ordered; a recipe's ``stages`` picks from these names.
STAGES: tuple[Stage, ...] = (
    Stage("ingest", ingest.load_config, ingest.run_stage),
    Stage("decontaminate", decontaminate.load_config, decontaminate.run_stage),
    Stage("rollout", rollout.load_config, rollout.run_stage),
    Stage("score", score.load_config, score.run_stage),
    Stage("select", select.load_config, select.run_stage),
    Stage("curriculum", curriculum.load_config, curriculum.run_stage),
)


def stage_names() -> list[str]:
    return [stage.name for stage in STAGES]


def _module(name: str) -> Stage:
    for stage in STAGES:
        if stage.name == name:
            return stage
    raise ConfigError(f"unknown stage {name!r}; stages: {stage_names()}")


def validate(recipe: Recipe) -> None:
    """Check every listed stage's config before any work starts, so a typo fails in seconds, not after hours."""
    for name in recipe.stages:
        _module(name).load_config(recipe)


def run_stage(name: str, ws: Workspace, recipe: Recipe, *, force: bool = False) -> StageResult:
    """Run one stage through its wrapper and time it."""
    module = _module(name)
    t0 = time.perf_counter()
    result = module.run_stage(ws, recipe, force=force)
    result.wall_s = time.perf_counter() - t0
    return result


def run_recipe(
    recipe: Recipe,
    ws: Workspace,
    *,
    only: Iterable[str] | None = None,
    force: bool = False,
    on_result: Callable[[StageResult], None] | None = None,
) -> list[StageResult]:
    """Run the recipe's stages in order (or the subset ``only``), returning each stage's result."""
    validate(recipe)
    wanted = list(only) if only else list(recipe.stages)
    unknown = [s for s in wanted if s not in recipe.stages]
    if unknown:
        raise ConfigError(f"stage(s) {unknown} are not in the recipe's stages {list(recipe.stages)}")
    results = []
    for name in recipe.stages:
        if name not in wanted:
            continue
        result = run_stage(name, ws, recipe, force=force)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
