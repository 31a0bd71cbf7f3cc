"""The CI fuzz run: a few hundred seeded mutations of the test policies, in child processes.

Fails on a crash, a hang, or an exception outside KaiwuError (and on InternalError, which
says "a bug in kaiwu_infer"). The cases are deterministic (campaign seed below); a finding is
reproduced with ``python scripts/fuzz.py --seed 2024 --cases 500 --save findings/``.
Long campaigns: ``scripts/fuzz.py`` (docs/robustness.md has the recorded result).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import fuzz_models

CI_SEED = 2024
CI_CASES = 500


def test_fuzz_ci_campaign(engine):
    result = fuzz_models.run_campaign(CI_CASES, seed=CI_SEED, workers=2, timeout=60.0)
    summary = result.summary()
    sys.stdout.write(f"fuzz: {summary['cases']} cases in {summary['seconds']} s: "
                     f"{summary['outcomes']}\n")
    assert result.cases == CI_CASES
    assert not result.findings, summary["findings"]
    assert not result.internal, summary["internal_errors"]
    # The campaign reaches both ends: models that load and run, and typed refusals.
    assert summary["outcomes"].get("run:ok", 0) > CI_CASES // 10
    assert summary["outcomes"].get("load:KaiwuError:ModelError", 0) > CI_CASES // 10


def test_fuzz_harness_reports_crashes_hangs_and_foreign_exceptions(engine):
    feeds = [{"x": np.ones((2, 4), np.float32)}]
    cases = [fuzz_models.Case(0, "selftest", "selftest:crash", b"", feeds),
             fuzz_models.Case(1, "selftest", "selftest:hang", b"", feeds),
             fuzz_models.Case(2, "selftest", "not a model", 12345, feeds),  # TypeError
             fuzz_models.Case(3, "selftest", "empty", b"", feeds)]          # ModelError
    result = fuzz_models.run_cases(cases, workers=2, timeout=5.0)
    found = {i: what for i, _, _, what in result.findings}
    assert set(found) == {0, 1, 2}, result.findings
    assert found[0].startswith("crash")
    assert found[1].startswith("hang")
    assert found[2].startswith("other:TypeError")
    assert result.outcomes["load:KaiwuError:ModelError"] == 1
