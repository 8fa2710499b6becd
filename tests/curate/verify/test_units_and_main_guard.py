"""What a new user hit in the checker (issue 11, items 7, 14).

- 7: the checker reads values with units and "no solution".
- 14: the checker's worker pool warns when the main script has no ``__main__`` guard.
"""

from __future__ import annotations

import subprocess
import sys

from curate import verify
from tests.conftest import REPO


# --------------------------------------------------------------------------------------------------- item 7
def test_checker_reads_units_and_no_solution_where_it_is_safe():
    assert verify.check(r"so \boxed{12}", "12 km/h").correct
    assert verify.check(r"\boxed{12 \text{ km/h}}", "12").correct
    assert not verify.check(r"\boxed{15}", "12 km/h").correct
    assert not verify.check(r"\boxed{12 \text{ m/s}}", "12 km/h").correct  # another unit is not the same answer
    assert verify.check(r"\boxed{\emptyset}", "no real solution").correct
    assert verify.check(r"\boxed{\text{No solutions}}", r"\text{no real solution}").correct
    assert verify.check(r"\boxed{3}", "no real solution").verdict == "wrong"
    assert verify.check(r"\boxed{\text{none}}", "5").verdict == "wrong"
    assert verify.check(r"\boxed{2, 3, 4}", r"2, 3, \text{ and } 4").correct  # a serial-comma enumeration


# --------------------------------------------------------------------------------------------------- item 14
def test_unguarded_main_script_is_detected(tmp_path):
    from curate.verify.pool import unguarded_main

    guarded = tmp_path / "guarded.py"
    guarded.write_text("import curate\n\nif __name__ == '__main__':\n    print(1)\n", encoding="utf-8")
    bare = tmp_path / "bare.py"
    bare.write_text("from curate import verify\nverify.check_batch(['x'], ['1'])\n", encoding="utf-8")
    assert not unguarded_main(guarded) and unguarded_main(bare) and not unguarded_main(None)


def test_an_unguarded_training_script_gets_a_warning_that_names_it(tmp_path):
    script = tmp_path / "train_reward.py"
    script.write_text(
        "from curate import verify\n"
        "print(verify.check_batch([r'\\boxed{\\frac{x}{2}}'], ['x/2'], workers=1)[0].verdict)\n",
        encoding="utf-8",
    )
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert f'{script} has no `if __name__ == "__main__":` guard' in run.stderr
    assert run.returncode != 0 and "re-running the main script" in run.stderr  # the worker says why it died
