"""``curate``'s help screens and ``curate show`` at 80 columns (issue 38.15): nothing lost to Rich markup, option
names whole, paragraphs wrapped to the width, no ``<bool>`` on flags; ``curate show`` never cuts the paths it lists
and pads no piped line, nor lists them wider than 80 columns (the pool's folder once, then each table by name)."""

from __future__ import annotations

import pytest

from curate.cli import app, main
from tests.help_screens import WIDTH, commands, help_problems


@pytest.mark.parametrize("name", commands(app))
def test_every_help_screen_fits_80_columns_whole(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    assert help_problems(app, name, capsys) == []


def test_show_lists_every_table_path_whole_on_unpadded_lines(ws, capsys, monkeypatch):
    from curate import io
    from curate import schema as S
    from curate.progress import make_console
    from tests.tiny_model import problems_frame

    io.write_parquet(problems_frame([("Compute 1 + 1.", "2")], "train"), ws.table("a-pool", "problems"), S.PROBLEMS)
    io.write_parquet(problems_frame([("Compute 1 + 1.", "2")], "train"), ws.table("a-pool", "scores"))
    for columns in ("80", None):  # a terminal-sized pipe, and a pipe (rich's 1000 columns)
        if columns:
            monkeypatch.setenv("COLUMNS", columns)
        else:
            monkeypatch.delenv("COLUMNS", raising=False)
        monkeypatch.setattr("curate.cli.common.out", make_console())  # the CLI's console, as it starts
        assert main(["show", "a-pool"]) == 0
        text = capsys.readouterr().out
        lines = text.splitlines()
        assert f"folder       {ws.pool_dir('a-pool')}" in lines, text  # the folder once, whole
        for table in ("problems", "scores"):
            assert f"{table}={ws.table('a-pool', table).name}" in text, text
        assert not [line for line in lines if line.endswith(" ") and "pools/" in line]
        wide = [line for line in lines if len(line) > WIDTH and not line.startswith("folder ")]
        assert not wide, wide  # issue 45.8: the tables' whole paths made lines of 82-108 columns


@pytest.mark.parametrize("cli", ["curate", "training"])
def test_the_top_level_screen_shows_every_summary_whole_and_lists_version(cli, capsys, monkeypatch):
    """Issue 45.8: ``curate --help`` and ``training --help`` cut every verb's summary with ``...`` at 80 columns,
    and ``--version`` worked but was not listed. Each summary is now its docstring's first sentence, wrapped."""
    import typer

    from curate.console import run_app
    from training.cli import app as training_app

    the_app = app if cli == "curate" else training_app
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    capsys.readouterr()
    assert run_app(the_app, ["--help"]) == 0
    text = capsys.readouterr().out
    assert "..." not in text.split("Commands:")[1] and "--version" in text and "Print the version and exit." in text
    assert not [line for line in text.splitlines() if len(line) > WIDTH]
    flat = " ".join(text.split())
    joined = flat.replace("- ", "-")  # the wrap may break a line after a hyphen
    for name, command in typer.main.get_command(the_app).commands.items():
        assert f"{name} {command.short_help}".replace("- ", "-") in joined, name  # whole, with its full stop
        assert command.short_help.endswith(".")
    assert run_app(the_app, ["--version"]) == 0 and capsys.readouterr().out.startswith(f"{cli} ")
    if cli == "curate":  # decontaminate flags near-duplicates; select drops them (it said "drop")
        assert "near-duplicates (`curate select` drops them)." in flat
    else:  # every other screen writes ±; `training eval --help` wrote +-
        assert "±" in flat and "+-" not in flat
        assert run_app(the_app, ["eval", "--help"]) == 0
        eval_help = capsys.readouterr().out
        assert "± standard error" in eval_help and "+-" not in eval_help


def test_an_unset_value_or_forecast_never_prints_none(capsys, monkeypatch):
    """Issue 45.8: a forecast without rollouts printed ``share=None, stderr=None``; any unset value ``None``."""
    from curate.cli.common import render_summary
    from curate.progress import make_console
    from curate.score.forecast import forecast

    monkeypatch.setattr("curate.cli.common.out", make_console())
    fc = forecast([0, 0], [0, 0], 8)
    assert fc["share"] is None
    render_summary({"zero_variance_forecast": {"pool": fc, "selection": fc}, "by": None, "score": {"a": None}})
    text = capsys.readouterr().out
    assert "None" not in text, text
    assert "no forecast: none of 2 prompts has rollouts" in text and "share=" not in text
