"""``training.rl``: strict RL config, TRL's CISPO loss vs the hand formula, ScaleRL hygiene on TRL's real loss,
and whole runs on a tiny local model (run folder, ledger, kill-and-resume, two ranks agreeing).

The loss tests build a real ``CurateGRPOTrainer`` and call TRL's own ``_compute_loss`` on hand-made batches;
the hand formulas are the papers' (METHODS §4.3), not TRL's code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import torch

from curate import io, prompts
from curate import schema as S
from curate.config import ConfigError
from curate.errors import InputError
from curate.rollout import ledger
from tests.tiny_model import make_problems, shared_tiny_model, write_rl_prompts
from training.grpo_trainer import group_hygiene
from training.rl import build_trainer, load_rl_config, load_train, train_rl


ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "num_generations=8",
    "prompts_per_step=4",
    "max_completion_length=24",
    "gradient_checkpointing=false",
    "learning_rate=1e-3",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, _ = shared_tiny_model(tmp_path_factory, n_problems=8, taught=8, train_steps=80)
    return path


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    return write_rl_prompts(tmp_path_factory.mktemp("rl-data") / "trl.parquet", make_problems(8))


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model is several times faster on one thread on a shared box
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------------- config
def test_cispo_gets_an_explicit_cap_and_bad_keys_fail_at_config_time(tmp_path):
    assert load_rl_config(None, ["loss_type=cispo"]).epsilon_high == 5.0  # never TRL's 0.2 fallback
    assert load_rl_config(None, ["loss_type=cispo", "epsilon_high=8"]).epsilon_high == 8.0
    assert load_rl_config(None, ["loss_type=dapo"]).epsilon_high is None  # dapo/grpo: TRL's symmetric clip
    with pytest.raises(ConfigError, match="absolute cap"):
        load_rl_config(None, ["loss_type=cispo", "epsilon_high=0.2"])
    with pytest.raises(ConfigError, match="loss_type 'gspo'"):
        load_rl_config(None, ["loss_type=gspo"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_rl_config(None, ["learning_rat=1e-6"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_rl_config(None, ["sampler.zero_variance_skp=true"])
    with pytest.raises(ConfigError, match=r"multiple of rl\.num_iterations"):
        load_rl_config(None, ["num_iterations=2", "save_steps=3"])
    recipe = tmp_path / "rl.yaml"
    recipe.write_text("rl:\n  learning_rate: 1e-6\n  policy: scalingrl\n  sampler: {size: 64}\n")
    cfg = load_rl_config(recipe, ["seed=7"])
    assert cfg.learning_rate == 1e-6 and cfg.sampler.policy == "scalingrl" and cfg.sampler.seed == 7
    assert cfg.sampler.size == 64 and cfg.generation_batch_size == 32
    with pytest.raises(ConfigError, match=r"rl\.policy"):
        load_rl_config(None, ["sampler.policy=scalingrl"])


# --------------------------------------------------------------------------------------------------- losses
@pytest.fixture(scope="module")
def trainer(tiny, train_file, tmp_path_factory):
    from transformers import AutoTokenizer

    cfg = load_rl_config(
        None, ["loss_type=cispo", "num_generations=2", "prompts_per_step=2", "gradient_checkpointing=false"]
    )
    tok = AutoTokenizer.from_pretrained(tiny, padding_side="left")
    frame, _ = load_train(train_file, tok, cfg.max_prompt_length)
    t = build_trainer(cfg, model=tiny, frame=frame, tokenizer=tok, out_dir=tmp_path_factory.mktemp("rl-loss"))
    t.model.train()
    t.current_gradient_accumulation_steps = 1  # set by the Trainer's loop; one micro batch per generation batch
    assert t.epsilon_high == 5.0 and t.args.steps_per_generation == 1
    return t


LENGTHS = [5, 3, 4, 2]  # completion tokens per row: 2 groups of G=2


def _batch(trainer, seed=0):
    g = torch.Generator().manual_seed(seed)
    tok = trainer.processing_class
    p = tok.apply_chat_template(prompts.chat_prompt("Compute 1 + 2."), add_generation_prompt=True, tokenize=True)
    p = p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p
    rows = len(LENGTHS)
    prompt_ids = torch.tensor([p] * rows)
    completion_ids = torch.randint(0, len(tok), (rows, max(LENGTHS)), generator=g)
    mask = torch.tensor([[1] * n + [0] * (max(LENGTHS) - n) for n in LENGTHS])
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": mask,
        "num_items_in_batch": mask.sum(),
    }


def _logps(model, batch):
    """log pi(y_t | x, y_<t) by a plain forward pass (temperature 1)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=att).logits
    start = batch["prompt_ids"].size(1)
    logits = logits[:, start - 1 : -1, :]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()


