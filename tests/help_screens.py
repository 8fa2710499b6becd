"""What a help screen of ``curate`` or ``training`` must show at 80 columns (issue 38.15), for both CLIs' tests.

problems = help_problems(app, "eval", capsys)   # [] when the screen is fine, else one line per fault
"""

from __future__ import annotations

import re

import typer


WIDTH = 80


def commands(app: typer.Typer) -> list[str]:
    """The app's verbs, by name."""
    return sorted(typer.main.get_command(app).commands)


def render(app: typer.Typer, name: str, capsys) -> str:
    """``<app> <name> --help`` as printed (``COLUMNS`` set by the caller)."""
    from curate.console import run_app

    capsys.readouterr()
    assert run_app(app, [name, "--help"]) == 0
    return capsys.readouterr().out


def help_problems(app: typer.Typer, name: str, capsys) -> list[str]:
    """Faults of one verb's help screen: lines wider than 80 columns, a ``<bool>`` metavar on a flag, an option name
    or a ``[default: X]`` of the help strings missing, and description paragraphs left with the docstring's hard
    line breaks (a line much shorter than the width in the middle of a paragraph)."""
    text = render(app, name, capsys)
    flat = " ".join(text.split())
    command = typer.main.get_command(app).commands[name]
    problems = [f"{len(line)} columns: {line!r}" for line in text.splitlines() if len(line) > WIDTH]
    if "<bool>" in text:
        problems.append("a flag shows a <bool> metavar")
    for param in command.params:
        problems += [f"option {opt} missing" for opt in param.opts if opt not in text]
        for default in re.findall(r"\[default: [^]]*\]", getattr(param, "help", None) or ""):
            if default not in flat:
                problems.append(f"{default} of {param.name} lost")
    description = text.split("\nOptions:")[0].split("\nArguments:")[0]
    for block in description.split("\n\n")[1:]:  # the paragraphs after the usage line
        lines = block.splitlines()
        problems += [f"ragged line {line!r}" for line in lines[:-1] if len(line) < WIDTH - 25]
    return problems
