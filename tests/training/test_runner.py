"""`training run`: plan -> stages (pure), recipe strictness, and the whole chain on a tiny model (slow)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml

from curate.errors import ConfigError
from tests.tiny_chain import write_tiny_chain
from training.card import read_lineage
from training.plan import rl_stages, sequential_note
from training.recipe import PlanScale, load_recipe
from training.rl import RLConfig
from training.runner import decision


PLAN = {
    "stages": [
        {"stage": "stage1", "shard": "stage1.parquet", "rows": 7, "n": 8, "prompt_batch": 128, "steps": 160,
         "max_response_length": 8192, "max_prompt_length": 1024, "use_kl_loss": True, "kl_loss_coef": 1e-3,
         "entropy_coef": 1e-3, "lr": 1e-6, "temperature": 0.6},
        {"stage": "stage2", "shard": "stage2.parquet", "rows": 9, "n": 16, "prompt_batch": 64, "steps": 580,
         "max_response_length": 16384, "max_prompt_length": 1024, "use_kl_loss": False, "kl_loss_coef": 1e-3,
         "entropy_coef": 0.0, "lr": 1e-6, "temperature": 0.6},
    ]
}  # fmt: skip


def test_plan_stages_follow_the_plan_scaled_and_overridden_in_order():
    stages = rl_stages(
        PLAN, Path("cur"), RLConfig(loss_type="cispo", learning_rate=1e-4),
        fields=["n", "prompt_batch", "steps", "max_response_length", "kl", "entropy_coef"],
        scale=PlanScale(context=1 / 128, steps=0.1, max_prompts_per_step=4, max_num_generations=8),
        per_stage={"stage2": {"max_steps": 3}},
    )  # fmt: skip
    assert [s.name for s in stages] == ["stage1", "stage2"] and [s.folder for s in stages] == [
        "01-stage1",
        "02-stage2",
    ]
    one, two = (s.rl for s in stages)
    assert (one.max_completion_length, two.max_completion_length) == (64, 128)  # context grows as planned
    assert (one.num_generations, two.num_generations) == (8, 8)  # capped
    assert one.prompts_per_step == 4 and one.max_steps == 16 and two.max_steps == 3  # stage override wins
    assert one.beta == pytest.approx(1e-3) and two.beta == 0.0  # KL off where the plan turns it off
    assert one.learning_rate == 1e-4  # lr not in fields: the recipe's, not the 1.5B plan's
    assert one.epsilon_high == 5.0  # cispo's explicit cap
    assert stages[0].shard == Path("cur/stage1.parquet")


def test_a_plans_parallel_groups_train_independently_unless_the_recipe_says_sequential_and_then_it_says_so():
    from training.groups import group_mode
    from training.recipe import RunRecipe

    recipe = RunRecipe(name="r", pool="p", curriculum="c")
    assert sequential_note(rl_stages(PLAN, Path("c"))) is None  # FastCuRL's stages are sequential by design
    assert group_mode(recipe, rl_stages(PLAN, Path("c"))) == "sequential"
    bands = {"stages": [{**st, "parallel": True, "init_from": "base"} for st in PLAN["stages"]]}
    stages = rl_stages(bands, Path("c"))
    assert [s.parallel for s in stages] == [True, True]
    assert group_mode(recipe, stages) == "parallel" and sequential_note(stages, "parallel") is None  # as planned
    sequential = RunRecipe(name="r", pool="p", curriculum="c", groups="sequential")
    note = sequential_note(stages, group_mode(sequential, stages))
    assert "['stage1', 'stage2']" in note and "one after another" in note and "groups: sequential" in note
    with pytest.raises(ConfigError, match="groups 'paralel'"):
        RunRecipe(name="r", pool="p", curriculum="c", groups="paralel")


def test_plan_errors_fail_before_any_training():
    with pytest.raises(ConfigError, match="not in the plan"):
        rl_stages(PLAN, Path("c"), per_stage={"stage9": {}})
    with pytest.raises(ConfigError):
        rl_stages(PLAN, Path("c"), per_stage={"stage1": {"max_stepz": 3}})  # a typo in one stage's section
    with pytest.raises(ConfigError, match="plan_fields"):
        rl_stages(PLAN, Path("c"), fields=["n", "bogus"])


def test_recipe_is_strict(tmp_path):
    good = {"name": "r", "pool": "p", "curriculum": "c", "rl": {"loss_type": "cispo"}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(good))
    assert load_recipe(path).curriculum == "c"
    for bad in ({**good, "curriculm": "c"}, {**good, "eval": {"kk": 2}}, {**good, "scale": {"contxt": 0.5}},
                {**good, "train": "x.parquet"}, {**good, "sft": {"learning_rate": 1e-4}}):  # fmt: skip
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(ConfigError):
            load_recipe(path)


def test_decision_stops_only_when_a_pinned_asymptote_is_within_the_margin_of_the_pass_rate():
    band = {"A": [0.30, 0.33]}
    assert decision(None, 0.30, 0.02)["action"] == "continue"  # too few evaluations for a fit
    assert decision({"A": 0.31, "band": band, "band_at_edge": []}, 0.30, 0.02)["action"] == "stop"
    assert decision({"A": 0.29, "band": band, "band_at_edge": []}, 0.30, 0.02)["action"] == "stop"  # above A
    far = decision({"A": 0.40, "band": band, "band_at_edge": []}, 0.30, 0.02)
    assert far["action"] == "continue" and far["gap"] == pytest.approx(0.10)
    assert decision({"A": 0.31, "band": band, "band_at_edge": ["A"]}, 0.30, 0.02)["action"] == "continue"  # unpinned
    assert decision({"A": 0.31, "band": None, "band_at_edge": []}, 0.30, 0.02)["action"] == "continue"  # 3 points
    assert decision({"A": 0.35, "band": band, "band_at_edge": []}, 0.30, 0.05)["action"] == "stop"  # recipe's margin


def test_recipe_decide_section_is_strict_down_to_the_curate_sections(tmp_path):
    good = {"name": "r", "pool": "p", "curriculum": "c", "eval": {"split": "validation"},
            "decide": {"stop_margin": 0.01, "coscale_iterations": 2, "rollout": {"n": 4, "max_tokens": 64},
                       "solutions": {"k": 2, "unsolvable_below": 0.1}}}  # fmt: skip
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(good))
    assert load_recipe(path).decide.coscale_iterations == 2
    # issue 38.3: `decide` fits the eval curve, so with the default eval.split (test) it would choose on the test split
    path.write_text(yaml.safe_dump({k: v for k, v in good.items() if k != "eval"}))
    with pytest.raises(ConfigError, match=r"`decide` chooses on the eval curve, and eval.split is test"):
        load_recipe(path)
    bad_sections = (
        {"stop_margn": 0.01},  # a typo in the section
        {"rollout": {"nn": 4}},  # a typo in the curate rollout settings
        {"solutions": {"kk": 2}},  # ... and in the solutions settings
        {"rollout": {"model": "x"}},  # the chain sets the model
        {"coscale_iterations": -1},
    )
    for bad in bad_sections:
        path.write_text(yaml.safe_dump({**good, "decide": bad}))
        with pytest.raises(ConfigError):
            load_recipe(path)


def test_stamp_lineage_names_the_chain_in_the_card_once_and_keeps_the_steps_own_keys(tmp_path):
    from training.card import read_lineage, write_model_card
    from training.step import stamp_lineage

    model = tmp_path / "final"
    write_model_card(model, kind="redistill", base_model=str(tmp_path / "init"), recipe={"lr": 1e-5}, metrics={"x": 1},
                     data={"pool": "t", "selection": {"solutions": 3}, "rows": 3})  # fmt: skip
    chain = {"pool": "t", "selection": "ws/selections/t/selection.parquet", "curriculum": "ws/curricula/t",
             "solutions": "ws/solutions/t/sft.parquet", "recipe": "ws/runs/chain/recipe.json"}  # fmt: skip
    assert stamp_lineage(model, chain) is True
    lineage = read_lineage(model)
    assert {k: lineage["data"][k] for k in chain} == chain
    assert lineage["data"]["redistill_selection"] == {"solutions": 3} and lineage["data"]["rows"] == 3
    assert (lineage["kind"], lineage["recipe"], lineage["metrics"]) == ("redistill", {"lr": 1e-5}, {"x": 1})
    card = (model / "README.md").read_text()
    assert "ws/curricula/t" in card and "ws/solutions/t/sft.parquet" in card and "## Code version" in card
    assert stamp_lineage(model, chain) is False  # already there: the card is not rewritten


@pytest.mark.slow
@pytest.mark.timeout(900)  # two chains: ~2 minutes alone, more on a busy box
def test_chain_runs_sft_then_two_stages_with_growing_context_and_hands_the_model_over(tmp_path):
    """curation -> tiny model -> SFT -> two RL stages (64 then 96 tokens) -> eval after each -> fit attempt; then
    another run of the same recipe into another folder keeps its own ledger and leaves the first run's data alone."""
    from training.runner import run_chain

    home = tmp_path / "ws"
    recipe_path = write_tiny_chain(tmp_path)
    recipe = load_recipe(recipe_path, {"eval.temperatures": [1.0]})
    summary = run_chain(recipe, home=home, echo=lambda s: None)
    run_dir = Path(summary["run_dir"])
    steps = [s["step"] for s in json.loads((run_dir / "chain.json").read_text())["steps"]]
    assert steps == ["init", "sft", "rl:stage1", "rl:stage2"]
    # the other temperature where the comparison reads it (SFT, the last stage), not at a stage another follows
    at_one = sorted(p.name for p in (run_dir / "evals").glob("*@T1.parquet"))
    assert at_one == ["rl_stage2@T1.parquet", "sft@T1.parquet"]
    one = json.loads((run_dir / "rl/01-stage1/config.json").read_text())
    two = json.loads((run_dir / "rl/02-stage2/config.json").read_text())
    assert one["rl"]["max_completion_length"] == 64 and two["rl"]["max_completion_length"] == 96
    assert two["model"] == str(run_dir / "rl/01-stage1/final")  # stage 2 starts from stage 1's final model
    assert one["model"] == str(run_dir / "sft/final")
    for step in json.loads((run_dir / "chain.json").read_text())["steps"]:
        assert 0.0 <= step["pass_at_1"] <= 1.0 and step["n_problems"] == (4 if step["step"] == "init" else 8)
    curve = pl.read_parquet(run_dir / "eval.parquet")
    assert curve["step"].to_list() == sorted(curve["step"].to_list()) and curve.height >= 3  # checkpoints + finals
    # a checkpoint's per-problem table (a paired comparison at an early budget): stage 2's step 1 is run step 3
    early = pl.read_parquet(run_dir / "evals" / "rl_stage2-step1.parquet")
    assert early["mean"].mean() == pytest.approx(curve.filter(pl.col("step") == 3)["pass_at_1"].item())
    # The last RL model against SFT, paired on the same held-out problems (per-problem tables in evals/).
    gain = summary["gain_over_sft"]
    assert (gain["after"], gain["before"], gain["n_problems"]) == ("rl:stage2", "sft", 8)
    sft_rate = pl.read_parquet(run_dir / "evals" / "sft.parquet")["mean"].mean()
    assert gain["before"] == "sft" and gain["gain"] == pytest.approx(gain["after_rate"] - sft_rate)
    # Re-running the same command trains nothing again.
    again = run_chain(recipe, home=home, echo=lambda s: None)
    assert [s["step"] for s in again["steps"]] == steps
    cost = {t["step"]: t for t in again["timings"]}  # and its summary still says what each step cost in all
    first = {t["step"]: t["cpu_s"] for t in summary["timings"]}
    assert cost["sft"]["invocations"] == 2 and cost["sft"]["cpu_s"] >= first["sft"] > 0
    assert sum(t["cpu_s"] for t in cost.values()) >= sum(first.values())
    # Another run of the same recipe in the same workspace (--out): its own ledger model, and the first run's
    # pinned inputs (what its cards recorded) keep their content hashes.
    from curate import io
    from curate.manifest import file_hash
    from curate.rollout import ledger

    pinned = json.loads((run_dir / "data" / "pinned.json").read_text())
    other = Path(run_chain(recipe, home=home, out=tmp_path / "quick", echo=lambda s: None)["run_dir"])
    models = {json.loads((r / "rl/01-stage1/summary.json").read_text())["ledger"]["model"] for r in (run_dir, other)}
    assert len(models) == 2  # one ledger model per run
    for model in models:
        assert ledger.read(io.Workspace(home), "t", model).height == 2 * 2 * 2  # 2 steps x 2 prompts x 2, one run's
    assert all(file_hash(run_dir / "data" / name) == sha for name, sha in pinned["sha256"].items())
    card = read_lineage(run_dir / "rl/01-stage1/final")["data"]  # its paths absolute again (lineage.json: relative)
    assert card["solutions"] == str(run_dir / "data" / "sft.parquet") and card["data"]["sha256"] == pinned["sha256"]


