#!/usr/bin/env python3
"""Long fuzz campaigns over the test policies (tests/python/fuzz_models.py describes the cases).

    python scripts/fuzz.py --cases 100000 --seed 23 --workers 2 --out fuzz.json --save findings/

Prints progress and a summary, writes the summary as JSON (--out), saves each finding and each
InternalError case as an .onnx model plus a .feeds.pkl (--save), and exits 1 when there was a
crash, a hang, or an exception outside KaiwuError. Uses the kaiwu_infer that Python imports
(PYTHONPATH=python for a development build).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
if os.path.isdir(os.path.join(ROOT, "python", "kaiwu_infer")):
    sys.path.insert(0, os.path.join(ROOT, "python"))

import fuzz_models  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0, help="campaign seed (cases are deterministic)")
    ap.add_argument("--workers", type=int, default=2, help="child processes running cases")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case is a hang")
    ap.add_argument("--budget", default="512M", help="KAIWU_MEMORY_BUDGET of the workers")
    ap.add_argument("--address-space", default="6G",
                    help="RLIMIT_AS of the workers: an allocation made before its size was "
                         "checked fails there as MemoryError (0: no limit)")
    ap.add_argument("--out", help="write the summary as JSON here")
    ap.add_argument("--save", help="save findings (.onnx + .feeds.pkl) in this directory")
    args = ap.parse_args()

    import kaiwu_infer

    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    a = args.address_space.upper()
    address_space = int(float(a[:-1]) * units[a[-1]]) if a[-1:] in units else int(a)
    t0 = time.time()

    def progress(r):
        print(f"  {r.cases} cases, {time.time() - t0:.0f} s, findings {len(r.findings)}, "
              f"InternalError {len(r.internal)}", flush=True)

    result = fuzz_models.run_campaign(args.cases, seed=args.seed, workers=args.workers,
                                      timeout=args.timeout, budget=args.budget,
                                      address_space=address_space, save_dir=args.save,
                                      progress=progress if args.cases >= 1000 else None)
    summary = result.summary()
    summary.update({"seed": args.seed, "workers": args.workers, "budget": args.budget,
                    "address_space": args.address_space, "kaiwu_infer": kaiwu_infer.__file__,
                    "python": platform.python_version(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if result.findings else 0


if __name__ == "__main__":
    sys.exit(main())
