"""Model cards and lineage: every model folder this project writes says what made it.

A model folder is ``save_pretrained`` model + tokenizer + ``README.md`` (a Hugging Face model card) +
``lineage.json`` (the same facts, machine-readable) + a ``generation_config.json`` fit for use
(``max_new_tokens``, the stop and pad ids; transformers' ``max_length=20`` default dropped). ``write_model_card``
writes all three; SFT, RL, re-distillation, merging and ``init-tiny`` call it, so a model found on disk (or on the
hub) can always be traced back to its data (pool, selection, curriculum, solutions table, row counts), its recipe,
its base model and the code version that trained it. ``record_evaluation`` adds the held-out evaluation afterwards
(the chain evaluates a model after training it).

When the base model is a local folder with its own ``lineage.json``, that lineage is embedded under ``parents``, so
the chain init -> SFT -> RL -> re-distillation reads from the last folder alone.

The card follows the hub's layout: YAML front matter (``library_name``, ``base_model`` when the chain starts from a
hub model, tags, ``model-index`` with the held-out pass@1), then model description, training data (lineage),
training procedure (recipe, hyperparameters, results), evaluation, usage (a ``transformers`` snippet) and code
version. Paths in the card and in ``lineage.json`` are relative to the workspace (``runs/...``, ``pools/...``;
``short_path``), a model in the Hugging Face cache is named by its hub id, content hashes are kept whole: a folder
copied to another machine or workspace names nothing of the machine it was made on. ``read_lineage``
gives the paths back as absolute ones, under the workspace the folder is in now.

    write_model_card(out / "final", kind="sft", base_model="Qwen/Qwen2.5-0.5B-Instruct",
                     data={"selection": "math-1500", "rows": 4500, "dropped": {"too_long": 3}},
                     recipe={"learning_rate": 1e-5, "epochs": 2}, metrics={"train_loss_last": 0.41})
    record_evaluation(out / "final", {"pass_at_1": 0.41, "stderr": 0.02, "n_problems": 500, "k": 4,
                                      "temperature": 0.6, "split": "test", "dataset": "math"})
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from curate import io
from curate.cards import fmt
from training import layout
from training.generation import max_new_tokens, write_generation_config


LINEAGE = "lineage.json"
CARD = "README.md"
# data keys shown first, in this order, in the card's "Training data" section; any other key follows
_DATA_ORDER = ("pool", "selection", "curriculum", "solutions", "source", "source_sha256", "rows", "problems",
               "dropped")  # fmt: skip
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HUB_CACHE = re.compile(r"/models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")  # huggingface_hub's cache layout
_REPO = Path(__file__).resolve().parents[1]  # the curate-rl checkout: its files are named ``curate-rl:<path>``
EVALUATION_KEYS = ("pass_at_1", "stderr", "n_problems", "k", "temperature", "split", "dataset")
_KINDS = {
    "init": "a randomly initialised model (no training)",
    "sft": "supervised fine-tuning (TRL SFTTrainer, loss on the completion tokens only) on solutions (what was "
    "checked about their answers: Training data)",
    "rl": "reinforcement learning (TRL GRPOTrainer) on a curriculum stage's prompts, rewarded by curate-rl's answer "
    "checker (the one that measured the data's pass rates)",
    "redistill": "re-distillation (CoScale-RL): SFT of the initial model on the latest correct RL solutions",
    "merge": "a weight merge of the source models",
    "rft": "rejection-sampling fine-tuning (a round of iterated RFT): SFT of the parent model on its own samples of "
    "the RL prompts that curate-rl's answer checker verified",
}


def code_version() -> dict[str, Any]:
    """curate-rl's version and, when the code runs from a git checkout, its commit and whether it had edits."""
    from importlib import metadata

    try:
        version = metadata.version("curate-rl")
    except metadata.PackageNotFoundError:
        version = "unknown"
    out: dict[str, Any] = {"curate_rl": version, "git_commit": None, "git_dirty": None}
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return out
    out.update(git_commit=commit or None, git_dirty=bool(dirty))
    return out


