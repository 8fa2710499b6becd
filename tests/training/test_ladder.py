"""CoScale-RL's rollout ladder (``training.ladder``, ``training.groups.next_rung``): a plateau of the training reward
ends a segment, and the next rung trains with N doubled and lr/N kept, within the stage's budget; the rule comes from
the plan. The runs: ``tests/training/test_runner.py`` (a chain interrupted between and inside rungs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curate import io
from curate.errors import ConfigError
from training.ladder import LadderConfig, LadderWatch


def feed(watch: LadderWatch, rewards: list[float], start: int = 1) -> list[dict | None]:
    return [watch.observe(step, r) for step, r in enumerate(rewards, start=start)]


def test_a_plateau_doubles_n_and_keeps_lr_over_n():
    cfg = LadderConfig(factor=2, n_max=32, patience=3, collapse_drop=0.1, window=2)
    watch = LadderWatch(cfg, n=8, lr=1e-4)
    # the mean of 2 steps: 0.25, 0.35, 0.40 (peak at step 4), then 0.39, 0.385, 0.395: no new peak for 3 steps
    events = feed(watch, [0.2, 0.3, 0.4, 0.4, 0.38, 0.39, 0.40])
    assert events[:-1] == [None] * 6
    event = events[-1]
    assert (event["step"], event["rule"], event["peak_step"]) == (7, "plateau", 4)
    assert event["value"] == pytest.approx(0.395) and event["peak"] == pytest.approx(0.40)
    assert (event["n_from"], event["n_to"], event["exhausted"]) == (8, 16, False)
    assert event["lr_to"] == pytest.approx(2e-4)
    assert event["lr_to"] / event["n_to"] == pytest.approx(event["lr_from"] / event["n_from"])  # lr/N kept
    assert watch.observe(8, 0.1) is None  # one event per segment: the segment ends there
    assert watch.summary()["event"] == event and watch.summary()["rule"]["patience"] == 3

    # The next rung starts from the saved state: its N and lr, a fresh window and peak; a rung on another N is refused.
    rung = LadderWatch(cfg, n=16, lr=2e-4)
    rung.load_state_dict(json.loads(json.dumps(watch.state_dict())), fresh=True)
    rung.check(16, 2e-4)
    with pytest.raises(ConfigError, match="N=16"):
        rung.check(8, 1e-4)
    assert feed(rung, [0.5]) == [None]  # one step is not a window of 2
    # a fall of more than collapse_drop below the peak ends it at once: 16 -> 32, lr 4e-4 (= 1e-4 x 32 / 8)
    event = feed(rung, [0.5, 0.5, 0.2], start=2)[-1]
    assert (event["rule"], event["n_to"], event["step"]) == ("collapse", 32, 4)
    assert event["lr_to"] == pytest.approx(4e-4)

    # At the top rung a plateau exhausts the ladder: N stays.
    top = LadderWatch(cfg, n=32, lr=4e-4)
    event = feed(top, [0.3] * 5)[-1]  # the mean of 2 steps peaks at step 2 and stays: 3 steps later, at step 5
    assert event["exhausted"] and event["n_to"] == 32 and event["lr_to"] == pytest.approx(4e-4)


def test_a_resumed_segment_keeps_its_window_and_peak():
    cfg = LadderConfig(patience=2, window=2)
    one, two = LadderWatch(cfg, 8, 1e-4), LadderWatch(cfg, 8, 1e-4)
    feed(one, [0.1, 0.3, 0.5])
    two.load_state_dict(json.loads(json.dumps(one.state_dict())))  # what a checkpoint keeps
    later = [0.2, 0.2, 0.2]
    assert feed(one, later, start=4) == feed(two, later, start=4)
    assert one.event is not None and one.event["step"] == 5


def test_the_budget_counts_rollouts_or_steps():
    assert LadderConfig(budget="rollouts").next_steps(13, 7, 8, 16) == 3  # 6 steps x 8 left = 3 steps x 16
    assert LadderConfig(budget="steps").next_steps(13, 7, 8, 16) == 6
    assert LadderConfig().next_steps(13, 13, 8, 16) == 0
    for bad in ({"factor": 1}, {"patience": 0}, {"window": 0}, {"collapse_drop": 0.0}, {"budget": "tokens"}):
        with pytest.raises(ConfigError):
            LadderConfig(**bad)


def test_the_plan_gives_the_rule_scaled_and_the_recipe_may_follow_it_or_not():
    from training.plan import rl_stages
    from training.recipe import PlanScale
    from training.rl import RLConfig

    entry = {"stage": "p0.05-0.25", "shard": "g.parquet", "rows": 9, "n": 16, "parallel": True,
             "stop_rule": {"max_steps": 200, "window": 2, "plateau_patience": 20, "collapse_drop": 0.15},
             "ladder": {"n0": 8, "factor": 2, "n_max": 64, "patience": 20, "lr0": 1e-6}}  # fmt: skip
    base = RLConfig(ladder=LadderConfig(budget="steps"))  # the recipe's own key, merged key by key with the plan's
    [stage] = rl_stages({"stages": [entry]}, Path("c"), base, fields=["n", "ladder"],
                        scale=PlanScale(steps=0.25, max_num_generations=32))  # fmt: skip
    want = LadderConfig(factor=2, n_max=32, patience=5, collapse_drop=0.15, window=2, budget="steps")
    assert stage.rl.ladder == want
    assert stage.rl.num_generations == 16 and stage.parallel
    [fixed] = rl_stages({"stages": [entry]}, Path("c"), RLConfig(), fields=["n"])
    assert fixed.rl.ladder is None  # not among plan_fields: N stays fixed
    assert "ladder" not in fixed.rl.to_dict()  # a stage folder's identity made before the ladder existed holds


def _rung_folder(folder: Path, steps: int, event: dict | None) -> None:
    """A rung's run folder as ``training.rl.train_rl`` leaves it: summary, final model, the checkpoint it cut at."""
    io.write_json(folder / "final" / "config.json", {})
    io.write_json(folder / "checkpoints" / f"checkpoint-{steps}" / "sampler_state.json", {})
    io.write_json(folder / "summary.json", {"steps": steps, "ladder": {"event": event, "signal": "reward"}})


