"""``curate``'s help screens and ``curate show`` at 80 columns (issue 38.15): nothing lost to Rich markup, option
names whole, paragraphs wrapped to the width, no ``<bool>`` on flags; ``curate show`` never cuts the paths it lists
and pads no piped line."""

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
        for table in ("problems", "scores"):
            assert str(ws.table("a-pool", table)) in text, text
        assert not [line for line in text.splitlines() if line.endswith(" ") and "pools/" in line]
