"""kaiwu_infer imported after torch (which loads its libraries with RTLD_GLOBAL) runs
sessions: the module keeps its C++ runtime private (-static-libstdc++, --exclude-libs),
so another libstdc++ build in the process cannot interpose its streams and locales. A GPU
host's CUDA torch build crashed the first plan's shape formatting before that."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = r"""
import sys
sys.path[:0] = sys.argv[1:3]
import torch  # first, as in most training scripts
import numpy as np
import kaiwu_infer as ki
import policies
data = policies.export_bytes("mlp")
devices = ["cpu"] + (["cuda"] if ki.cuda_available() else [])
for d in devices:
    out = ki.Session(data, device=d).run(policies.make_inputs("mlp", 3, seed=1))
    assert all(np.isfinite(v).all() for v in out.values())
    try:
        ki.Session(data, device=d).run({"obs": np.zeros((3, 5), np.float32)})
    except ki.InputError as e:
        assert "obs" in str(e)
print("ok")
"""


def test_session_runs_when_torch_was_imported_first():
    pytest.importorskip("torch")
    import kaiwu_infer
    # The child imports kaiwu_infer from where this process found it: the installed
    # package on a clean clone (whose python/ has no built module), python/ in a dev tree.
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kaiwu_infer.__file__)))
    r = subprocess.run([sys.executable, "-c", SCRIPT, pkg_root, HERE],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok")
