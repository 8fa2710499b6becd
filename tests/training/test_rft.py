"""Iterated rejection-sampling fine-tuning (``training.rft``, recipe key ``rft``): what each round keeps, when the
rounds stop, and the rounds end to end on the taught tiny model, killed in round 2 and resumed (slow)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.errors import ConfigError, InputError
from training.chain import Chain
from training.recipe import recipe_from_mapping


def test_a_round_keeps_only_verified_finished_distinct_samples_of_the_rl_prompts_capped_per_prompt():
    from training.rft import verified

    rows = [  # (problem, sample, completion, correct, finish)
        ("a", 0, "x=1", True, "stop"), ("a", 1, "x=1", True, "stop"),  # the same text twice: once
        ("a", 2, "y=1", True, "stop"), ("a", 3, "z=1", True, "stop"),  # a third distinct one: over the cap
        ("b", 0, "w=2", False, "stop"), ("b", 1, "v=2", True, "length"),  # wrong; right but cut at the cap
        ("c", 0, "u=3", True, "stop"), ("d", 0, "t=4", True, "stop"),  # d is not an RL prompt
        ("c", 1, None, True, "stop"),
    ]  # fmt: skip
    cols = [S.PROBLEM_ID, S.SAMPLE_IDX, S.COMPLETION, S.CORRECT, S.FINISH_REASON]
    kept = verified(pl.DataFrame(rows, schema=cols, orient="row"), {"a", "b", "c"}, per_prompt=2)
    assert kept.rows() == [("a", "x=1", 0), ("a", "y=1", 2), ("c", "u=3", 0)]


def recipe(tmp_path: Path, **rft):
    return recipe_from_mapping({"name": "r", "pool": "p", "train": str(tmp_path / "t.parquet"), "rft": rft})


def test_the_rft_section_is_typed_and_checked_at_load(tmp_path):
    r = recipe(tmp_path, rounds=2, sft={"max_steps": 5})
    assert (r.rft.rounds, r.rft.sft.max_steps, r.rft.sft.learning_rate, r.rft.sft.lr_scheduler) == (
        2,
        5,
        1e-4,
        "cosine",
    )
    assert r.rft.sft.seed == r.seed == 0  # its fine-tunes take the recipe's seed
    from training.recipe import load_recipe, rft_rollout

    r = load_recipe(Path(__file__).parents[2] / "training/recipes/tiny/fastcurl.yaml", {"rft.rounds": 2, "seed": 4})
    assert (r.rft.sft.max_length, r.rft.sft.weight_decay, r.rft.sft.torch_threads) == (256, 0.1, 1)  # the recipe's SFT
    assert (r.rft.sft.learning_rate, r.rft.sft.max_steps, r.rft.sft.seed) == (1e-4, None, 4)  # its own schedule
    section = rft_rollout(r, "m", "s")  # the rollouts' settings are measure's (RL's prompts were measured with them)
    assert (section["max_tokens"], section["n"], section["model"], section["selection"]) == (240, 8, "m", "s")
    with pytest.raises(ConfigError, match="did you mean 'rounds'"):
        recipe(tmp_path, roundz=2)
    with pytest.raises(ConfigError, match=r"rft\.split"):
        recipe(tmp_path, split="test")
    with pytest.raises(ConfigError, match="cpu_budget"):
        recipe(tmp_path, cpu_budget=0)
    with pytest.raises(ConfigError, match="set by the chain"):
        recipe(tmp_path, rollout={"n": 4})
    with pytest.raises(ConfigError, match="max_tokenz"):  # curate's rollout section, checked at load
        recipe(tmp_path, rollout={"max_tokenz": 4})
    with pytest.raises(ConfigError, match="give `curriculum` or `train`"):
        recipe_from_mapping({"name": "r", "pool": "p", "sft": {"data": "s.parquet"}, "rft": {}})


def test_rounds_stop_at_the_cpu_budget_and_keep_the_last_round_and_the_best_on_validation(tmp_path, monkeypatch):
    """The loop of ``rft_rounds`` with a stand-in round (it records a validation score; each round's step costs
    40 CPU-s in the chain's timings): a budget of 100 CPU-s lets 3 rounds start of 5; the best (round 2) and the last
    (round 3) are kept; a rerun redoes no round."""
    from training import rft
    from training.chain import ChainState, open_run
    from training.runner import add_timing

    run = open_run(recipe(tmp_path, rounds=5, cpu_budget=100), home=tmp_path / "ws", echo=lambda s: None)
    problems = pl.DataFrame({S.PROBLEM_ID: ["v"], S.PROBLEM: ["1+1"], S.ANSWER: ["2"], S.SPLIT: ["train"]})
    io.write_parquet(problems, run.ws.table("p", "problems"))
    with pytest.raises(InputError, match="no 'validation' problems"):  # before any round: the split it chooses on
        rft.rft_rounds(run, lambda *a: pytest.fail("a round ran"), ChainState(model="m0", initial="m0"))
    io.write_parquet(problems.with_columns(pl.lit("validation").alias(S.SPLIT)), run.ws.table("p", "problems"))
    scores, ran = {1: 0.2, 2: 0.5, 3: 0.4, 4: 0.9}, []

    def fake_round(run, state, r):
        if run.chain().note("rft", f"r{r}") is None:
            ran.append(r)
            run.chain().note("rft", f"r{r}", {"model": f"m{r}", "start": state.model, "pass_at_1": scores[r]})
        return dataclasses.replace(state, model=f"m{r}")

    def step(name, fn, *args):
        out = fn(*args)
        add_timing(run, name, {"cpu_s": 40.0 if ran and ran[-1] == int(name[-1]) else 0.0})
        return out

    monkeypatch.setattr(rft, "rft_round", fake_round)
    state, best = rft.rft_rounds(run, step, ChainState(model="m0", initial="m0"))
    assert ran == [1, 2, 3] and state.model == "m3" and state.pending == {"step": "rft", "model": "m3", "wall_s": 0}
    assert best == {"step": "rft:best", "model": "m2", "wall_s": 0.0}
    note = run.chain().note("rft", "rounds")
    assert (note["best"], note["last"], note["cpu_s"]) == ("r2", "r3", 120.0) and "CPU budget" in note["stopped"]
    assert [run.chain().note("rft", f"r{r}")["start"] for r in (1, 2, 3)] == ["m0", "m1", "m2"]
    again, _ = rft.rft_rounds(run, step, ChainState(model="m0", initial="m0"))
    assert ran == [1, 2, 3] and again.model == "m3"  # a finished round is never redone, nor one past the budget


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two chain invocations, three SFT processes: ~2 minutes alone, more at load
def test_iterated_rft_climbs_on_verified_samples_and_resumes_a_killed_round_without_duplicates(
    tmp_path, tmp_path_factory, monkeypatch
):
    """Two rounds on the taught tiny model and 6 prompts (3 samples each): each round fine-tunes on its start
    model's verified samples only, round 2 samples from and starts from round 1's model, every model has a card
    and lineage. Killed (an exception) as round 2's fine-tune starts, then run again: round 1 is not redone, round 2
    draws no sample again (the ledger holds 3 per prompt per model, no duplicate) and finishes."""
    from curate.rollout import ledger
    from tests.tiny_model import problems_frame, shared_tiny_model, write_rl_prompts
    from training import rft
    from training.card import read_lineage
    from training.runner import run_chain

    path, problems = shared_tiny_model(tmp_path_factory)  # the first 8 problems taught
    home = tmp_path / "ws"
    ws = io.Workspace(home)
    frame = pl.concat([problems_frame(problems[:6], "train"), problems_frame(problems[6:10], "validation")])
    io.write_parquet(frame, ws.table("tiny", "problems"), S.PROBLEMS)
    train = write_rl_prompts(tmp_path / "train.parquet", problems[:6])
    sft = {"learning_rate": 1e-3, "max_steps": 3, "per_device_batch_size": 4, "max_length": 128, "save_steps": 1,
           "gradient_checkpointing": False, "torch_threads": 1, "logging_steps": 1}  # fmt: skip
    rollout = {"max_tokens": 16, "shard_size": 3, "hf": {"batch_size": 16}, "verify_workers": 1}
    r = recipe_from_mapping({
        "name": "rft", "pool": "tiny", "model": str(path), "train": str(train),
        "eval": {"split": "validation", "k": 1, "limit": 4, "max_new_tokens": 16},
        "rft": {"rounds": 2, "n": 3, "per_prompt": 2, "k": 1, "limit": 4, "rollout": rollout, "sft": sft},
    })  # fmt: skip
    real = rft.run_step

    def killed_in_round_2(spec, launch=None):
        if "/r2/" in spec["out"]:
            raise RuntimeError("killed")
        return real(spec, launch)

    monkeypatch.setattr(rft, "run_step", killed_in_round_2)
    lines: list[str] = []
    with pytest.raises(RuntimeError, match="killed"):
        run_chain(r, home=home, echo=lines.append)
    run_dir = home / "runs" / "rft"
    chain = Chain(run_dir)  # its reader: chain.json keeps paths relative to the run folder
    first = next(n for n in chain.notes["rft"] if n["name"] == "r1")
    assert not any(n["name"] == "r2" for n in chain.notes["rft"])
    r1_model = first["model"]
    parts = {m: ledger.files(ws, "tiny", m) for m in (first["ledger_model"], ws.model_name(r1_model))}
    assert all(parts.values())  # round 2 had sampled round 1's model before it was killed
    metrics = (run_dir / "rft/r1/sft/metrics.json").stat().st_mtime_ns

    monkeypatch.setattr(rft, "run_step", real)
    summary = run_chain(r, home=home, echo=lines.append)
    notes = {n["name"]: n for n in Chain(run_dir).notes["rft"]}
    assert notes["r1"] == first and (run_dir / "rft/r1/sft/metrics.json").stat().st_mtime_ns == metrics  # not redone
    assert notes["rounds"]["rounds"] == ["r1", "r2"] and notes["r2"]["start"] == r1_model  # round 2 from round 1
    assert notes["r2"]["ledger_model"] == ws.model_name(r1_model)
    train_ids = set(pl.read_parquet(train)[S.PROBLEM_ID])
    for name, note in (("r1", notes["r1"]), ("r2", notes["r2"])):
        samples = ledger.read(ws, "tiny", note["ledger_model"])
        assert ledger.files(ws, "tiny", note["ledger_model"]) == parts[note["ledger_model"]]  # nothing drawn again
        assert samples.height == 3 * 6 and samples.select(ledger.KEY).is_unique().all()  # 3 per prompt, once
        data = pl.read_parquet(run_dir / "rft" / name / "data.parquet")
        good = samples.filter(pl.col(S.CORRECT) & (pl.col(S.FINISH_REASON) == "stop"))
        pairs = set(zip(good[S.PROBLEM_ID], good[S.COMPLETION], strict=True))
        texts = [c[0]["content"] for c in data["completion"].to_list()]
        assert data.height == note["rows"] > 0 and set(zip(data[S.PROBLEM_ID], texts, strict=True)) <= pairs
        assert (
            set(data[S.PROBLEM_ID]) <= train_ids
            and len(set(zip(data[S.PROBLEM_ID], texts, strict=True))) == data.height
        )
        assert data.group_by(S.PROBLEM_ID).len()["len"].max() <= 2
        lineage = read_lineage(note["model"])
        assert lineage["kind"] == "rft" and lineage["base_model"] == note["start"]
        assert lineage["data"]["rft_round"] == int(name[1]) and lineage["data"]["pool"] == "tiny"
    assert [s["step"] for s in summary["steps"]][:2] == ["init", "rft"]
    assert any(line.startswith("[chain] rft round 2:") for line in lines)
    assert any(line.startswith("[chain] rft: 2 round(s), stopped by 2 rounds") for line in lines)
