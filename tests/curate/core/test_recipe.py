"""The strict recipe (issue 10): unknown keys fail at every level with a suggestion, before any work; one seed
reaches every stage that draws random numbers; one workspace-root precedence for `curate run` and the flow; the
curriculum's input is decided when the recipe loads.

Recipes are built over the built-in generator, so a check that came too late would visibly ingest a pool.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path

import pytest
import yaml

from curate import config, pipeline
from curate.cli import main
from curate.config import ConfigError, recipe_from_mapping
from curate.io import Workspace


BASE = {
    "name": "t",
    "pool": "p",
    "seed": 0,
    "stages": ["ingest", "decontaminate", "score", "select", "curriculum"],
    "ingest": {"sources": [{"path": "gen://mixed?n=20&seed=0", "split": "train"}]},
}

# (what is misspelled, patch applied to BASE, the wrong key, the key suggested)
TYPOS = [
    ("top level", {"selct": {"size": 3}}, "selct", "select"),
    ("stages", {"stages": ["ingest", "selekt"]}, "selekt", "select"),
    ("ingest", {"ingest": {**BASE["ingest"], "max_problem_char": 9}}, "max_problem_char", "max_problem_chars"),
    ("ingest.sources[0]", {"ingest": {"sources": [{"path": "gen://mixed?n=20", "splt": "train"}]}}, "splt", "split"),
    ("decontaminate", {"decontaminate": {"ngram_treshold": 0.5}}, "ngram_treshold", "ngram_threshold"),
    ("decontaminate.embed", {"decontaminate": {"embed": {"dtyp": "float32"}}}, "dtyp", "dtype"),
    ("rollout (present, not listed)", {"rollout": {"model": "m", "temprature": 0.5}}, "temprature", "temperature"),
    ("score", {"score": {"pseudo_cout": 4}}, "pseudo_cout", "pseudo_count"),
    ("score.embed", {"score": {"embed": {"batchsize": 8}}}, "batchsize", "batch_size"),
    ("select", {"select": {"sise": 3}}, "sise", "size"),
    ("select.embed", {"select": {"embed": {"encodr": "x"}}}, "encodr", "encoder"),
    ("curriculum", {"curriculum": {"plann": "bands"}}, "plann", "plan"),
    ("curriculum.sampler", {"curriculum": {"sampler": {"sed": 1}}}, "sed", "seed"),
    ("verify", {"verify": {"item_timeout": 3}}, "item_timeout", "item_timeout_s"),
]


def recipe_data(**patch) -> dict:
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(patch))
    return data


def write(tmp_path: Path, data: dict, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(("where", "patch", "wrong", "suggested"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_misspelled_key_fails_at_load_with_a_suggestion(where, patch, wrong, suggested):
    with pytest.raises(ConfigError) as err:
        pipeline.validate(recipe_from_mapping(recipe_data(**patch)))
    assert repr(wrong) in str(err.value) and f"did you mean {suggested!r}" in str(err.value)


@pytest.mark.parametrize(("where", "patch", "wrong", "suggested"), TYPOS, ids=[t[0] for t in TYPOS])
def test_curate_run_rejects_the_typo_before_any_work(ws, tmp_path, capsys, where, patch, wrong, suggested):
    path = write(tmp_path, recipe_data(**patch))
    assert main(["run", "--recipe", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"did you mean {suggested!r}" in err and "Traceback" not in err
    assert not (ws.root / "pools").exists()  # nothing was ingested: the check came first


def test_a_misspelled_stage_on_the_command_line_gets_a_suggestion_before_any_work(ws, tmp_path, capsys):
    """Issue 38.8: `curate run --stage selcet` had no "did you mean", while every other misspelling has one."""
    path = write(tmp_path, recipe_data())
    assert main(["run", "--recipe", str(path), "--stage", "ingest", "--stage", "selcet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "stage(s) 'selcet' (did you mean 'select'?) are not in the recipe's stages" in err
    assert "Traceback" not in err and not (ws.root / "pools").exists()


def test_the_demo_recipe_is_valid_and_typed():
    recipe = pipeline.load_recipe(Path(__file__).resolve().parents[3] / "datasets" / "demo" / "recipe.yaml")
    typed = pipeline.sections(recipe)
    assert set(typed) == {*recipe.stages, "verify"}
    from curate.curriculum.stage import CurriculumConfig
    from curate.embed import EmbedConfig
    from curate.score.stage import ScoreConfig
    from curate.select.stage import SelectConfig

    assert isinstance(typed["score"], ScoreConfig) and isinstance(typed["score"].embed, EmbedConfig)
    assert isinstance(typed["select"], SelectConfig) and isinstance(typed["select"].embed, EmbedConfig)
    assert isinstance(typed["curriculum"], CurriculumConfig)


def test_every_pipeline_stage_has_a_recipe_section():
    assert set(config.SECTIONS) == {*pipeline.stage_names(), "verify"}


def test_a_recipe_override_is_checked_like_the_file(tmp_path):
    path = write(tmp_path, recipe_data())
    with pytest.raises(ConfigError, match="did you mean 'size'"):
        pipeline.load_recipe(path, config.parse_overrides(["select.sise=3"]))
    assert pipeline.load_recipe(path, {"select.size": 3}).stage_config("select") == {"size": 3}


# --------------------------------------------------------------------------------------------------- seed
def test_one_seed_reaches_every_stage_that_draws_random_numbers():
    from curate.curriculum import stage as curriculum
    from curate.rollout import stage as rollout
    from curate.score import stage as score
    from curate.select import stage as select

    recipe = recipe_from_mapping(recipe_data(seed=7, rollout={"model": "m"}))
    assert rollout.load_config(recipe).seed == 7  # rollout sampling (per-request seeds derive from it)
    assert rollout.load_config(recipe).sampling.seed == 7
    assert score.load_config(recipe).seed == 7  # predictor split, k-means
    assert select.load_config(recipe).seed == 7  # Gumbel-top-k sampling
    assert curriculum.load_config(recipe).sampler.seed == 7  # the plan's and the online sampler's draws
    # a section's own seed wins over the recipe's
    own = recipe_from_mapping(
        recipe_data(seed=7, rollout={"model": "m", "seed": 1}, select={"seed": 2}, curriculum={"sampler": {"seed": 3}})
    )
    assert rollout.load_config(own).seed == 1 and select.load_config(own).seed == 2
    assert curriculum.load_config(own).sampler.seed == 3 and score.load_config(own).seed == 7


# --------------------------------------------------------------------------------------------------- curriculum input
def test_curriculum_input_is_decided_when_the_recipe_loads(ws):
    from curate.curriculum import stage as curriculum

    with_select = recipe_from_mapping(recipe_data(select={"name": "picked"}))
    cfg = curriculum.load_config(with_select)
    assert (cfg.selection, cfg.pool, cfg.name) == ("picked", None, "t")  # no selection exists yet: no file check

    no_select = recipe_from_mapping(recipe_data(stages=["ingest", "curriculum"]))
    (ws.selection_dir("t") / "selection.parquet").parent.mkdir(parents=True)
    (ws.selection_dir("t") / "selection.parquet").write_bytes(b"")  # a stale folder named like the recipe
    cfg = curriculum.load_config(no_select)
    assert (cfg.selection, cfg.pool) == (None, "p")  # the recipe's pool, whatever files exist

    explicit = recipe_from_mapping(recipe_data(curriculum={"selection": "other", "pool": "q"}))
    assert (curriculum.load_config(explicit).selection, curriculum.load_config(explicit).pool) == ("other", "q")


# --------------------------------------------------------------------------------------------------- workspace root
def test_workspace_root_precedence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CURATE_HOME", raising=False)
    assert Workspace.resolve().root == tmp_path / "workspace"
    assert Workspace.resolve(recipe_home="r").root == tmp_path / "r"
    monkeypatch.setenv("CURATE_HOME", str(tmp_path / "env"))
    assert Workspace.resolve(recipe_home="r").root == tmp_path / "env"  # the environment beats the recipe
    assert Workspace.resolve("flag", recipe_home="r").root == tmp_path / "flag"  # the flag beats both


def test_curate_run_and_the_flow_pick_the_same_root(tmp_path, monkeypatch):
    """With both $CURATE_HOME and a recipe `home:` set, `curate run` and the Prefect flow write to one root."""
    monkeypatch.setenv("CURATE_HOME", str(tmp_path / "env"))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    path = write(tmp_path, recipe_data(stages=["ingest"], home=str(tmp_path / "recipe-home")))
    assert main(["run", "--recipe", str(path)]) == 0
    assert (tmp_path / "env" / "pools" / "p" / "problems.parquet").is_file()
    assert not (tmp_path / "recipe-home").exists()

    from flows import curation

    homes = []
    monkeypatch.setattr(curation, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(curation, "_one_stage", lambda name, recipe, home, *a: homes.append(home) or {})
    monkeypatch.setattr(curation.artifacts, "publish", lambda report, ws: None)
    report = curation.curate_dataset.fn(recipe_path=str(path))  # the flow's body, without a Prefect run
    assert homes == [str(tmp_path / "env")] and report["home"] == str(tmp_path / "env")
    assert os.environ["CURATE_HOME"] == str(tmp_path / "env")