def read_lineage(model_dir: str | Path) -> dict[str, Any]:
    """The ``lineage.json`` of a model folder, its paths absolute again (``_expand``: under the workspace the folder
    is in now); ``FileNotFoundError`` naming the folder if it has none."""
    path = Path(model_dir) / LINEAGE
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no {LINEAGE} (not written by curate-rl's training)")
    return _expand(json.loads(path.read_text(encoding="utf-8")), workspace_root(os.path.abspath(model_dir)))


def _parent(model: str | Path | None) -> dict[str, Any] | None:
    """The lineage of a local model folder, else None (hub ids and folders without one)."""
    if model is None or not (Path(model) / LINEAGE).is_file():
        return None
    return read_lineage(model)


def _jsonable(obj: Any) -> Any:
    return io.jsonable(obj)


# --------------------------------------------------------------------------------------------------- paths
def workspace_root(*paths: str | Path | None) -> Path | None:
    """The workspace holding the first of ``paths`` that lies in one (``curate.io.Workspace``'s layout): the
    nearest ancestor with a ``pools/`` folder, or the folder above ``runs/`` for a path in ``<root>/runs/``. None
    when none does (a model trained outside a workspace)."""
    for path in paths:
        if not path or not str(path).startswith("/"):
            continue
        path = Path(path)
        for folder in path.parents:
            if (folder / "pools").is_dir() or path.is_relative_to(folder / layout.RUNS):
                return folder
    return None


def short_path(value: Any, root: str | Path | None = None, base: str | Path | None = None) -> Any:
    """An absolute path as a reader can use it anywhere: relative to ``base`` (e.g. the run folder ``training
    show`` was given), else to the workspace ``root``; a file of the curate-rl checkout as ``curate-rl:<path>``;
    a path under the home folder as ``~/...``. Anything else (hub ids, hashes, numbers) is returned unchanged.

    >>> short_path("/data/ws/runs/demo/sft/final", root="/data/ws")
    'runs/demo/sft/final'
    >>> short_path("/data/ws/runs/demo/sft/final", root="/data/ws", base="/data/ws/runs/demo")
    'sft/final'
    >>> short_path("Qwen/Qwen2.5-Math-1.5B", root="/data/ws")
    'Qwen/Qwen2.5-Math-1.5B'
    >>> short_path("/home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-Math-1.5B/snapshots/4a1b")
    'Qwen/Qwen2.5-Math-1.5B'
    """
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    if hub := _HUB_CACHE.search(value):  # a snapshot in the Hugging Face cache: the model's hub id
        return f"{hub[1]}/{hub[2]}"
    path = Path(value)
    for folder, prefix in ((base, ""), (root, ""), (_REPO, "curate-rl:")):
        if folder is not None and path.is_relative_to(folder) and path != Path(folder):
            return prefix + str(path.relative_to(folder))
    home = Path(os.path.expanduser("~"))
    if str(home) != "/" and path.is_relative_to(home):
        return "~/" + str(path.relative_to(home))
    return value


def _expand(obj: Any, root: str | Path | None, key: str | None = None) -> Any:
    """The paths ``_shorten`` wrote, absolute again: ``curate-rl:<path>`` and ``~/...`` always, a relative path
    when it names something under the workspace ``root`` (a single name only as a model: ``base_model``,
    ``sources``, e.g. a model folder ``init`` at the root); every other string (hub ids, names) unchanged."""
    if isinstance(obj, Mapping):
        return {k: _expand(v, root, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expand(v, root, key) for v in obj]
    if not isinstance(obj, str) or obj.startswith("/"):
        return obj
    if obj.startswith("curate-rl:"):
        return str(_REPO / obj.removeprefix("curate-rl:"))
    if obj.startswith("~/"):
        return os.path.expanduser(obj)
    if root is not None and ("/" in obj or key in ("base_model", "sources")) and (Path(root) / obj).exists():
        return str(Path(root) / obj)
    return obj


def _shorten(obj: Any, root: str | Path | None, base: str | Path | None = None) -> Any:
    """``short_path`` on every string of a nested mapping / list."""
    if isinstance(obj, Mapping):
        return {k: _shorten(v, root, base) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_shorten(v, root, base) for v in obj]
    return short_path(obj, root, base)


# --------------------------------------------------------------------------------------------------- writing
def write_model_card(
    model_dir: str | Path,
    *,
    kind: str,
    base_model: str | Path | None,
    data: Mapping[str, Any],
    recipe: Mapping[str, Any],
    metrics: Mapping[str, Any],
    parents: Sequence[str | Path] = (),
    evaluation: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``README.md`` and ``lineage.json`` into ``model_dir`` (and tidy its ``generation_config.json``,
    ``write_generation_config``); return the card's path.

    kind: what made the model (``init``, ``sft``, ``rl``, ``redistill``, ``merge``). base_model: the starting model
    (hub id or folder; None for a random init). data / recipe / metrics: free-form mappings (JSON-serialisable;
    other values are stringified). parents: further source models (a merge's inputs); ``base_model`` is always the
    first parent. evaluation: the held-out result, when known (``EVALUATION_KEYS``: pass_at_1, stderr, n_problems,
    k, temperature, split, dataset; further keys such as ``step`` or ``max_new_tokens`` are kept): the card's
    ``model-index`` and "Evaluation" section. The front matter names ``base_model`` only when the chain starts
    from a hub id, as the hub requires.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    sources = [base_model, *parents] if base_model is not None else list(parents)
    lineage = _jsonable(
        {
            "kind": kind,
            "base_model": None if base_model is None else str(base_model),
            "sources": [str(s) for s in sources],
            "data": dict(data),
            "recipe": dict(recipe),
            "metrics": dict(metrics),
            "code": code_version(),
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "parents": [p for p in (_parent(s) for s in sources) if p is not None],
        }
    )
    if evaluation is not None:
        lineage["evaluation"] = _jsonable(dict(evaluation))
    return _write(model_dir, lineage)


def record_evaluation(model_dir: str | Path, evaluation: Mapping[str, Any]) -> Path:
    """Add a held-out evaluation (``EVALUATION_KEYS``) to a model folder's ``lineage.json`` and card, everything
    else kept; returns the card's path. The chain calls it after evaluating each model it trained."""
    model_dir = Path(model_dir)
    lineage = read_lineage(model_dir)
    lineage["evaluation"] = _jsonable(dict(evaluation))
    return _write(model_dir, lineage)


def record_choice(model_dir: str | Path, choice: Mapping[str, Any]) -> Path:
    """Say in a model folder's ``lineage.json`` and card how it was chosen among a run's checkpoints
    (``training.choose``: the step, of how many, the validation pass@1 that chose it); returns the card's path."""
    model_dir = Path(model_dir)
    lineage = read_lineage(model_dir)
    lineage["chosen"] = _jsonable(dict(choice))
    return _write(model_dir, lineage)


def _write(model_dir: Path, lineage: dict[str, Any]) -> Path:
    root = workspace_root(os.path.abspath(model_dir), (lineage.get("data") or {}).get("run"))
    io.write_json(model_dir / LINEAGE, _shorten(lineage, root))  # no machine paths (module docstring)
    write_generation_config(model_dir, max_new_tokens(lineage))
    return io.write_text(model_dir / CARD, render_card(lineage, name=title(model_dir, lineage), root=root,
                                                       model_dir=model_dir))  # fmt: skip


# --------------------------------------------------------------------------------------------------- the card
def title(model_dir: str | Path, lineage: Mapping[str, Any]) -> str:
    """The card's title: ``<recipe name> / <chain step>`` for a model of a ``training run`` (``tiny-fastcurl /
    rl:stage4``; the step from the evaluation, else the folder in the run: ``rl/04-stage4``), else the folder's
    name (its parent's when it is a ``final/`` folder)."""
    model_dir = Path(model_dir)
    data = lineage.get("data") or {}
    step = (lineage.get("evaluation") or {}).get("step")
    run = data.get("run")
    if step is None and run and model_dir.resolve().is_relative_to(Path(run)):
        rel = model_dir.resolve().relative_to(Path(run))
        step = str(rel.parent if rel.name == layout.FINAL else rel) if str(rel) != "." else None
    if step is None:
        step = model_dir.resolve().parent.name if model_dir.name == layout.FINAL else model_dir.name
    return f"{data['recipe_name']} / {step}" if data.get("recipe_name") else str(step)


MODEL_CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ title }}

## Model description

{{ made }}

{% for fact in facts %}- {{ fact }}
{% endfor %}{% if chain %}
Chain of models (oldest first):

{% for step in chain %}{{ loop.index }}. {{ step }}
{% endfor %}{% endif %}
## Training data

{{ data_table }}

{% for note in data_notes %}{{ note }}

{% endfor %}Paths are relative to the workspace (the folder holding `pools/`, `selections/`, `runs/` ...); \
`curate-rl:` marks a file of the curate-rl repository; `*_sha256` are content hashes.

## Training procedure

{{ procedure }}

Hyperparameters (the step's resolved config):

```yaml
{{ hyperparameters }}
```

Training results:

{{ metrics_table }}

## Evaluation

{{ evaluation }}

## Usage

```python
{{ usage }}
```

`generation_config.json` sets `max_new_tokens` and the stop tokens, so `generate` needs no length argument. The model \
was trained on the chat template, the instruction above after the problem.

## Code version

{{ version }}

Machine-readable: `lineage.json` beside this card.
"""


def render_card(
    lineage: Mapping[str, Any],
    name: str = "model",
    root: str | Path | None = None,
    model_dir: str | Path | None = None,
) -> str:
    """The model card of a lineage record (pure apart from reading the pool's ``sources.json`` under ``root``):
    ``huggingface_hub.ModelCard`` from ``MODEL_CARD_TEMPLATE`` with ``card_data`` as its front matter. ``root``:
    the workspace the paths are shown relative to (``short_path``); ``model_dir``: the folder, for the usage
    snippet. Numbers are shown rounded (``fmt``), never as Python reprs."""
    from huggingface_hub import ModelCard

    kind = lineage["kind"]
    short = _shorten(dict(lineage), root)
    data, recipe, metrics, code = short["data"], short["recipe"], short["metrics"], lineage["code"]
    pool = pool_facts(root, (lineage.get("data") or {}).get("pool"))
    base = short.get("base_model")
    made = f"Made by curate-rl's `{kind}` step: {_KINDS.get(kind, kind)}, from " + (
        f"`{base}`" if base else "a random initialisation"
    )
    if len(short["sources"]) > 1:
        made += f" and {', '.join(f'`{s}`' for s in short['sources'][1:])}"
    facts = []
    if hub_base := _hub_root(lineage):
        facts.append(f"Base model (the start of the chain): [`{hub_base}`](https://huggingface.co/{hub_base})")
    elif lineage.get("parents") or kind == "init":
        facts.append("Base model: none; the chain starts from a random initialisation (no pretraining)")
    if lineage.get("evaluation"):
        facts.append(f"Held-out pass@1: {_eval_text(lineage['evaluation'])}")
    if chosen := lineage.get("chosen"):
        facts.append(f"Chosen on the {chosen['split']} split: step {chosen['step']} of {chosen['steps']}, pass@1 "
                     f"{_num(chosen['pass_at_1'])} ± {_num(chosen['stderr'])} ({chosen['n_problems']} problems x "
                     f"{chosen['k']}), the best of {chosen['candidates']} checkpoints evaluated there")  # fmt: skip
        if chosen.get("stopped"):
            facts.append(f"SFT {chosen['stopped']}")  # why training ended (training.plateau.why_stopped)
    facts.append(f"Task: {pool['task']}, answered step by step, the final answer in `\\boxed{{}}`")
    facts.append(f"Training data licence: {pool['licences']}; on the Hub: {', '.join(pool['datasets']) or 'none'}")
    keys = [k for k in _DATA_ORDER if k in data] + [k for k in data if k not in _DATA_ORDER]
    what = _KINDS.get(kind, kind)
    card = ModelCard.from_template(
        card_data(lineage, name, pool),
        template_str=MODEL_CARD_TEMPLATE,
        title=name,
        made=made + f", on {lineage['created_at']}.",
        facts=facts,
        chain=_chain(short),
        data_table="\n".join(_table(("item", "value"), [(k, data[k]) for k in keys])) if keys else "(none)",
        data_notes=answer_notes(lineage),
        procedure=f"{what[0].upper()}{what[1:]}.",
        hyperparameters=yaml.safe_dump(_rounded(recipe), sort_keys=False).strip() or "{}",
        metrics_table="\n".join(_table(("metric", "value"), list(metrics.items()))) if metrics else "(none)",
        evaluation=_evaluation_text(lineage.get("evaluation")),
        usage="\n".join(_usage(model_dir, root)),
        version=_version_text(code),
    )
    return str(card)


SAMPLERS = {  # evaluate's ``sampler`` as a card says it
    "engine": "curate-rl's rollout engine (KV cache, continuous batching)",
    "generate": "transformers generate",
}


def _evaluation_text(ev: Mapping[str, Any] | None) -> str:
    if not ev:
        return ("No held-out evaluation recorded for this folder (`training eval MODEL --pool POOL` measures one; "
                "`training run` records it here after each step).")  # fmt: skip
    table = _table(
        ("dataset", "split", "pass@1", "SE", "problems", "samples per problem", "temperature", "sampled by"),
        [(ev.get("dataset"), ev.get("split"), ev.get("pass_at_1"), ev.get("stderr"), ev.get("n_problems"),
          ev.get("k"), ev.get("temperature"), SAMPLERS.get(ev.get("sampler"), ev.get("sampler")))],
    )  # fmt: skip
    return "\n".join(table) + (
        "\n\npass@1 is the mean over the samples of each problem (mean@k), averaged over the held-out problems; SE is "
        "its standard error over problems. The answers are checked by curate-rl's checker (math-verify), the same "
        "that scored the training data."
    )


def _version_text(code: Mapping[str, Any]) -> str:
    commit = code.get("git_commit")
    return f"curate-rl {code.get('curate_rl')}" + (
        f", git commit `{commit}`" + (" (with uncommitted changes)" if code.get("git_dirty") else "") if commit else ""
    )


def card_data(lineage: Mapping[str, Any], name: str, pool: Mapping[str, Any] | None = None) -> Any:
    """The card's front matter as ``huggingface_hub.ModelCardData``: licence, language, the training data's Hub
    datasets (``pool_facts``), library, pipeline, ``base_model`` (when it is a hub id), tags and, once evaluated,
    ``eval_results`` (the hub's ``model-index``) with the held-out pass@1."""
    from huggingface_hub import EvalResult, ModelCardData

    pool = pool or pool_facts(None, None)
    base = lineage.get("base_model")
    licence = model_licence(lineage)
    ev = lineage.get("evaluation")
    results = None
    if ev and ev.get("pass_at_1") is not None:
        dataset = str(ev.get("dataset") or "held-out")
        how = f"mean of {ev.get('k', '?')} samples at T={ev.get('temperature', '?')}"
        if ev.get("stderr") is not None:
            how += f"; SE {float(ev['stderr']):.3f} over {ev.get('n_problems', '?')} problems"
        results = [EvalResult(task_type="text-generation", task_name="math reasoning", dataset_type=dataset,
                              dataset_name=dataset, dataset_split=str(ev["split"]) if ev.get("split") else None,
                              metric_type="pass@1", metric_value=round(float(ev["pass_at_1"]), 4),
                              metric_name=f"pass@1 ({how})")]  # fmt: skip
    return ModelCardData(
        language=["en"],
        license=licence["license"],
        license_name=licence.get("license_name"),
        license_link=licence.get("license_link"),
        datasets=pool["datasets"] or None,
        library_name="transformers",
        pipeline_tag="text-generation",
        base_model=base if base and _is_hub_id(base) else None,  # the hub's model tree takes hub ids only
        tags=["curate-rl", lineage["kind"], "math", "reasoning"],
        model_name=name if results else None,
        eval_results=results,
    )


def model_licence(lineage: Mapping[str, Any]) -> dict[str, str]:
    """The weights' licence for the card: a hub base model's (from its card in the local hub cache, else ``other``
    with a link to it); curate-rl's Apache-2.0 for a chain that starts from a random initialisation; ``unknown``
    for a local base model of unknown origin."""
    hub = _hub_root(lineage)
    if hub is not None:
        from huggingface_hub import ModelCard, try_to_load_from_cache

        cached = try_to_load_from_cache(hub, "README.md")
        if isinstance(cached, str):
            found = ModelCard.load(cached, ignore_metadata_errors=True).data.license
            if found:
                return {"license": str(found)}
        return {"license": "other", "license_name": "base-model", "license_link": f"https://huggingface.co/{hub}"}
    node: Mapping[str, Any] = lineage
    while node.get("parents"):
        node = node["parents"][0]
    scratch = node.get("kind") == "init" or node.get("base_model") is None
    return {"license": "apache-2.0" if scratch else "unknown"}


def pool_facts(root: str | Path | None, pool: str | None) -> dict[str, Any]:
    """What the card says about the training pool, from ``<root>/pools/<pool>/sources.json``: the task
    (``provenance.task_description``), its sources' licences and Hub dataset ids. Neutral words when the pool's
    record cannot be read (a model trained outside a workspace)."""
    from curate.select import provenance

    path = Path(root) / "pools" / str(pool) / "sources.json" if root and pool else None
    if path is None or not path.is_file():
        return {"task": "math problems", "licences": "not recorded", "datasets": []}
    sources = [s for s in io.read_json(path) if isinstance(s, dict)]
    known = [provenance.source_provenance(s.get("name", ""), s.get("path")) for s in sources]
    licences = sorted({p["licence"] for p in known})
    return {
        "task": f"{provenance.task_description(sources)}, pool `{pool}`",
        "licences": "; ".join(licences) or "not recorded",
        "datasets": provenance.hub_datasets(known),
    }


def answer_notes(lineage: Mapping[str, Any]) -> list[str]:
    """What was and was not checked about the answers an SFT step (this model or an ancestor along the first-parent
    line) trained on, from ``data.answers`` (``curate.solutions.export.answer_check``): the measured share of rows
    whose answer the checker finds wrong, never a claim of "verified" the data does not support."""
    notes = []
    node: Mapping[str, Any] | None = lineage
    who = "these training rows"
    while node is not None:
        answers = (node.get("data") or {}).get("answers")
        if node.get("kind") == "sft" or answers is not None:
            notes.append(_answers_text(answers, who))
        node = node["parents"][0] if node.get("parents") else None
        who = f"the rows its `{node['kind']}` ancestor trained on" if node is not None else who
    return notes


def _answers_text(answers: Mapping[str, Any] | None, who: str) -> str:
    if not answers or not answers.get("rows"):
        return f"The answers of {who} were not checked by curate-rl (the data has no `verdict` column)."
    rows, verdicts = answers["rows"], dict(answers.get("verdicts") or {})
    correct, wrong = verdicts.pop("correct", 0), verdicts.pop("wrong", 0)
    if correct == rows:
        return f"The answers of {who} are verified: all {rows:,} box the gold answer (curate-rl's checker)."
    other = ", ".join(f"{n:,} with verdict {v}" for v, n in sorted(verdicts.items()))
    return (
        f"The answers of {who} are NOT verified: {wrong:,} of {rows:,} ({wrong / rows:.1%}) box an answer "
        f"curate-rl's checker finds wrong and {correct:,} ({correct / rows:.1%}) the gold answer"
        + (f"; {other}" if other else "")
        + " (the solutions export kept them: `solutions.recheck: false`)."
    )


def _hub_root(lineage: Mapping[str, Any]) -> str | None:
    """The hub id the chain starts from: the first-parent line's oldest ``base_model`` that is a hub id."""
    found = None
    node: Mapping[str, Any] | None = lineage
    while node is not None:
        base = node.get("base_model")
        if base and _is_hub_id(base):
            found = base
        node = node["parents"][0] if node.get("parents") else None
    return found


def _is_hub_id(name: str) -> bool:
    return bool(_HUB_ID.match(name)) and not Path(name).exists()


def _eval_text(ev: Mapping[str, Any]) -> str:
    out = f"{_num(ev.get('pass_at_1'))} ± {_num(ev.get('stderr'))}"
    extra = [f"{ev['n_problems']} problems" if ev.get("n_problems") else "",
             f"k={ev['k']}" if ev.get("k") else "", f"T={ev['temperature']}" if ev.get("temperature") else "",
             " ".join(str(ev[k]) for k in ("dataset", "split") if ev.get(k))]  # fmt: skip
    extra = [e for e in extra if e]
    return out + (f" ({', '.join(extra)})" if extra else "")


def _num(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) and math.isfinite(x) else fmt(x)


def _rounded(obj: Any) -> Any:
    """Floats of a nested structure to 6 significant digits (``0.30000000000000004`` -> ``0.3``), for YAML."""
    if isinstance(obj, Mapping):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_rounded(v) for v in obj]
    return float(f"{obj:.6g}") if isinstance(obj, float) and math.isfinite(obj) else obj


def _usage(model_dir: str | Path | None, root: str | Path | None) -> list[str]:
    from curate.prompts import user_message

    where = short_path(str(Path(model_dir).resolve()), root) if model_dir is not None else "."
    message = user_message("Compute $6 - 5 + 7$.")
    return [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"path = {where!r}  # this folder (here relative to the workspace), or its hub id once uploaded",
        "tokenizer = AutoTokenizer.from_pretrained(path)",
        "model = AutoModelForCausalLM.from_pretrained(path)",
        f'messages = [{{"role": "user", "content": {message!r}}}]',
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", '
        "return_dict=True)",
        "output = model.generate(**inputs, do_sample=True, temperature=0.6)",
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
    ]


def _chain(lineage: Mapping[str, Any]) -> list[str]:
    """``kind from base`` for each ancestor along the first-parent line, oldest first, then this model."""
    steps = []
    node: Mapping[str, Any] | None = lineage
    while node is not None:
        base = node.get("base_model")
        steps.append(f"`{node['kind']}` from " + (f"`{base}`" if base else "a random initialisation"))
        node = node["parents"][0] if node.get("parents") else None
    return steps[::-1] if len(steps) > 1 else []


def _cell(value: Any) -> str:
    return fmt(value).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows),
    ]