def test_chain_control_flow_stops_a_pass_and_runs_coscale_iterations_up_to_the_budget(tmp_path):
    """The loop of ``run_chain`` through its ``call`` hook (steps replaced by stand-ins that only move the state):
    a ``stop`` ends the pass (stage2 never trains), then CoScale iterations follow up to the budget, over the
    stages that still have solvable problems."""
    import dataclasses

    from curate import io
    from curate import schema as S
    from training.chain import ChainState
    from training.recipe import DecideSection, EvalSection, RunRecipe
    from training.runner import run_chain

    ws = tmp_path / "ws"
    problems = pl.DataFrame({S.PROBLEM_ID: ["a", "b", "c"], S.PROBLEM: ["1+1", "2+2", "3+3"],
                             S.ANSWER: ["2", "4", "6"], S.SPLIT: ["train", "train", "validation"]})  # fmt: skip
    io.write_parquet(problems, ws / "pools" / "t" / "problems.parquet")
    plan = {"stages": [{"stage": "stage1", "shard": "stage1.parquet", "rows": 1},
                       {"stage": "stage2", "shard": "stage2.parquet", "rows": 1}]}  # fmt: skip
    io.write_json(ws / "curricula" / "c" / "plan.json", plan)
    recipe = RunRecipe(name="r", pool="t", curriculum="c", rl=RLConfig(loss_type="cispo"),
                       decide=DecideSection(coscale_iterations=2), eval=EvalSection(split="validation"))  # fmt: skip
    actions = iter(["stop", "continue", "continue"])
    calls = []

    def stand_in(name, fn, *args):
        calls.append(name)
        run, state = args[0], args[1] if len(args) > 1 else None
        if fn.__name__ == "init_model":
            return ChainState(model="init", initial="init")
        if fn.__name__ == "decide":
            return {"action": next(actions)}
        if fn.__name__ == "coscale_measure":
            return dataclasses.replace(state, iteration=state.iteration + 1)
        if fn.__name__ == "coscale_solutions":  # stage1 keeps a solvable problem, stage2 none
            for stage, ids in (("stage1", ["a"]), ("stage2", [])):
                io.write_parquet(pl.DataFrame({S.PROBLEM_ID: ids}, schema={S.PROBLEM_ID: pl.String}),
                                 run.coscale_dir(state.iteration) / f"{stage}.parquet")  # fmt: skip
            return state
        if fn.__name__ == "rl_stage":
            return dataclasses.replace(state, model=f"{name}/final")
        if fn.__name__ in ("fit_and_plot", "write_summary"):
            return {"final_model": state.model}
        return state

    summary = run_chain(recipe, home=ws, echo=lambda s: None, call=stand_in)
    assert calls == [
        "init", "eval init",
        "rl:stage1", "eval rl:stage1", "decide rl:stage1",  # stop: stage2 of the first pass is not trained
        "it1:measure", "it1:solutions", "it1:sft", "eval it1:sft",
        "it1:rl:stage1", "eval it1:rl:stage1", "decide it1:rl:stage1",  # stage2 has no solvable problem left
        "it2:measure", "it2:solutions", "it2:sft", "eval it2:sft",
        "it2:rl:stage1", "eval it2:rl:stage1", "decide it2:rl:stage1",
        "fit", "summary",
    ]  # fmt: skip
    assert summary["final_model"] == "it2:rl:stage1/final"


