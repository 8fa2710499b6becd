"""The training flow: one recipe from raw pool to trained model (``train-chain``), one Prefect task per step.

Where it sits: ``flows -> training -> curate``. It holds no training logic and no control flow of its own: it
loads the recipe once (``training.recipe.load_recipe``: the training recipe and its curation recipe), opens the run
folder once (``training.chain.open_run``), hands the loaded curation recipe to the ``curate-dataset`` subflow and
runs ``training.runner.run_opened``, the steps behind ``training run``, with a ``call`` that turns each step
(``init_model``, ``sft``, ``choose`` (the SFT checkpoint on validation), ``measure`` and ``forecast_waste``
(``training.measure``), one ``rl_stage``, ``next_rung`` (the rollout ladder), ``merge_groups`` (parallel groups),
``evaluate_model``, ``decide``, the CoScale steps, ``rft_round`` (with ``rft``), ``redistill``, ``fit_and_plot``,
``write_summary``) into a task named after it. The CLI and the flow therefore take the same steps
in the same order, and the recipe's ``decide`` section (stop when the fitted asymptote is near, CoScale
iterations) acts the same in both. The curation half (``curate_recipe``) runs first as the ``curate-dataset``
subflow (one task per curation stage, with its own summary, table and plot artifacts), until the run has started
training: from then on its data is pinned (``training.runner.curation_pinned``).

Skip-if-done is the run folder's job, never Prefect's cache (``cache_policy=NONE``): finished curation stages are
skipped through their manifests, finished training steps through ``chain.json`` and their own completion files. A
failed step fails the run (after publishing what finished); triggering the deployment again resumes at that step,
an RL stage from its last checkpoint (``training.rl``: its ledger parts are named by run and step, so a resumed
step rewrites its rows instead of adding them).

GPU steps on a work pool of the user's choice (``training_pool``): with it, this run does the curation here and
hands the training part to a deployment of this flow on that work pool (``run_deployment`` as a subflow, found
through the API among the deployments of ``train-chain`` on ``training_pool``, the first by name), then waits
for it. The worker of that pool (a process worker on the GPU box) must see the repository, the recipe and the
workspace at the same paths (a shared file system). ``part`` runs only ``curation`` or only ``training``.

Artifacts per run (``flows.artifacts.publish_training``): the chain summary (steps, pass rates, decisions, fit,
step timings), the lineage table (pool -> selection -> curriculum -> solutions -> every model folder with its pass
rate), the solutions histogram, the learning curves, the eval curve against compute and the fitted sigmoid.

Run it without any server (Prefect's ephemeral API)::

    python -m flows.training training/recipes/tiny/fastcurl.yaml --set eval.limit=50
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.runtime import flow_run

from flows import artifacts
from flows.curation import curate_dataset, exit_on_sigterm, progress_to_run_log, reap_orphaned_servers
from training import outcome, runner
from training.chain import check_launch, open_run
from training.recipe import load_recipe


FLOW_NAME = "train-chain"
PARTS = ("all", "curation", "training")
POLL_S = 2


def step_task(name: str, fn, *args: Any) -> Any:
    """``run_chain``'s ``call``: run one chain step as a Prefect task named after the step (no Prefect cache), with
    the progress of what it runs in this process (``measure``'s curate stages) in the run's log."""

    @functools.wraps(fn)
    def logged(*a: Any, **kw: Any) -> Any:
        with progress_to_run_log():
            return fn(*a, **kw)

    return task(logged, name=fn.__name__, task_run_name=name, cache_policy=NONE)(*args)


def _log(message: str) -> None:
    get_run_logger().info(message)


def _run_name() -> str:
    """``tiny/fastcurl.yaml: all @ 2026-11-21 03:00Z``: readable in the UI's run list."""
    params = flow_run.parameters
    path = Path(params.get("recipe_path", "recipe"))
    part = params.get("part") or "all"
    pool = f" -> {params['training_pool']}" if params.get("training_pool") else ""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%MZ")
    return f"{path.parent.name}/{path.name}: {part}{pool} @ {when}"


def training_deployment(work_pool: str) -> Any:
    """The deployment of ``train-chain`` on ``work_pool`` (the first by name when there are several)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, WorkPoolFilter, WorkPoolFilterName

    with get_client(sync_client=True) as client:
        found = client.read_deployments(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[work_pool])),
        )
    if not found:
        raise ValueError(
            f"no deployment of {FLOW_NAME!r} on work pool {work_pool!r}: deploy one there (prefect.yaml's "
            f"`qwen-math-1.5b-gpu` on `training-gpu`, or `prefect deploy --name ... --pool {work_pool}`)"
        )
    return sorted(found, key=lambda d: d.name)[0]


def hand_off(work_pool: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """Run the training part on ``work_pool`` through its deployment (a subflow run) and wait for it."""
    from prefect.deployments import run_deployment

    deployment = training_deployment(work_pool)
    get_run_logger().info("handing the training part to %s/%s on work pool %s", FLOW_NAME, deployment.name, work_pool)
    child = run_deployment(deployment.id, parameters=parameters, as_subflow=True, poll_interval=POLL_S)
    if not child.state.is_completed():
        raise RuntimeError(f"training run {child.name!r} on work pool {work_pool!r} ended {child.state.type.value}")
    return {"work_pool": work_pool, "deployment": deployment.name, "flow_run_id": str(child.id)}


# log_prints stays off for the reason flows/curation.py gives (library prints would flood the run's log).
@flow(name=FLOW_NAME, flow_run_name=_run_name, log_prints=False)
def train_chain(
    recipe_path: str,
    overrides: dict[str, Any] | None = None,
    home: str | None = None,
    out: str | None = None,
    training_pool: str | None = None,
    part: str = "all",
) -> dict:
    """Curation, starting model, SFT, RL stages (with decisions and CoScale iterations), re-distillation,
    evaluation and the scaling fit of one training recipe; one task per step, artifacts at the end.

    Args:
        recipe_path: the training recipe, e.g. ``training/recipes/tiny/fastcurl.yaml`` (from the working directory).
        overrides: dotted recipe keys, e.g. ``{"eval.k": 2, "stages.stage1.max_steps": 5}``.
        home: workspace root (default ``$CURATE_HOME``, the recipe's ``home``, ``./workspace``).
        out: run folder (default ``<workspace>/runs/<recipe name>``).
        training_pool: run the training part on this work pool (a deployment of this flow there), curation here.
        part: ``all``, ``curation`` (only the curate recipe) or ``training`` (everything after curation).
    """
    from curate.progress import quiet_library_bars

    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    quiet_library_bars()  # a worker's log is not a terminal: no tqdm bars of the libraries, here or in the steps
    logger = get_run_logger()
    recipe = load_recipe(recipe_path, overrides)
    run = open_run(recipe, home, out, echo=_log)
    logger.info("recipe %s (pool %s, part %s) into %s", recipe.name, recipe.pool, part, run.run_dir)
    if recipe.curate is not None and part != "training":
        if runner.curation_pinned(run):
            logger.info("curation pinned: this run has started training (a run with a new name re-curates)")
        else:
            curate_dataset(recipe_path=recipe.curate_recipe, home=str(run.ws.root), recipe=recipe.curate)
    if part == "curation":
        return {"run_dir": str(run.run_dir), "part": part}
    if training_pool and part == "all":
        params = {"recipe_path": recipe_path, "overrides": overrides, "home": str(run.ws.root),
                  "out": str(run.run_dir), "part": "training"}  # fmt: skip
        return {"run_dir": str(run.run_dir), "handed_off": hand_off(training_pool, params)}
    check_launch(recipe)  # the training part's launcher, where it runs (a hand-off checks it on the GPU pool)
    try:
        summary = runner.run_opened(run, call=step_task, curate=False)
    except Exception as exc:  # publish what finished, then fail the run with the step's error
        try:
            artifacts.publish_training(outcome.write_summary(run, extra={"failed": f"{type(exc).__name__}: {exc}"}))
        except Exception as publish_error:  # never hide the step's error behind a reporting one
            logger.warning("could not publish the failed run's artifacts: %s", publish_error)
        raise
    artifacts.publish_training(summary)
    return summary


def main(argv: list[str] | None = None) -> dict:
    """``python -m flows.training RECIPE [--set k=v] [--home DIR] [--out DIR] [--training-pool POOL]``."""
    from curate.config import parse_overrides

    parser = argparse.ArgumentParser(
        prog="python -m flows.training",
        description="Run a training recipe as a Prefect flow (ephemeral local API unless PREFECT_API_URL is set).",
    )
    parser.add_argument("recipe", help="Training recipe YAML, e.g. training/recipes/tiny/fastcurl.yaml.")
    parser.add_argument("--set", dest="overrides", action="append", help="Override a recipe key: eval.k=2.")
    parser.add_argument("--home", help="Workspace root (default: $CURATE_HOME, the recipe's home, ./workspace).")
    parser.add_argument("--out", help="Run folder (default <workspace>/runs/<recipe name>).")
    parser.add_argument("--training-pool", help="Hand the training part to a deployment on this work pool.")
    parser.add_argument("--part", choices=PARTS, default="all", help="Run all, only curation, or only training.")
    args = parser.parse_args(argv)
    if not os.environ.get("PREFECT_API_URL"):
        reap_orphaned_servers()
    with exit_on_sigterm():
        return train_chain(
            recipe_path=args.recipe,
            overrides=parse_overrides(args.overrides) or None,
            home=args.home,
            out=args.out,
            training_pool=args.training_pool,
            part=args.part,
        )


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, default=str))
