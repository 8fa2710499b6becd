"""Generation backends: prompts, the vLLM translation, and the OpenAI-compatible client against a local server.

- Prompts come from the tiny model's own chat template (tests/tiny_model.py, built locally).
- vLLM is not installed anywhere we run, so its backend is tested as a TRANSLATION ONLY: RequestOutput-shaped fakes
  in, ledger completions out, and ``generate_vllm`` against a fake ``vllm`` module that records what it was given.
- The OpenAI backend talks to a real HTTP server on 127.0.0.1 (stdlib ``http.server`` in a thread) that speaks
  ``/v1/chat/completions`` and ``/v1/completions`` and answers with the tiny model's generations; it can be told to
  fail (500, 429, 400) or stall past the client's timeout. No network beyond loopback, no GPU.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import types
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import polars as pl
import pytest

from curate import io, prompts
from curate import schema as S
from curate.rollout import backends, ledger
from curate.rollout import stage as rollout
from curate.rollout import vllm_engine as vllm_backend
from curate.rollout.backends import BackendError, OpenAIOptions, Request, Sampling
from tests.tiny_model import problems_frame, shared_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield shared_tiny_model(tmp_path_factory)
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------------- prompts
def test_prompt_from_chat_template_and_seeds(tiny):
    from transformers import AutoTokenizer

    path, _ = tiny
    tok = AutoTokenizer.from_pretrained(path)
    msg = prompts.user_message("  Compute 2 + 3. ")
    assert msg == "Compute 2 + 3. Let's think step by step and output the final answer within \\boxed{}."
    assert prompts.build_prompt(tok, msg) == f"<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n"
    assert prompts.build_prompt(None, msg) == msg  # no template (a base model): the bare message
    assert prompts.user_message("x", instruction="") == "x"
    seeds = {backends.request_seed(0, "p", i) for i in range(4)}
    assert len(seeds) == 4 and backends.request_seed(0, "p", 0) == backends.request_seed(0, "p", 0)
    assert backends.finish_reason("abort") == "error" and backends.finish_reason("length") == "length"


def test_hf_greedy_is_seed_free_and_sampling_is_seeded(tiny):
    path, _ = tiny
    reqs = [Request("p1", "Compute 1 + 1.", (0, 1), 5), Request("p2", "Compute 2 + 2.", (0,), 6)]
    greedy = [backends.generate_hf(reqs, str(path), Sampling(0.0, 1.0, 8, seed)) for seed in (0, 1)]
    assert [c.text for c in greedy[0]] == [c.text for c in greedy[1]]
    assert greedy[0][0].text == greedy[0][1].text  # two greedy samples of one prompt are the same
    done = []
    sampled = [backends.generate_hf(reqs, str(path), Sampling(1.0, 1.0, 8, 0), on_done=lambda k, t: done.append(k))]
    sampled.append(backends.generate_hf(reqs, str(path), Sampling(1.0, 1.0, 8, 0)))
    assert sampled[0] == sampled[1] and sum(done) == 3
    assert all(c.completion_tokens <= 8 and c.prompt_tokens > 0 for c in sampled[0])


# --------------------------------------------------------------------------------------------------- vllm
def fake_output(prompt_len: int, outs: list[tuple[int, str, int, str]]) -> SimpleNamespace:
    """A RequestOutput-shaped object: (index, text, n_tokens, finish_reason) per CompletionOutput."""
    return SimpleNamespace(
        prompt_token_ids=list(range(prompt_len)) if prompt_len else None,
        outputs=[SimpleNamespace(index=i, text=t, token_ids=[7] * k, finish_reason=f) for i, t, k, f in outs],
    )


def test_vllm_translation_of_request_outputs():
    reqs = [Request("p1", "m1", (4, 5), 11), Request("p2", "m2", (0,), 12)]
    outputs = [
        fake_output(9, [(1, "b", 3, "length"), (0, "a", 2, "stop")]),  # out of order: .index decides
        fake_output(0, [(0, "c", 1, "abort")]),
    ]
    got = vllm_backend.to_completions(reqs, outputs)
    assert [(c.problem_id, c.sample_idx, c.text, c.completion_tokens, c.finish_reason) for c in got] == [
        ("p1", 4, "a", 2, "stop"),
        ("p1", 5, "b", 3, "length"),
        ("p2", 0, "c", 1, "error"),
    ]
    assert got[0].prompt_tokens == 9 and got[2].prompt_tokens is None
    with pytest.raises(ValueError, match="outputs"):
        vllm_backend.to_completions(reqs, outputs[:1])
    with pytest.raises(ValueError, match="samples of p1"):
        vllm_backend.to_completions(reqs, [fake_output(9, [(0, "a", 2, "stop")]), outputs[1]])
    kw = vllm_backend.sampling_kwargs(reqs[0], Sampling(0.6, 0.95, 512, 3))
    assert kw == {"n": 2, "temperature": 0.6, "top_p": 0.95, "max_tokens": 512, "seed": 11}
    eng = vllm_backend.engine_kwargs("m", "abc", vllm_backend.VLLMOptions(tensor_parallel_size=2), seed=3)
    assert eng["tensor_parallel_size"] == 2 and eng["revision"] == "abc" and "max_model_len" not in eng


def test_generate_vllm_against_a_fake_vllm_module(monkeypatch):
    """Translation test: a stand-in ``vllm`` module records the engine and sampling arguments it receives."""
    seen: dict = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, **kw):
            seen["engine"] = kw

        def get_tokenizer(self):
            return None

        def generate(self, prompts, params, use_tqdm=True):
            seen["prompts"], seen["params"], seen["use_tqdm"] = prompts, [p.kw for p in params], use_tqdm
            return [
                fake_output(5, [(i, f"{p} \\boxed{{{i}}}", 4, "stop") for i in range(sp.kw["n"])])
                for p, sp in zip(prompts, params, strict=True)
            ]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    vllm_backend.load_engine.cache_clear()
    reqs = [Request("p1", "what?", (0, 1, 2), 21), Request("p2", "why?", (3,), 22)]
    opts = vllm_backend.VLLMOptions(tensor_parallel_size=4, max_model_len=2048)
    done = []
    got = vllm_backend.generate_vllm(
        reqs, "org/m", Sampling(1.0, 0.9, 64, 5), opts, on_done=lambda k, t: done.append((k, t))
    )
    vllm_backend.load_engine.cache_clear()
    assert seen["engine"]["tensor_parallel_size"] == 4 and seen["engine"]["max_model_len"] == 2048
    assert seen["engine"]["model"] == "org/m" and seen["engine"]["seed"] == 5 and seen["use_tqdm"] is False
    assert seen["prompts"] == ["what?", "why?"]  # no chat template on the fake tokenizer: bare messages
    assert [(p["n"], p["seed"], p["max_tokens"]) for p in seen["params"]] == [(3, 21, 64), (1, 22, 64)]
    assert [(c.problem_id, c.sample_idx) for c in got] == [("p1", 0), ("p1", 1), ("p1", 2), ("p2", 3)]
    assert done == [(4, 16)]


# --------------------------------------------------------------------------------------------------- openai
class Server:
    """A local OpenAI-compatible server answering with the tiny model; ``plan`` scripts failures per request."""

    def __init__(self, model_path):
        self.model_path = str(model_path)
        self.plan: deque = deque()  # ("status", code) or ("sleep", seconds), consumed one per request
        self.bodies: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.bodies.append((self.path, body))
                    action = outer.plan.popleft() if outer.plan else None
                if action and action[0] == "status":
                    return self.reply(action[1], {"error": {"message": "scripted failure"}}, {"Retry-After": "0"})
                if action and action[0] == "sleep":
                    time.sleep(action[1])
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    self.reply(200, outer.answer(self.path, body))

            def reply(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer(self, path: str, body: dict) -> dict:
        import torch

        tok, lm, _ = backends.load_hf(self.model_path)
        chat = path.endswith("/chat/completions")
        prompt = prompts.build_prompt(tok, body["messages"][-1]["content"]) if chat else body["prompt"]
        enc = tok([prompt] * body["n"], return_tensors="pt", add_special_tokens=False)
        with self.lock:
            torch.manual_seed(body.get("seed", 0))
            out = lm.generate(
                **enc, max_new_tokens=body["max_tokens"], do_sample=True, top_k=0, pad_token_id=tok.pad_token_id
            )
        choices, total = [], 0
        for i, ids in enumerate(out[:, enc["input_ids"].shape[1] :].tolist()):
            stop = tok.eos_token_id in ids
            ids = ids[: ids.index(tok.eos_token_id) + 1] if stop else ids
            text = tok.decode(ids, skip_special_tokens=True)
            total += len(ids)
            finish = "stop" if stop else "length"
            choice = (
                {"index": i, "message": {"role": "assistant", "content": text}} if chat else {"index": i, "text": text}
            )
            choices.append({**choice, "finish_reason": finish})
        usage = {"prompt_tokens": enc["input_ids"].shape[1], "completion_tokens": total}
        return {"object": "chat.completion" if chat else "text_completion", "choices": choices[::-1], "usage": usage}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def opts(server: Server, **kw) -> OpenAIOptions:
    return OpenAIOptions(base_url=server.url, **{"concurrency": 4, "backoff_s": 0.01, "timeout_s": 30.0, **kw})


REQS = [Request("p1", "Compute 1 + 1.", (0, 1, 2), 5), Request("p2", "Compute 2 + 2.", (3,), 6)]
SAMPLING = Sampling(temperature=1.0, top_p=1.0, max_tokens=12, seed=0)


def test_openai_chat_and_completions(tiny):
    path, _ = tiny
    with Server(path) as server:
        chat = backends.generate_openai(REQS, "tiny", SAMPLING, opts(server))
        assert [(c.problem_id, c.sample_idx) for c in chat] == [("p1", 0), ("p1", 1), ("p1", 2), ("p2", 3)]
        assert all(c.finish_reason in ("stop", "length") for c in chat)
        # usage is per request: exact for a single-sample response, unknown per sample otherwise (no tokenizer)
        assert [c.completion_tokens is None for c in chat] == [True, True, True, False]
        first = min((b for _, b in server.bodies), key=lambda b: b["seed"])
        assert first["n"] == 3 and first["messages"][0]["content"] == "Compute 1 + 1." and first["max_tokens"] == 12
        server.bodies.clear()
        comp = backends.generate_openai(REQS, "tiny", SAMPLING, opts(server, api="completions", tokenizer=str(path)))
        assert all(isinstance(c.completion_tokens, int) for c in comp)
        prompts = {b["prompt"] for _, b in server.bodies}
        assert "<|im_start|>user\nCompute 1 + 1.<|im_end|>\n<|im_start|>assistant\n" in prompts
        assert {p for p, _ in server.bodies} == {"/v1/completions"}
        server.bodies.clear()
        single = backends.generate_openai(REQS, "tiny", SAMPLING, opts(server, request_n=False))
        assert len(server.bodies) == 4 and {b["n"] for _, b in server.bodies} == {1}
        assert all(isinstance(c.completion_tokens, int) for c in single)


def test_openai_retries_timeouts_and_failures(tiny):
    path, _ = tiny
    one = [REQS[1]]
    with Server(path) as server:
        server.plan.extend([("status", 500), ("status", 429)])
        assert len(backends.generate_openai(one, "tiny", SAMPLING, opts(server))) == 1
        assert len(server.bodies) == 3

        server.bodies.clear()
        # longer than the client waits: the request is retried, and answered before the first one would have been
        # (the client's 3 s leave the retry time to generate on a busy box: 0.5 s timed out all six tries at load 9)
        server.plan.append(("sleep", 12.0))
        t0 = time.monotonic()
        assert len(backends.generate_openai(one, "tiny", SAMPLING, opts(server, timeout_s=3.0))) == 1
        assert len(server.bodies) == 2 and time.monotonic() - t0 < 11

        server.bodies.clear()
        server.plan.append(("status", 400))  # a client error is not retried
        with pytest.raises(BackendError, match="HTTP 400"):
            backends.generate_openai(one, "tiny", SAMPLING, opts(server))
        assert len(server.bodies) == 1

        server.plan.extend([("status", 503)] * 3)
        with pytest.raises(BackendError, match="gave up after 3 attempts"):
            backends.generate_openai(one, "tiny", SAMPLING, opts(server, max_retries=2))


def test_rollout_through_the_openai_backend(ws, tiny):
    path, problems = tiny
    io.write_parquet(problems_frame(problems[:4]), ws.table("p", "problems"), S.PROBLEMS)
    cfg = rollout.RolloutConfig(model="tiny-served", backend="openai", n=2, max_tokens=12, verify_workers=1)
    with Server(path) as server:
        cfg = rollout.RolloutConfig(**{**cfg.__dict__, "openai": opts(server, tokenizer=str(path))})
        result = rollout.rollout(ws, "p", cfg)
    led = ledger.read(ws, "p", "tiny-served")
    assert led.height == 8 and result.summary["samples_generated"] == 8
    assert set(led[S.BACKEND].to_list()) == {"openai"} and led[S.COMPLETION_TOKENS].null_count() == 0
    assert led.select(pl.col(S.VERDICT).is_in(list(S.VERDICTS))).to_series().all()
