"""The ordered stages of a curation recipe and the one way to run them.

Each stage lives in its own module and exposes the same two functions:

- ``load_config(recipe) -> <Stage>Config``: the recipe's section for the stage as its typed config (raises
  ``ConfigError`` on an unknown key, with a suggestion);
- ``run_stage(ws, recipe, force=False, progress=False) -> StageResult``: the stage's I/O entry point, through the
  one stage wrapper ``curate.stage_wrapper.run_wrapped``: it fingerprints the inputs (content hashes), config and code
  version, skips the work when the manifest matches (``force`` re-runs), runs the stage's pure functions, writes
  outputs atomically and one manifest layout, and returns a summary.

The CLI verb, ``curate run`` and the Prefect task all call ``run_stage``, so they cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from curate import verify
from curate.config import SECTIONS, ConfigError, Recipe, unknown_key_error
from curate.config import load_recipe as _read_recipe
from curate.curriculum import stage as curriculum
from curate.decontaminate import stage as decontaminate
from curate.ingest import stage as ingest
from curate.io import Workspace
from curate.rollout import stage as rollout
from curate.score import stage as score
from curate.select import stage as select
from curate.solutions import stage as solutions
from curate.stage_wrapper import StageResult


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
    Stage("solutions", solutions.load_config, solutions.run_stage),
)


def stage_names() -> list[str]:
    return [stage.name for stage in STAGES]


def _module(name: str) -> Stage:
    for stage in STAGES:
        if stage.name == name:
            return stage
    raise unknown_key_error([name], stage_names(), "the recipe's stages")


def section(recipe: Recipe, name: str) -> Any:
    """Section ``name`` of the recipe as its stage's typed config (``verify`` included); ``ConfigError`` on an
    unknown key or bad value. What a caller that changed one section of a validated recipe checks."""
    return verify.load_config(recipe) if name == "verify" else _module(name).load_config(recipe)


def sections(recipe: Recipe) -> dict[str, Any]:
    """The recipe's typed sections: ``{name: <Stage>Config}`` for every listed stage and every section present
    (``verify`` included). Raises ``ConfigError`` on the first unknown key or bad value, at any depth."""
    names = [
        *recipe.stages,
        *(n for n in SECTIONS if n not in recipe.stages and (n == "verify" or n in recipe.stage_configs)),
    ]
    return {name: section(recipe, name) for name in names}


def validate(recipe: Recipe) -> None:
    """Build every section of the recipe (listed stages, other sections present, ``verify``) before any work
    starts, so a typo anywhere fails in seconds, not after hours."""
    sections(recipe)


def load_recipe(path: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """Read a recipe (``curate.config.load_recipe``) and validate every section: the one entry point of a recipe
    file (``curate run``, the Prefect flow, a training recipe's ``curate_recipe``), called once per file; what it
    returns is passed down, never read again."""
    recipe = _read_recipe(path, overrides)
    validate(recipe)
    return recipe


def planned_stages(recipe: Recipe, only: Iterable[str] | None = None) -> list[str]:
    """The recipe's stages to run, in recipe order: all of them, or those in ``only`` (a name the recipe does not
    list is a ``ConfigError``). ``run_recipe`` and the Prefect flow both run this list."""
    import difflib

    wanted = list(only) if only else list(recipe.stages)
    unknown = [s for s in wanted if s not in recipe.stages]
    if unknown:
        named = []
        for name in unknown:  # a misspelling gets a "did you mean", as a misspelled recipe key does
            close = difflib.get_close_matches(name, recipe.stages, n=1, cutoff=0.6)
            named.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"stage(s) {', '.join(named)} are not in the recipe's stages {list(recipe.stages)}")
    return [name for name in recipe.stages if name in wanted]


def run_stage(name: str, ws: Workspace, recipe: Recipe, *, force: bool = False, progress: bool = False) -> StageResult:
    """Run one stage through its wrapper and time it. ``progress``: bars on a terminal, periodic lines in logs."""
    module = _module(name)
    t0 = time.perf_counter()
    result = module.run_stage(ws, recipe, force=force, progress=progress)
    result.wall_s = time.perf_counter() - t0
    return result


def run_recipe(
    recipe: Recipe,
    ws: Workspace,
    *,
    only: Iterable[str] | None = None,
    force: bool = False,
    on_result: Callable[[StageResult], None] | None = None,
    progress: bool = False,
) -> list[StageResult]:
    """Run the recipe's stages in order (or the subset ``only``), returning each stage's result. ``recipe`` is a
    validated one (``load_recipe``, or ``validate`` for one built in code): it is not checked again here."""
    results = []
    for name in planned_stages(recipe, only):
        result = run_stage(name, ws, recipe, force=force, progress=progress)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
