"""``training/layout.py``: the run folder's names and the step-name grammar, and that no other module spells them.

The names are the ones a finished run folder from before holds (``chain.json``'s paths, ``evals/``' files, the
checkpoint and stage folders), byte for byte; ``parse_step`` reads back every step name the chain writes. The walk
over ``training/``, ``flows/`` and ``bench/`` (``bench_frontier.py`` apart: its owner moves it) fails on a module
that builds a run path from a string literal (``run_dir / "sft"``), spells a record's file name (``"chain.json"``)
or builds or parses a step name by hand (``f"it{n}:..."``, ``"rl:"``, ``"merge:"``, ``.split("@")``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from training import layout
from training.layout import StepName, parse_step


ROOT = Path(__file__).resolve().parents[2]
EXEMPT = {"training/layout.py"}
# names a run folder shares with other things: every Hugging Face model folder's config (an RL stage's identity file
# has its name), and ``curate solutions``' SFT file (``curate.solutions.export.SFT_FILE``: data/ keeps its copy so)
SHARED = {"config.json", "sft.parquet"}
# (module, literal) pairs that name something else: the checkout's shared datasets (``<checkout>/../shared/data``)
OTHER = {("bench/bench_embed.py", "data"), ("bench/bench_select.py", "data"), ("bench/bench_verify.py", "data")}
# a step name in the making: ``itN:`` / ``itN-``, ``rl:`` / ``merge:`` (not a message's ``rl: ...``), a rung's
# ``@n<N>``, a checkpoint's ``-step<N>``, a merge folder, an RFT round
GRAMMAR = re.compile(r"^\^?(?:it(?:\d+|\{\}|\\d\+?)[:-]|(?:rl|merge):(?! ))|@n\{\}|-step\{\}|^merge-|^r\{\}$|:r\{\}$")


def _names() -> set[str]:
    """Every name ``training.layout`` spells: its string constants, and the values of its dicts of names."""
    out: set[str] = set()
    for key, value in vars(layout).items():
        if key.isupper() and isinstance(value, str):
            out.add(value)
        elif key.isupper() and isinstance(value, dict):
            out |= {v for v in value.values() if isinstance(v, str)}
        elif key.isupper() and isinstance(value, tuple):
            out |= {v for v in value if isinstance(v, str)}
    return out


# what a path may not be built from: every folder and file name (the note kinds and step-only names apart)
NAMES = _names() - {layout.SOLUTIONS, layout.ROUNDS, layout.RFT_BEST, *layout.NOTES} | {layout.COSCALE, layout.RFT}
PATHS = NAMES - SHARED
FILES = {n for n in PATHS if "." in n}


def _rendered(node: ast.AST) -> str | None:
    """A string literal as written (an f-string with ``{}`` for each value), None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _skipped(tree: ast.AST) -> set[int]:
    """ids of the literals the walk leaves alone: docstrings (and other bare strings) and ``help=`` texts."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and _rendered(node.value) is not None:
            out |= {id(n) for n in ast.walk(node.value)}
        if isinstance(node, ast.keyword) and node.arg == "help":
            out |= {id(n) for n in ast.walk(node.value)}
    return out


def _path_offences(node: ast.BinOp, module: str) -> list[str]:
    """``a / "sft"``, ``a / f"it{n}-..."``: a path built from a literal the layout holds (either side)."""
    out = []
    for side in (node.left, node.right):
        text = _rendered(side)
        if text is not None and (module, text) not in OTHER and (text.split("/")[0] in PATHS or GRAMMAR.search(text)):
            out.append(f"line {node.lineno}: a run path from the literal {text!r}")
    return out


def _literal_offences(node: ast.AST) -> list[str]:
    """A record's file name spelled, or a step name built or parsed by hand (``"rl:"``, ``.split("@")``)."""
    text, where = _rendered(node), f"line {getattr(node, 'lineno', '?')}"
    if text in FILES:
        return [f"{where}: the run folder's file name {text!r}"]
    if text is not None and GRAMMAR.search(text):
        return [f"{where}: a step name by hand {text!r}"]
    split = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split"
    if split and node.args and _rendered(node.args[0]) == "@":
        return [f"{where}: a step name parsed by hand (split('@'))"]
    return []


def offences(source: str, module: str = "") -> list[str]:
    """What a module's source does that only ``training.layout`` may: one line per offence."""
    tree = ast.parse(source)
    skipped, out = _skipped(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            out += _path_offences(node, module)
        elif id(node) not in skipped:
            out += _literal_offences(node)
    return sorted(set(out))


def modules() -> list[Path]:
    found = [*ROOT.glob("training/**/*.py"), *ROOT.glob("flows/**/*.py"), *ROOT.glob("bench/*.py")]
    return sorted(p for p in found if str(p.relative_to(ROOT)) not in EXEMPT)


def test_no_module_but_layout_spells_a_run_path_or_a_step_name():
    found = {str(p.relative_to(ROOT)): offences(p.read_text(), str(p.relative_to(ROOT))) for p in modules()}
    assert len(found) > 40  # the walk found the modules
    assert {path: lines for path, lines in found.items() if lines} == {}


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ('p = run_dir / "sft"', "a run path from the literal 'sft'"),
        ('p = run.run_dir / "rl" / name', "a run path from the literal 'rl'"),
        ('p = folder / f"it{i}-{name}"', "a run path from the literal 'it{}-{}'"),
        ('SUMMARY = "summary.json"', "the run folder's file name 'summary.json'"),
        ('name = f"it{i}:rl:{stage}"', "a step name by hand 'it{}:rl:{}'"),
        ('ok = name.startswith("rl:")', "a step name by hand 'rl:'"),
        ('m = re.compile(r"merge:(\\d+)of\\d+$")', "a step name by hand"),
        ('stage = name.split("@")[0]', "a step name parsed by hand"),
        ('e = f"{slug}-step{at}"', "a step name by hand '{}-step{}'"),
    ],
)
def test_the_walk_finds_each_kind_of_offence(source, what):
    assert any(what in line for line in offences(source)), offences(source)


