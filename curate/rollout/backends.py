r"""Generation backends for rollouts: prompts in, completions out. ``hf`` and ``openai`` live here; ``vllm`` in
``curate/rollout/vllm_engine.py`` (the one module allowed to import vLLM).

Every backend takes the same inputs and returns the same records, so the ledger cannot tell them apart except by
its ``backend`` column:

- a ``Request`` per problem: the user message (problem text + instruction), the sample indices still missing for
  it, and a seed derived from the run seed, the problem id and the first sample index;
- ``Sampling``: temperature, top_p, max_tokens and the run seed (recorded with every ledger row);
- out comes one ``Completion`` per (problem, sample index): text, prompt/completion token counts, finish reason
  (``stop`` or ``length``; ``error`` for anything else a server reports).

Prompts are built from the model's own chat template (``build_prompt``) with the instruction appended to the
problem, as DeepScaleR/FastCuRL do: ``"<problem> Let's think step by step and output the final answer within
\boxed{}."``. A tokenizer without a chat template (a base model) gets the bare message.

Example ``Completion``::

    Completion(problem_id="3f9c0a1b2c4d5e6f", sample_idx=0, text="... so \\boxed{5}.", prompt_tokens=41,
               completion_tokens=187, finish_reason="stop")
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from curate.errors import ConfigError, CurateError
from curate.prompts import build_prompt


OnDone = Callable[[int, int], None]  # (samples finished, completion tokens) for progress bars


# --------------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Sampling:
    """Sampling settings of a run; ``temperature == 0`` is greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 4096
    seed: int = 0


@dataclass(frozen=True)
class Request:
    """One problem to sample: its user message and the sample indices to draw, with the seed to draw them."""

    problem_id: str
    message: str
    sample_idxs: tuple[int, ...]
    seed: int


@dataclass(frozen=True)
class Completion:
    """One generated sample."""

    problem_id: str
    sample_idx: int
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str


def request_seed(seed: int, problem_id: str, sample_idx: int) -> int:
    """A 31-bit seed for one request, stable across runs and machines (sha256, never Python's ``hash``)."""
    digest = hashlib.sha256(f"{seed}:{problem_id}:{sample_idx}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def finish_reason(reason: Any) -> str:
    """A backend's finish reason in our vocabulary: ``stop``, ``length`` or ``error``."""
    return reason if reason in ("stop", "length") else "error"


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), max(1, size)):
        yield items[i : i + max(1, size)]


# --------------------------------------------------------------------------------------------------- hf
ENGINES = ("auto", "hf")


def check_engine(engine: str, key: str) -> None:
    """``key`` (``hf.engine``, ``eval.engine``, ``rl.engine``, the recipe's ``engine``) is one of ``ENGINES``."""
    if engine not in ENGINES:
        raise ConfigError(f"{key} must be one of {ENGINES}, got {engine!r}")


@dataclass(frozen=True)
class HFOptions:
    """Hugging Face transformers backend (CPU or one GPU).

    device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``...
    dtype: ``auto`` (bfloat16 on CUDA, float32 on CPU), ``float32``, ``bfloat16``, ``float16``.
    batch_size: sequences per ``generate`` call (prompts are repeated once per sample).
    threads: torch CPU threads (0: torch's default). On a busy CPU box one thread can beat two by far for small
    models (tests/tiny_model.py, 512 samples x 128 tokens, load ~10 on 2 cores: 3,528 vs 357 tokens/s).

    engine: ``auto`` samples with the project's rollout engine (``curate.rollout.engine``: a KV cache and
    continuous batching, each sample seeded by its own problem and index) where it supports the model (the ``tiny``
    Qwen2 models, Llama, on the CPU), else with ``generate``; ``hf`` always with ``generate``. With the engine,
    ``batch_size`` is its number of slots.
    """

    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 32
    threads: int = 0
    engine: str = "auto"

    def __post_init__(self) -> None:
        check_engine(self.engine, "hf.engine")


def load_hf(model: str, revision: str | None = None, opts: HFOptions = HFOptions()) -> tuple[Any, Any, str]:
    """Tokenizer, model and device, loaded once per process (a Dask worker running many shards loads them once)."""
    return _load_hf(model, revision, opts.device, opts.dtype)


