"""Where a GPU refit's time goes: per policy and source (host numpy by ONNX names, a
state_dict of torch CUDA tensors), with today's paths and with KAIWU_REFIT_LEGACY=all, the
engine's phase timers (KAIWU_REFIT_TRACE=1, runtime/refit_trace.h: means per refit, the
first two refits left out) beside the mean time of the whole call as Python sees it; the
difference is spent outside WeightBuilder::Build (Python, reading the arrays or tensors,
the publish, the report). Writes refit_cuda_phases.md / .json in --out-dir.

    PYTHONPATH=python python bench/refit_phases.py --out-dir bench/results/h100 [--refits 300]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_refit as br  # noqa: E402  (puts python/ and tests/python/ on the path)
import kaiwu_infer.torch as kt  # noqa: E402

PHASES = ("resolve", "assemble", "stage", "weight_launch", "derived", "wait", "fault")
COUNTS = ("launches", "jobs", "kernel_steps", "copy_steps", "early_steps")


def traced(model, refit, weights, refits, legacy):
    """Mean ms of `refit(sess, weights)` over `refits` calls after two, and the trace line."""
    os.environ["KAIWU_REFIT_TRACE"] = "1"
    os.environ["KAIWU_REFIT_LEGACY"] = legacy
    try:
        sess = kt.load(model, device="cuda")
        a, b = weights
        refit(sess, a)
        refit(sess, b)
        t0 = time.perf_counter()
        for i in range(refits):
            refit(sess, a if i % 2 == 0 else b)
        mean_ms = 1e3 * (time.perf_counter() - t0) / refits
        sys.stderr.flush()
        with tempfile.TemporaryFile() as f:
            saved = os.dup(2)
            os.dup2(f.fileno(), 2)
            try:
                del sess
                gc.collect()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            f.seek(0)
            err = f.read().decode()
    finally:
        os.environ.pop("KAIWU_REFIT_TRACE", None)
        os.environ.pop("KAIWU_REFIT_LEGACY", None)
    line = next(ln for ln in err.splitlines() if ln.startswith("refit trace:"))
    us = dict((k, float(v)) for k, v in re.findall(r"(\w+) (-?[\d.]+)", line.split(":", 1)[1]))
    return mean_ms, us


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--refits", type=int, default=300)
    p.add_argument("--policies", default=None)
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "h100"))
    a = p.parse_args(argv)
    builders, source = br.policy_builders()
    names = a.policies.split(",") if a.policies else list(builders)
    rows, results = [], []
    for n in names:
        module, ins, outs, dyn, args, model, sd_a, sd_b, onnx_a, onnx_b = br.refit_case(builders[n])
        cuda = ({k: v.cuda() for k, v in sd_a.items()}, {k: v.cuda() for k, v in sd_b.items()})
        for src, refit, weights in (
                ("numpy", lambda s, w: s.session.refit(w, strict=False) if hasattr(s, "session")
                 else s.refit(w, strict=False), (onnx_a, onnx_b)),
                ("torch CUDA sd", lambda s, w: s.refit(w), cuda)):
            for legacy in ("0", "all"):
                mean_ms, us = traced(model, refit, weights, a.refits, legacy)
                r = {"policy": n, "source": src, "legacy": legacy, "call_ms": mean_ms, "trace_us": us}
                results.append(r)
                outside = 1e3 * mean_ms - us["total"]
                rows.append(f"| {n} | {src} | {'earlier' if legacy == 'all' else 'new'} | "
                            f"{1e3 * mean_ms:.1f} | {outside:.1f} | "
                            + " | ".join(f"{us[k]:.1f}" for k in PHASES) + " | "
                            + " | ".join(f"{us[k]:.1f}" for k in COUNTS) + " |")
                print(rows[-1], flush=True)
    head = ("| policy | source | paths | call us | outside Build us | " + " | ".join(PHASES) + " | "
            + " | ".join(COUNTS) + " |")
    md = "\n".join([head, "|" + "---|" * (5 + len(PHASES) + len(COUNTS))] + rows)
    meta = {"command": "PYTHONPATH=python python bench/refit_phases.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "versions": br.versions(),
        "device": br.torch.cuda.get_device_name(0), "host": br.machine_info().get("Model name", "?"),
        "refits": a.refits, "policies_from": source}
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "refit_cuda_phases.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    with open(os.path.join(a.out_dir, "refit_cuda_phases.md"), "w") as f:
        f.write("# Where a GPU refit's time goes\n\n")
        f.write(f"Command: `{meta['command']}`  \nDevice: {meta['device']}; host {meta['host']}  \n")
        f.write("Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + "\n\n")
        f.write(f"Means per refit over {a.refits} back-to-back refits alternating two weight sets "
                "(after two that fill the pool), one session per row. 'call': the whole `refit` "
                "call as Python sees it; 'outside Build': call minus the engine's phases (Python, "
                "reading the arrays or tensors, publish, report). Phases (us) from KAIWU_REFIT_TRACE; "
                "counts per refit. 'earlier': KAIWU_REFIT_LEGACY=all in the same binary.\n\n")
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
