"""Model cards and lineage: every model folder this project writes says what made it.

A model folder is ``save_pretrained`` model + tokenizer + ``README.md`` (a Hugging Face model card) +
``lineage.json`` (the same facts, machine-readable, with absolute paths) + a ``generation_config.json`` fit for use
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
version. Paths in the card are relative to the workspace (``runs/...``, ``pools/...``; ``short_path``), content
hashes are kept whole.

    write_model_card(out / "final", kind="sft", base_model="Qwen/Qwen2.5-0.5B-Instruct",
                     data={"selection": "math-1500", "rows": 4500, "dropped": {"too_long": 3}},
                     recipe={"learning_rate": 1e-5, "epochs": 2}, metrics={"train_loss_last": 0.41})
    record_evaluation(out / "final", {"pass_at_1": 0.41, "stderr": 0.02, "n_problems": 500, "k": 4,
                                      "temperature": 0.6, "split": "test", "dataset": "math"})
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from curate import io


LINEAGE = "lineage.json"
CARD = "README.md"
GENERATION_CONFIG = "generation_config.json"
# data keys shown first, in this order, in the card's "Training data" section; any other key follows
_DATA_ORDER = ("pool", "selection", "curriculum", "solutions", "source", "source_sha256", "rows", "problems",
               "dropped")  # fmt: skip
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_REPO = Path(__file__).resolve().parents[1]  # the curate-rl checkout: its files are named ``curate-rl:<path>``
EVALUATION_KEYS = ("pass_at_1", "stderr", "n_problems", "k", "temperature", "split", "dataset")
DEFAULT_MAX_NEW_TOKENS = 1024  # when neither the evaluation nor the recipe says how long an answer may be
_KINDS = {
    "init": "a randomly initialised model (no training)",
    "sft": "supervised fine-tuning (TRL SFTTrainer, loss on the completion tokens only) on verified solutions",
    "rl": "reinforcement learning (TRL GRPOTrainer) on a curriculum stage's prompts, rewarded by curate-rl's answer "
    "checker (the one that measured the data's pass rates)",
    "redistill": "re-distillation (CoScale-RL): SFT of the initial model on the latest correct RL solutions",
    "merge": "a weight merge of the source models",
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
    """The ``lineage.json`` of a model folder; ``FileNotFoundError`` naming the folder if it has none."""
    path = Path(model_dir) / LINEAGE
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no {LINEAGE} (not written by curate-rl's training)")
    return json.loads(path.read_text(encoding="utf-8"))


def _parent(model: str | Path | None) -> dict[str, Any] | None:
    """The lineage of a local model folder, else None (hub ids and folders without one)."""
    if model is None or not (Path(model) / LINEAGE).is_file():
        return None
    return read_lineage(model)


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


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
            if (folder / "pools").is_dir() or path.is_relative_to(folder / "runs"):
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
    """
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    path = Path(value)
    for folder, prefix in ((base, ""), (root, ""), (_REPO, "curate-rl:")):
        if folder is not None and path.is_relative_to(folder) and path != Path(folder):
            return prefix + str(path.relative_to(folder))
    home = Path(os.path.expanduser("~"))
    if str(home) != "/" and path.is_relative_to(home):
        return "~/" + str(path.relative_to(home))
    return value


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


def _write(model_dir: Path, lineage: dict[str, Any]) -> Path:
    io.write_json(model_dir / LINEAGE, lineage)
    write_generation_config(model_dir, max_new_tokens(lineage))
    root = workspace_root(model_dir, (lineage.get("data") or {}).get("run"))
    return io.write_text(model_dir / CARD, render_card(lineage, name=title(model_dir, lineage), root=root,
                                                       model_dir=model_dir))  # fmt: skip


def max_new_tokens(lineage: Mapping[str, Any]) -> int:
    """How long an answer may be: the evaluation's generation budget, else the RL stage's completion length, else
    the SFT row length, else ``DEFAULT_MAX_NEW_TOKENS``."""
    recipe = lineage.get("recipe") or {}
    candidates = [
        (lineage.get("evaluation") or {}).get("max_new_tokens"),
        (recipe.get("rl") or {}).get("max_completion_length"),
        *((recipe.get(k) or {}).get("max_length") for k in ("sft", "redistill")),
    ]
    return next((int(c) for c in candidates if isinstance(c, int | float) and c > 0), DEFAULT_MAX_NEW_TOKENS)