def test_the_walk_leaves_other_strings_alone():
    source = '''
"""A docstring naming rl:stage1, chain.json and run_dir / "sft"."""
x = {"sft": 1, "kind": "rl"}
ap.add_argument("--n", help="rl: prompts per step")
log = home / "logs" / f"{arm}-seed{seed}.log"
cfg = model_dir / "config.json"
print(f"rl: {n} steps")
raise ConfigError(f"merge: {n} groups")
'''
    assert offences(source) == []


# --------------------------------------------------------------------------------------------------- the names
def test_paths_are_the_ones_a_finished_run_folder_holds(tmp_path):
    run = tmp_path / "runs" / "demo"
    assert layout.run_dir(tmp_path, "demo") == run
    assert layout.stage_folder(0, "stage1") == "01-stage1"
    assert layout.stage_folder(3, "easy", n=16) == "04-easy-n16"
    assert layout.stage_dir(run, "01-stage1") == run / "rl" / "01-stage1"
    assert layout.stage_dir(run, "01-stage1", 2) == run / "rl" / "it2-01-stage1"
    assert layout.merge_dir(run, 2, 3) == run / "rl" / "merge-2of3"
    assert layout.merge_dir(run, 2, 3, 1) == run / "rl" / "it1-merge-2of3"
    assert layout.coscale_dir(run, 1) == run / "coscale" / "it1"
    assert layout.rft_dir(run, 4) == run / "rft" / "r4"
    assert layout.checkpoint(run / "sft", 500) == run / "sft" / "checkpoints" / "checkpoint-500"
    assert layout.checkpoint_step(run / "sft" / "checkpoints" / "checkpoint-500") == 500
    assert layout.checkpoint_step(run / "sft" / "bad-checkpoint-500") is None
    assert layout.final(run / "sft") == run / "sft" / "final"
    assert layout.pinned_path(run, "sft") == run / "data" / "sft.parquet"
    assert layout.pinned_path(run, "curriculum") == run / "data" / "curriculum"
    assert layout.eval_path(run, "rl:stage2") == run / "evals" / "rl_stage2.parquet"
    assert layout.eval_path(run, "sft", 1.0, samples=True) == run / "evals" / "sft@T1.samples.parquet"
    assert layout.checkpoint_eval("rl:stage2", 10) == "rl_stage2-step10"
    assert (layout.CHAIN, layout.SUMMARY, layout.RECIPE, layout.EVAL_CURVE) == (
        "chain.json", "summary.json", "recipe.json", "eval.parquet")  # fmt: skip


def test_step_names_build_and_parse_back():
    assert layout.rl_step("stage1") == "rl:stage1"
    assert layout.rl_step("stage1", 2, n=16) == "it2:rl:stage1@n16"
    assert layout.merge_step(2, 3) == "merge:2of3"
    assert layout.merge_step(2, 3, 1) == "it1:merge:2of3"
    assert layout.in_iteration("sft", 1) == "it1:sft" and layout.in_iteration("sft") == "sft"
    assert layout.rft_step(3) == "rft:r3" and layout.is_rft_round("rft:r3") and not layout.is_rft_round("rft:best")
    assert parse_step("it2:rl:stage1@n16") == StepName("it2:rl:stage1@n16", "rl", 2, "stage1", 16)
    assert parse_step("rl:stage1@n16").stage_step == "rl:stage1"
    assert parse_step("it1:rl:g").stage_step == "it1:rl:g"
    assert parse_step("merge:2of3") == StepName("merge:2of3", "merge", count=2, total=3)
    assert parse_step("it1:sft") == StepName("it1:sft", iteration=1)
    assert parse_step("rl:stage1@n16").label == "stage1@n16" and parse_step("it1:rl:g").label == "it1:rl:g"
    assert layout.first_pass_rl("rl:g@n16") and not layout.first_pass_rl("it1:rl:g")
    assert not layout.first_pass_rl("merge:2of3") and not layout.first_pass_rl("sft")


def test_stage_plan_names_are_unchanged():
    """``StagePlan.folder`` and ``rl_step_name`` through the layout: the names a run folder from before holds."""
    from training.plan import StagePlan, rl_step_name
    from training.rl import RLConfig

    stage = StagePlan(1, "stage2", Path("s.parquet"), 10, RLConfig(num_generations=8))
    rung = StagePlan(1, "stage2", Path("s.parquet"), 10, RLConfig(num_generations=16), rung=1)
    assert (stage.folder, rung.folder) == ("02-stage2", "02-stage2-n16")
    assert (rl_step_name(stage), rl_step_name(rung, 1)) == ("rl:stage2", "it1:rl:stage2@n16")
