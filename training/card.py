"""Model cards and lineage: every model folder this project writes says what made it.

A model folder is ``save_pretrained`` model + tokenizer + ``README.md`` (a Hugging Face model card with YAML front
matter) + ``lineage.json`` (the same facts, machine-readable). ``write_model_card`` writes both; SFT, RL,
re-distillation, merging and ``init-tiny`` all call it, so a model found on disk (or on the hub) can always be traced
back to its data (pool, selection, curriculum, solutions table, row counts), its recipe, its base model and the code
version that trained it.

When the base model is a local folder with its own ``lineage.json``, that lineage is embedded under ``parents``, so
the chain init -> SFT -> RL -> re-distillation reads from the last folder alone.

    write_model_card(out / "final", kind="sft", base_model="Qwen/Qwen2.5-0.5B-Instruct",
                     data={"selection": "math-1500", "rows": 4500, "dropped": {"too_long": 3}},
                     recipe={"learning_rate": 1e-5, "epochs": 2}, metrics={"train_loss_last": 0.41})
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from curate import io


LINEAGE = "lineage.json"
CARD = "README.md"
# data keys shown first, in this order, in the card's "Training data" section; any other key follows
_DATA_ORDER = ("pool", "selection", "curriculum", "solutions", "source", "source_sha256", "rows", "problems",
               "dropped")  # fmt: skip
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


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


def write_model_card(
    model_dir: str | Path,
    *,
    kind: str,
    base_model: str | Path | None,
    data: Mapping[str, Any],
    recipe: Mapping[str, Any],
    metrics: Mapping[str, Any],
    parents: Sequence[str | Path] = (),
) -> Path:
    """Write ``README.md`` and ``lineage.json`` into ``model_dir``; return the card's path.

    kind: what made the model (``init``, ``sft``, ``rl``, ``redistill``, ``merge``). base_model: the starting model
    (hub id or folder; None for a random init). data / recipe / metrics: free-form mappings (JSON-serialisable;
    other values are stringified). parents: further source models (a merge's inputs); ``base_model`` is always the
    first parent. The front matter names ``base_model`` only when it is a hub id, as the hub requires.
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
    io.write_json(model_dir / LINEAGE, lineage)
    return io.write_text(model_dir / CARD, render_card(lineage, name=model_dir.name))


def render_card(lineage: Mapping[str, Any], name: str = "model") -> str:
    """The Markdown model card of a lineage record (pure: ``write_model_card`` writes it)."""
    base = lineage.get("base_model")
    front: dict[str, Any] = {"library_name": "transformers", "pipeline_tag": "text-generation"}
    if base and _HUB_ID.match(base) and not Path(base).exists():
        front["base_model"] = base
    front["tags"] = ["curate-rl", lineage["kind"], "math", "reasoning"]
    data, recipe, metrics, code = lineage["data"], lineage["recipe"], lineage["metrics"], lineage["code"]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "", f"# {name}", ""]
    lines += [
        f"Made by curate-rl's `{lineage['kind']}` stage from "
        + (f"`{base}`" if base else "a random initialisation")
        + (f" and {', '.join(f'`{s}`' for s in lineage['sources'][1:])}" if len(lineage["sources"]) > 1 else "")
        + f" on {lineage['created_at']}.",
        "",
        "## Training data",
        "",
    ]
    keys = [k for k in _DATA_ORDER if k in data] + [k for k in data if k not in _DATA_ORDER]
    lines += _table(("item", "value"), [(k, data[k]) for k in keys]) if keys else ["(none)"]
    chain = _chain(lineage)
    if chain:
        lines += ["", "Lineage (oldest first):", ""]
        lines += [f"{i + 1}. `{step}`" for i, step in enumerate(chain)]
    lines += ["", "## Recipe", "", "```yaml", yaml.safe_dump(recipe, sort_keys=False).strip() or "{}", "```", ""]
    lines += ["## Metrics", ""]
    lines += _table(("metric", "value"), list(metrics.items())) if metrics else ["(none)"]
    commit = code.get("git_commit")
    version = f"curate-rl {code.get('curate_rl')}" + (
        f", git commit `{commit}`" + (" (with uncommitted changes)" if code.get("git_dirty") else "") if commit else ""
    )
    lines += ["", "## Code version", "", version, "", "Machine-readable: `lineage.json` beside this card.", ""]
    return "\n".join(lines)


def _chain(lineage: Mapping[str, Any]) -> list[str]:
    """``kind from base`` for each ancestor along the first-parent line, oldest first, then this model."""
    steps = []
    node: Mapping[str, Any] | None = lineage
    while node is not None:
        steps.append(f"{node['kind']} from {node.get('base_model') or 'random init'}")
        node = node["parents"][0] if node.get("parents") else None
    return steps[::-1] if len(steps) > 1 else []


def _cell(value: Any) -> str:
    text = json.dumps(value, default=str) if isinstance(value, Mapping | list | tuple) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, str], rows: list[tuple[Any, Any]]) -> list[str]:
    return [f"| {header[0]} | {header[1]} |", "|---|---|", *(f"| {_cell(k)} | {_cell(v)} |" for k, v in rows)]