def write_generation_config(model_dir: str | Path, new_tokens: int) -> Path | None:
    """Make ``generation_config.json`` fit for ``model.generate(**inputs)``: ``max_new_tokens`` (capped at the
    model's context), every stop id (the config's and the tokenizer's end-of-turn token), the pad id, and no
    ``max_length`` left at transformers' default of 20. None for a folder without ``config.json`` (no model).
    Weights and ``config.json`` (what ``files.json`` records) are never touched."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        return None
    config = json.loads((model_dir / "config.json").read_text())
    path = model_dir / GENERATION_CONFIG
    gen = json.loads(path.read_text()) if path.is_file() else {}
    tokens = _special_token_ids(model_dir)
    eos: list[int] = []
    for ids in (gen.get("eos_token_id"), config.get("eos_token_id"), tokens.get("eos_token")):
        for i in ids if isinstance(ids, list) else [ids]:
            if isinstance(i, int) and i not in eos:
                eos.append(i)
    pad = next((i for i in (gen.get("pad_token_id"), config.get("pad_token_id"), tokens.get("pad_token"))
                if isinstance(i, int)), eos[0] if eos else None)  # fmt: skip
    gen.pop("_from_model_config", None)  # edited: transformers must not rebuild it from config.json
    if gen.get("max_length") == 20:
        gen.pop("max_length")
    limit = config.get("max_position_embeddings")
    gen["max_new_tokens"] = min(int(new_tokens), int(limit)) if isinstance(limit, int) else int(new_tokens)
    if eos:
        gen["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    if pad is not None:
        gen["pad_token_id"] = pad
    return io.write_json(path, gen)


def _special_token_ids(model_dir: Path) -> dict[str, int]:
    """``{"eos_token": id, "pad_token": id}`` from the saved tokenizer's files (no transformers import)."""
    cfg_path, tok_path = model_dir / "tokenizer_config.json", model_dir / "tokenizer.json"
    if not cfg_path.is_file() or not tok_path.is_file():
        return {}
    cfg = json.loads(cfg_path.read_text())
    tok = json.loads(tok_path.read_text())
    vocab = {t["content"]: t["id"] for t in tok.get("added_tokens") or []}
    model_vocab = (tok.get("model") or {}).get("vocab")
    out = {}
    for key in ("eos_token", "pad_token"):
        text = cfg.get(key)
        text = text.get("content") if isinstance(text, Mapping) else text
        ident = vocab.get(text) if text else None
        if ident is None and isinstance(model_vocab, Mapping) and text:
            ident = model_vocab.get(text)
        if isinstance(ident, int):
            out[key] = ident
    return out


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
        step = str(rel.parent if rel.name == "final" else rel) if str(rel) != "." else None
    if step is None:
        step = model_dir.resolve().parent.name if model_dir.name == "final" else model_dir.name
    return f"{data['recipe_name']} / {step}" if data.get("recipe_name") else str(step)


