"""The curation flow: a recipe's stages as Prefect tasks, with a summary, tables and plots as UI artifacts.

Where it sits: ``flows -> curate``. It is a thin wrapper over ``curate.pipeline`` and holds no curation logic.
Each stage listed in ``curate.pipeline.STAGES`` (ingest, decontaminate, rollout, score, select, curriculum, ...)
becomes one task that calls ``curate.pipeline.run_stage``, the same wrapper ``curate run`` calls, so the flow and
the CLI write identical workspaces. New stages appear in the flow as soon as they are registered there.

Parameters are JSON-simple so they can be edited in the UI and in ``prefect.yaml``: a recipe path, dotted
overrides (``{"select.size": 500}``), a subset of stages, ``force``, a workspace root, and a Dask address. The
flow reads and validates the recipe once (``curate.pipeline.load_recipe``; the training flow hands down the one
its training recipe loaded) and its tasks receive that typed recipe (a small frozen dataclass, pickled to Dask
workers) and return ``StageResult.to_dict()``; frames never cross a task boundary.

Skip-if-done is the workspace's job: a re-run of a finished flow skips finished stages through their manifests
(``StageResult.skipped``), never through Prefect's cache (``cache_policy=NONE`` on every task). Retries with
exponential backoff are given only to stages that talk to the outside world, decided per stage from the recipe:
``ingest`` of ``hf://`` sources (hub downloads) and ``rollout`` with the ``openai`` backend (endpoint calls).

Run it without any server (Prefect's ephemeral local API, SQLite)::

    python -m flows.curation datasets/demo/recipe.yaml --set select.size=500 --stage score --stage select

Scale-out: with ``dask_address`` (a scheduler address such as ``tcp://10.0.0.5:8786``, or ``"local"`` for a
``LocalCluster`` started for the run) the rollout stage runs as plan -> one task per shard on Dask -> finalize,
through ``curate.rollout.stage.plan_shards / run_shard / finalize``. Math verification inside a shard runs in a process
pool (``curate.verify``); Dask worker *processes* are daemons by default and may not start children, so a cluster
used for rollouts needs ``distributed.worker.daemon: false`` (``DASK_DISTRIBUTED__WORKER__DAEMON=False`` for
``dask worker``); the ``"local"`` cluster sets it. Workers of a remote cluster must see the workspace at the same
path (a shared file system), and have this package installed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NONE
from prefect.runtime import flow_run
from prefect.tasks import exponential_backoff

from curate import config, pipeline
from curate.config import Recipe
from curate.io import Workspace
from flows import artifacts


# Stages that do I/O with the outside world get these retries; everything else fails fast (a bug or a bad input
# does not get better by waiting). 3 retries at 30 s, 60 s, 120 s, with jitter so parallel runs do not align.
OUTSIDE_RETRIES = 3
OUTSIDE_BACKOFF_S = 30
RETRY_JITTER = 0.5
LOCAL_DASK_WORKERS = 2


# --------------------------------------------------------------------------------------------------- policy
def touches_outside(name: str, recipe: config.Recipe) -> bool:
    """Whether stage ``name`` of ``recipe`` talks to the outside world (hub downloads, a generation endpoint).

    Only such stages get retries: a transient network error is worth waiting for, a bad input is not.
    """
    if name == "ingest":
        return any(spec.path.startswith("hf://") for spec in recipe.ingest.sources)
    if name == "rollout":
        return str(recipe.stage_config("rollout").get("backend", "")).lower() == "openai"
    return False


def _run_name() -> str:
    """``demo/recipe.yaml: ingest,select @ 2026-11-21 03:00Z``: readable in the UI's run list."""
    params = flow_run.parameters
    path = Path(params.get("recipe_path", "recipe"))
    what = ",".join(params.get("stages") or []) or "all stages"
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%MZ")
    return f"{path.parent.name}/{path.name}: {what} @ {when}"


# --------------------------------------------------------------------------------------------------- tasks
@contextlib.contextmanager
def progress_to_run_log():
    """While the block runs, ``curate.progress``'s lines (a stage's status lines, and its progress as a line every
    30 s with the rate and the time left) go to this run's Prefect logger: the worker's log and the UI show them.
    Off a terminal they went nowhere: a flow ran its stages with progress off."""
    from curate.progress import log_to

    with log_to(get_run_logger().info):
        yield


@task(cache_policy=NONE, task_run_name="{name}")
def run_stage(name: str, recipe: Recipe, home: str, force: bool) -> dict:
    """One stage through ``curate.pipeline.run_stage``, its progress in the run's log; returns
    ``StageResult.to_dict()``."""
    with progress_to_run_log():
        result = pipeline.run_stage(name, Workspace(Path(home)), recipe, force=force, progress=True)
    _log_result(result.to_dict())
    return result.to_dict()