def test_the_chain_reads_its_plan_once_per_pass_and_tells_the_evaluation_which_stage_is_last(tmp_path, monkeypatch):
    """Issue 39: ``evaluate_model`` re-read and re-validated the plan after every RL stage only to learn whether the
    stage was the last (5 reads in the demo's run). ``_rl_passes`` knows: it passes it down."""
    import training.chain
    from curate import io
    from curate import schema as S
    from training.chain import ChainState
    from training.recipe import RunRecipe
    from training.runner import run_chain

    ws = tmp_path / "ws"
    problems = pl.DataFrame({S.PROBLEM_ID: ["a", "b"], S.PROBLEM: ["1+1", "2+2"], S.ANSWER: ["2", "4"],
                             S.SPLIT: ["train", "test"]})  # fmt: skip
    io.write_parquet(problems, ws / "pools" / "t" / "problems.parquet")
    plan = {"stages": [{"stage": f"stage{i}", "shard": f"stage{i}.parquet", "rows": 1} for i in (1, 2, 3)]}
    io.write_json(ws / "curricula" / "c" / "plan.json", plan)
    reads = []
    plan_stages = training.chain.plan_stages
    monkeypatch.setattr(training.chain, "plan_stages", lambda *a: reads.append(1) or plan_stages(*a))
    evaluated = []

    def stand_in(name, fn, *args):
        if fn.__name__ == "init_model":
            return ChainState(model="init", initial="init")
        if fn.__name__ == "evaluate_model":
            evaluated.append((name, *args[2:]))
        if fn.__name__ in ("fit_and_plot", "write_summary"):
            return {}
        return args[1] if len(args) > 1 else None

    run_chain(RunRecipe(name="r", pool="t", curriculum="c", rl=RLConfig()), home=ws, echo=lambda s: None,
              call=stand_in)  # fmt: skip
    assert evaluated == [("eval init",), ("eval rl:stage1", False, True), ("eval rl:stage2", False, True),
                         ("eval rl:stage3", True, True)]  # (last, on the eval curve)  # fmt: skip
    assert len(reads) == 2  # checked before any model work, then read for the pass


