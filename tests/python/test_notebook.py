"""Executes notebooks/selfplay.ipynb end to end with nbclient (skipped if nbclient is missing)."""

from __future__ import annotations

import os
import sys

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("torch")
pytest.importorskip("gymnasium")
kaiwu_infer = pytest.importorskip("kaiwu_infer")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NOTEBOOK = os.path.join(ROOT, "notebooks", "selfplay.ipynb")


def test_selfplay_notebook_runs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel imports the same kaiwu_infer as this process (installed or a checkout)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(kaiwu_infer.__file__)))
    env_path = os.pathsep.join([pkg_parent] + [p for p in sys.path if p])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path  # the kernel is a subprocess
    try:
        client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                         resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
        client.execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
        if o.get("output_type") == "stream")
    assert "max |kaiwu_infer - onnxruntime|" in outputs
    assert "RefitError:" in outputs
    assert "us per refit" in outputs
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, "the learning-curve figure was not produced"