@functools.lru_cache(maxsize=2)
def _load_hf(model: str, revision: str | None, device: str, dtype: str) -> tuple[Any, Any, str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    tok = AutoTokenizer.from_pretrained(model, revision=revision)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    lm = AutoModelForCausalLM.from_pretrained(model, revision=revision, dtype=getattr(torch, dtype))
    lm.to(device).eval()
    return tok, lm, device


def _eos_ids(tok: Any, lm: Any) -> set[int]:
    ids = lm.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    return ids


def generate_hf(
    requests: Sequence[Request],
    model: str,
    sampling: Sampling,
    opts: HFOptions = HFOptions(),
    *,
    revision: str | None = None,
    on_done: OnDone | None = None,
) -> list[Completion]:
    """Sample with the rollout engine where it supports the model (``sampler_name``), else with ``transformers``
    ``generate``: every (request, sample index) is one row of a batch.

    The engine seeds every sample with ``request_seed(run seed, problem id, sample index)``, so a sample is the same
    whatever else shares its batch and however a shard is resumed. ``generate`` is seeded per batch
    (``torch.manual_seed`` with the seed of the batch's first request, offset by its first sample index), so the
    same shard gives the same completions on a re-run. The model's own generation defaults (top_k,
    repetition penalty) are overridden: only temperature and top_p shape sampling, as recorded in the ledger.
    """
    import torch

    tok, lm, device = load_hf(model, revision, opts)
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    eos = _eos_ids(tok, lm)
    prompts = {r.problem_id: build_prompt(tok, r.message) for r in requests}
    if sampler_name(lm, opts) == "engine":
        return _generate_engine(requests, tok, lm, prompts, eos, sampling, opts, on_done)
    rows = [(r, idx) for r in requests for idx in r.sample_idxs]
    greedy = sampling.temperature <= 0
    gen_kwargs: dict[str, Any] = {
        "max_new_tokens": sampling.max_tokens,
        "do_sample": not greedy,
        "pad_token_id": tok.pad_token_id,
        "eos_token_id": sorted(eos),
        "repetition_penalty": 1.0,
    }
    if not greedy:
        gen_kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
    out: list[Completion] = []
    for batch in _chunks(rows, opts.batch_size):
        enc = tok(
            [prompts[r.problem_id] for r, _ in batch], return_tensors="pt", padding=True, add_special_tokens=False
        )
        enc = {k: v.to(device) for k, v in enc.items()}
        first, first_idx = batch[0]
        torch.manual_seed((first.seed + first_idx) & 0x7FFFFFFF)
        with torch.inference_mode():
            generated = lm.generate(**enc, **gen_kwargs)
        new = generated[:, enc["input_ids"].shape[1] :].tolist()
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        tokens = 0
        for (req, idx), ids, plen in zip(batch, new, prompt_lens, strict=True):
            cut = next((i for i, t in enumerate(ids) if t in eos), None)
            reason = "length" if cut is None else "stop"
            kept = ids if cut is None else ids[: cut + 1]  # the EOS token counts, as in vLLM's token_ids
            text = tok.decode(kept, skip_special_tokens=True)
            out.append(Completion(req.problem_id, idx, text, int(plen), len(kept), reason))
            tokens += len(kept)
        if on_done is not None:
            on_done(len(batch), tokens)
    return out


def sampler_name(lm: Any, opts: HFOptions) -> str:
    """Which sampler the hf backend uses for this model: ``engine`` or ``generate`` (recorded with the samples)."""
    from curate.rollout.engine import supports

    return "engine" if opts.engine == "auto" and supports(lm) is None else "generate"


def _generate_engine(
    requests: Sequence[Request],
    tok: Any,
    lm: Any,
    prompts: dict[str, str],
    eos: set[int],
    sampling: Sampling,
    opts: HFOptions,
    on_done: OnDone | None,
) -> list[Completion]:
    """``generate_hf`` through the rollout engine: one engine request per (problem, sample index)."""
    from curate.rollout.engine import Engine, EngineRequest

    ids = {pid: tuple(tok(text, add_special_tokens=False)["input_ids"]) for pid, text in prompts.items()}
    rows = [(r, idx) for r in requests for idx in r.sample_idxs]
    wanted = [
        EngineRequest(ids[r.problem_id], request_seed(sampling.seed, r.problem_id, idx), sampling.max_tokens)
        for r, idx in rows
    ]
    longest = max((len(w.prompt_ids) for w in wanted), default=0) + sampling.max_tokens
    engine = Engine(lm, slots=max(1, min(opts.batch_size, len(rows))), context=longest)
    temperature = max(0.0, sampling.temperature)
    outs = engine.generate(wanted, temperature=temperature, top_p=sampling.top_p, stop_ids=eos, on_done=on_done)
    return [
        Completion(r.problem_id, idx, tok.decode(o.token_ids, skip_special_tokens=True), len(ids[r.problem_id]),
                   len(o.token_ids), o.finish_reason)
        for (r, idx), o in zip(rows, outs, strict=True)
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------------- openai
@dataclass(frozen=True)
class OpenAIOptions:
    """Any OpenAI-compatible server (``vllm serve``, SGLang, a hosted API).

    api: ``chat`` (``/chat/completions``; the server applies the chat template) or ``completions``
    (``/completions``; the prompt is rendered here with ``tokenizer``'s template, or sent bare without one).
    api_key_env: environment variable holding the API key (never stored in a config or manifest).
    concurrency: requests in flight. timeout_s: per request. max_retries / backoff_s: on 429, 5xx, timeouts and
    dropped connections, wait ``backoff_s * 2**attempt`` (or the server's ``Retry-After``, at most 60 s).
    request_n: ask for all of a problem's samples in one request (``n``); off for servers without ``n``.
    tokenizer: a local tokenizer (path or id) to count each sample's tokens; without it, completion tokens are
    known only for single-sample responses (``usage`` is per request).
    """

    base_url: str = "http://127.0.0.1:8000/v1"
    api: str = "chat"
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 16
    timeout_s: float = 600.0
    max_retries: int = 5
    backoff_s: float = 1.0
    request_n: bool = True
    tokenizer: str | None = None


RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class BackendError(CurateError, RuntimeError):
    """A request failed for good (a non-retryable status, or retries exhausted); the shard is not written."""


def post_with_retries(client: Any, url: str, body: dict[str, Any], opts: OpenAIOptions) -> dict[str, Any]:
    """POST ``body`` as JSON, retrying with exponential backoff; returns the parsed response."""
    import httpx

    last = ""
    for attempt in range(opts.max_retries + 1):
        wait = opts.backoff_s * (2**attempt)
        try:
            resp = client.post(url, json=body, timeout=opts.timeout_s)
        except httpx.TransportError as exc:  # timeouts, refused or dropped connections
            last = f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code == 200:
                return resp.json()
            last = f"HTTP {resp.status_code}: {resp.text[:300]}"
            if resp.status_code not in RETRY_STATUS:
                raise BackendError(f"{url}: {last}")
            retry_after = resp.headers.get("retry-after", "")
            if retry_after.replace(".", "", 1).isdigit():
                wait = float(retry_after)
        if attempt < opts.max_retries:
            time.sleep(min(wait, 60.0))
    raise BackendError(f"{url}: gave up after {opts.max_retries + 1} attempts; last error {last}")


def _choice_text(choice: dict[str, Any], api: str) -> str:
    """A choice's text; a reasoning server's separate reasoning is kept in front, inside ``<think>`` tags."""
    if api == "completions":
        return choice.get("text") or ""
    msg = choice.get("message") or {}
    content = msg.get("content") or ""
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    return f"<think>\n{reasoning}\n</think>\n\n{content}" if reasoning else content


@functools.lru_cache(maxsize=2)
def load_tokenizer(name: str) -> Any:
    """A tokenizer (local path or id), loaded once per process: token counts for the openai backend and imports."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def generate_openai(
    requests: Sequence[Request],
    model: str,
    sampling: Sampling,
    opts: OpenAIOptions = OpenAIOptions(),
    *,
    on_done: OnDone | None = None,
) -> list[Completion]:
    """Sample through an OpenAI-compatible endpoint with ``opts.concurrency`` requests in flight."""
    import httpx

    if opts.api not in ("chat", "completions"):
        raise ConfigError(f"openai api must be 'chat' or 'completions', got {opts.api!r}")
    tok = load_tokenizer(opts.tokenizer) if opts.tokenizer else None
    url = opts.base_url.rstrip("/") + ("/chat/completions" if opts.api == "chat" else "/completions")
    key = os.environ.get(opts.api_key_env, "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    calls = (
        [(r, r.sample_idxs, r.seed) for r in requests]
        if opts.request_n
        else [(r, (i,), (r.seed + i) & 0x7FFFFFFF) for r in requests for i in r.sample_idxs]
    )
    lock = threading.Lock()

    def one(client: Any, call: tuple[Request, tuple[int, ...], int]) -> list[Completion]:
        req, idxs, seed = call
        body: dict[str, Any] = {
            "model": model,
            "n": len(idxs),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": seed,
        }
        if opts.api == "chat":
            body["messages"] = [{"role": "user", "content": req.message}]
        else:
            body["prompt"] = build_prompt(tok, req.message)
        data = post_with_retries(client, url, body, opts)
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != len(idxs):
            raise BackendError(f"{url}: asked for {len(idxs)} samples of {req.problem_id}, got {len(choices)}")
        usage = data.get("usage") or {}
        out = []
        for idx, choice in zip(idxs, choices, strict=True):
            text = _choice_text(choice, opts.api)
            if tok is not None:
                n_tok = len(tok(text, add_special_tokens=False)["input_ids"])
            else:
                n_tok = usage.get("completion_tokens") if len(idxs) == 1 else None
            reason = finish_reason(choice.get("finish_reason"))
            out.append(Completion(req.problem_id, idx, text, usage.get("prompt_tokens"), n_tok, reason))
        if on_done is not None:
            with lock:
                on_done(len(out), sum(c.completion_tokens or 0 for c in out))
        return out

    limits = httpx.Limits(max_connections=opts.concurrency, max_keepalive_connections=opts.concurrency)
    with httpx.Client(headers=headers, limits=limits) as client, ThreadPoolExecutor(opts.concurrency) as pool:
        futures = [pool.submit(one, client, c) for c in calls]
        try:
            results = [f.result() for f in futures]
        except BaseException:
            for f in futures:  # a request failed for good: do not start the queued ones
                f.cancel()
            raise
    return [c for batch in results for c in batch]
