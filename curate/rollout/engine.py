"""A rollout engine for the project's small decoder-only models on the CPU: what vLLM does on a GPU, in plain torch.

Why: sampling the built-in 0.6M-parameter model through transformers' ``generate`` runs ~7x below the model's own
matrix products (per-operation overhead of a general implementation), each static batch runs until its longest
answer ends, and transformers' continuous batching (``generate_batch``) ran 28x slower than ``generate`` on this CPU
(bench/README.md, ``bench/bench_generate.py``). This engine does the same work with a handful of fused operations per
layer:

- a **preallocated KV cache**, ``(layers, slots, kv_heads, context, head_dim)``, written in place;
- **continuous batching**: a row that finishes (a stop token or its token limit) takes the next request at once;
  the active rows stay packed at the front of the cache, so a step costs what its live rows cost;
- **prompts of any length**: each distinct prompt is prefilled once (causal attention over the whole prompt) and its
  keys and values are copied into every slot that samples it, so k samples of a problem share one prefill;
- **the sampling the ledger records**: temperature (0 is greedy), top_p with transformers' rule (keep the most
  probable tokens whose mass before them is under top_p), the stop tokens, and one ``torch.Generator`` per request
  seeded with the request's own seed, so a completion depends only on its model, prompt, settings and seed, never on
  the batch it ran in or the slot it took.

Supported: ``Qwen2ForCausalLM`` (the ``tiny`` sizes the project builds) and ``LlamaForCausalLM`` with full attention
on the CPU (``supports``); any other model samples through ``generate`` (``curate.rollout.backends``). The logits of
every step equal the model's own forward within 1e-5 and greedy completions are token-identical to ``generate``'s
(``tests/curate/rollout/test_engine.py``).

    engine = Engine(model, slots=128)
    outs = engine.generate([EngineRequest(prompt_ids, seed=7, max_new_tokens=240)], temperature=0.6, stop_ids={2})
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from curate.errors import ConfigError


ARCHITECTURES = ("Qwen2ForCausalLM", "LlamaForCausalLM")
PREFIX_CACHE = 256  # distinct prompts whose prefilled keys and values are kept (the k samples of a problem share one)


@dataclass(frozen=True)
class EngineRequest:
    """One sample to draw: the prompt's token ids, its seed, and how many tokens it may add."""

    prompt_ids: tuple[int, ...]
    seed: int
    max_new_tokens: int


@dataclass(frozen=True)
class EngineOutput:
    """One finished sample: its new token ids (the stop token included, as vLLM counts it) and why it ended."""

    token_ids: list[int]
    finish_reason: str  # "stop" or "length"


def supports(model: Any) -> str | None:
    """None when the engine can sample ``model``; else why not, in a few words (the caller falls back)."""
    cfg = getattr(model, "config", None)
    arch = (getattr(cfg, "architectures", None) or [type(model).__name__])[0]
    if type(model).__name__ not in ARCHITECTURES:
        return f"architecture {arch} (the engine runs {', '.join(ARCHITECTURES)})"
    sliding = "sliding_attention" in (getattr(cfg, "layer_types", None) or [])
    if getattr(cfg, "use_sliding_window", False) or (getattr(cfg, "sliding_window", None) and sliding):
        return "sliding-window attention"
    if next(model.parameters()).device.type != "cpu":
        return "a model on an accelerator (vLLM or generate serve there)"
    return None


