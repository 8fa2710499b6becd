"""What a new user hit in curriculum plans (issue 11, item 8): FastCuRL steps scale with the data unless fixed;
a stage that repeats its data many times is warned about."""

from __future__ import annotations

import polars as pl
import pytest

from curate import schema as S


# --------------------------------------------------------------------------------------------------- item 8
def _lengths(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {S.PROBLEM_ID: [f"{i:016x}" for i in range(n)], "prompt_length": [100 + (i * 37) % 400 for i in range(n)]}
    )


def test_fastcurl_steps_scale_with_the_data_unless_the_recipe_fixes_them():
    from curate.curriculum import rules
    from curate.curriculum.stage import CurriculumConfig, fastcurl_plan

    df = _lengths(1500)
    scaled, facts = fastcurl_plan(df, CurriculumConfig())
    for (entry, frame), spec in zip(scaled, rules.fastcurl_stages("preview"), strict=True):
        assert entry["paper_steps"] == spec.steps
        assert entry["epochs"] == pytest.approx(rules.paper_epochs(spec), abs=spec.prompt_batch / frame.height)
        assert entry["stop_rule"]["max_steps"] == entry["steps"] < spec.steps
    assert facts["warnings"] == [] and facts["steps"] == "scaled"

    paper, paper_facts = fastcurl_plan(df, CurriculumConfig(fastcurl_steps="paper"))
    assert [e["steps"] for e, _ in paper] == [160, 590, 230, 580]
    stage1 = paper[0][0]
    assert stage1["epochs"] > 20  # 160 steps of 128 prompts over ~800 short prompts
    assert any(w.startswith("stage1 goes over its") for w in paper_facts["warnings"])

    fixed, _ = fastcurl_plan(df, CurriculumConfig(fastcurl_steps=(5, 6, 7, 8)))
    assert [e["steps"] for e, _ in fixed] == [5, 6, 7, 8]
    from curate.config import ConfigError

    with pytest.raises(ConfigError, match="4 step counts"):
        CurriculumConfig(fastcurl_steps=(5, 6))


def test_bands_plan_warns_when_a_small_group_is_repeated_many_times():
    from curate.curriculum.stage import CurriculumConfig, bands_plan, with_bands

    df = pl.DataFrame({S.PROBLEM_ID: [f"{i:016x}" for i in range(30)], S.PASS_RATE: [0.1] * 10 + [0.6] * 20})
    cfg = CurriculumConfig(plan="bands")
    _, facts = bands_plan(with_bands(df, cfg), cfg)
    assert any("goes over its 10 prompts" in w for w in facts["warnings"])
