"""Offline curricula: FastCuRL's length split and stages, CoScale-RL bands, ScalingRL epochs, and the plan folder
(real parquet, `datasets` offline; the FastCuRL count check reads the shared DeepScaleR rows and skips without them).
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from curate import io, pipeline, prompts
from curate import schema as S
from curate.cli import main as cli_main
from curate.config import ConfigError, recipe_from_mapping
from curate.curriculum.sampler import SamplerConfig
from curate.curriculum.stage import (
    CurriculumConfig,
    build,
    fastcurl_stages,
    prompt_length,
    split_by_prompt_length,
    stage_names,
)
from curate.manifest import Manifest, write_manifest


def problems_frame(n: int, seed: int = 0) -> pl.DataFrame:
    """``n`` train problems of varied length with pass rates spread over [0, 1] (every 7th unknown)."""
    rng = np.random.default_rng(seed)
    texts = [f"Problem {i}: compute {i} + {i}." + " pad" * int(rng.integers(0, 60)) for i in range(n)]
    rates = [None if i % 7 == 3 else float(rng.uniform()) for i in range(n)]
    return pl.DataFrame(
        {
            S.PROBLEM_ID: [S.problem_id(t) for t in texts],
            S.PROBLEM: texts,
            S.ANSWER: [str(2 * i) for i in range(n)],
            S.ANSWER_ALTERNATIVES: [[str(2 * i)] for i in range(n)],
            S.SOURCE: ["synthetic"] * n,
            S.SPLIT: ["train"] * n,
            S.PASS_RATE: rates,
        }
    )


def write_selection(ws: io.Workspace, name: str, df: pl.DataFrame, pool: str | None = None) -> None:
    sel = df.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int32).alias(S.RANK),
        pl.lit(0, pl.Int32).alias(S.CLUSTER),
        pl.lit(0.5).alias(S.DES),
        pl.col(S.PROBLEM).str.len_chars().cast(pl.Int32).alias(S.PROMPT_CHARS),
    )
    path = ws.selection_dir(name) / "selection.parquet"
    io.write_parquet(sel, path, S.SELECTIONS)
    write_manifest(path.parent, Manifest(stage="select", config={"pool": pool}))


def write_pool(ws: io.Workspace, pool: str, df: pl.DataFrame, test_rows: int = 0) -> None:
    n = df.height
    rows = df.drop(S.PASS_RATE).with_columns(
        pl.col(S.ANSWER).alias(S.ANSWER_RAW),
        pl.lit(None, pl.String).alias(S.SOLUTION),
        pl.lit(None, pl.Int32).alias(S.LEVEL),
        pl.lit(None, pl.Float64).alias(S.DIFFICULTY),
        pl.lit(None, pl.String).alias(S.SUBJECT),
        pl.int_range(pl.len(), dtype=pl.Int64).alias(S.SOURCE_ROW),
        pl.lit(["synthetic"]).alias(S.SOURCES),
        pl.lit("{}").alias(S.META),
        pl.when(pl.int_range(pl.len()) >= n - test_rows)
        .then(pl.lit("test"))
        .otherwise(pl.lit("train"))
        .alias(S.SPLIT),
    )
    io.write_parquet(rows, ws.table(pool, "problems"), S.PROBLEMS)


# --------------------------------------------------------------------------------------------------- FastCuRL
def test_fastcurl_split_reproduces_released_counts(shared_data):
    frames = [pl.read_parquet(shared_data / "fastcurl" / f"train_L{k}.parquet") for k in (1, 3)]
    raw = pl.concat(frames).with_columns(
        pl.col("prompt").list.get(0).struct.field("content").str.len_chars().alias("prompt_length"),
        pl.col("extra_info").struct.field("index").alias("index"),
    )
    parts, cut = split_by_prompt_length(raw)  # the prompt already carries the instruction suffix
    assert round(cut, 2) == 317.24
    assert [parts[k].height for k in ("L1", "L2", "L3")] == [24_976, 40_315, 15_339]
    released_l1 = set(frames[0]["extra_info"].struct.field("index").to_list())
    assert set(parts["L1"]["index"].to_list()) == released_l1


def test_prompt_length_adds_the_suffix_back():
    assert prompt_length("abc") == 3 + len(S.INSTRUCTION_SUFFIX) == 73
    assert prompt_length("abc", include_suffix=False) == 3


def test_fastcurl_presets():
    preview, v2, v3 = (fastcurl_stages(v) for v in ("preview", "v2", "v3"))
    assert [s.split for s in preview] == ["L1", "L2", "L3", "L2"]
    assert [s.max_response_length for s in preview] == [8192, 16384, 24576, 16384]
    assert [s.n for s in preview] == [8, 8, 8, 16] and [s.prompt_batch for s in preview] == [128, 64, 64, 64]
    assert sum(s.steps * s.prompt_batch / 128 for s in preview) == 860  # the README normalises to batch 128
    assert (v2[-1].use_kl_loss, v2[-1].entropy_coef) == (False, 1e-6)
    assert (v3[-1].use_kl_loss, v3[-1].entropy_coef, v3[-1].steps) == (False, 0.0, 3520)
    with pytest.raises(ConfigError):
        fastcurl_stages("v9")


def test_fastcurl_plan_on_a_pool(ws):
    df = problems_frame(40)
    write_pool(ws, "demo", df, test_rows=4)
    result = build(ws, CurriculumConfig(name="fc", pool="demo", plan="fastcurl", preset="v2"))
    s = result.summary
    assert s["rows_in"] == 40 and s["drops"] == {"test_split": 4} and s["kept"] == 36 and s["reconciles"]
    lengths = np.array([len(t) + len(S.INSTRUCTION_SUFFIX) for t in df[S.PROBLEM].to_list()[:36]])
    assert s["threshold"] == pytest.approx(lengths.mean())
    assert s["split_counts"] == {"L1": int((lengths <= lengths.mean()).sum()), "L2": 36,
                                 "L3": int((lengths > lengths.mean()).sum())}  # fmt: skip
    folder = ws.curriculum_dir("fc")
    plan = json.loads((folder / "plan.json").read_text())
    assert [st["stage"] for st in plan["stages"]] == ["stage1", "stage2", "stage3", "stage4", "stage5"]
    assert stage_names(CurriculumConfig(plan="fastcurl", preset="v2")) == [st["stage"] for st in plan["stages"]]
    first = plan["stages"][0]
    assert first["rows"] == s["split_counts"]["L1"] and first["max_response_length"] == 8192
    assert first["steps_per_epoch"] == math.ceil(first["rows"] / 128) and first["init_from"] == "base"
    assert plan["stages"][1]["init_from"] == "stage1" and plan["stages"][4]["kl"]["use_kl_loss"] is False
    for name in ("plan.png", "manifest.json", *(st["shard"] for st in plan["stages"])):
        assert (folder / name).is_file()
    stage3 = io.read_parquet(folder / "stage3.parquet")
    assert stage3.height == s["split_counts"]["L3"]
    assert stage3[S.PROMPT_CHARS].min() > s["threshold"]


def test_shards_load_with_datasets_and_polars(ws):
    write_selection(ws, "sel", problems_frame(30))
    build(ws, CurriculumConfig(name="fc", selection="sel"))
    shard = ws.curriculum_dir("fc") / "stage1.parquet"
    df = pl.read_parquet(shard)
    assert df.columns[: len(S.CURRICULA)] == list(S.CURRICULA)
    S.validate(df, S.CURRICULA)
    row = df.row(0, named=True)
    assert row["prompt"] == [{"role": "user", "content": row[S.PROBLEM] + S.INSTRUCTION_SUFFIX}]
    assert row["reward_model"] == {"ground_truth": row[S.ANSWER], "style": "rule"}
    assert row["extra_info"]["problem_id"] == row[S.PROBLEM_ID] and row["extra_info"]["index"] == 0
    # the selection's verl.parquet layout (curate.prompts.verl_columns), every gold form included, plus the stage
    assert row["extra_info"]["answer_alternatives"] == row[S.ANSWER_ALTERNATIVES]
    assert row["extra_info"]["stage"] == "stage1" and row["extra_info"]["split"] == "train"
    source = df.select(S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, pl.col("data_source").alias(S.SOURCE))
    verl = prompts.verl_frame(source)
    assert verl.drop("extra_info").rows() == df.select(verl.columns).drop("extra_info").rows()
    assert verl["extra_info"].to_list() == [{k: v for k, v in e.items() if k != "stage"} for e in df["extra_info"]]

    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(shard), split="train")
    assert ds.num_rows == df.height
    assert ds[0]["prompt"][0]["role"] == "user" and ds[0]["answer"] == row[S.ANSWER]


def test_token_unit_with_a_local_tokenizer(ws, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    write_selection(ws, "sel", problems_frame(20))
    cfg = CurriculumConfig(name="tk", selection="sel", unit="tokens", tokenizer=str(tmp_path / "tok"))
    s = build(ws, cfg).summary
    assert s["unit"] == "tokens" and 10 < s["threshold"] < 100  # words, not characters
    assert s["split_counts"]["L1"] + s["split_counts"]["L3"] == 20
    with pytest.raises(ConfigError, match="tokenizer"):
        CurriculumConfig(unit="tokens")


# --------------------------------------------------------------------------------------------------- bands, scalingrl
def test_bands_plan(ws):
    df = problems_frame(70, seed=1)
    write_selection(ws, "sel", df)
    s = build(ws, CurriculumConfig(name="b", selection="sel", plan="bands")).summary
    rates = [r for r in df[S.PASS_RATE].to_list()]
    unknown = sum(r is None for r in rates)
    assert s["drops"] == {
        k: v
        for k, v in {
            "no_pass_rate": unknown,
            "unsolvable": sum(r is not None and r < 0.05 for r in rates),
            "solved": sum(r is not None and r > 0.7 for r in rates),
        }.items()
        if v
    }
    assert s["reconciles"] and s["rows_in"] == 70
    plan = json.loads((ws.curriculum_dir("b") / "plan.json").read_text())
    stages = {st["stage"]: st for st in plan["stages"]}
    assert list(stages) == stage_names(CurriculumConfig(plan="bands"))  # what a training recipe is checked against
    assert list(stages) == ["p0.05-0.25", "p0.25-0.5", "p0.5-0.7"]
    assert stages["p0.05-0.25"]["n"] >= stages["p0.5-0.7"]["n"] >= 8
    assert all(st["parallel"] and st["lr"] / st["n"] == pytest.approx(1e-6 / 8) for st in stages.values())
    shard = io.read_parquet(ws.curriculum_dir("b") / "p0.25-0.5.parquet")
    assert shard[S.PASS_RATE].is_between(0.25, 0.5, closed="left").all()


def test_a_plan_over_one_constant_pass_rate_warns_in_plan_json_and_on_plan_png(ws):
    """A pool without rollouts gets the prior pass rate everywhere: every problem lands in one band ("p0.5-0.7").
    plan.png drew that band as if it meant something (issue 30.10); it now carries the warning pass_rate.png has
    (under the figure and in its Description), and plan.json's warnings too. Varied pass rates get none."""
    from PIL import Image

    write_selection(ws, "flat", problems_frame(30).with_columns(pl.lit(0.5).alias(S.PASS_RATE)))
    s = build(ws, CurriculumConfig(name="flat", selection="flat", plan="bands")).summary
    plan = json.loads((ws.curriculum_dir("flat") / "plan.json").read_text())
    assert [st["stage"] for st in plan["stages"]] == ["p0.5-0.7"]
    assert any("every problem has the pass rate 0.50" in w for w in s["warnings"])
    png = Image.open(ws.curriculum_dir("flat") / "plan.png")
    assert "carry no information" in png.info["Description"]
    write_selection(ws, "varied", problems_frame(70, seed=1))
    build(ws, CurriculumConfig(name="varied", selection="varied", plan="bands"))
    assert "Description" not in Image.open(ws.curriculum_dir("varied") / "plan.png").info
    assert "pass_rate_warning" not in json.loads((ws.curriculum_dir("varied") / "plan.json").read_text())


