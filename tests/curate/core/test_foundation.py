"""Foundation: answer normalization, schema validation, atomic I/O and manifests, recipes, generator, layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from curate import schema as S
from curate.config import ConfigError, load_recipe, parse_overrides
from curate.ingest.generate import generate, generate_problem, parse_uri
from curate.io import Workspace, read_parquet, write_parquet
from curate.manifest import Manifest, up_to_date, write_manifest
from curate.verify import answers as A


REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("#### 1,080", "1080"),
        ("She makes $18.\nA: 18", "18"),
        (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}"),
        (r"\[ \boxed{ 3\sqrt{2} } \]", r"3\sqrt{2}"),
        ("$2\\sqrt{5}$", "2\\sqrt{5}"),
        ("$(-\\infty, 0) \\cup\\{1\\}$.", "(-\\infty, 0) \\cup\\{1\\}"),
        ("$6764$,$10945$", "6764, 10945"),
        (27.0, "27"),
        ("27.0", "27"),
        ("097", "97"),
        ("2.50", "2.5"),
        ("-0", "0"),
        ("1{,}000", "1000"),
        ("1, 2", "1, 2"),  # a tuple, not a thousands separator
        ("\\text{(C)}", "\\text{(C)}"),
        ("9.6\n", "9.6"),
        ("$2.60", "2.6"),
        ("\\$1,200", "1200"),
        (None, ""),
        ("   ", ""),
        (float("nan"), ""),
    ],
)
def test_normalize_answer(raw, expected):
    assert A.normalize_answer(raw) == expected


def test_alternatives_and_keys():
    assert A.normalize_alternatives(["9.6\n", "9.60", "$9.6$"]) == ["9.6"]
    assert A.normalize_alternatives(142.0) == ["142"]
    assert A.answer_key(r"\left( 3, \frac{\pi}{2} \right)") == A.answer_key(r"(3,\frac{\pi}{2})")
    assert A.answer_key("25") != A.answer_key("20")
    assert A.find_boxed(r"a \boxed{x^{2}} b \boxed{ {1} } c \boxed{unbalanced") == ["x^{2}", " {1} "]


def test_problem_id_is_stable_content_hash():
    a = S.problem_id("What is  2+3?\n")
    assert a == S.problem_id("what is 2+3?") == "e4f5ed4b3ecec1f6" or len(a) == 16
    assert a == S.problem_id("What is 2+3?" + S.INSTRUCTION_SUFFIX)
    assert S.problem_id("What is 2+4?") != a
    # pinned value: same id on every machine and library version
    import hashlib

    assert a == hashlib.sha256(b"what is 2+3?").hexdigest()[:16]


def test_validate_names_missing_and_mistyped_columns():
    df = pl.DataFrame({S.PROBLEM_ID: ["a"], S.ENCODER: [1]})
    with pytest.raises(S.SchemaError, match=r"missing column\(s\) \['embedding'\]"):
        S.validate(df, S.EMBEDDINGS)
    df = df.with_columns(pl.lit(None).alias(S.EMBEDDING))
    with pytest.raises(S.SchemaError, match="encoder is Int64, expected String"):
        S.validate(df, S.EMBEDDINGS)
    ok = pl.DataFrame({S.PROBLEM_ID: ["a"], S.ENCODER: ["e"], S.EMBEDDING: [None], "extra": [1]})
    assert S.validate(ok, S.EMBEDDINGS).columns == list(S.EMBEDDINGS)
    for name, schema in S.TABLES.items():  # every table in DESIGN.md is declared
        assert S.PROBLEM_ID in schema or name == "quarantine", name


def test_atomic_write_and_skip_if_done(tmp_path):
    ws = Workspace.resolve(tmp_path / "w")
    path = ws.table("p", "problems")
    df = pl.DataFrame(
        {S.PROBLEM_ID: ["b", "a"], S.ENCODER: ["e", "e"], S.EMBEDDING: [[1.0], [2.0]]}, schema=S.EMBEDDINGS
    )
    write_parquet(df, path, S.EMBEDDINGS)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert read_parquet(path, S.EMBEDDINGS).equals(df)
    inputs, config = {"x": "h1"}, {"k": 1}
    write_manifest(path, Manifest(stage="t", inputs=inputs, config=config, rows_in=2, rows_out=2))
    assert up_to_date(path, inputs, config) is not None
    assert up_to_date(path, {"x": "h2"}, config) is None
    assert up_to_date(path, inputs, {"k": 2}) is None
    m = json.loads(path.with_name("problems.manifest.json").read_text())
    assert m["rows_in"] == 2 and m["versions"]["polars"] == pl.__version__


def test_workspace_root_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("CURATE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Workspace.resolve().root == tmp_path / "workspace"
    monkeypatch.setenv("CURATE_HOME", str(tmp_path / "env"))
    assert Workspace.resolve().root == tmp_path / "env"
    assert Workspace.resolve(tmp_path / "flag").root == tmp_path / "flag"
    with pytest.raises(FileNotFoundError, match="curate ingest"):
        Workspace.resolve().require_pool("nope")


def test_recipe_loader_is_strict(tmp_path):
    r = load_recipe(REPO / "datasets/demo/recipe.yaml", parse_overrides(["seed=3"]))
    assert r.pool == "demo" and r.seed == 3 and r.ingest.sources[1].split == "test"
    bad = tmp_path / "r.yaml"
    bad.write_text("name: x\npool: p\ningest:\n  sourcez: []\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_recipe(bad)
    bad.write_text("name: x\npool: p\ningest:\n  max_problem_chars: lots\n")
    with pytest.raises(ConfigError, match="expected int"):
        load_recipe(bad)
    rel = tmp_path / "sub" / "r.yaml"
    rel.parent.mkdir()
    rel.write_text("name: x\npool: p\ningest:\n  sources: [data/a.jsonl, 'gen://arith?n=3']\n")
    srcs = load_recipe(rel).ingest.sources
    assert srcs[0].path == str(tmp_path / "sub/data/a.jsonl") and srcs[1].path == "gen://arith?n=3"


def test_generator_is_deterministic_prefix_stable_and_correct():
    a = list(generate(50, seed=7))
    b = list(generate(80, seed=7))
    assert a == b[:50]
    assert a != list(generate(50, seed=8))
    levels = {p["level"] for p in generate(300)}
    families = {p["family"] for p in generate(300)}
    assert levels == {1, 2, 3, 4, 5} and families == {"arith", "linear", "fraction", "word"}
    for p in generate(200, seed=1):
        assert p["solution"].rstrip().endswith("}$") or p["solution"].rstrip().endswith("}$.")
        assert A.find_boxed(p["solution"])[-1] == p["answer"]
    p = generate_problem(3, seed=0, family="linear", level=2)
    x = p["answer"]
    assert p["problem"].startswith("Solve for $x$") and x
    lengths = [len(p["problem"]) for p in generate(500)]
    assert max(lengths) > 3 * min(lengths)  # prompt lengths vary
    assert parse_uri("gen://word?n=5&seed=2") == {"family": "word", "n": 5, "seed": 2}
    with pytest.raises(ValueError, match="unknown generator option"):
        parse_uri("gen://word?m=5")


def test_generator_linear_answers_solve_the_equation():
    import re
    from fractions import Fraction

    for i in range(100):
        p = generate_problem(i, seed=0, family="linear")
        a, sb, b, c, sd, d = re.search(r"\$(-?\d+)x ([+-]) (\d+) = (-?\d+)x ([+-]) (\d+)\$", p["problem"]).groups()
        b = int(b) * (1 if sb == "+" else -1)
        d = int(d) * (1 if sd == "+" else -1)
        x = Fraction(d - b, int(a) - int(c))
        ans = p["answer"]
        m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", ans)
        got = Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1) if m else Fraction(int(ans))
        assert got == x


def test_datasets_folder_is_data_only():
    bad = [p for p in (REPO / "datasets").rglob("*.py")] + list((REPO / "datasets").rglob("__init__.py"))
    assert not bad, f"datasets/ must never hold Python files (it would shadow HF datasets): {bad}"


def test_cli_ingest_pools_show_json(ws, tmp_path, capsys):
    from curate.cli import main

    src = tmp_path / "p.jsonl"
    src.write_text("\n".join(json.dumps({"question": f"What is {i}*2?", "answer": f"#### {2 * i}"}) for i in range(4)))
    assert main(["ingest", str(src), "--pool", "tiny", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["summary"]["admitted"] == 4 and payload["summary"]["reconciles"]
    assert main(["pools", "--json"]) == 0
    pools = json.loads(capsys.readouterr().out)["pools"]
    assert pools[0]["pool"] == "tiny" and pools[0]["problems"] == 4
    assert main(["show", "tiny", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tables"]["problems"].endswith("problems.parquet")
    assert main(["show", "missing"]) == 2
    assert main(["ingest", str(tmp_path / "none.jsonl"), "--pool", "x"]) == 2
    assert os.environ["CURATE_HOME"] == str(ws.root)
