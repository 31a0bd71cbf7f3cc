#!/usr/bin/env python
"""A/B of two builds of kaiwu_infer on the core benchmark, for refactors that must not cost speed.

Each build is a folder holding a built `kaiwu_infer` package (a checkout whose `python/` has the
compiled `_core` module, or a site dir). The two builds run bench/bench_core.py in turn, A B A B
..., each round in fresh processes and with onnxruntime in the same process as the common yardstick,
so that machine drift hits both alike. Per (policy, batch, threads) the report gives each build's
median kaiwu `run()` latency over rounds, the ratio B/A (< 1: B faster), and each build's
ort/kaiwu ratio; at batch 1 the latency is the per-run overhead.

    python bench/bench_ab.py --a /path/to/old/python --b python --rounds 3 \
        --policies mlp,atari_cnn,impala_lstm,gru_seq,multi_input --batch 1,32 --threads 1,2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_core(pythonpath: str, args: argparse.Namespace, out_dir: str, name: str) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "bench_core.py"), "--policies", args.policies,
           "--batch", args.batch, "--threads", args.threads, "--repeats", str(args.repeats),
           "--block-s", str(args.block_s), "--out-dir", out_dir, "--name", name, "--no-plot",
           "--silent"]
    env = dict(os.environ, PYTHONPATH=pythonpath)
    subprocess.run(cmd, env=env, check=True)
    with open(os.path.join(out_dir, name + ".json")) as f:
        return json.load(f)


def git_rev(path: str) -> str:
    try:
        return subprocess.run(["git", "-C", path, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="PYTHONPATH of build A (the baseline)")
    ap.add_argument("--b", required=True, help="PYTHONPATH of build B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policies", default="mlp,atari_cnn,impala_lstm,gru_seq,multi_input")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--block-s", type=float, default=0.08)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "dev-2core", "ab_core.md"))
    args = ap.parse_args()

    lat: dict[str, dict[tuple, list[float]]] = {"a": {}, "b": {}}
    ort: dict[str, dict[tuple, list[float]]] = {"a": {}, "b": {}}
    machine = versions = None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for tag in ("a", "b"):
                d = run_core(getattr(args, tag), args, tmp, f"{tag}{r}")
                machine, versions = d.get("machine"), d.get("versions")
                for res in d["results"]:
                    if res.get("status") != "ok":
                        continue
                    key = (res["policy"], res["batch"], res["threads"])
                    lat[tag].setdefault(key, []).append(res["engines"]["kaiwu"]["median_us"])
                    ort[tag].setdefault(key, []).append(res["engines"]["ort"]["median_us"])
                print(f"round {r + 1}/{args.rounds} build {tag.upper()} done", flush=True)

    rows = []
    for key in sorted(set(lat["a"]) & set(lat["b"])):
        a, b = statistics.median(lat["a"][key]), statistics.median(lat["b"][key])
        oa, ob = statistics.median(ort["a"][key]), statistics.median(ort["b"][key])
        rows.append((key, a, b, b / a, oa / a, ob / b))
    ratios = [r[3] for r in rows]
    geo = statistics.geometric_mean(ratios) if ratios else float("nan")
    b1 = [r[3] for r in rows if r[0][1] == 1]
    # The same comparison against onnxruntime measured in the same process: drift that slows a
    # whole round (other load on the machine) cancels out.
    norm = [r[4] / r[5] for r in rows]
    geo_norm = statistics.geometric_mean(norm) if norm else float("nan")
    b1_norm = [r[4] / r[5] for r in rows if r[0][1] == 1]
    lines = [
        "# A/B of two builds on bench_core (kaiwu run() latency)",
        "",
        f"- command: `{' '.join(shlex.quote(x) for x in sys.argv)}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}",
        f"- A: `{args.a}` ({git_rev(args.a)}), B: `{args.b}` ({git_rev(args.b)})",
        f"- machine: {machine}",
        f"- versions: {versions}",
        f"- {args.rounds} rounds, A and B alternating, each a bench_core run with {args.repeats} "
        f"repeats of {args.block_s} s blocks; figures are medians over rounds",
        f"- geometric mean of B/A over {len(rows)} configs: **{geo:.3f}**"
        + (f"; at batch 1 (per-run overhead): {statistics.geometric_mean(b1):.3f}" if b1 else ""),
        f"- the same normalized by onnxruntime in each run ((ort/kaiwu A) / (ort/kaiwu B), < 1: B "
        f"faster): **{geo_norm:.3f}**"
        + (f"; at batch 1: {statistics.geometric_mean(b1_norm):.3f}" if b1_norm else ""),
        "",
        "| policy | batch | threads | A us | B us | B/A | ort/kaiwu A | ort/kaiwu B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (p, bt, th), a, b, ratio, ra, rb in rows:
        lines.append(f"| {p} | {bt} | {th} | {a:.1f} | {b:.1f} | {ratio:.3f} | {ra:.2f} | {rb:.2f} |")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
