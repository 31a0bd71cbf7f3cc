"""pytest fixtures for the kaiwu_infer Python suites.

Fixtures:
  engine -- the kaiwu_infer module (tests skip with the import error if it is not built;
            set KAIWU_REQUIRE_ENGINE=1 to make that an error instead).
  rng    -- np.random.Generator seeded from the test's node id (fresh, reproducible data
            per test; never all zeros -- see helpers.rand).
  check  -- check(model, feeds, **tol) runs onnxruntime and kaiwu_infer and compares.
"""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
# python/ of the repository when a development build put the module there (CMake builds
# do), so PYTHONPATH is optional; otherwise the installed package is tested.
_PY = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
if glob.glob(os.path.join(_PY, "kaiwu_infer", "_core*.so")) and _PY not in sys.path:
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


_FAILED: list[tuple[str, str]] = []


def _short_error(msg: str) -> str:
    """First line of an error; for unsupported-op errors, the sorted op names instead of node lists."""
    import re

    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    if not lines:
        return "?"
    first = lines[0]
    if "does not support" in first or "UnsupportedOp" in first:
        ops = sorted({m.group(1) for ln in lines[1:] for m in [re.match(r"\s*(?:E\s+)?(\w+) \(node", ln)] if m})
        if ops:
            first = re.sub(r"\d+ node\(s\)", "node(s)", first) + " " + ",".join(ops)
    return first


def pytest_runtest_logreport(report):
    if report.failed:
        text = getattr(report, "longreprtext", "") or ""
        elines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
        elines = [ln for ln in elines if ln]
        if elines and elines[0].rstrip(":").endswith("Error") or (elines and elines[0] in ("AssertionError:",)):
            pass
        msg = " | ".join(elines[:4]) if elines else (text.strip().splitlines() or ["?"])[-1]
        if "does not support" in msg:
            msg = "\n".join(elines)
        _FAILED.append((report.nodeid, msg))


def _failure_groups():
    """Failures grouped by (file::test function) then by first line of the error."""
    import collections
    import re

    groups = collections.OrderedDict()
    for nodeid, msg in _FAILED:
        fn = nodeid.split("[", 1)[0]
        first = _short_error(msg)
        # node-name details vary per case; group on the op list / message head
        key = re.sub(r"node '[^']*'", "node '...'", first)[:240]
        groups.setdefault(fn, collections.OrderedDict()).setdefault(key, []).append(nodeid)
    lines = []
    for fn, msgs in groups.items():
        n = sum(len(v) for v in msgs.values())
        lines.append(f"{fn}: {n} failed")
        for key, ids in msgs.items():
            ex = ", ".join(i.split("[", 1)[1].rstrip("]") if "[" in i else i.split("::")[-1] for i in ids[:6])
            more = f" (+{len(ids) - 6} more)" if len(ids) > 6 else ""
            lines.append(f"    {len(ids):4d} x {key}")
            lines.append(f"           e.g. {ex}{more}")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Failures grouped by test; per-op pass counts of the ONNX node suite (if it ran)."""
    if _FAILED:
        lines = _failure_groups()
        terminalreporter.section("kaiwu failures grouped by test and error")
        for line in lines:
            terminalreporter.write_line(line)
        try:
            base = config._tmp_path_factory.getbasetemp()  # noqa: SLF001
            with open(os.path.join(str(base), "failures_grouped.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
        except Exception:  # noqa: BLE001
            pass
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