def render_card(
    lineage: Mapping[str, Any],
    name: str = "model",
    root: str | Path | None = None,
    model_dir: str | Path | None = None,
) -> str:
    """The Markdown model card of a lineage record (pure: ``write_model_card`` writes it). ``root``: the workspace
    the paths are shown relative to (``short_path``); ``model_dir``: the folder, for the usage snippet."""
    kind = lineage["kind"]
    short = _shorten(dict(lineage), root)
    data, recipe, metrics, code = short["data"], short["recipe"], short["metrics"], lineage["code"]
    evaluation = lineage.get("evaluation")
    hub_base = _hub_root(lineage)
    lines = ["---", yaml.safe_dump(front_matter(lineage, name), sort_keys=False, allow_unicode=True).strip(), "---"]
    lines += ["", f"# {name}", "", "## Model description", ""]
    base = short.get("base_model")
    made = f"Made by curate-rl's `{kind}` step: {_KINDS.get(kind, kind)}, from " + (
        f"`{base}`" if base else "a random initialisation"
    )
    if len(short["sources"]) > 1:
        made += f" and {', '.join(f'`{s}`' for s in short['sources'][1:])}"
    lines += [made + f", on {lineage['created_at']}.", ""]
    if hub_base:
        lines += [f"- Base model (the start of the chain): [`{hub_base}`](https://huggingface.co/{hub_base})"]
    elif lineage.get("parents") or kind == "init":
        lines += ["- Base model: none; the chain starts from a random initialisation (no pretraining)"]
    if evaluation:
        lines += [f"- Held-out pass@1: {_eval_text(evaluation)}"]
    lines += ["- Task: math word problems answered step by step, the final answer in `\\boxed{}`", ""]
    chain = _chain(short)
    if chain:
        lines += ["Chain of models (oldest first):", ""]
        lines += [f"{i + 1}. {step}" for i, step in enumerate(chain)]
        lines += [""]

    lines += ["## Training data", ""]
    keys = [k for k in _DATA_ORDER if k in data] + [k for k in data if k not in _DATA_ORDER]
    lines += _table(("item", "value"), [(k, data[k]) for k in keys]) if keys else ["(none)"]
    lines += ["", "Paths are relative to the workspace (the folder holding `pools/`, `selections/`, `runs/` ...); "
              "`curate-rl:` marks a file of the curate-rl repository; `*_sha256` are content hashes.", ""]  # fmt: skip

    what = _KINDS.get(kind, kind)
    lines += ["## Training procedure", "", f"{what[0].upper()}{what[1:]}.", ""]
    lines += ["Hyperparameters (the step's resolved config):", ""]
    lines += ["```yaml", yaml.safe_dump(recipe, sort_keys=False).strip() or "{}", "```", ""]
    lines += ["Training results:", ""]
    lines += _table(("metric", "value"), list(metrics.items())) if metrics else ["(none)"]

    lines += ["", "## Evaluation", ""]
    if evaluation:
        lines += _table(
            ("dataset", "split", "pass@1", "SE", "problems", "samples per problem", "temperature"),
            [(evaluation.get("dataset"), evaluation.get("split"), _num(evaluation.get("pass_at_1")),
              _num(evaluation.get("stderr")), evaluation.get("n_problems"), evaluation.get("k"),
              evaluation.get("temperature"))],
        )  # fmt: skip
        lines += ["", "pass@1 is the mean over the samples of each problem (mean@k), averaged over the held-out "
                  "problems; SE is its standard error over problems. The answers are checked by curate-rl's checker "
                  "(math-verify), the same that scored the training data.", ""]  # fmt: skip
    else:
        lines += ["No held-out evaluation recorded for this folder (`training eval MODEL --pool POOL` measures one; "
                  "`training run` records it here after each step).", ""]  # fmt: skip

    lines += ["## Usage", "", "```python", *_usage(model_dir, root), "```", ""]
    lines += [
        "`generation_config.json` sets `max_new_tokens` and the stop tokens, so `generate` needs no length argument. "
        "The model was trained on the chat template, the instruction above after the problem.",
        "",
    ]

    commit = code.get("git_commit")
    version = f"curate-rl {code.get('curate_rl')}" + (
        f", git commit `{commit}`" + (" (with uncommitted changes)" if code.get("git_dirty") else "") if commit else ""
    )
    lines += ["## Code version", "", version, "", "Machine-readable: `lineage.json` beside this card.", ""]
    return "\n".join(lines)


def front_matter(lineage: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The card's YAML front matter: library, pipeline, ``base_model`` (when it is a hub id), tags and, once evaluated,
    ``model-index`` with the held-out pass@1 (the hub's evaluation-results format)."""
    front: dict[str, Any] = {"library_name": "transformers", "pipeline_tag": "text-generation"}
    base = lineage.get("base_model")
    if base and _is_hub_id(base):  # the hub's model tree takes hub ids only (the chain's root is in the text)
        front["base_model"] = base
    front["tags"] = ["curate-rl", lineage["kind"], "math", "reasoning"]
    ev = lineage.get("evaluation")
    if ev and ev.get("pass_at_1") is not None:
        dataset = str(ev.get("dataset") or "held-out")
        how = f"mean of {ev.get('k', '?')} samples at T={ev.get('temperature', '?')}"
        if ev.get("stderr") is not None:
            how += f"; SE {float(ev['stderr']):.3f} over {ev.get('n_problems', '?')} problems"
        metric = {"type": "pass@1", "value": round(float(ev["pass_at_1"]), 4), "name": f"pass@1 ({how})"}
        ds = {"name": dataset, "type": dataset}
        if ev.get("split"):
            ds["split"] = str(ev["split"])
        front["model-index"] = [{"name": name, "results": [{"task": {"type": "text-generation", "name": "math "
                                "reasoning"}, "dataset": ds, "metrics": [metric]}]}]  # fmt: skip
    return front


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
    return f"{x:.3f}" if isinstance(x, float) else str(x)


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
    text = json.dumps(value, default=str) if isinstance(value, Mapping | list | tuple) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows),
    ]