def test_pass_rates_from_pooled_ledger_stats(ws):
    df = problems_frame(3).with_columns(pl.lit(None, pl.Float64).alias(S.PASS_RATE))
    write_pool(ws, "demo", df)
    ids = df[S.PROBLEM_ID].to_list()
    stats = pl.DataFrame({
        S.PROBLEM_ID: [ids[0], ids[0], ids[1], ids[1]], S.MODEL: ["m1", "m2", "m1", "m2"],
        S.N_SAMPLES: [1, 1, 2, 2], S.N_CORRECT: [1, 0, 2, 2],
    }, schema_overrides={S.N_SAMPLES: pl.Int32, S.N_CORRECT: pl.Int32})  # fmt: skip
    stats = stats.with_columns(*(pl.lit(None, t).alias(c) for c, t in S.STATS.items() if c not in stats.columns))
    io.write_parquet(stats, ws.table("demo", "stats"), S.STATS)
    with pytest.raises(ValueError, match="pick one"):
        build(ws, CurriculumConfig(name="b", pool="demo", plan="bands"))
    from curate.curriculum.inputs import load_inputs

    got = load_inputs(ws, {"selection": None, "pool": "demo"}, model="*").sort(S.PROBLEM_ID)
    by_id = {r[S.PROBLEM_ID]: r for r in got.iter_rows(named=True)}
    assert by_id[ids[0]][S.PASS_RATE] == 0.5 and by_id[ids[0]][S.ZERO_VARIANCE] is False  # 1 of 2, pooled
    assert by_id[ids[1]][S.PASS_RATE] == 5 / 6 and by_id[ids[1]][S.ZERO_VARIANCE] is True  # 4 of 4
    assert by_id[ids[2]][S.PASS_RATE] is None