def _trl_loss(trainer, batch):
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach(), _grads(trainer.model)


def _hand(trainer, fn):
    trainer.model.zero_grad()
    loss = fn()
    loss.backward()
    return loss.detach(), _grads(trainer.model)


def test_cispo_is_reinforce_with_capped_stopped_ratio(trainer):
    """TRL cispo == -(1/N) sum sg(min(rho, 5)) A log pi over tokens (ScaleRL, METHODS §4.3), value and gradient."""
    batch = _batch(trainer)
    mask = batch["completion_mask"].float()
    with torch.no_grad():
        logp = _logps(trainer.model, batch)
    delta = torch.tensor(
        [[-2.0, 0.0, 0.3, -1.8, 0.1], [0.5, -2.5, 0.0, 0, 0], [0.2, 0.1, -0.1, 0.0, 0], [-3.0, 1.0, 0, 0, 0]]
    )
    batch["old_per_token_logps"] = logp + delta  # rho = exp(-delta): some tokens far above the cap
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    trainer.loss_type = "cispo"
    got, got_grad = _trl_loss(trainer, batch)

    def hand():
        lp = _logps(trainer.model, batch)
        rho = torch.exp(lp - batch["old_per_token_logps"]).detach()
        weight = torch.clamp(rho, max=5.0)
        return -(weight * batch["advantages"][:, None] * lp * mask).sum() / mask.sum()

    want, want_grad = _hand(trainer, hand)
    assert ((torch.exp(-delta) > 5.0) & mask.bool()).sum() >= 3  # the cap is active on several tokens
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(got_grad, want_grad, atol=1e-6, rtol=1e-4)
    assert not torch.allclose(got, -(torch.exp(-delta) * batch["advantages"][:, None] * logp * mask).sum() / 14)


def _surrogate(lp, loss_type):
    """Per-token policy term on-policy (rho = 1): cispo is A log pi (capped weight 1); the PPO-clip losses
    (dapo, grpo) are A rho with rho = exp(log pi - sg(log pi)): value 1, gradient grad log pi (REINFORCE)."""
    return lp if loss_type == "cispo" else torch.exp(lp - lp.detach())


def _hygiene_batch(trainer, rewards, advantages):
    batch = _batch(trainer, seed=1)
    batch["advantages"] = torch.tensor(advantages)
    return batch, torch.tensor(rewards)


@pytest.mark.parametrize("loss_type", ["cispo", "dapo", "grpo"])
def test_zero_variance_groups_leave_the_loss_and_its_normaliser(trainer, loss_type):
    trainer.loss_type = loss_type
    saved = (trainer.zero_variance_filter, trainer.prompt_level_loss)
    # group 0 (rows 0, 1) has signal; group 1 (rows 2, 3) is all-equal: advantage 0 but its tokens count in TRL
    batch, rewards = _hygiene_batch(trainer, [1.0, 0.0, 1.0, 1.0], [0.7, -0.7, 0.0, 0.0])
    trainer.zero_variance_filter = trainer.prompt_level_loss = False
    plain, _ = _trl_loss(trainer, trainer.apply_hygiene(dict(batch), rewards))
    trainer.zero_variance_filter = True  # the constructor's switch, as training.rl passes it
    filtered = trainer.apply_hygiene(dict(batch), rewards)
    assert filtered["completion_mask"][2:].sum() == 0 and int(filtered["num_items_in_batch"]) == 5 + 3
    got, got_grad = _trl_loss(trainer, filtered)
    trainer.zero_variance_filter, trainer.prompt_level_loss = saved
    mask = batch["completion_mask"].float()
    adv = batch["advantages"]

    def hand():
        term = _surrogate(_logps(trainer.model, batch), loss_type)
        if loss_type == "grpo":  # sample-level: mean over the kept rows of each row's token mean
            return -sum(adv[i] * (term[i] * mask[i]).sum() / mask[i].sum() for i in (0, 1)) / 2
        return -(adv[:2, None] * term[:2] * mask[:2]).sum() / mask[:2].sum()  # token-level over kept tokens only

    want, want_grad = _hand(trainer, hand)
    assert torch.allclose(got, want, atol=1e-6) and torch.allclose(got_grad, want_grad, atol=1e-6, rtol=1e-4)
    ratio = (mask.sum() / mask[:2].sum()) if loss_type != "grpo" else torch.tensor(4 / 2)
    assert torch.allclose(got, plain * ratio, atol=1e-6)  # the same signal, no longer diluted by dead tokens


