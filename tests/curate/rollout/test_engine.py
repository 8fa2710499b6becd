"""The rollout engine samples what transformers samples (curate/rollout/engine.py).

- every decode step's logits equal the model's own full forward within 1e-5, for rows of different lengths decoded
  together (each row masks what a previous request left in its slot); an engine whose cache is off by one position
  fails the same check, so the check has power;
- greedy completions are token-identical to ``generate``'s, with fewer slots than requests (rows refilled and
  moved);
- a sample depends on its seed only, not on its batch; sampled pass rates agree with ``generate``'s within the SE;
- a prompt longer than the context is one clear line; the hf backend uses the engine unless ``engine: hf``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from curate.errors import ConfigError
from curate.prompts import build_prompt, user_message
from curate.rollout import backends
from curate.rollout.backends import HFOptions, Request, Sampling
from curate.rollout.engine import Engine, EngineRequest, supports
from tests.tiny_model import build_tiny_model, shared_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path, problems = shared_tiny_model(tmp_path_factory)
    tok = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path).eval()
    yield path, problems, tok, lm
    torch.set_num_threads(threads)


def _ids(tok, question: str) -> tuple[int, ...]:
    return tuple(tok(build_prompt(tok, user_message(question)), add_special_tokens=False)["input_ids"])


def _max_logit_error(engine: Engine, lm, prompts: list[tuple[int, ...]], steps: int) -> float:
    """Greedy-decode ``prompts`` together for ``steps`` steps through ``engine.decode``, checking each step's logits
    against the model's forward over the whole sequence so far."""
    for slot, ids in enumerate(prompts):
        engine.place(slot, *engine.prefill(ids[:-1]))
    seqs = [list(ids) for ids in prompts]
    worst = 0.0
    for _ in range(steps):
        feed = torch.tensor([s[-1] for s in seqs])
        logits = engine.decode(feed, torch.tensor([len(s) - 1 for s in seqs]))
        for row, seq in enumerate(seqs):
            with torch.no_grad():
                ref = lm(torch.tensor([seq])).logits[0, -1]
            worst = max(worst, float((logits[row] - ref).abs().max()))
            seq.append(int(logits[row].argmax()))
    return worst


def test_every_steps_logits_equal_the_models_forward(tiny):
    _, problems, tok, lm = tiny
    prompts = [_ids(tok, q) for q, _ in problems[:3]] + [_ids(tok, "Compute 1 + 1. And then some more words.")]
    # in float64 the check sees the algorithm, not float32's rounding (transformers' own KV cache differs from its
    # full forward by ~7e-6 on this model in float32: the logits reach 16); float32 is checked at that noise
    for model, bound in ((copy.deepcopy(lm).double(), 1e-5), (lm, 5e-5)):
        engine = Engine(model, slots=4, context=128)
        # the slots first hold longer sequences, so each row must mask what a previous request left behind
        engine.place(0, *engine.prefill(list(range(5, 60))))
        assert _max_logit_error(engine, model, prompts, steps=12) < bound


def test_an_off_by_one_cache_fails_the_logits_check(tiny):
    _, problems, tok, lm = tiny

    class OffByOne(Engine):
        def decode(self, tokens, positions):
            return super().decode(tokens, positions + 1)

    prompts = [_ids(tok, q) for q, _ in problems[:2]]
    assert _max_logit_error(OffByOne(lm, slots=2, context=128), lm, prompts, steps=6) > 1e-3


