"""Serve the curation and training deployments from this process: ``python -m flows.serve``.

The same deployments as ``prefect.yaml`` (names, schedule, parameters), without a work pool or worker: the
serving process polls the API for scheduled or triggered runs and executes them itself. It needs a server
(``PREFECT_API_URL=http://127.0.0.1:4200/api``): with none configured Prefect would start a temporary one inside
this process, which runs no scheduler, so the nightly run would never be created; it stops with one line instead
(``flows.steps.require_api_server``).

- ``curate-dataset/demo-nightly``: the demo recipe, every day at 03:00 UTC.
- ``curate-dataset/demo-select``: on demand; re-scores and re-selects with editable overrides.

- ``train-chain/tiny-cpu``: on demand; the whole chain (curation to fitted model) on the built-in tiny recipe.
- ``train-chain/qwen-math-1.5b-gpu``: on demand; the GPU recipe (served here, it runs on this machine).

Trigger one with ``prefect deployment run 'curate-dataset/demo-select' --param stages='["select"]'``.

Serving after ``prefect deploy --all`` (the README's Prefect block read top to bottom) takes the yaml's deployments
of the same names over: they are updated in place, their work pool is cleared (runs are this process's, not a
worker's), and each run executes the flow object this process holds (``Runner.add_flow``), never flow code
"downloaded from storage", which a yaml deployment does not have (its code comes from a pull step that serving
clears). A later ``prefect deploy --all`` gives them back to the work pool.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from prefect.schedules import Cron

from flows.curation import curate_dataset
from flows.steps import require_api_server
from flows.training import train_chain


DEMO_RECIPE = "datasets/demo/recipe.yaml"
TINY_RECIPE = "training/recipes/tiny/fastcurl.yaml"
GPU_RECIPE = "training/recipes/qwen2.5-math-1.5b/fastcurl.yaml"
TINY_CHAIN = "tiny-cpu"
GPU_CHAIN = "qwen-math-1.5b-gpu"
NIGHTLY = "demo-nightly"
SELECT = "demo-select"
NIGHTLY_CRON = "0 3 * * *"
TIMEZONE = "UTC"
SELECT_PARAMETERS = {"recipe_path": DEMO_RECIPE, "stages": ["score", "select"], "overrides": {"select.size": 500}}


def deployment_specs(recipe_path: str = DEMO_RECIPE) -> list[dict[str, Any]]:
    """The deployments ``prefect.yaml`` declares, as keyword arguments of ``Runner.add_flow``."""
    return [
        {
            "name": NIGHTLY,
            "schedules": [Cron(NIGHTLY_CRON, timezone=TIMEZONE)],
            "parameters": {"recipe_path": recipe_path},
            "description": "Nightly curation of the demo recipe (every stage it lists; finished stages are skipped).",
            "tags": ["curation", "nightly"],
        },
        {
            "name": SELECT,
            "parameters": {**SELECT_PARAMETERS, "recipe_path": recipe_path},
            "description": "On-demand re-scoring and selection; edit overrides (e.g. select.size) when triggering.",
            "tags": ["curation", "selection"],
        },
    ]


def training_specs(tiny_recipe: str = TINY_RECIPE) -> list[dict[str, Any]]:
    """The training deployments ``prefect.yaml`` declares (on demand, no schedule), as ``add_flow`` arguments."""
    return [
        {
            "name": TINY_CHAIN,
            "parameters": {"recipe_path": tiny_recipe},
            "description": "The whole chain on the built-in tiny recipe, on CPU; curation, SFT, RL stages, eval, fit.",
            "tags": ["training", "tiny"],
        },
        {
            "name": GPU_CHAIN,
            "parameters": {"recipe_path": GPU_RECIPE},
            "description": "FastCuRL on Qwen2.5-Math-1.5B (GPU; curate the DeepScaleR pool first).",
            "tags": ["training", "gpu"],
        },
    ]


def deployments(recipe_path: str = DEMO_RECIPE) -> list:
    """The curation deployments as ``RunnerDeployment`` objects (what ``prefect.yaml`` is compared with)."""
    return [curate_dataset.to_deployment(**spec) for spec in deployment_specs(recipe_path)]


def training_deployments(tiny_recipe: str = TINY_RECIPE) -> list:
    """The training deployments as ``RunnerDeployment`` objects."""
    return [train_chain.to_deployment(**spec) for spec in training_specs(tiny_recipe)]


def serve(recipe_path: str = DEMO_RECIPE, limit: int = 1, tiny_recipe: str = TINY_RECIPE) -> None:
    """Register the deployments and run their flow runs in this process until interrupted.

    ``prefect.serve`` is not used: it registers deployments without their flow, so the runner re-loads the flow
    from the deployment's storage, which a deployment made by ``prefect deploy`` does not have. ``add_flow`` keeps
    the flow in the runner and explicitly clears any work pool on the server.
    """
    from prefect.exceptions import TerminationSignal
    from prefect.runner import Runner

    runner = Runner(name="curate-serve", pause_on_shutdown=True, limit=limit)
    for spec in deployment_specs(recipe_path):
        runner.add_flow(curate_dataset, **spec)
    for spec in training_specs(tiny_recipe):
        runner.add_flow(train_chain, **spec)
    names = [f"{curate_dataset.name}/{spec['name']}" for spec in deployment_specs(recipe_path)]
    names += [f"{train_chain.name}/{spec['name']}" for spec in training_specs(tiny_recipe)]
    print(f"Serving {', '.join(names)} (recipe {recipe_path}); Ctrl-C stops and pauses their schedules.", flush=True)
    try:
        asyncio.run(runner.start())
    except (KeyboardInterrupt, TerminationSignal) as exc:
        print(f"{type(exc).__name__}: stopped serving.", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Register the deployments and execute their runs until interrupted (Ctrl-C pauses their schedules)."""
    parser = argparse.ArgumentParser(
        prog="python -m flows.serve",
        description="Serve the deployments of prefect.yaml from this process (Ctrl-C stops).",
    )
    parser.add_argument("--recipe", default=DEMO_RECIPE, help=f"Recipe of the curation deployments ({DEMO_RECIPE}).")
    parser.add_argument("--limit", type=int, default=1, help="Flow runs executed at the same time (default 1).")
    parser.add_argument("--training-recipe", default=TINY_RECIPE, help=f"Recipe of {TINY_CHAIN} ({TINY_RECIPE}).")
    args = parser.parse_args(argv)
    require_api_server("`python -m flows.serve`")  # a temporary server would never schedule the nightly run
    serve(args.recipe, args.limit, args.training_recipe)


if __name__ == "__main__":
    main()