@task(cache_policy=NONE, task_run_name="rollout-plan")
def rollout_plan(recipe: Recipe, home: str) -> list[Any]:
    """The rollout shards still to run (finished shards are in the ledger and not planned again)."""
    from curate.rollout import stage as rollout

    return list(rollout.plan_shards(Workspace(Path(home)), recipe.pool, rollout.load_config(recipe)))


@task(cache_policy=NONE, task_run_name="rollout-shard-{index}")
def rollout_shard(recipe: Recipe, home: str, shard: Any, index: int) -> str | None:
    """Generate and verify one shard on whichever engine runs this task; returns the ledger part it wrote."""
    from curate.rollout import stage as rollout

    path = rollout.run_shard(Workspace(Path(home)), recipe.pool, rollout.load_config(recipe), shard)
    return None if path is None else str(path)


@task(cache_policy=NONE, task_run_name="rollout-finalize")
def rollout_finalize(recipe: Recipe, home: str, force: bool) -> dict:
    """Refresh the stats and write the ledger's manifest, exactly as the unsharded stage does at its end."""
    from curate.rollout import stage as rollout

    return rollout.finalize(Workspace(Path(home)), recipe.pool, rollout.load_config(recipe), force=force).to_dict()


def with_outside_retries(fn):
    """``fn`` (a task) with the retries of a stage that talks to the outside world (see ``touches_outside``)."""
    return fn.with_options(
        retries=OUTSIDE_RETRIES,
        retry_delay_seconds=exponential_backoff(backoff_factor=OUTSIDE_BACKOFF_S),
        retry_jitter_factor=RETRY_JITTER,
    )


# --------------------------------------------------------------------------------------------------- flows
@flow(name="curate-rollout-sharded", flow_run_name="rollout shards of {recipe.name}")
def rollout_sharded(recipe: Any, home: str, force: bool = False, retries: bool = False) -> dict:
    """The rollout stage as plan -> ``run_shard`` mapped over the task runner (Dask) -> finalize. ``recipe``: the
    loaded ``curate.config.Recipe`` (a flow parameter typed ``Any``: see ``curate_dataset``).

    ``force`` has the unsharded stage's meaning: the stats are recomputed; ledger rows are never regenerated.
    ``retries``: shards call an endpoint and get the outside-I/O retries.
    """
    t0 = time.perf_counter()
    shards = rollout_plan(recipe, home)
    shard_task = with_outside_retries(rollout_shard) if retries else rollout_shard
    futures = shard_task.map(unmapped(recipe), unmapped(home), shards, [shard.index for shard in shards])
    futures.result()  # raises the first shard failure; finished shards stay in the ledger for the re-run
    result = rollout_finalize(recipe, home, force)
    result["skipped"] = not shards
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    planned = {"shards_run": len(shards), "samples_planned": sum(shard.samples for shard in shards)}
    result["summary"] = planned | result["summary"]
    _log_result(result)
    return result


def dask_runner(address: str):
    """A ``DaskTaskRunner`` on an existing scheduler, or on a ``LocalCluster`` for ``address == "local"``."""
    from prefect_dask import DaskTaskRunner

    if address != "local":
        return DaskTaskRunner(address=address)
    import dask

    # Worker processes must be allowed to start the verification process pool (see the module docstring), and
    # run one shard at a time: the hf backend seeds the process-wide torch RNG per batch.
    dask.config.set({"distributed.worker.daemon": False})
    return DaskTaskRunner(
        cluster_kwargs={"n_workers": LOCAL_DASK_WORKERS, "threads_per_worker": 1, "dashboard_address": None}
    )


