"""Command line: `python -m kaiwu_infer inspect model.onnx` prints what the engine did."""

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
    args = parser.parse_args(argv)

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


if __name__ == "__main__":
    sys.exit(main())