def test_a_rerun_reports_every_evaluated_step_as_done(tmp_path):
    """Issue 38.11: a finished run's rerun printed the comparison lines but not the per-step held-out lines; every
    step reports its recorded line instead, marked done, and nothing is evaluated again."""
    from curate import io
    from training.chain import ChainState, Run
    from training.recipe import RunRecipe
    from training.runner import evaluate_model

    echoed: list[str] = []
    run = Run(RunRecipe(name="r", pool="t", train="x.parquet", rl=RLConfig()), io.Workspace(tmp_path), tmp_path,
              echoed.append)  # fmt: skip
    run.chain().put({"step": "sft", "model": str(tmp_path / "sft" / "final"), "wall_s": 359.4, "pass_at_1": 0.631,
                     "stderr": 0.027, "n_problems": 300, "k": 4})  # fmt: skip
    pending = {"step": "sft", "model": str(tmp_path / "sft" / "final"), "wall_s": 0.1}
    state = evaluate_model(run, ChainState(model="m", initial="i", pending=pending))
    assert state.pending is None  # no model was loaded: the held-out problems do not even exist here
    assert echoed == ["[chain] sft                      held-out pass@1 = 0.631 ± 0.027 (n=300, k=4)  [359 s] (done)"]


@pytest.mark.slow
def test_coscale_iteration_remeasures_adds_sft_on_unsolvable_and_trains_rl_on_solvable(tmp_path):
    """A real CoScale iteration on the tiny model: curate rollout of the trained model, curate solutions with it as
    the student, SFT on the unsolvable problems' solutions, RL on the stage shard restricted to solvable ones."""
    from curate import io
    from curate.rollout import ledger
    from training.runner import run_chain

    home = tmp_path / "ws"
    rl = {
        "loss_type": "cispo",
        "learning_rate": 1e-4,
        "num_generations": 2,
        "prompts_per_step": 2,
        "gradient_checkpointing": False,
        "max_prompt_length": None,
    }
    recipe_path = write_tiny_chain(
        tmp_path, name="cs", rl=rl, stages={"stage1": {"max_steps": 1}}, only_stages=["stage1"],
        eval={"k": 1, "limit": 4, "max_new_tokens": 32, "split": "validation"},  # decide never reads the test split
        # pass rate 0 counts as solvable (unsolvable_below 0); the problems left unmeasured (limit) are unsolvable
        decide={"coscale_iterations": 1, "rollout": {"n": 1, "max_tokens": 16, "limit": 30},
                "solutions": {"unsolvable_below": 0.0}},
    )  # fmt: skip
    summary = run_chain(load_recipe(recipe_path), home=home, echo=lambda s: None)
    run_dir = Path(summary["run_dir"])
    assert [s["step"] for s in summary["steps"]] == ["init", "sft", "rl:stage1", "it1:sft", "it1:rl:stage1"]
    assert [d["after"] for d in summary["decisions"]] == ["rl:stage1", "it1:rl:stage1"]
    [pools] = [note["pools"] for note in summary["coscale"] if note["name"] == "it1:solutions"]
    assert pools.get("solvable", 0) > 0 and pools.get("unsolvable", 0) > 0
    measured = ledger.read(io.Workspace(home), "t", "runs/cs/rl/01-stage1/final")  # named relative to the workspace
    assert measured["problem_id"].n_unique() == 30  # the trained model's own rollouts, decide.rollout.limit
    snapshot = pl.read_parquet(run_dir / "coscale/it1/solution_pools.parquet")
    solvable = set(snapshot.filter(pl.col("coscale_pool") == "solvable")["problem_id"])
    unsolvable = set(snapshot.filter(pl.col("coscale_pool") == "unsolvable")["problem_id"])
    sft_rows = pl.read_parquet(run_dir / "coscale/it1/sft_unsolvable.parquet")
    assert sft_rows.height > 0 and set(sft_rows["problem_id"]) <= unsolvable
    config = json.loads((run_dir / "rl/it1-01-stage1/config.json").read_text())
    assert config["model"] == str(run_dir / "coscale/it1/sft/final")  # RL again from the SFT'd model
    shard = pl.read_parquet(config["train"])
    assert config["train"] == str(run_dir / "coscale/it1/stage1.parquet") and set(shard["problem_id"]) <= solvable
    lineage = read_lineage(run_dir / "rl/it1-01-stage1/final")["data"]
    assert lineage["curriculum"] == str(run_dir / "data" / "curriculum")  # the run's own copy, pinned at its start
    assert lineage["data"]["sources"]["curriculum"].endswith("curricula/t")
    assert lineage["selection"].endswith("selection.parquet")
    assert lineage["solutions"] == str(home / "solutions" / "cs-it1" / "sft.parquet")  # the iteration's solutions
    assert lineage["coscale_iteration"] == 1
    again = run_chain(load_recipe(recipe_path), home=home, echo=lambda s: None)  # resumes: nothing trained again
    assert [s["step"] for s in again["steps"]] == [s["step"] for s in summary["steps"]]
    assert again["decisions"] == summary["decisions"]