def test_the_next_rung_continues_the_stage_at_2n_with_lr_kept_per_n_and_the_budget_left(tmp_path):
    from training.chain import ChainState, Run
    from training.groups import next_rung
    from training.plan import StagePlan
    from training.recipe import RunRecipe
    from training.rl import RLConfig

    said: list[str] = []
    run = Run(RunRecipe(name="r", pool="t", curriculum="c"), io.Workspace(tmp_path), tmp_path, said.append)
    cfg = RLConfig(num_generations=8, learning_rate=1e-4, max_steps=13, warmup_steps=5, prompts_per_step=32,
                   ladder=LadderConfig(n_max=32, patience=3, window=2))  # fmt: skip
    stage = StagePlan(0, "g", tmp_path / "g.parquet", 40, cfg)
    event = LadderWatch(cfg.ladder, 8, 1e-4)
    event = feed(event, [0.2, 0.3, 0.4, 0.4, 0.38, 0.39, 0.40])[-1]  # a plateau at step 7
    folder = tmp_path / "rl" / stage.folder
    _rung_folder(folder, 7, event)
    state = ChainState(model=str(folder / "final"), initial="i", last_stage=str(folder), offset_step=7)

    rung = next_rung(run, state, stage)
    assert (rung.rl.num_generations, rung.rl.max_steps, rung.rl.warmup_steps) == (16, 3, 0)  # 6 x 8 = 3 x 16 left
    assert rung.rl.learning_rate == pytest.approx(2e-4) and rung.rl.prompts_per_step == 32
    assert rung.resume == str(folder / "checkpoints" / "checkpoint-7") and rung.rung == 1
    assert (rung.folder, rung.shard) == ("01-g-n16", stage.shard)
    [note] = run.chain().notes["ladder"]
    assert (note["name"], note["group"], note["run_step"], note["next"]) == ("rl:g", "g", 7, "rl:g@n16")
    assert note["event"]["rule"] == "plateau" and note["budget"]["next_steps"] == 3
    assert said == [
        "[chain] ladder rl:g: plateau at step 7 (reward 0.395, mean of 2 step(s); peak 0.400 at step 4, "
        "patience 3, collapse 0.1): N 8 -> 16, lr 0.0001 -> 0.0002; next rung rl:g@n16: 3 steps"
    ]

    # the top rung plateaus again: the ladder is exhausted, one line, the group ends
    top = LadderWatch(rung.rl.ladder, 32, 4e-4)
    top = feed(top, [0.3] * 5)[-1]
    folder = tmp_path / "rl" / "01-g-n32"
    _rung_folder(folder, 5, top)
    last = StagePlan(0, "g", stage.shard, 40, RLConfig(num_generations=32, learning_rate=4e-4, max_steps=8,
                                                         ladder=rung.rl.ladder), rung=2)  # fmt: skip
    assert next_rung(run, ChainState(model="m", initial="i", last_stage=str(folder)), last) is None
    assert said[-1].startswith("[chain] ladder rl:g@n32: plateau at step 5") and said[-1].endswith(
        "N = 32 is the top rung: the ladder is exhausted; the group ends"
    )
    # a rung that ran its budget without an event ends the stage without a word
    _rung_folder(folder, 8, None)
    assert next_rung(run, ChainState(model="m", initial="i", last_stage=str(folder)), last) is None


