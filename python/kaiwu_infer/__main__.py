"""Command line: `python -m kaiwu_infer inspect model.onnx` prints what the engine did;
`python -m kaiwu_infer ops` prints which op runs on which backend."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from . import KaiwuError, Session

    parser = argparse.ArgumentParser(prog="kaiwu_infer")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="show the graph before and after optimization")
    inspect.add_argument("model")
    inspect.add_argument("--no-optimize", action="store_true")
    prof = sub.add_parser("profile", help="per-node timings on random inputs")
    prof.add_argument("model")
    prof.add_argument("--batch", type=int, default=1, help="value for symbolic dimensions")
    prof.add_argument("--runs", type=int, default=20)
    prof.add_argument("--threads", type=int, default=None)
    prof.add_argument("--no-optimize", action="store_true")
    prof.add_argument("--top", type=int, default=25, help="rows to print, slowest first")
    ops = sub.add_parser("ops", help="op coverage: op x backend x dtype/precision")
    ops.add_argument("--markdown", action="store_true", help="the table docs/ops.md holds")
    args = parser.parse_args(argv)

    if args.command == "ops":
        from . import ops as coverage

        rows = coverage.op_table()
        if args.markdown:
            print(coverage.markdown(rows), end="")
            return 0
        names = coverage.backends(rows)
        width = max(len(r["op"]) for r in rows)
        print(f"{'op':<{width}}  " + "  |  ".join(names))
        for r in rows:
            print(f"{r['op']:<{width}}  " + "  |  ".join(coverage.cell(r, b) for b in names))
        if "cuda" not in names:
            print("(this build has no CUDA backend; docs/ops.md has the CUDA column)")
        return 0

    if args.command == "profile":
        try:
            sess = Session(args.model, threads=args.threads, optimize=not args.no_optimize)
            feeds = _random_feeds(sess, args.batch)
            rows = sess.profile(feeds, runs=args.runs)
        except KaiwuError as e:
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return 1
        total = sum(r["seconds"] for r in rows)
        print(f"{len(rows)} nodes per run, {total * 1e6:.1f} us in kernels "
              f"(mean of {args.runs} runs, batch {args.batch}, {sess.threads} threads)")
        print(f"{'op':<20} {'node':<36} {'output shape':<22} {'us':>10} {'share':>7}")
        for r in sorted(rows, key=lambda r: -r["seconds"])[: args.top]:
            print(f"{r['op']:<20} {r['node'][:36]:<36} {str(r['shape']):<22} "
                  f"{r['seconds'] * 1e6:>10.1f} {r['share'] * 100:>6.1f}%")
        return 0

    if args.command == "inspect":
        try:
            sess = Session(args.model, optimize=not args.no_optimize)
        except KaiwuError as e:
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(sess.describe(), end="")
        print("inputs:")
        for i in sess.inputs:
            print(f"  {i.name}: {i.dtype} {i.shape}")
        print("outputs:")
        for o in sess.outputs:
            print(f"  {o.name}: {o.dtype} {o.shape}")
        print(f"refittable weights: {len(sess.weights_info)}")
    return 0


def _random_feeds(sess, batch: int) -> dict:
    """Random inputs for every model input; symbolic dimensions take `batch`."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.inputs:
        shape = tuple(d if isinstance(d, int) else batch for d in (i.shape or ()))
        if np.issubdtype(i.dtype, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(i.dtype)
        elif i.dtype == np.bool_:
            feeds[i.name] = rng.random(shape) < 0.5
        else:
            feeds[i.name] = rng.integers(0, 2, shape).astype(i.dtype)
    return feeds


if __name__ == "__main__":
    sys.exit(main())