def count_recipe_reads(monkeypatch) -> tuple[Counter, Counter]:
    """(reads per recipe file, validations per curate recipe name) from here on: every YAML file read goes through
    ``curate.config.read_yaml`` and every whole-recipe check through ``curate.pipeline.sections``."""
    import training.recipe
    from curate import config, pipeline

    reads, checks = Counter(), Counter()
    read_yaml, sections = config.read_yaml, pipeline.sections

    def read(path, what="recipe"):
        reads[Path(path).name] += 1
        return read_yaml(path, what)

    def check(recipe):
        checks[recipe.name] += 1
        return sections(recipe)

    for module in (config, training.recipe):
        monkeypatch.setattr(module, "read_yaml", read)
    monkeypatch.setattr(pipeline, "sections", check)
    return reads, checks


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three chains (measured, an arm, SFT only): ~2.5 minutes alone, x4 at load 8 and more
def test_measure_scores_the_rl_candidates_with_the_sft_model_and_trains_on_its_curriculum(
    tmp_path, monkeypatch, capfd
):
    """``measure``: after SFT, curate rollout of the SFT model over the RL source only, score with those rollouts as
    the evidence, select and build the recipe's curriculum from them, pin it, and train RL on it; recorded in the
    chain and the lineage, skipped on a re-run. The whole ``training run`` reads and validates each recipe file
    once (issue 31.6: the curate recipe was parsed again by curation, ``measure`` and each of its four stages)."""
    from curate import io
    from curate import schema as S
    from curate.rollout import ledger
    from training.cli import main
    from training.runner import run_chain

    home = tmp_path / "ws"
    recipe_path = write_tiny_chain(
        tmp_path, rl_source=True, unchecked_teacher=True, name="m", curriculum="t-rl",
        stages={"stage1": {"max_steps": 1}}, only_stages=["stage1"],
        eval={"k": 1, "limit": 4, "max_new_tokens": 32, "by": "meta.ops", "temperatures": [1.0]},
        measure={"rollout": {"n": 2, "max_tokens": 24, "sources": ["t/rl"]},
                 "select": {"sources": ["t/rl"], "size": 10, "drop_solved": False, "drop_zero_variance": False}},
    )  # fmt: skip
    reads, checks = count_recipe_reads(monkeypatch)
    assert main(["run", "--recipe", str(recipe_path), "--home", str(home), "--json"]) == 0
    assert reads == {"train.yaml": 1, "curate.yaml": 1} and checks == {"t": 1}
    printed = capfd.readouterr()
    summary = json.loads(printed.out)
    run_dir = Path(summary["run_dir"])
    sft_model = str(run_dir / "sft" / "final")
    err = printed.err  # the long steps print progress (issue 30.8): measure's rollout, each evaluation
    assert re.search(r"rollout runs/m/sft/final: \d+ samples in", err) and re.search(r"eval sft: 4 samples in", err)
    assert not (run_dir / "running.json").exists()  # the status file lives only while a step runs
    # the SFT model's ledger is named relative to the workspace, so a moved workspace keeps it (issue 30.10)
    names = [p.name for p in (home / "pools" / "t" / "rollouts").iterdir()]
    assert "runs__m__sft__final" in names and not [n for n in names if tmp_path.name in n], names
    everything = ledger.read(io.Workspace(home), "t", "runs/m/sft/final")
    measured = everything.filter(pl.col(S.SAMPLE_IDX) < 2)  # measure's n = 2; the forecast's fresh ones follow
    problems = pl.read_parquet(home / "pools" / "t" / "problems.parquet")
    rl_ids = set(problems.filter(pl.col(S.SOURCE) == "t/rl")[S.PROBLEM_ID])
    assert set(measured[S.PROBLEM_ID]) == rl_ids and measured.height == 2 * len(rl_ids)  # n=2, the RL source only
    # the headroom report before any RL step (issue 36.1), kept in the run folder and printed
    assert "measure: headroom: RL can sharpen" in err and (run_dir / "headroom" / "headroom.png").is_file()
    # the forecast from fresh samples of the 10 selected prompts (rl.num_generations = 2 more each)
    fresh = everything.filter(pl.col(S.SAMPLE_IDX) >= 2)
    assert fresh.height == 2 * 10 and fresh[S.PROBLEM_ID].n_unique() == 10 and set(fresh[S.PROBLEM_ID]) <= rl_ids
    assert measured[S.RUN_ID].str.starts_with("chain-").all()  # the next run's curation will not read them
    from training.chain import Chain

    chain = Chain(run_dir).to_dict()
    [note] = chain["notes"]["measure"]  # read back as the run reads it: chain.json keeps it as ./sft/final
    assert note["model"] == sft_model and note["select"]["selected"] == 10
    assert note["ledger_model"] == "runs/m/sft/final"  # what bench_curation's RFT arm reads the rollouts by
    assert note["score"]["evidence"] == "ledger" and note["score"]["pass_rate_source"]["blend"] == len(rl_ids)
    shard = pl.read_parquet(run_dir / "data" / "curriculum" / "stage1.parquet")
    assert set(shard[S.PROBLEM_ID]) <= rl_ids  # RL trains on the measured candidates, from the run's own copy
    config = json.loads((run_dir / "rl" / "01-stage1" / "config.json").read_text())
    assert config["train"] == str(run_dir / "data" / "curriculum" / "stage1.parquet")
    lineage = read_lineage(run_dir / "rl" / "01-stage1" / "final")["data"]
    assert lineage["curriculum"] == str(run_dir / "data" / "curriculum")
    assert "/curricula/t-rl.m-" in lineage["data"]["sources"]["curriculum"]  # the run's own measured curriculum
    sft_rows = pl.read_parquet(run_dir / "data" / "sft.parquet")  # the teacher's traces, unchecked
    assert sft_rows.height == sft_rows["problem_id"].n_unique()
    assert note["headroom"]["totals"]["prompts"] == len(rl_ids) and note["headroom"]["verdict"]
    [forecast] = chain["notes"]["forecast"]  # from the fresh samples, at the plan's group size
    assert forecast["fresh_prompts"] == 10 and forecast["2"]["rollouts"] == 2 and 0.0 <= forecast["share"] <= 1.0
    waste = summary["zero_variance"]  # and what RL met beside it
    assert waste["forecast"]["share"] == forecast["share"] and 0.0 <= waste["observed"] <= 1.0
    assert waste["groups"] == 2
    samples = pl.read_parquet(run_dir / "evals" / "rl_stage1.samples.parquet")  # every sample, for reading
    assert samples.height == 4 and {"completion", "correct"} <= set(samples.columns)
    assert all(t["cpu_s"] >= 0 for t in summary["timings"]) and sum(t["cpu_s"] for t in summary["timings"]) > 1
    gain = summary["gain_over_sft"]  # at the eval temperature and at 1.0, per chain length
    assert gain["temperature"] == 0.6 and set(gain["at_temperature"]) == {"1.0"} and gain["by"]
    assert (run_dir / "evals" / "rl_stage1@T1.parquet").is_file()
    again = run_chain(load_recipe(recipe_path), home=home, echo=lambda s: None)  # measure is not run again
    assert ledger.read(io.Workspace(home), "t", "runs/m/sft/final").height == everything.height
    assert [s["step"] for s in again["steps"]] == [s["step"] for s in summary["steps"]]
    # An arm from this run's SFT model (bench/bench_methods.py's shape): no `sft`, `measure` measures the starting
    # model, reusing its rollouts already in the ledger; a random subset; the borrowed model's card is left alone.
    card = (Path(sft_model) / "README.md").read_bytes()
    arm = load_recipe(recipe_path, {"model": sft_model, "sft": None, "measure.select.by": "random",
                                    "measure.fresh": 0})  # fmt: skip
    other = run_chain(arm, home=home, out=tmp_path / "arm", echo=lambda s: None)
    assert [s["step"] for s in other["steps"]] == ["init", "rl:stage1"]
    [note] = Chain(tmp_path / "arm").notes["measure"]
    assert note["model"] == sft_model and note["select"]["by"] == "random" and note["select"]["selected"] == 10
    again = ledger.read(io.Workspace(home), "t", "runs/m/sft/final").filter(pl.col(S.SAMPLE_IDX) < 2)
    assert again.height == measured.height  # measure sampled nothing again (its forecast samples its own selection)
    assert json.loads((tmp_path / "arm" / "rl" / "01-stage1" / "config.json").read_text())["model"] == sft_model
    assert (Path(sft_model) / "README.md").read_bytes() == card
    # An SFT-only run (bench/bench_curation.py's baselines): no curriculum, SFT continued for a set number of steps
    more = {"model": sft_model, "curriculum": None, "measure": None, "curate_recipe": None, "sft.max_steps": 3,
            "sft.data": str(run_dir / "data" / "sft.parquet")}  # fmt: skip
    sft_only = run_chain(load_recipe(recipe_path, more), home=home, out=tmp_path / "more", echo=lambda s: None)
    assert [s["step"] for s in sft_only["steps"]] == ["init", "sft"] and sft_only["gain_over_sft"] is None
    assert json.loads((tmp_path / "more" / "sft" / "metrics.json").read_text())["steps"] == 3


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_sft_model_is_its_best_checkpoint_on_the_validation_split(tmp_path, monkeypatch):
    """``sft.validation`` (issue 36.2): every kept checkpoint and the final model are evaluated on the validation
    split, the best becomes ``sft/best`` (the chosen checkpoint's weights, sealed, its card saying so) and the chain
    goes on from it; a rerun reads the choice back; a recipe that would choose on the test split fails at load."""
    import training.evaluate as evaluate_mod
    from training.runner import run_chain

    real = evaluate_mod.evaluate
    seen: list[str] = []

    def fake(model_dir, problems, cfg, **kw):  # validation pass@1 peaks at step 4, then falls (memorizing)
        name = Path(model_dir).name
        if name.startswith("checkpoint-") or name == "final":
            seen.append(name)
            rate = 0.5 if name == "checkpoint-4" else 0.2
            return {"pass_at_1": rate, "stderr": 0.1, "n_problems": problems.height, "k": cfg.k}
        return real(model_dir, problems, cfg, **kw)

    monkeypatch.setattr(evaluate_mod, "evaluate", fake)
    sft = {"data": "solutions/t/sft.parquet", "learning_rate": 1e-3, "max_steps": 8, "per_device_batch_size": 8,
           "max_length": 256, "gradient_checkpointing": False,
           "validation": {"every": 2, "k": 1, "limit": 4, "reference": 0.9, "band": 0.1}}  # fmt: skip
    recipe_path = write_tiny_chain(tmp_path, name="v", curriculum=None, sft=sft,
                                   eval={"split": "validation", "k": 1, "limit": 4, "max_new_tokens": 32})  # fmt: skip
    lines: list[str] = []
    home = tmp_path / "ws"
    out = run_chain(load_recipe(recipe_path), home=home, echo=lines.append)
    sft_dir = Path(out["run_dir"]) / "sft"
    assert seen == ["checkpoint-2", "checkpoint-4", "checkpoint-6", "final"]  # step 8's checkpoint is the final
    record = json.loads((sft_dir / "validation.json").read_text())
    assert [p["step"] for p in record["points"]] == [2, 4, 6, 8] and record["chosen"]["step"] == 4
    best = sft_dir / "best"
    weights = (best / "model.safetensors").read_bytes()
    assert weights == (sft_dir / "checkpoints" / "checkpoint-4" / "model.safetensors").read_bytes()
    assert weights != (sft_dir / "final" / "model.safetensors").read_bytes()
    assert json.loads((best / "files.json").read_text())  # sealed
    assert "Chosen on the validation split: step 4 of 8" in " ".join((best / "README.md").read_text().split())
    assert [s["model"] for s in out["steps"] if s["step"] == "sft"] == [str(best)]
    assert any("step 4 of 8 chosen on the validation split" in line for line in lines)
    assert any("warning: the SFT model's validation pass@1 0.500 is far below the 0.900" in line for line in lines)
    seen.clear()
    run_chain(load_recipe(recipe_path), home=home, echo=lambda s: None)
    assert seen == []  # the choice is read back, nothing evaluated again
    with pytest.raises(ConfigError, match=r"sft\.validation\.split"):
        load_recipe(recipe_path, {"sft.validation.split": "test"})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_chains_sft_stops_at_its_validation_plateau_and_says_why(tmp_path, monkeypatch):
    """``sft.validation.patience`` (issue 42.1): the SFT step evaluates each checkpoint on the validation split as
    it saves it and stops when the best point went ``patience`` evaluations without a gain over its paired SE, far
    below its ``max_steps`` cap (the from-scratch tiny model stays at its floor); the chain prints the curve and why
    it stopped, keeps the best point as ``sft/best`` (its card says why training ended) without evaluating any
    checkpoint again, and a rerun reads it all back. A bad patience fails at load."""
    import training.evaluate as evaluate_mod
    from training.runner import run_chain

    real, seen = evaluate_mod.evaluate, []

    def spy(model_dir, problems, cfg, **kw):  # the chain's own evaluations (the SFT step's are in its process)
        seen.append(Path(model_dir).name)
        return real(model_dir, problems, cfg, **kw)

    monkeypatch.setattr(evaluate_mod, "evaluate", spy)
    sft = {"data": "solutions/t/sft.parquet", "learning_rate": 1e-3, "max_steps": 40, "per_device_batch_size": 8,
           "max_length": 256, "gradient_checkpointing": False,
           "validation": {"every": 2, "k": 1, "limit": 4, "patience": 2}}  # fmt: skip
    recipe_path = write_tiny_chain(tmp_path, name="p", curriculum=None, sft=sft,
                                   eval={"split": "validation", "k": 1, "limit": 4, "max_new_tokens": 16})  # fmt: skip
    lines: list[str] = []
    out = run_chain(load_recipe(recipe_path), home=tmp_path / "ws", echo=lines.append)
    sft_dir = Path(out["run_dir"]) / "sft"
    record = json.loads((sft_dir / "validation.json").read_text())
    steps = [p["step"] for p in record["points"]]
    stopped = record["stopped"]
    assert stopped["rule"] == "plateau" and steps[-1] == stopped["step"] < 40 and stopped["waited"] == 2
    assert steps == list(range(2, steps[-1] + 1, 2))
    assert json.loads((sft_dir / "metrics.json").read_text())["steps"] == steps[-1]
    assert record["chosen"]["step"] == max(record["points"], key=lambda p: (p["pass_at_1"], p["step"]))["step"]
    assert [line for line in lines if re.match(r"\[chain\] sft: validation pass@1 at step \d+: ", line)]
    why = f"[chain] sft: stopped at step {steps[-1]} of at most 40: no gain over the best (step {stopped['best']}"
    assert any(line.startswith(why) and line.endswith("by more than its paired SE in 2 evaluations") for line in lines)
    assert not any("still rising" in line for line in lines)
    card = " ".join((sft_dir / "best" / "README.md").read_text().split())
    assert f"SFT stopped at step {steps[-1]} of at most 40" in card
    assert not [name for name in seen if name.startswith("checkpoint-") or name == "final"]  # none evaluated again
    again: list[str] = []
    run_chain(load_recipe(recipe_path), home=tmp_path / "ws", echo=again.append)
    assert any(line.startswith(why) for line in again)
    with pytest.raises(ConfigError, match=r"sft\.validation\.patience"):
        load_recipe(recipe_path, {"sft.validation.patience": 0})
