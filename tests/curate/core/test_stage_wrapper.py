"""The one stage wrapper (``curate.stage_wrapper.run_wrapped``, issue 10): every stage skips, writes and records the
same way, and its ``reconciles`` checks read the tables back from disk (so they can fail).

One small recipe over the built-in generator, without the encoder, runs ingest -> decontaminate -> score ->
select -> curriculum (rollout goes through the same wrapper in its ``finalize``; tests/curate/rollout/test_rollout.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from curate import io, pipeline, stage_wrapper
from curate import schema as S
from curate.config import recipe_from_mapping
from curate.manifest import code_version, read_manifest


STAGES = ["ingest", "decontaminate", "score", "select", "curriculum"]
LAYOUT = {
    "stage", "fingerprint", "inputs", "config", "code_version", "versions", "rows_in", "rows_out", "drops",
    "summary", "extra", "outputs", "started_at", "wall_s",
}  # fmt: skip


@pytest.fixture
def recipe():
    return recipe_from_mapping(
        {
            "name": "w",
            "pool": "w",
            "seed": 3,
            "stages": STAGES,
            "ingest": {
                "sources": [
                    {"path": "gen://mixed?n=60&seed=0", "name": "gen/train", "split": "train"},
                    {"path": "gen://mixed?n=10&seed=1", "name": "gen/eval", "split": "test"},
                ]
            },
            "decontaminate": {"use_embeddings": False, "dedup": {"enabled": False}},
            "score": {"use_embeddings": False},
            "select": {"size": 20, "plots": False},
            "curriculum": {"plan": "fastcurl"},
        }
    )


def _recorded(summary: dict) -> dict:
    """What the manifest keeps of a summary: ingest's ``new_sources`` is about the call, not the pool."""
    return {k: v for k, v in summary.items() if k != "new_sources"}


def test_every_stage_writes_one_manifest_layout_and_skips_when_done(ws, recipe, monkeypatch):
    first = pipeline.run_recipe(recipe, ws)
    assert [r.stage for r in first] == STAGES and not any(r.skipped for r in first)
    for result in first:
        manifest = read_manifest(result.outputs[0])  # one naming rule: manifest_path(first output)
        assert set(manifest) == LAYOUT, result.stage
        assert manifest["stage"] == result.stage and manifest["summary"] == _recorded(result.summary)
        assert manifest["code_version"] == code_version()
        assert set(manifest["outputs"]) == {str(Path(o).relative_to(ws.root)) for o in result.outputs}
        assert all(len(h) == 64 for h in manifest["inputs"].values() if h != "missing")
    assert [r.summary.get("reconciles") for r in first if r.stage in ("ingest", "decontaminate", "curriculum")] == [
        True
    ] * 3

    again = pipeline.run_recipe(recipe, ws)
    assert all(r.skipped for r in again)
    assert [_recorded(r.summary) for r in again] == [_recorded(r.summary) for r in first]

    # an output removed behind the wrapper's back is redone, though its inputs did not change
    ws.table("w", "scores").unlink()
    redo = {r.stage: r.skipped for r in pipeline.run_recipe(recipe, ws)}
    assert redo["score"] is False and redo["ingest"] is True and redo["decontaminate"] is True

    # other code: every stage is redone (a skipped stage would keep the old code's output)
    monkeypatch.setattr(stage_wrapper, "code_version", lambda: "0+other")
    assert not any(r.skipped for r in pipeline.run_recipe(recipe, ws))