def _generate_greedy(lm, tok, ids: tuple[int, ...], max_new: int) -> list[int]:
    eos = tok.eos_token_id
    with torch.no_grad():
        out = lm.generate(torch.tensor([ids]), max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                          pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()  # fmt: skip
    return out[: out.index(eos) + 1] if eos in out else out


def test_greedy_completions_are_generates_with_rows_refilled_and_moved(tiny):
    _, problems, tok, lm = tiny
    prompts = [_ids(tok, q) for q, _ in problems[:12]]
    limits = [4 + 3 * (i % 5) for i in range(len(prompts))]  # rows end at different steps: refills and moves
    reqs = [EngineRequest(ids, i, m) for i, (ids, m) in enumerate(zip(prompts, limits, strict=True))]
    outs = Engine(lm, slots=3).generate(reqs, temperature=0.0, stop_ids={tok.eos_token_id})
    for ids, m, out in zip(prompts, limits, outs, strict=True):
        want = _generate_greedy(lm, tok, ids, m)
        assert out.token_ids == want
        assert out.finish_reason == ("stop" if want[-1] == tok.eos_token_id else "length")


def test_a_sample_depends_on_its_seed_not_its_batch(tiny):
    _, problems, tok, lm = tiny
    prompts = [_ids(tok, q) for q, _ in problems[:6]]
    reqs = [EngineRequest(ids, seed=100 + i, max_new_tokens=16) for i, ids in enumerate(prompts)]
    alone = [Engine(lm, slots=1).generate([r], temperature=1.0, stop_ids={tok.eos_token_id})[0] for r in reqs]
    together = Engine(lm, slots=4).generate(list(reversed(reqs)), temperature=1.0, stop_ids={tok.eos_token_id})
    assert [o.token_ids for o in alone] == [o.token_ids for o in reversed(together)]
    reseeded = Engine(lm, slots=4).generate(
        [EngineRequest(r.prompt_ids, r.seed + 1, 16) for r in reqs], temperature=1.0, stop_ids={tok.eos_token_id}
    )
    assert [o.token_ids for o in reseeded] != [o.token_ids for o in alone]
    nucleus = Engine(lm, slots=4).generate(reqs, temperature=1.0, top_p=1e-9, stop_ids={tok.eos_token_id})
    greedy = Engine(lm, slots=4).generate(reqs, temperature=0.0, stop_ids={tok.eos_token_id})
    assert [o.token_ids for o in nucleus] == [o.token_ids for o in greedy]  # a vanishing nucleus keeps the top token


@pytest.mark.parametrize(("temperature", "top_p"), [(0.6, 1.0), (1.0, 1.0), (1.0, 0.9)])
def test_sampled_tokens_follow_the_same_distribution_as_generates(tiny, tmp_path, temperature, top_p):
    """Next-token frequencies over 3,000 seeds, from the engine and from ``generate``, against the exact tempered,
    nucleus-filtered softmax of the model's forward (transformers' TopPLogitsWarper rule). The model is an untaught
    one whose final norm is scaled until its next token is uncertain but not uniform (max p 0.1-0.5)."""
    from transformers import AutoModelForCausalLM

    _, problems, tok, _ = tiny
    lm = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", seed=1)).eval()
    ids = _ids(tok, problems[0][0])
    for scale in (10.0, 20.0, 40.0, 80.0, 160.0, 320.0):
        with torch.no_grad():
            lm.model.norm.weight.fill_(scale)
            probs = torch.softmax(lm(torch.tensor([ids])).logits[0, -1].double() / temperature, -1)
        if float(probs.max()) > 0.1:
            break
    ranked, order = probs.sort(descending=True)
    ranked[(ranked.cumsum(0) - ranked) >= top_p] = 0
    exact = torch.zeros_like(probs).scatter_(0, order, ranked / ranked.sum())
    n = 3000
    outs = Engine(lm, slots=256).generate([EngineRequest(ids, s, 1) for s in range(n)], temperature=temperature,
                                          top_p=top_p)  # fmt: skip
    engine = torch.bincount(torch.tensor([o.token_ids[0] for o in outs]), minlength=len(probs)).double() / n
    torch.manual_seed(0)
    with torch.no_grad():
        gen = lm.generate(torch.tensor([ids] * n), max_new_tokens=1, do_sample=True, temperature=temperature,
                          top_p=top_p, top_k=0, pad_token_id=tok.pad_token_id)[:, -1]  # fmt: skip
    hf = torch.bincount(gen, minlength=len(probs)).double() / n
    bound = 4 * (exact * (1 - exact) / n).sqrt() + 2e-3
    assert 0.1 < float(exact.max()) < 0.6  # an uncertain token, so the comparison can fail
    assert bool(((engine - exact).abs() <= bound).all()), (engine - exact).abs().max()
    assert bool(((hf - exact).abs() <= bound).all()), (hf - exact).abs().max()
    assert float(engine[exact == 0].sum()) == 0.0  # nothing outside the nucleus


def test_a_prompt_longer_than_the_context_is_one_line(tiny):
    path, _, _, lm = tiny
    engine = Engine(lm, slots=2, context=32)
    with pytest.raises(ConfigError, match="does not fit the model's context of 32 tokens") as err:
        engine.generate([EngineRequest(tuple(range(40)), 0, 4)], temperature=1.0)
    assert "\n" not in str(err.value)
    long = Request("p", "Compute 1 + 1. " * 200, (0,), 0)
    with pytest.raises(ConfigError, match="does not fit"):
        backends.generate_hf([long], str(path), Sampling(max_tokens=8), HFOptions())


def test_the_hf_backend_samples_with_the_engine_unless_told_not_to(tiny):
    path, problems, _, lm = tiny
    assert supports(lm) is None and backends.sampler_name(lm, HFOptions()) == "engine"
    assert backends.sampler_name(lm, HFOptions(engine="hf")) == "generate"
    with pytest.raises(ConfigError, match=r"hf\.engine must be one of"):
        HFOptions(engine="vllm")
    reqs = [Request(f"p{i}", user_message(q), (0, 1, 2), 7) for i, (q, _) in enumerate(problems[:5])]
    sampling = Sampling(temperature=1.0, max_tokens=12, seed=3)
    small = backends.generate_hf(reqs, str(path), sampling, HFOptions(batch_size=2))
    large = backends.generate_hf(reqs, str(path), sampling, HFOptions(batch_size=64))
    assert [c.text for c in small] == [c.text for c in large]  # seeded per sample: the batch does not matter
    resumed = backends.generate_hf([Request(r.problem_id, r.message, (2,), 0) for r in reqs], str(path), sampling)
    assert [c.text for c in resumed] == [c.text for c in large if c.sample_idx == 2]  # nor what was sampled before
    assert {c.finish_reason for c in large} <= {"stop", "length"} and all(c.completion_tokens for c in large)


def test_a_recipes_engine_reaches_every_section_that_samples():
    from training.recipe import load_recipe

    recipe = load_recipe("training/recipes/tiny/fastcurl.yaml", {"engine": "hf"})
    assert (recipe.rl.engine, recipe.eval.engine, recipe.measure.rollout["hf"]["engine"]) == ("hf", "hf", "hf")
    default = load_recipe("training/recipes/tiny/fastcurl.yaml")
    assert (default.rl.engine, default.eval.engine) == ("auto", "auto")
    with pytest.raises(ConfigError, match="engine must be one of"):
        load_recipe("training/recipes/tiny/fastcurl.yaml", {"engine": "vllm"})
