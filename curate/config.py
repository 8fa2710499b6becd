"""Stage configs (frozen dataclasses) and the one strict recipe loader.

A recipe (``datasets/<name>/recipe.yaml``) is the unit of experiment: which pool, which stages, and each
stage's settings. Precedence is fixed: dataclass defaults < recipe YAML < overrides (CLI flags or Prefect
parameters, as dotted keys like ``select.size=1500``). Unknown keys are an error at every level (top level, a
stage's section, nested sections such as ``score.embed``) that names the key and suggests the closest allowed one,
so a typo never silently falls back to a default.

The recipe has one section per stage plus ``verify`` (``SECTIONS``); each section is typed by its stage's config
dataclass (``ingest`` here, the others beside their stage, ``<stage>.load_config``), and ``curate.pipeline``
builds every section present when the recipe loads, before any work starts. One ``seed`` reaches every stage that
draws random numbers (rollout sampling, score, select, the curriculum's sampler) unless a section sets its own.

Relative paths inside a recipe's ``ingest.sources`` resolve against the recipe file's folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from curate.errors import ConfigError


__all__ = ["ConfigError"]  # re-exported: stages import it from here

# The recipe's sections: one per stage of ``curate.pipeline.STAGES`` plus ``verify`` (the answer checker's
# settings, shared by rollout and the training reward). A test checks that this matches the pipeline.
SECTIONS = ("ingest", "decontaminate", "rollout", "score", "select", "curriculum", "solutions", "verify")


def unknown_key_error(unknown: list[str], allowed: list[str] | set[str], where: str) -> ConfigError:
    """``unknown key 'selct' in recipe (did you mean 'select'?); allowed: [...]``: the error of every strict level."""
    allowed = sorted(allowed)
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ConfigError(f"unknown key {', '.join(parts)} in {where}; allowed: {allowed}")


PLACEMENT = "placement"  # field metadata: the setting changes where or how fast work runs, never its results


def placement(default: Any) -> Any:
    """A config field whose value changes where or how fast work runs (threads, device, launcher, tracker), never
    its results: a training run folder may be reopened with another value (``training.chain.recipe_changes``)."""
    return field(default=default, metadata={PLACEMENT: True})


HELP, CHOICES = "help", "choices"  # field metadata: a setting's one-line help and the values it may take


def setting(default: Any, help: str, choices: tuple[str, ...] | None = None, *, placement: bool = False) -> Any:
    """A config field with its one-line help and its allowed values in the metadata, as TRL's ``GRPOConfig`` keeps
    them: the one source of a config's check of its choices and of a CLI's list of its settings (``training rl``).
    ``placement``: as ``placement`` marks a field."""
    metadata = {HELP: help, **({CHOICES: choices} if choices else {}), **({PLACEMENT: True} if placement else {})}
    return field(default=default, metadata=metadata)


def placement_keys(cls: type, prefix: str = "") -> frozenset[str]:
    """The dotted keys of ``cls``'s ``placement`` fields, nested config dataclasses included (``eval.threads``)."""
    hints = typing.get_type_hints(cls)
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        if f.metadata.get(PLACEMENT):
            out.add(prefix + f.name)
        for tp in (hints[f.name], *typing.get_args(hints[f.name])):
            if dataclasses.is_dataclass(tp):
                out |= placement_keys(tp, f"{prefix}{f.name}.")
    return frozenset(out)


# --------------------------------------------------------------------------------------------------- ingest
@dataclass(frozen=True)
class SourceSpec:
    """One input of ``curate ingest``.

    path: a file or folder, ``hf://org/name`` (needs internet), or ``gen://mixed?n=2000&seed=0`` (the built-in
    generator). format: an adapter name (``curate ingest --help`` lists them); detected when unambiguous.
    fields: generic-adapter mapping from our column to the source's (``{"problem": "question", "answer": "gt"}``).
    split: ``train``, ``validation`` (evaluation while choosing settings) or ``test``; defaults from the source where
    known, else ``train``.
    name: the source's name in the pool; defaults from the path.
    gen: options of a ``gen://`` source, the same as its URI's query (``curate.ingest.generate.parse_uri``), in a
    mapping a recipe can comment line by line; they extend the URI's (``location``).
    """

    path: str
    format: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    split: str | None = None
    name: str | None = None
    gen: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gen and not self.path.startswith("gen://"):
            raise ConfigError(f"source {self.path}: 'gen' options are for gen:// sources only")

    @property
    def location(self) -> str:
        """The path, with ``gen`` merged into a ``gen://`` URI's query (what identifies and reads the source)."""
        if not self.gen:
            return self.path
        from urllib.parse import urlencode

        extra = urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in self.gen.items()})
        return f"{self.path}{'&' if '?' in self.path else '?'}{extra}"


