"""`training reward` scores a file through the TRL reward adapter (local file, real math-verify in workers)."""

from __future__ import annotations

import json


def test_training_reward_on_jsonl(tmp_path, capsys):
    from training.cli import main

    path = tmp_path / "c.jsonl"
    rows = [
        {"completion": "so the answer is \\boxed{\\frac{1}{2}}", "answer": "0.5"},
        {"completion": "\\boxed{3}", "answer": "4"},
        {"completion": "I don't know", "answer": ["7", "7.0"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["reward", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"rows": 3, "scored": 3, "skipped_unreadable_gold": 0, "mean_reward": round(1 / 3, 4)}
    assert main(["reward", str(tmp_path / "missing.jsonl")]) == 2