class _Weights:
    """The model's weights as the engine multiplies them, read from the live parameters (cheap: an engine built
    after an optimizer step samples the new policy). Per layer, one matrix gives q, k, v and the rotate-half of q
    and k (RoPE's ``rotate_half`` is linear, so it folds into the weights), with q scaled by 1/sqrt(head_dim); gate
    and up are one matrix. Same arithmetic as the model's forward, fewer operations."""

    def __init__(self, model: Any) -> None:
        cfg = model.config
        inner = model.model
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        d = self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.context = cfg.max_position_embeddings
        self.embed = inner.embed_tokens.weight.detach()
        self.norm = inner.norm.weight.detach()
        self.lm_head = model.lm_head.weight.detach()
        half = torch.cat([torch.arange(d // 2, d), torch.arange(d // 2)])  # rotate_half(x) = sign * x[half]
        sign = torch.cat([-torch.ones(d // 2), torch.ones(d // 2)]).to(self.embed.dtype)
        self.layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            scale = [d**-0.5, 1.0, 1.0]
            ws = [p.weight.detach() * c for p, c in zip((att.q_proj, att.k_proj, att.v_proj), scale, strict=True)]
            bs = [p.bias.detach() * c if p.bias is not None else torch.zeros(p.out_features)
                  for p, c in zip((att.q_proj, att.k_proj, att.v_proj), scale, strict=True)]  # fmt: skip
            qk_w, qk_b = torch.cat(ws[:2]), torch.cat(bs[:2])
            rot_w = (qk_w.unflatten(0, (-1, d))[:, half] * sign[:, None]).flatten(0, 1)
            rot_b = (qk_b.unflatten(0, (-1, d))[:, half] * sign).flatten()
            self.layers.append(
                (
                    layer.input_layernorm.weight.detach(),
                    torch.cat([qk_w, ws[2], rot_w]),
                    torch.cat([qk_b, bs[2], rot_b]),
                    att.o_proj.weight.detach(),
                    layer.post_attention_layernorm.weight.detach(),
                    torch.cat([mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()]),
                    mlp.down_proj.weight.detach(),
                )
            )
        positions = torch.arange(self.context).unsqueeze(0)
        probe = torch.zeros(1, 1, d, dtype=self.embed.dtype)
        cos, sin = inner.rotary_emb(probe, positions)
        self.cos, self.sin = cos[0].detach(), sin[0].detach()  # (context, head_dim)


class Engine:
    """Continuous-batching sampler over a preallocated KV cache (module docstring).

    slots: rows decoded together (the batch); context: the longest prompt + completion (default and most: the
    model's ``max_position_embeddings``).
    """

    def __init__(self, model: Any, *, slots: int = 128, context: int | None = None) -> None:
        why = supports(model)
        if why is not None:
            raise ConfigError(f"the rollout engine cannot sample this model: {why}")
        self.w = _Weights(model)
        self.slots = max(1, slots)
        self.context = min(context or self.w.context, self.w.context)
        shape = (len(self.w.layers), self.slots, self.w.n_kv, self.context, self.w.head_dim)
        self.k = torch.zeros(shape, dtype=self.w.embed.dtype)
        self.v = torch.zeros(shape, dtype=self.w.embed.dtype)
        self._prefixes: collections.OrderedDict[tuple[int, ...], tuple[torch.Tensor, ...]] = collections.OrderedDict()

    # ------------------------------------------------------------------------------------------- forward passes
    def _qkv(self, x: torch.Tensor, layer: tuple, cos: torch.Tensor, sin: torch.Tensor):
        """The layer's input (tokens, hidden) -> rotated q (tokens, H, D) (scaled), rotated k and v (tokens, KV, D),
        at the positions cos and sin (tokens, 1, D) were taken at."""
        w = self.w
        qk_heads = w.n_heads + w.n_kv
        out = F.linear(F.rms_norm(x, x.shape[-1:], layer[0], w.eps), layer[1], layer[2])
        qk, v, rot = out.split([qk_heads * w.head_dim, w.n_kv * w.head_dim, qk_heads * w.head_dim], dim=-1)
        qk = qk.unflatten(-1, (qk_heads, w.head_dim)) * cos + rot.unflatten(-1, (qk_heads, w.head_dim)) * sin
        return qk[:, : w.n_heads], qk[:, w.n_heads :], v.unflatten(-1, (w.n_kv, w.head_dim))

    def _block_out(self, x: torch.Tensor, attn: torch.Tensor, layer: tuple) -> torch.Tensor:
        """The residual stream after the attention output and the MLP."""
        x = x + F.linear(attn, layer[3])
        gate, up = F.linear(F.rms_norm(x, x.shape[-1:], layer[4], self.w.eps), layer[5]).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, layer[6])

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.rms_norm(x, x.shape[-1:], self.w.norm, self.w.eps), self.w.lm_head)

    @torch.no_grad()
    def prefill(self, prompt_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens through the model with causal attention: their keys and values per layer,
        ``(layers, kv_heads, len, head_dim)`` each, what a slot's cache rows receive (``place``)."""
        w = self.w
        n = len(prompt_ids)
        x = w.embed[torch.as_tensor(prompt_ids, dtype=torch.long)]  # (n, hidden)
        cos, sin = w.cos[:n].unsqueeze(1), w.sin[:n].unsqueeze(1)
        ks, vs = [], []
        for layer in w.layers:
            q, k, v = (t.transpose(0, 1) for t in self._qkv(x, layer, cos, sin))  # heads first
            ks.append(k)
            vs.append(v)
            attn = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True,
                                                  scale=1.0, enable_gqa=True)  # fmt: skip
            x = self._block_out(x, attn[0].transpose(0, 1).flatten(-2), layer)
        return torch.stack(ks), torch.stack(vs)

    def place(self, slot: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """A prefilled prompt's keys and values into ``slot``'s first cache rows."""
        n = keys.shape[2]
        self.k[:, slot, :, :n] = keys
        self.v[:, slot, :, :n] = values

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token for each of the first ``len(tokens)`` slots, at its position: writes its keys and values into
        the cache and returns the next-token logits, (rows, vocab). A row attends to its own cache up to its
        position; the slot's later rows (a previous request's) are masked out."""
        w = self.w
        rows, kv, ctx, d = tokens.shape[0], w.n_kv, self.context, w.head_dim
        span = int(positions.max()) + 1
        # where each row's new key lands in a layer's cache seen as (slots * kv_heads * context, head_dim)
        flat = ((torch.arange(rows) * kv).unsqueeze(1) + torch.arange(kv)) * ctx + positions.unsqueeze(1)
        flat = flat.flatten()
        x = w.embed[tokens]  # (rows, hidden)
        cos, sin = w.cos[positions].unsqueeze(1), w.sin[positions].unsqueeze(1)
        mask = torch.zeros(rows, 1, 1, span, dtype=x.dtype)
        mask.masked_fill_(torch.arange(span).view(1, 1, 1, span) > positions.view(rows, 1, 1, 1), float("-inf"))
        for i, layer in enumerate(w.layers):
            q, k, v = self._qkv(x, layer, cos, sin)  # (rows, H, D), (rows, KV, D)
            self.k[i].view(-1, d).index_copy_(0, flat, k.reshape(-1, d))
            self.v[i].view(-1, d).index_copy_(0, flat, v.reshape(-1, d))
            keys, values = self.k[i, :rows, :, :span], self.v[i, :rows, :, :span]  # (rows, KV, span, D)
            scores = torch.matmul(q.view(rows, kv, -1, d), keys.transpose(-1, -2)) + mask  # (rows, KV, G, span)
            attn = torch.matmul(torch.softmax(scores, dim=-1), values)  # (rows, KV, G, D)
            x = self._block_out(x, attn.flatten(1), layer)
        return self._logits(x)

    # ------------------------------------------------------------------------------------------- the loop
    def _prefix(self, prompt_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of a prompt but its last token (which the first decode step feeds), prefilled once
        per distinct prompt while it stays among the last ``PREFIX_CACHE`` used."""
        hit = self._prefixes.pop(prompt_ids, None)
        if hit is None:
            hit = self.prefill(prompt_ids[:-1])
        self._prefixes[prompt_ids] = hit
        while len(self._prefixes) > PREFIX_CACHE:
            self._prefixes.popitem(last=False)
        return hit

    def _check(self, requests: Sequence[EngineRequest]) -> None:
        for r in requests:
            if not r.prompt_ids:
                raise ConfigError("the rollout engine got an empty prompt")
            if len(r.prompt_ids) >= self.context:
                raise ConfigError(
                    f"a prompt of {len(r.prompt_ids)} tokens does not fit the model's context of {self.context} "
                    "tokens (max_position_embeddings): shorten the problem or use a model with a longer context"
                )

    def generate(
        self,
        requests: Sequence[EngineRequest],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_ids: set[int] | frozenset[int] = frozenset(),
        on_done: Callable[[int, int], None] | None = None,
    ) -> list[EngineOutput]:
        """Sample every request, results in request order (module docstring). A completion ends at a stop token, at
        its ``max_new_tokens``, or where prompt + completion fill the context (``length``).

        Every step is the same for every row: feed the row's next token at its position, sample from the logits
        with the row's next uniform. A new request's row starts at its prompt's last token (the rest is prefilled),
        so a refilled row needs no step of its own."""
        self._check(requests)
        if not requests:
            return []
        sample = _Sampler(temperature, top_p)
        stops = torch.tensor(sorted(stop_ids) or [-1], dtype=torch.long)
        rows = _Rows(self.slots, max(r.max_new_tokens for r in requests))
        results: list[EngineOutput | None] = [None] * len(requests)
        queue = collections.deque(range(len(requests)))

        def admit(slot: int) -> None:
            j = queue.popleft()
            r = requests[j]
            self.place(slot, *self._prefix(r.prompt_ids))
            n = len(r.prompt_ids)
            gen = torch.Generator().manual_seed(int(r.seed) & 0x7FFFFFFFFFFFFFFF)
            rows.start(slot, j, r.prompt_ids[-1], n - 1, max(1, min(r.max_new_tokens, self.context - n)), gen)

        while queue and rows.n < self.slots:
            admit(rows.n)
            rows.n += 1
        while rows.n:
            n = rows.n
            at = torch.arange(n)
            logits = self.decode(rows.feed[:n], rows.pos[:n])
            rows.pos[:n] += 1
            token = sample(logits, rows.u[at, rows.made[:n]])
            rows.out[at, rows.made[:n]] = token
            rows.made[:n] += 1
            rows.feed[:n] = token
            done = torch.isin(token, stops) | (rows.made[:n] >= rows.limit[:n])
            if not bool(done.any()):
                continue
            for slot in reversed(done.nonzero().flatten().tolist()):  # the last first: moves never cross a done row
                j, ids = rows.finish(slot)
                results[j] = EngineOutput(ids, "stop" if ids[-1] in stop_ids else "length")
                if on_done is not None:
                    on_done(1, len(ids))
                if queue:
                    admit(slot)
                else:
                    self._move(rows, rows.n - 1, slot)
                    rows.n -= 1
        return results  # type: ignore[return-value]

    def _move(self, rows: _Rows, src: int, dst: int) -> None:
        """Slot ``src``'s request moves into slot ``dst`` (its cache rows so far and its state): the live rows stay
        packed at the front once the queue is empty."""
        if src == dst:
            return
        span = int(rows.pos[src])
        self.k[:, dst, :, :span] = self.k[:, src, :, :span]
        self.v[:, dst, :, :span] = self.v[:, src, :, :span]
        rows.copy(src, dst)


class _Rows:
    """Per-slot state as tensors: the request a slot holds, the token it feeds next and at which position, tokens
    made and allowed, its uniforms (drawn at admission from the request's own generator) and its tokens so far."""

    def __init__(self, slots: int, longest: int) -> None:
        self.n = 0
        self.request = [0] * slots
        self.feed = torch.zeros(slots, dtype=torch.long)
        self.pos = torch.zeros(slots, dtype=torch.long)
        self.made = torch.zeros(slots, dtype=torch.long)
        self.limit = torch.zeros(slots, dtype=torch.long)
        self.u = torch.zeros(slots, longest + 1, dtype=torch.float64)
        self.out = torch.zeros(slots, longest + 1, dtype=torch.long)

    def start(self, slot: int, request: int, feed: int, pos: int, limit: int, gen: torch.Generator) -> None:
        self.request[slot] = request
        self.feed[slot], self.pos[slot], self.made[slot], self.limit[slot] = feed, pos, 0, limit
        self.u[slot, :limit] = torch.rand(limit, generator=gen, dtype=torch.float64)

    def finish(self, slot: int) -> tuple[int, list[int]]:
        return self.request[slot], self.out[slot, : int(self.made[slot])].tolist()

    def copy(self, src: int, dst: int) -> None:
        self.request[dst] = self.request[src]
        for t in (self.feed, self.pos, self.made, self.limit, self.u, self.out):
            t[dst] = t[src]


class _Sampler:
    """Next tokens from logits and one uniform per row: greedy at temperature 0, else inverse-CDF sampling from the
    tempered softmax restricted to transformers' top_p nucleus."""

    def __init__(self, temperature: float, top_p: float) -> None:
        self.temperature, self.top_p = temperature, top_p

    def __call__(self, logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        if self.temperature <= 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            probs, order = probs.sort(dim=-1, descending=True)
            before = probs.cumsum(-1) - probs
            probs = probs.masked_fill(before >= self.top_p, 0.0)
        cdf = probs.cumsum(-1)
        pick = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1)).clamp_(max=probs.shape[-1] - 1).squeeze(1)
        return pick if self.top_p >= 1.0 else order.gather(1, pick.unsqueeze(1)).squeeze(1)