@dataclass(frozen=True)
class IngestConfig:
    """Cleaning bounds. Rows over a bound go to quarantine as ``too_long``."""

    sources: tuple[SourceSpec, ...] = ()
    max_problem_chars: int = 20_000
    max_answer_chars: int = 1_000
    max_solution_chars: int = 100_000
    # Same problem, answers that differ after normalization: ask math-verify whether they are equivalent before
    # calling the group a conflict (bounded in time per pair). Off: any normalized difference is a conflict.
    check_equivalence: bool = True


# --------------------------------------------------------------------------------------------------- recipe
@dataclass(frozen=True)
class Recipe:
    """A whole curation run. ``stages`` lists what ``curate run`` executes, in order.

    home: the workspace root when neither ``--home`` nor ``$CURATE_HOME`` is set (``Workspace.resolve``).
    seed: the one seed of every stage that draws random numbers, unless its section sets ``seed``.
    stage_configs: the sections of the other stages and ``verify`` as mappings (keys checked against ``SECTIONS``
    here); each stage's ``load_config`` turns its section into the stage's frozen dataclass with ``from_mapping``.
    """

    name: str
    pool: str
    stages: tuple[str, ...] = ("ingest",)
    home: str | None = None
    seed: int = 0
    ingest: IngestConfig = field(default_factory=IngestConfig)
    stage_configs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stage_config(self, name: str) -> dict[str, Any]:
        """Section ``name`` as a (copied) mapping; empty when the recipe does not have it."""
        return dict(self.stage_configs.get(name, {}))

    def seeded_config(self, name: str, key: str = "seed") -> dict[str, Any]:
        """Section ``name`` with ``key`` set to the recipe's ``seed`` unless the section sets it."""
        data = self.stage_config(name)
        data.setdefault(key, self.seed)
        return data