@pytest.mark.parametrize("loss_type", ["cispo", "dapo", "grpo"])
def test_prompt_level_loss_weighs_every_prompt_equally(trainer, loss_type):
    trainer.loss_type = loss_type
    saved = trainer.prompt_level_loss
    batch, rewards = _hygiene_batch(trainer, [1.0, 0.0, 0.0, 1.0], [0.7, -0.7, -0.7, 0.7])
    trainer.prompt_level_loss = True
    got, got_grad = _trl_loss(trainer, trainer.apply_hygiene(dict(batch), rewards))
    trainer.prompt_level_loss = saved
    mask = batch["completion_mask"].float()
    adv = batch["advantages"]

    def hand():  # (1/P) sum_p (1/T_p) sum_{i in p} sum_t A_i log pi: each prompt's tokens averaged over its group
        term = _surrogate(_logps(trainer.model, batch), loss_type)
        per_prompt = [(adv[r, None] * term[r] * mask[r]).sum() / mask[r].sum() for r in (slice(0, 2), slice(2, 4))]
        return -sum(per_prompt) / 2

    want, want_grad = _hand(trainer, hand)
    assert torch.allclose(got, want, atol=1e-6) and torch.allclose(got_grad, want_grad, atol=1e-6, rtol=1e-4)


def test_batch_advantage_normalisation_uses_the_std_of_the_kept_groups():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0])
    tokens = torch.tensor([3, 3, 3, 3, 2, 2, 2, 2, 4, 4, 4, 4])
    h = group_hygiene(rewards, tokens, 4, loss_type="cispo", zero_variance_filter=True, batch_adv_norm=True)
    centred = torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0, 0.5, -0.5, 0.5, -0.5])
    kept = torch.tensor([True] * 4 + [False] * 4 + [True] * 4)
    assert torch.equal(h.keep, kept) and (h.groups, h.signal_groups) == (3, 2)
    assert torch.allclose(h.advantages, centred / (centred[kept].std() + 1e-4))
    nan = group_hygiene(torch.tensor([1.0, float("nan"), 0, 0]), torch.ones(4), 2, loss_type="dapo",
                        zero_variance_filter=True)  # fmt: skip
    assert not nan.keep.any() and nan.signal_groups == 0  # one scorable completion is no signal