def test_bands_without_evidence_fails_clearly(ws):
    write_pool(ws, "demo", problems_frame(10))
    with pytest.raises(ValueError, match="no stage"):
        build(ws, CurriculumConfig(name="b", pool="demo", plan="bands"))


def test_scalingrl_plan_epochs(ws):
    write_selection(ws, "sel", problems_frame(50, seed=2))
    cfg = CurriculumConfig(name="s", selection="sel", plan="scalingrl", sampler=SamplerConfig(size=12, epochs=4))
    s = build(ws, cfg).summary
    folder = ws.curriculum_dir("s")
    plan = json.loads((folder / "plan.json").read_text())
    assert [st["rows"] for st in plan["stages"]] == [12] * 4
    assert [st["stage"] for st in plan["stages"]] == stage_names(cfg) == ["epoch0", "epoch1", "epoch2", "epoch3"]
    assert plan["stages"][0]["fresh"] == 12 and plan["stages"][1]["fresh"] == 9  # ρ_1 = 0.75 of 12
    assert s["kept"] + s["drops"].get("not_selected", 0) == 50 and s["reconciles"]
    first = io.read_parquet(folder / "epoch0.parquet")[S.PROBLEM_ID].to_list()
    build(ws, cfg, force=True)
    assert io.read_parquet(folder / "epoch0.parquet")[S.PROBLEM_ID].to_list() == first  # seeded
    other = CurriculumConfig(name="s2", selection="sel", plan="scalingrl",
                             sampler=SamplerConfig(size=12, epochs=4, seed=9))  # fmt: skip
    build(ws, other)
    assert io.read_parquet(ws.curriculum_dir("s2") / "epoch0.parquet")[S.PROBLEM_ID].to_list() != first


