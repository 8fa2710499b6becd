"""`training merge`: linear / TIES / task arithmetic over full state dicts (peft merge_utils), tiny local models."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A base (random init), an expert = base + noise, and a model of another architecture."""
    import torch
    from transformers import AutoModelForCausalLM

    from training.tiny import TinyConfig, init_tiny

    root = tmp_path_factory.mktemp("merge")
    base = init_tiny(root / "base", TinyConfig(size="tiny", corpus_problems=300))
    expert = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in expert.parameters():
            p.add_(0.05 * torch.randn_like(p))
    expert.save_pretrained(root / "expert")
    for f in base.iterdir():
        if f.name.startswith("tokenizer") or f.name == "chat_template.jinja":
            (root / "expert" / f.name).write_bytes(f.read_bytes())
    other = init_tiny(root / "other", TinyConfig(size="small", corpus_problems=300))
    return base, root / "expert", other


def _state(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@pytest.mark.parametrize(
    ("method", "weights"), [("linear", "0.5,0.5"), ("ties", None), ("task_arithmetic", "0.5,0.5")]
)
def test_merging_two_copies_returns_them(models, tmp_path, method, weights, capsys):
    import torch
    from transformers import AutoTokenizer

    from training.card import read_lineage
    from training.cli import main

    base, expert, _ = models
    out = tmp_path / method
    args = ["merge", str(expert), str(expert), "--base", str(base), "--method", method, "--out", str(out), "--json"]
    assert main(args + (["--weights", weights] if weights else [])) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == method and summary["tensors"] > 0
    merged, want = _state(out), _state(expert)
    assert merged.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(merged[k], want[k], atol=1e-6, rtol=1e-5)
    assert AutoTokenizer.from_pretrained(out).eos_token == "<|im_end|>"  # a complete, loadable model folder
    lineage = read_lineage(out)
    assert lineage["kind"] == "merge" and lineage["sources"] == [str(base), str(expert), str(expert)]


def test_linear_weights_and_ties_sign_election():
    import torch

    from training.merge import MergeConfig, merge_tensor

    a, b = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([3.0, 1.0, -1.0])
    lin = merge_tensor(torch.zeros(3), [a, b], (3.0, 1.0), MergeConfig(method="linear"))
    torch.testing.assert_close(lin, 0.75 * a + 0.25 * b)  # weights are relative (normalised)
    # TIES over a zero base: the sign with the larger total wins per entry; only agreeing entries are averaged
    ties = merge_tensor(torch.zeros(3), [a, b], (0.5, 0.5), MergeConfig(method="ties"))
    torch.testing.assert_close(ties, torch.tensor([2.0, -2.0, 3.0]))
    # density trims each task vector to its largest entries before the election
    trimmed = merge_tensor(torch.zeros(3), [a, b], (0.5, 0.5), MergeConfig(method="ties", density=0.34))
    torch.testing.assert_close(trimmed, torch.tensor([3.0, 0.0, 3.0]))
    ta = merge_tensor(torch.ones(3), [a + 1, b + 1], (1.0, 1.0), MergeConfig(method="task_arithmetic"))
    torch.testing.assert_close(ta, 1 + a + b)  # task vectors add up


def test_mismatched_architectures_refused(models, tmp_path, capsys):
    from training.cli import main
    from training.merge import MergeError, merge_models

    base, expert, other = models
    with pytest.raises(MergeError, match="different architectures"):
        merge_models([expert, other], base=base, out_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # refused before writing anything
    assert main(["merge", str(expert), str(other), "--out", str(tmp_path / "y")]) == 2
    assert "different architectures" in capsys.readouterr().err
    assert main(["merge", str(expert), str(expert), "--method", "ties", "--out", str(tmp_path / "z")]) == 2
    assert "needs --base" in capsys.readouterr().err