# --------------------------------------------------------------------------------------------------- runs
def test_train_rl_writes_run_folder_checkpoint_state_final_model_and_ledger(tiny, train_file, tmp_path, one_thread):
    cfg = load_rl_config(None, [*SMALL, "max_steps=3", "save_steps=2"])
    run, ws = tmp_path / "run", io.Workspace(tmp_path / "ws")
    s = train_rl(cfg, model=tiny, train=train_file, out_dir=run, home=ws.root, pool="tiny")
    assert s["steps"] == 3 and s["resumed_from"] is None and s["curriculum"]["groups"] == 3 * 4

    m = pl.read_parquet(run / "metrics.parquet")
    assert m["step"].to_list() == [1, 2, 3]
    for col in ("reward", "kept_group_frac", "entropy", "completion_mean_length", "truncation_rate", "clip_ratio",
                "tokens", "wall_s", "loss"):  # fmt: skip
        assert m[col].null_count() == 0, col
    assert m["tokens"].is_sorted() and m["tokens"][0] > 0 and m["wall_s"].is_sorted()

    state = json.loads((run / "checkpoints" / "checkpoint-2" / "sampler_state.json").read_text())
    assert state["chunks_trained"] == 2 and state["curriculum"]["counts"]["groups"] == 2 * 4
    assert len(state["carry"]) == 1 and len(state["carry"][0]) == 4  # the prefetched chunk, trained at step 3

    final = run / "final"
    for name in ("model.safetensors", "config.json", "tokenizer.json", "lineage.json", "README.md"):
        assert (final / name).is_file(), name
    assert json.loads((final / "lineage.json").read_text())["kind"] == "rl"
    assert json.loads((run / "config.json").read_text())["rl"]["epsilon_high"] == 5.0
    assert not (run / "checkpoints" / "README.md").exists()  # TRL's stub card: "fine-tuned version of [None]"

    led = ledger.read(ws, "tiny", "run")
    assert led.height == 3 * 32 and led.select(ledger.KEY).is_unique().all()  # the key, never twice
    assert sorted(led[S.STEP].unique().to_list()) == [1, 2, 3]
    assert led[S.VERDICT].null_count() == 0 and set(led[S.REWARD].unique().to_list()) <= {0.0, 1.0}
    step3 = led.filter(pl.col(S.STEP) == 3).group_by(S.PROBLEM_ID).len()
    assert sorted(step3[S.PROBLEM_ID].to_list()) == sorted(state["carry"][0]) and set(step3["len"]) == {8}

    again = train_rl(cfg, model=tiny, train=train_file, out_dir=run, home=ws.root, pool="tiny")
    assert again["skipped"] is True and ledger.read(ws, "tiny", "run").height == 3 * 32

    # the final model damaged after the run: rebuilt from the checkpoint of step 3, never trained into a step 4
    before = (run / "checkpoints" / "checkpoint-3" / "model.safetensors").read_bytes()
    with (final / "model.safetensors").open("r+b") as f:
        f.truncate(100)
    rebuilt = train_rl(cfg, model=tiny, train=train_file, out_dir=run, home=ws.root, pool="tiny")
    assert rebuilt["steps"] == 3 and not (run / "checkpoints" / "checkpoint-4").exists()
    assert ledger.read(ws, "tiny", "run").height == 3 * 32 and (run / "optimizer.pt").is_file()
    assert pl.read_parquet(run / "metrics.parquet")["step"].to_list() == [1, 2, 3]
    from safetensors.torch import load

    got, want = load((final / "model.safetensors").read_bytes()), load(before)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
    with pytest.raises(InputError, match="another config"):
        train_rl(load_rl_config(None, [*SMALL, "max_steps=4"]), model=tiny, train=train_file, out_dir=run)


