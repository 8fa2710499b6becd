"""Serve the curation deployments from this process: ``python -m flows.serve``.

The same two deployments as ``prefect.yaml`` (names, schedule, parameters), without a work pool or worker: the
serving process polls the API for scheduled or triggered runs and executes them itself. Use it against a local
server (``PREFECT_API_URL=http://127.0.0.1:4200/api``); with no server configured Prefect starts an ephemeral one
that lives only as long as this process (no UI to look at, but runs still happen).

- ``curate-dataset/demo-nightly``: the demo recipe, every day at 03:00 UTC.
- ``curate-dataset/demo-select``: on demand; re-scores and re-selects with editable overrides.

Trigger one with ``prefect deployment run 'curate-dataset/demo-select' --param stages='["select"]'``.
"""

from __future__ import annotations

import argparse

from prefect import serve
from prefect.schedules import Cron

from flows.curation import curate_dataset


DEMO_RECIPE = "datasets/demo/recipe.yaml"
NIGHTLY = "demo-nightly"
SELECT = "demo-select"
NIGHTLY_CRON = "0 3 * * *"
TIMEZONE = "UTC"
SELECT_PARAMETERS = {"recipe_path": DEMO_RECIPE, "stages": ["score", "select"], "overrides": {"select.size": 500}}


def deployments(recipe_path: str = DEMO_RECIPE) -> list:
    """The runner deployments ``prefect.yaml`` declares, for ``prefect.serve``."""
    return [
        curate_dataset.to_deployment(
            name=NIGHTLY,
            schedule=Cron(NIGHTLY_CRON, timezone=TIMEZONE),
            parameters={"recipe_path": recipe_path},
            description="Nightly curation of the demo recipe (every stage it lists; finished stages are skipped).",
            tags=["curation", "nightly"],
        ),
        curate_dataset.to_deployment(
            name=SELECT,
            parameters={**SELECT_PARAMETERS, "recipe_path": recipe_path},
            description="On-demand re-scoring and selection; edit overrides (e.g. select.size) when triggering.",
            tags=["curation", "selection"],
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    """Register the deployments and execute their runs until interrupted (Ctrl-C pauses their schedules)."""
    parser = argparse.ArgumentParser(
        prog="python -m flows.serve",
        description="Serve the deployments of prefect.yaml from this process (Ctrl-C stops).",
    )
    parser.add_argument("--recipe", default=DEMO_RECIPE, help=f"Recipe the deployments run (default {DEMO_RECIPE}).")
    parser.add_argument("--limit", type=int, default=1, help="Flow runs executed at the same time (default 1).")
    args = parser.parse_args(argv)
    serve(*deployments(args.recipe), limit=args.limit)


if __name__ == "__main__":
    main()
