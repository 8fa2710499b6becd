"""The vLLM offline-engine backend: a thin translation between our records and vLLM's API, nothing more.

The only module of ``curate`` allowed to import ``vllm`` (the one ``ignore_imports`` entry of the import-linter
contract in pyproject.toml), and only inside ``generate_vllm``, which runs when ``--backend vllm`` is chosen. vLLM
is an optional extra (``pip install -e ".[gpu]"``); nothing else in the project needs it.

What it uses of vLLM (documented offline API, ``docs.vllm.ai`` "Offline Inference"):
``LLM(model=..., revision=..., tensor_parallel_size=..., dtype=..., gpu_memory_utilization=..., max_model_len=...,
seed=...)``, ``LLM.get_tokenizer()``, ``SamplingParams(n, temperature, top_p, max_tokens, seed)`` (one per
request, so every problem has its own seed), and ``LLM.generate(prompts, sampling_params, use_tqdm=False)``, which
returns one ``RequestOutput`` per prompt, in prompt order, with ``.prompt_token_ids`` and ``.outputs``: a list of
``CompletionOutput`` with ``.index``, ``.text``, ``.token_ids`` and ``.finish_reason`` (``"stop"``, ``"length"`` or
``"abort"``).

Data parallelism is done one level up, by shards: start one process per GPU (or per tensor-parallel group) with
``--dp-size D --dp-rank R`` (and ``CUDA_VISIBLE_DEVICES``); each takes the shards ``i % D == R``. Shards are
independent and written atomically, so nothing has to coordinate the processes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from curate.prompts import build_prompt
from curate.rollout.backends import Completion, OnDone, Request, Sampling, finish_reason


@dataclass(frozen=True)
class VLLMOptions:
    """vLLM engine settings. max_model_len: None lets vLLM take the model's own limit."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    dtype: str = "auto"


def engine_kwargs(model: str, revision: str | None, opts: VLLMOptions, seed: int) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for our options."""
    kwargs: dict[str, Any] = {
        "model": model,
        "tensor_parallel_size": opts.tensor_parallel_size,
        "gpu_memory_utilization": opts.gpu_memory_utilization,
        "dtype": opts.dtype,
        "seed": seed,
    }
    if revision is not None:
        kwargs["revision"] = revision
    if opts.max_model_len is not None:
        kwargs["max_model_len"] = opts.max_model_len
    return kwargs


def sampling_kwargs(request: Request, sampling: Sampling) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one request: all its missing samples, its own seed.

    >>> sampling_kwargs(Request("p", "m", (4, 5, 6), 17), Sampling(0.6, 0.95, 512, 0))["n"]
    3
    """
    return {
        "n": len(request.sample_idxs),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "seed": request.seed,
    }


def to_completions(requests: Sequence[Request], outputs: Sequence[Any]) -> list[Completion]:
    """vLLM ``RequestOutput``s (one per request, in request order) into our ``Completion`` records.

    ``CompletionOutput.index`` (0..n-1) picks the request's sample index, so the order of ``.outputs`` does not
    matter. A missing or extra output is an error: the shard must not be written with holes.
    """
    if len(outputs) != len(requests):
        raise ValueError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
    out = []
    for req, res in zip(requests, outputs, strict=True):
        samples = sorted(res.outputs, key=lambda o: o.index)
        if [o.index for o in samples] != list(range(len(req.sample_idxs))):
            raise ValueError(
                f"vLLM returned outputs {[o.index for o in samples]} for {len(req.sample_idxs)} samples of "
                f"{req.problem_id}"
            )
        prompt_tokens = len(res.prompt_token_ids) if res.prompt_token_ids is not None else None
        for o in samples:
            out.append(
                Completion(
                    problem_id=req.problem_id,
                    sample_idx=req.sample_idxs[o.index],
                    text=o.text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=len(o.token_ids),
                    finish_reason=finish_reason(o.finish_reason),
                )
            )
    return out


@functools.lru_cache(maxsize=1)
def load_engine(model: str, revision: str | None, opts: VLLMOptions, seed: int) -> Any:
    """One engine per process: loading the weights and capturing CUDA graphs is the expensive part."""
    from vllm import LLM

    return LLM(**engine_kwargs(model, revision, opts, seed))


def release_engine() -> None:
    """Free the engine ``load_engine`` holds (its GPU memory) once a process is done sampling with it: the training
    chain evaluates each model in its own process, between training steps that need the GPU. Best effort across
    vLLM versions (its distributed state torn down where it exposes the calls)."""
    import contextlib
    import gc

    load_engine.cache_clear()
    with contextlib.suppress(Exception):
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def generate_vllm(
    requests: Sequence[Request],
    model: str,
    sampling: Sampling,
    opts: VLLMOptions = VLLMOptions(),
    *,
    revision: str | None = None,
    on_done: OnDone | None = None,
) -> list[Completion]:
    """Sample every request with the offline engine in one ``generate`` call (vLLM batches continuously)."""
    from vllm import SamplingParams

    llm = load_engine(model, revision, opts, sampling.seed)
    tok = llm.get_tokenizer()
    prompts = [build_prompt(tok, r.message) for r in requests]
    params = [SamplingParams(**sampling_kwargs(r, sampling)) for r in requests]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    completions = to_completions(requests, outputs)
    if on_done is not None:
        on_done(len(completions), sum(c.completion_tokens or 0 for c in completions))
    return completions