def _cli(tiny, train_file, run, ws, sets):
    cmd = [sys.executable, "-m", "training.cli", "rl", "--model", str(tiny), "--train", str(train_file)]
    cmd += ["--out", str(run), "--home", str(ws), "--pool", "tiny", "--json"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_kill_after_first_checkpoint_and_rerun_resumes_without_duplicates(tiny, train_file, tmp_path, one_thread):
    sets = [*SMALL, "max_steps=6", "save_steps=2"]
    run, ws = tmp_path / "run", io.Workspace(tmp_path / "ws")
    proc = subprocess.Popen(
        _cli(tiny, train_file, run, ws.root, sets),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes its verify workers too
    )
    first = run / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    deadline = time.monotonic() + 400
    while not first.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first.is_file(), "the run never reached its first checkpoint"
    assert not (run / "summary.json").exists()

    done = subprocess.run(_cli(tiny, train_file, run, ws.root, sets), cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["resumed_from"] and summary["steps"] == 6
    assert summary["curriculum"]["groups"] == 6 * 4  # the restored curriculum saw every trained group exactly once

    led = ledger.read(ws, "tiny", "run")
    assert led.height == 6 * 32 and led.select(S.PROBLEM_ID, S.SAMPLE_IDX).is_unique().all()
    assert led.group_by(S.STEP).len().sort(S.STEP)["len"].to_list() == [32] * 6
    m = pl.read_parquet(run / "metrics.parquet")
    assert m["step"].to_list() == list(range(1, 7))

    # The same command never interrupted, in a fresh process like the resumed one, is the same run bit for bit:
    # the same prompts and the same completions at every step (the checkpoint's RNG state restored), the same
    # rewards, the same final weights.
    ref_run, ref_ws = tmp_path / "ref", io.Workspace(tmp_path / "ref-ws")
    ref_run.mkdir()
    done = subprocess.run(_cli(tiny, train_file, ref_run / "run", ref_ws.root, sets), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ref = ledger.read(ref_ws, "tiny", "run")

    def per_step(df):
        cols = [S.STEP, S.PROBLEM_ID, S.COMPLETION, S.REWARD]
        return df.select(cols).sort(cols).rows()

    assert per_step(led) == per_step(ref)
    from safetensors.torch import load_file

    got, want = (
        load_file(run / "final" / "model.safetensors"),
        load_file(ref_run / "run" / "final" / "model.safetensors"),
    )
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TWO_RANKS = """
import json, os, sys
from pathlib import Path


def main():
    from training.rl import load_rl_config, train_rl

    cfg = load_rl_config(None, json.loads(sys.argv[4]))
    s = train_rl(cfg, model=sys.argv[1], train=Path(sys.argv[2]), out_dir=Path(sys.argv[3]))
    Path(sys.argv[3], f"hash-{os.environ['RANK']}.json").write_text(json.dumps(s))


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_two_gloo_ranks_end_with_identical_curriculum_state(tiny, train_file, tmp_path):
    script = tmp_path / "two_ranks.py"
    script.write_text(TWO_RANKS)
    run = tmp_path / "run"
    sets = [*SMALL, "max_steps=3", "save_steps=3", "sampler.zero_variance_skip=true"]
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--nproc_per_node=2", f"--master_port={_free_port()}", str(script), str(tiny)]
    cmd += [str(train_file), str(run), json.dumps(sets)]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((run / f"hash-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sampler_state_sha256"] == ranks[1]["sampler_state_sha256"]
    assert ranks[0]["steps"] == 3 and ranks[0]["curriculum"]["groups"] == 3 * 4  # each group fed once, not per rank
    state = json.loads((run / "checkpoints" / "checkpoint-3" / "sampler_state.json").read_text())
    assert state["curriculum"]["counts"]["groups"] == 3 * 4


def test_warmup_is_honoured_with_the_default_constant_schedule(tmp_path):
    """transformers' 'constant' schedule ignores warmup_steps; the stage must warm up when the recipe asks."""
    import torch
    from transformers import get_scheduler

    from training.rl import grpo_args

    for warmup, kind in ((0, "constant"), (10, "constant_with_warmup")):
        args = grpo_args(load_rl_config(None, [f"warmup_steps={warmup}", "learning_rate=1e-4"]), tmp_path, 1)
        assert args.lr_scheduler_type.value == kind
    args = grpo_args(load_rl_config(None, ["warmup_steps=10", "learning_rate=1e-4"]), tmp_path, 1)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
    sched = get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=args.warmup_steps, num_training_steps=100)
    assert sched.get_last_lr()[0] == 0.0  # first step at lr 0, full lr after 10 steps
    from training.sft import lr_schedule  # SFT's warmup_ratio goes through the same mapping

    assert (lr_schedule("constant", 0.05), lr_schedule("cosine", 0.05)) == ("constant_with_warmup", "cosine")


def test_carry_optimizer_starts_adam_from_the_previous_stages_moments(trainer, tmp_path):
    """``carry_optimizer``: the next stage's Adam starts from the saved moments, with its own learning rate."""
    trainer.optimizer, trainer.optimizer_from = None, None
    first = trainer.create_optimizer()
    loss = sum((p.float() ** 2).sum() for p in trainer.model.parameters() if p.requires_grad)
    loss.backward()
    first.step()
    first.zero_grad()
    torch.save(first.state_dict(), tmp_path / "optimizer.pt")
    saved = first.state_dict()
    saved_lr = [g["lr"] for g in saved["param_groups"]]
    try:
        trainer.optimizer, trainer.optimizer_from = None, tmp_path / "optimizer.pt"
        carried = trainer.create_optimizer().state_dict()
        assert carried["state"].keys() == saved["state"].keys() and carried["state"]
        assert all(torch.equal(carried["state"][i]["exp_avg"], saved["state"][i]["exp_avg"]) for i in saved["state"])
        assert [g["lr"] for g in carried["param_groups"]] == saved_lr  # this stage's own lr, not a stale one
        trainer.optimizer, trainer.optimizer_from = None, None
        assert not trainer.create_optimizer().state_dict()["state"]  # a first stage starts from a fresh Adam
    finally:
        trainer.optimizer, trainer.optimizer_from = None, None
