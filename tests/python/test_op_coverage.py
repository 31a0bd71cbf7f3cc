"""The op coverage report against the engine's own tables.

docs/ops.md is generated on a build with the CUDA backend (`python -m kaiwu_infer ops --markdown`).
Here (any build) its CPU column must match this build's CPU table, and every op the CPU runs
must have a CUDA entry or a written reason; on a CUDA build its CUDA column must match too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kaiwu_infer.ops as coverage

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"
REGENERATE = "regenerate it on a CUDA build: python -m kaiwu_infer ops --markdown > docs/ops.md"


@pytest.fixture(scope="module")
def rows():
    return coverage.op_table()


@pytest.fixture(scope="module")
def doc():
    return coverage.parse_markdown(DOC.read_text())


def test_every_op_has_shape_inference_and_a_cpu_kernel_or_plan_time_eval(rows):
    assert len(rows) > 100
    no_infer = [r["op"] for r in rows if not r["infer"]]
    assert not no_infer, f"ops without op-layer shape inference: {no_infer}"
    for r in rows:
        if r["plan_time"]:
            assert not any(r["kernels"].values()), f"{r['op']} is evaluated at plan time yet has kernels"
        else:
            assert r["kernels"]["cpu"] or r["gaps"].get("cpu"), f"{r['op']} has no CPU kernel or reason"


def test_doc_lists_every_op_with_this_builds_cpu_table(rows, doc):
    assert set(doc) == {r["op"] for r in rows}, f"docs/ops.md lists other ops: {REGENERATE}"
    stale = [r["op"] for r in rows if doc[r["op"]]["cpu"] != coverage.cell(r, "cpu")]
    assert not stale, f"docs/ops.md's CPU column differs for {stale}: {REGENERATE}"


def test_every_cpu_op_has_a_cuda_kernel_or_a_reason(rows, doc):
    missing = [r["op"] for r in rows if doc[r["op"]].get("cuda", "-") == "-"]
    assert not missing, f"ops with neither a CUDA kernel nor a written reason: {missing}"


def test_cuda_column_matches_this_build(rows, doc):
    if "cuda" not in coverage.backends(rows):
        pytest.skip("this build has no CUDA backend")
    stale = [r["op"] for r in rows if doc[r["op"]]["cuda"] != coverage.cell(r, "cuda")]
    assert not stale, f"docs/ops.md's CUDA column differs for {stale}: {REGENERATE}"


def test_cell_formats_precisions_and_gaps():
    row = {"op": "X", "domain": "", "plan_time": False, "gaps": {"cuda": "needs a sort"},
           "kernels": {"cpu": [("float32", "fp32"), ("int64", "fp32"), ("float16", "fp16")],
                       "cuda": []}}
    assert coverage.cell(row, "cpu") == "fp32: float32, int64; fp16: float16"
    assert coverage.cell(row, "cuda") == "no kernel: needs a sort"
    text = coverage.markdown([row])
    assert coverage.parse_markdown(text) == {
        "X": {"cpu": "fp32: float32, int64; fp16: float16", "cuda": "no kernel: needs a sort"}}