@pytest.mark.slow
def test_a_plateau_ends_the_run_at_its_checkpoint_and_the_next_rung_continues_from_it(tmp_path_factory, tmp_path):
    """``train_rl`` with a ladder: the segment stops at the plateau with a checkpoint that is its end (a kill before
    its summary resumes to the same end, untrained); the next rung, at 2N and 2 lr, starts from that checkpoint's
    curriculum position (the chunk the loader had drawn is its first) and refuses to start on another rung."""
    import shutil

    from curate.rollout import ledger
    from tests.tiny_model import make_problems, shared_tiny_model, write_rl_prompts
    from training.rl import load_rl_config, train_rl

    tiny, _ = shared_tiny_model(tmp_path_factory, n_problems=8, taught=8, train_steps=80)
    train = write_rl_prompts(tmp_path / "trl.parquet", make_problems(8))
    ws = io.Workspace(tmp_path / "ws")
    small = {"prompts_per_step": 4, "max_completion_length": 24, "gradient_checkpointing": False, "save_steps": 100,
             "ladder": {"patience": 1, "n_max": 4, "collapse_drop": 1.0}}  # fmt: skip
    cfg = load_rl_config({**small, "num_generations": 2, "learning_rate": 1e-3, "max_steps": 8})
    run = tmp_path / "rung0"
    first = train_rl(cfg, model=tiny, train=train, out_dir=run, home=ws.root, pool="tiny")
    event, steps = first["ladder"]["event"], first["steps"]
    assert event is not None and event["step"] == steps < 8 and (event["n_to"], event["rule"]) == (4, "plateau")
    cut = run / "checkpoints" / f"checkpoint-{steps}"  # saved at the plateau although save_steps is 100
    assert json.loads((cut / "trainer_state.json").read_text())["max_steps"] == steps  # the segment's end
    state = json.loads((cut / "sampler_state.json").read_text())
    assert state["ladder"]["event"] == event and len(state["carry"]) == 1

    (run / "summary.json").unlink()  # killed after the checkpoint, before the summary
    shutil.rmtree(run / "final")
    again = train_rl(cfg, model=tiny, train=train, out_dir=run, home=ws.root, pool="tiny")
    assert (again["steps"], again["ladder"]["event"]) == (steps, event)
    assert not (run / "checkpoints" / f"checkpoint-{steps + 1}").exists()

    rung = load_rl_config({**small, "num_generations": 4, "learning_rate": 2e-3, "max_steps": 2})
    out = tmp_path / "rung1"
    second = train_rl(rung, model=run / "final", train=train, out_dir=out, home=ws.root, pool="tiny",
                      optimizer_from=cut / "optimizer.pt", continue_from=cut)  # fmt: skip
    assert second["steps"] >= 1 and (second["ladder"]["n0"], second["ladder"]["lr0"]) == (2, 1e-3)
    rows = ledger.read(ws, "tiny", "rung1")
    step_one = rows.filter(rows["step"] == 1)
    assert sorted(set(step_one["problem_id"])) == sorted(set(state["carry"][0])) and step_one.height == 4 * 4
    wrong = load_rl_config({**small, "num_generations": 2, "learning_rate": 1e-3, "max_steps": 2})
    with pytest.raises(ConfigError, match="rung N=4"):
        train_rl(wrong, model=run / "final", train=train, out_dir=tmp_path / "wrong", continue_from=cut)
