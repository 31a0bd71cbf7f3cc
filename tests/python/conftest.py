"""pytest fixtures for the kaiwu_infer Python suites.

Fixtures:
  engine -- the kaiwu_infer module (tests skip with the import error if it is not built;
            set KAIWU_REQUIRE_ENGINE=1 to make that an error instead).
  rng    -- np.random.Generator seeded from the test's node id (fresh, reproducible data
            per test; never all zeros -- see helpers.rand).
  check  -- check(model, feeds, **tol) runs onnxruntime and kaiwu_infer and compares.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
# python/ of the repository, so PYTHONPATH is optional when running from the checkout.
_PY = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
if os.path.isdir(_PY) and _PY not in sys.path:
    sys.path.insert(0, _PY)

import helpers  # noqa: E402

_ENGINE = helpers.load_engine()


def pytest_report_header(config):
    if helpers.BACKEND == "ort":
        return "kaiwu tests: BACKEND=ort SHIM (onnxruntime stands in for kaiwu_infer; NOT engine results)"
    if _ENGINE is None:
        return f"kaiwu tests: kaiwu_infer NOT importable ({helpers.engine_import_error()})"
    return f"kaiwu tests: kaiwu_infer from {getattr(_ENGINE, '__file__', '?')}"


@pytest.fixture(scope="session")
def engine():
    if _ENGINE is None:
        msg = f"kaiwu_infer not available: {helpers.engine_import_error()}"
        if os.environ.get("KAIWU_REQUIRE_ENGINE") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return _ENGINE


@pytest.fixture
def rng(request):
    return np.random.default_rng(helpers.seed_for(request.node.nodeid))


@pytest.fixture
def check(engine):
    def _check(model, feeds, **kw):
        return helpers.check_against_ort(engine, model, feeds, **kw)

    return _check


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Per-op pass counts of the ONNX node suite (if it ran), also written to a file."""
    mod = sys.modules.get("test_onnx_node_suite")
    if mod is None or not hasattr(mod, "summary_lines"):
        return
    lines = mod.summary_lines()
    terminalreporter.section("ONNX node suite summary")
    for line in lines:
        terminalreporter.write_line(line)
    try:
        base = config._tmp_path_factory.getbasetemp()  # noqa: SLF001
        path = os.path.join(str(base), "onnx_node_suite_summary.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        terminalreporter.write_line(f"(written to {path})")
    except Exception as e:  # noqa: BLE001
        terminalreporter.write_line(f"(could not write summary file: {e})")