# --------------------------------------------------------------------------------------------------- stage, CLI
def test_skip_if_done_and_stale_shards(ws):
    write_selection(ws, "sel", problems_frame(30))
    cfg = CurriculumConfig(name="c", selection="sel", preset="v3")
    assert not build(ws, cfg).skipped
    assert build(ws, cfg).skipped
    assert not build(ws, cfg, force=True).skipped
    assert not build(ws, CurriculumConfig(name="c", selection="sel", preset="preview")).skipped
    assert not (ws.curriculum_dir("c") / "stage5.parquet").exists()  # the old plan's shard is gone


def test_recipe_stage_and_cli(ws):
    write_pool(ws, "demo", problems_frame(25))
    recipe = recipe_from_mapping({"name": "r", "pool": "demo", "stages": ["curriculum"],
                                  "curriculum": {"plan": "fastcurl", "preset": "preview"}})  # fmt: skip
    pipeline.validate(recipe)
    result = pipeline.run_stage("curriculum", ws, recipe)
    assert result.summary["source"] == {"selection": None, "pool": "demo"} and result.summary["kept"] == 25
    with pytest.raises(ConfigError):
        pipeline.validate(
            recipe_from_mapping({"name": "r", "pool": "demo", "stages": ["curriculum"], "curriculum": {"plann": 1}})
        )

    write_selection(ws, "sel", problems_frame(20))
    assert cli_main(["curriculum", "--selection", "sel", "--name", "cli", "--plan", "scalingrl", "--size", "5",
                     "--epochs", "2", "--json"]) == 0  # fmt: skip
    assert (ws.curriculum_dir("cli") / "epoch1.parquet").is_file()
    assert cli_main(["curriculum", "--selection", "missing", "--name", "x"]) == 2