def test_a_copied_workspace_skips_every_finished_stage(ws, recipe, tmp_path):
    """Manifests name the workspace's files relative to it, outputs too: a finished workspace copied under another
    ``--home`` redoes nothing (issue 38.12: all five curation stages ran again), and the copy is still checked (a
    removed output is redone; the stages after it read the same content, so they stay done)."""
    import shutil

    from curate.config import apply_overrides

    data = {
        "name": "w", "pool": "w", "seed": 3, "stages": [*STAGES, "solutions"],
        "ingest": {"sources": [s.__dict__ for s in recipe.ingest.sources]},
        **recipe.stage_configs, "solutions": {"selection": "w", "k": 1},
    }  # fmt: skip
    full = recipe_from_mapping(apply_overrides(data, {}))
    assert not any(r.skipped for r in pipeline.run_recipe(full, ws))
    copy = io.Workspace.resolve(tmp_path / "elsewhere" / "workspace")
    shutil.copytree(ws.root, copy.root, symlinks=True)
    assert [r.stage for r in pipeline.run_recipe(full, copy) if not r.skipped] == []
    shutil.rmtree(copy.selection_dir("w"))
    assert [r.stage for r in pipeline.run_recipe(full, copy) if not r.skipped] == ["select"]


def test_reconciles_reads_the_tables_on_disk(ws, recipe):
    from curate.curriculum import stage as curriculum
    from curate.decontaminate import stage as decontaminate
    from curate.ingest import stage as ingest

    results = {r.stage: r for r in pipeline.run_recipe(recipe, ws)}
    problems, quarantine = ws.table("w", "problems"), ws.table("w", "quarantine")
    raw = sorted(ws.raw_dir("w").glob("*.parquet"))
    assert ingest.reconciles_on_disk(raw, problems, quarantine)
    filters = ws.table("w", "filters")
    q_decontam = next(Path(p) for p in results["decontaminate"].outputs if Path(p) != filters)  # its quarantine
    assert decontaminate.reconciles_on_disk(problems, filters, q_decontam)
    summary = results["curriculum"].summary
    shards = [ws.curriculum_dir("w") / f"{st['stage']}.parquet" for st in summary["stages"]]
    assert curriculum.reconciles_on_disk(ws, summary["source"], shards, summary["drops"])

    # a row lost on disk makes each check fail
    table = pl.read_parquet(problems)
    io.write_parquet(table.head(table.height - 1), problems)
    assert not ingest.reconciles_on_disk(raw, problems, quarantine)
    assert not decontaminate.reconciles_on_disk(problems, filters, q_decontam)
    assert not curriculum.reconciles_on_disk(ws, summary["source"], shards, {"not_selected": 99})
    first = pl.read_parquet(shards[0])
    io.write_parquet(first.with_columns(pl.lit("not-an-input").alias(S.PROBLEM_ID)), shards[0])
    assert not curriculum.reconciles_on_disk(ws, summary["source"], shards, summary["drops"])


def test_curriculum_shards_carry_the_selections_instruction(ws, recipe):
    from curate.config import apply_overrides

    custom = "Answer in one line, inside \\boxed{}."
    data = {
        "name": "w", "pool": "w", "seed": 3, "stages": STAGES,
        "ingest": {"sources": [s.__dict__ for s in recipe.ingest.sources]},
        **recipe.stage_configs,
    }  # fmt: skip
    rec = recipe_from_mapping(apply_overrides(data, {"select.instruction": custom}))
    results = {r.stage: r for r in pipeline.run_recipe(rec, ws)}
    sel = ws.selection_dir("w")
    assert read_manifest(sel)["config"]["instruction"] == custom
    trl = pl.read_parquet(sel / "trl.parquet")
    shard = pl.read_parquet(ws.curriculum_dir("w") / "stage1.parquet")
    by_id = dict(zip(trl[S.PROBLEM_ID].to_list(), trl["prompt"].to_list(), strict=True))
    row = shard.row(0, named=True)
    assert row["prompt"] == by_id[row[S.PROBLEM_ID]]  # the same user turn as the selection's TRL export
    assert row["prompt"][0]["content"].endswith(" " + custom)
    plan = json.loads((ws.curriculum_dir("w") / "plan.json").read_text())
    assert plan["instruction"] == custom and results["curriculum"].summary["reconciles"]