# --------------------------------------------------------------------------------------------------- loader
def from_mapping(cls: type, data: Mapping[str, Any] | None, where: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, recursively, rejecting unknown keys and wrong types. A class with a
    ``check_mapping(data)`` classmethod also checks the keys as written, which its built instance cannot tell from
    defaults (``training.rl.RLConfig``): every way the class is read goes through that one validator.

    >>> from_mapping(SourceSpec, {"path": "x.jsonl", "split": "test"}).split
    'test'
    """
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise unknown_key_error(unknown, names, where or cls.__name__)
    if hasattr(cls, "check_mapping"):
        cls.check_mapping(data)
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _coerce(hints[key], value, f"{where}.{key}" if where else key)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc}") from None


# A decimal number as people write it in YAML: ``1e-6``, ``2.0E-3``, ``+5``, ``.5`` (not ``nan``/``inf``).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _coerce(tp: Any, value: Any, where: str) -> Any:
    """``value`` as type ``tp`` (a union, a config dataclass, a container or a scalar), or ``ConfigError`` naming
    ``where``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(typing.get_args(tp), value, where)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):  # already built and checked (a loaded recipe handed down): taken as it is
            return value
        if isinstance(value, str) and tp is SourceSpec:
            value = {"path": value}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_mapping(tp, value, where)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        inner = (typing.get_args(tp) or (Any,))[0]
        return origin(_coerce(inner, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    return _coerce_scalar(tp, value, where)


def _coerce_union(args: tuple[Any, ...], value: Any, where: str) -> Any:
    """The first member of a union (``X | None``) that takes ``value``; the first member's error otherwise."""
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _coerce(arg, value, where)
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")


def _coerce_scalar(tp: Any, value: Any, where: str) -> Any:
    """int, float, str and bool strictly (a bool is not an int); an int or a decimal string is a float."""
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)  # PyYAML reads ``1e-6`` (no dot) as a string: the one numeric rule of every section
    if tp in (int, float, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    return value  # Any, or a type this loader does not check


def parse_overrides(items: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    """``["select.size=1500", "seed=3"]`` -> ``{"select.size": 1500, "seed": 3}`` (values parsed as YAML scalars)."""
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Set dotted keys in a nested mapping (the recipe as loaded from YAML)."""
    data = dict(data)
    for dotted, value in (overrides or {}).items():
        parts = dotted.split(".")
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            child = dict(child) if isinstance(child, Mapping) else {}
            node[part] = child
            node = child
        node[parts[-1]] = value
    return data


_TOP = {f.name for f in dataclasses.fields(Recipe)} - {"stage_configs"}


def recipe_from_mapping(data: Mapping[str, Any], base_dir: Path | None = None) -> Recipe:
    """Build a ``Recipe``: known top-level keys into fields, the other sections (``SECTIONS``) into
    ``stage_configs``; any other top-level key is an error with a "did you mean" suggestion.

    Each section is typed by its stage's config class; ``curate.pipeline.load_recipe`` / ``validate`` build every
    section present, so a typo at any depth fails when the recipe loads, before any work is done.
    """
    data = dict(data)
    unknown = sorted(k for k in data if k not in _TOP and k not in SECTIONS)
    if unknown:
        raise unknown_key_error(unknown, _TOP | set(SECTIONS), "recipe")
    stage_configs = {}
    for key in SECTIONS:
        if key == "ingest" or key not in data:
            continue
        value = data[key]
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"recipe key {key!r} must be a mapping of stage settings, got {value!r}")
        stage_configs[key] = dict(value or {})
    top = {k: v for k, v in data.items() if k in _TOP and not (k == "ingest" and v is None)}
    for required in ("name", "pool"):
        if required not in top:
            raise ConfigError(f"recipe needs a {required!r}")
    recipe = from_mapping(Recipe, top, "recipe")
    if base_dir is not None:
        sources = tuple(dataclasses.replace(s, path=_resolve(s.path, base_dir)) for s in recipe.ingest.sources)
        recipe = dataclasses.replace(recipe, ingest=dataclasses.replace(recipe.ingest, sources=sources))
    return dataclasses.replace(recipe, stage_configs=stage_configs)


def read_yaml(path: str | Path, what: str = "recipe") -> dict[str, Any]:
    """A YAML file that must hold a mapping (an empty file is ``{}``); ``ConfigError`` names ``what`` otherwise.

    The one reader of recipe and config files: curation recipes, training recipes, ``--config`` files.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:  # one line with the file, line and column instead of PyYAML's traceback
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what} {where}: not valid YAML ({problem})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} {path} must be a YAML mapping")
    return dict(data)


def load_recipe(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Recipe:
    """Read a recipe YAML, apply dotted overrides, validate. Raises ``ConfigError`` on anything unknown.

    A recipe may extend another: ``base: other.yaml`` (relative to this file) reads that one first and lays this
    one's keys over it, mappings merged key by key and anything else (``stages``, lists) replaced: a variant
    states only what differs (``datasets/tiny/raw.yaml``: the built-in pool without curation)."""
    path = Path(path).resolve()
    data = read_yaml(path, "recipe")
    seen = [path]
    while "base" in data:
        base = (path.parent / str(data.pop("base"))).resolve()
        if base in seen:
            raise ConfigError(f"recipe {seen[0]}: `base` recipes form a loop at {base}")
        seen.append(base)
        data, path = _merged(read_yaml(base, "base recipe"), data), base
    return recipe_from_mapping(apply_overrides(data, overrides), base_dir=path.parent)


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``: mappings merged recursively, other values replaced."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = _merged(out[key], value) if both else value
    return out


def _resolve(p: str, base_dir: Path) -> str:
    if "://" in p or Path(p).is_absolute():
        return p
    return str((base_dir / p).resolve())