def api_url_for_workers():
    """Pin ``PREFECT_API_URL`` to the API this process talks to, so Dask workers report to the same one.

    With no server configured, this process runs on an ephemeral API that only it knows about; a worker process
    would try to start its own and time out. Task runners ship the settings context with each task, so setting
    the URL around the sharded subflow is enough. A no-op when a server is configured.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        return contextlib.nullcontext()
    return temporary_settings(updates={PREFECT_API_URL: str(get_client().api_url)})


# log_prints stays off: the stages log through loggers and a stderr console, never ``print``, so forwarding prints
# would only forward libraries' ones (dill disassembles bytecode while datasets fingerprints a selection's ``hf/``
# folder, into a capture that Prefect's patched ``print`` bypasses: a dozen lines of bytecode per select run).
@flow(name="curate-dataset", flow_run_name=_run_name, log_prints=False)
def curate_dataset(
    recipe_path: str,
    overrides: dict[str, Any] | None = None,
    stages: list[str] | None = None,
    force: bool = False,
    home: str | None = None,
    dask_address: str | None = None,
    recipe: Any = None,
) -> dict:
    """Run a recipe's stages (or the subset ``stages``), one task each, and publish the results as artifacts.

    Args:
        recipe_path: the recipe YAML, e.g. ``datasets/demo/recipe.yaml`` (relative to the working directory).
        overrides: dotted recipe keys, e.g. ``{"select.size": 500, "rollout.backend": "openai"}``.
        stages: run only these of the recipe's stages (in recipe order); finished earlier stages are read as is.
        force: redo stages even when their manifests say they are up to date.
        home: workspace root; default ``$CURATE_HOME``, else the recipe's ``home``, else ``./workspace`` (the
            precedence of ``curate.io.Workspace.resolve``, shared with ``curate run``).
        dask_address: run rollout shards on Dask: a scheduler address, or ``"local"`` for a ``LocalCluster``.
        recipe: ``recipe_path`` already loaded and validated (a ``curate.config.Recipe`` from
            ``curate.pipeline.load_recipe``): the training flow passes the one its training recipe loaded, so the
            file is read once; then ``overrides`` must be empty. Typed ``Any`` for Prefect: a served or deployed
            run validates its parameters where this module's names do not resolve (pydantic: "not fully
            defined").
    """
    from curate.progress import quiet_library_bars

    quiet_library_bars()  # a worker's log is not a terminal: no tqdm bars of the libraries in it
    logger = get_run_logger()
    if recipe is None:
        recipe = pipeline.load_recipe(recipe_path, overrides)
    elif overrides:
        raise ValueError("give overrides with recipe_path, or an already loaded recipe without them")
    names = pipeline.planned_stages(recipe, stages)
    ws = Workspace.resolve(home, recipe_home=recipe.home)  # the one precedence `curate run` uses too
    logger.info("recipe %s (pool %s): stages %s into %s", recipe.name, recipe.pool, names, ws.root)
    t0 = time.perf_counter()
    results: list[dict] = []
    failed: dict[str, str] | None = None
    error: Exception | None = None
    for name in names:
        try:
            results.append(_one_stage(name, recipe, str(ws.root), force, dask_address))
        except Exception as exc:  # publish what finished, then fail the run with the stage's error
            failed, error = {"stage": name, "error": f"{type(exc).__name__}: {exc}"}, exc
            break
    report = {
        "recipe": recipe_path,
        "name": recipe.name,
        "pool": recipe.pool,
        "home": str(ws.root),
        "wall_s": round(time.perf_counter() - t0, 3),
        "stages": results,
        "failed": failed,
    }
    artifacts.publish(report, ws)
    if error is not None:
        raise error
    return report


def _one_stage(name: str, recipe: Recipe, home: str, force: bool, dask_address: str | None) -> dict:
    outside = touches_outside(name, recipe)
    if name == "rollout" and dask_address:
        sharded = rollout_sharded.with_options(task_runner=dask_runner(dask_address))
        with api_url_for_workers():
            return sharded(recipe, home, force, retries=outside)
    stage_task = with_outside_retries(run_stage) if outside else run_stage
    return stage_task(name, recipe, home, force)


def _log_result(result: dict) -> None:
    state = "skipped (up to date)" if result["skipped"] else f"done in {result['wall_s']:.1f}s"
    get_run_logger().info("%s %s: %s", result["stage"], state, result["summary"])


# --------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    """``python -m flows.curation RECIPE [--set k=v] [--stage s] [--force] [--home DIR] [--dask ADDRESS]``.

    Prints the run's report (stages, their summaries, wall times) as JSON when run as a script.
    """
    parser = argparse.ArgumentParser(
        prog="python -m flows.curation",
        description="Run a recipe as a Prefect flow (ephemeral local API unless PREFECT_API_URL is set).",
    )
    parser.add_argument("recipe", help="Recipe YAML, e.g. datasets/demo/recipe.yaml.")
    parser.add_argument("--set", dest="overrides", action="append", help="Override a recipe key: select.size=500.")
    parser.add_argument("--stage", dest="stages", action="append", help="Run only this stage (repeatable).")
    parser.add_argument("--force", action="store_true", help="Redo stages even if their outputs are up to date.")
    parser.add_argument("--home", help="Workspace root (default: $CURATE_HOME, the recipe's home, ./workspace).")
    parser.add_argument("--dask", dest="dask_address", help='Run rollout shards on Dask: an address or "local".')
    args = parser.parse_args(argv)
    if not os.environ.get("PREFECT_API_URL"):
        reap_orphaned_servers()
    with exit_on_sigterm():
        return curate_dataset(
            recipe_path=args.recipe,
            overrides=config.parse_overrides(args.overrides) or None,
            stages=args.stages,
            force=args.force,
            home=args.home,
            dask_address=args.dask_address,
        )


EPHEMERAL_APP = "prefect.server.api.server:create_app"  # what Prefect's temporary API server runs (uvicorn)


def reap_orphaned_servers(proc: Path = Path("/proc")) -> list[int]:
    """Stop temporary Prefect API servers whose flow process was killed (SIGKILL leaves them listening; see
    ``exit_on_sigterm``): processes of this user running Prefect's ephemeral server app (``PREFECT__SERVER_EPHEMERAL``
    in their environment) whose parent is gone. Prefect starts that server with the flow's own interpreter
    (``sys.executable``), so while the flow lives the server's parent runs the same executable as the server,
    whatever the process is called (``python``, ``ipython``, ``pytest``, a Jupyter kernel); once the flow is dead the
    server belongs to init or to a subreaper, which runs another program. Only those orphans are stopped; a server
    whose parent cannot be read is left alone. Called when a flow starts from the command line; Linux only
    (elsewhere: ``pkill -f prefect.server.api.server``). Returns the pids it stopped."""
    import signal

    if not (proc / "self").exists():
        return []
    stopped = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if EPHEMERAL_APP.encode() not in cmdline:
                continue
            if b"PREFECT__SERVER_EPHEMERAL=1" not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if not _orphaned(proc, entry, ppid):
                continue  # its flow is alive
            os.kill(int(entry.name), signal.SIGTERM)
            stopped.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    if stopped:
        from curate.progress import log

        log(f"stopped {len(stopped)} temporary Prefect server(s) left by killed flow runs: pids {stopped}")
    return stopped


def _orphaned(proc: Path, server: Path, ppid: int) -> bool:
    """Whether a temporary server's flow is gone: its parent is init, another user's process, or a process running
    another program than the server's interpreter (a subreaper). Raises ``OSError`` when the server's own
    executable cannot be read (then nothing is decided)."""
    if ppid <= 1:
        return True
    own = os.readlink(server / "exe").removesuffix(" (deleted)")  # an interpreter upgraded while it runs
    try:
        if (proc / str(ppid)).stat().st_uid != os.getuid():
            return True
        return os.readlink(proc / str(ppid) / "exe").removesuffix(" (deleted)") != own
    except PermissionError:
        return True  # a parent we may not read is not our flow
    except FileNotFoundError:
        return False  # the parent exited just now: decide at the next start


@contextlib.contextmanager
def exit_on_sigterm():
    """While the block runs, SIGTERM raises ``SystemExit(143)`` instead of killing the process outright.

    Prefect turns a SIGTERM during a run into a crashed task, then re-sends the signal to the handler that was
    installed before the run: with Python's default one the process dies at once, the flow run stays RUNNING and
    the temporary API server Prefect started for this process (no ``PREFECT_API_URL``) is left listening, because
    its ``atexit`` shutdown never runs. Raising ``SystemExit`` instead unwinds the flow (marked crashed) and runs
    ``atexit``, which stops that server. Ctrl-C (SIGINT) already unwinds as ``KeyboardInterrupt``. A SIGKILL cannot
    be caught: it leaves the server and a RUNNING run behind. Only the main thread can install a handler.

    A handler's exception raised while the main thread runs a finalizer (``__del__``, a weakref callback) is
    dropped by the interpreter ("Exception ignored in ..."), so one ``kill PID`` could be lost and the run go on to
    its end (seen under load: Prefect's ``TerminationSignal`` landed in an asyncio transport's ``__del__``). While
    the block runs, ``sys.unraisablehook`` therefore sends the SIGTERM again when the exception it is handed is that
    signal's (``TerminationSignal`` or this handler's ``SystemExit``), from a thread, once the finalizer is left.
    """
    import signal
    import sys
    import threading

    from prefect.exceptions import TerminationSignal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    def unraisable(info) -> None:
        hook(info)
        if isinstance(info.exc_value, TerminationSignal) or (
            isinstance(info.exc_value, SystemExit) and info.exc_value.code == 128 + signal.SIGTERM
        ):
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()

    previous, hook = signal.signal(signal.SIGTERM, handler), sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = hook
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, default=str))
