#!/usr/bin/env python
"""Plots bench/results/<machine>/core.json: ort/kaiwu speedup per policy vs batch, one line per thread count.

    python bench/plot_core.py [bench/results/dev-2core/core.json] [-o bench/results/dev-2core/core.png]
"""

from __future__ import annotations

import argparse
import json
import os

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(result: dict, path: str) -> str:
    rows = [r for r in result["results"] if r.get("status") == "ok"]
    policies = list(dict.fromkeys(r["policy"] for r in result["results"]))
    threads = sorted({r["threads"] for r in result["results"]})
    n = max(len(policies), 1)
    ncol = min(n, 3)
    nrow = (n + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.6 * nrow), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, p in zip(axes.flat, policies):
        for ti, t in enumerate(threads):
            pts = sorted((r["batch"], r["ratio"], r["ratio_out"]) for r in rows
                         if r["policy"] == p and r["threads"] == t)
            if not pts:
                continue
            b = [x[0] for x in pts]
            c = colors[ti % len(colors)]
            ax.plot(b, [x[1] for x in pts], "o-", color=c, label=f"{t} thread{'s' if t > 1 else ''}")
            ax.plot(b, [x[2] for x in pts], "x:", color=c, alpha=0.6,
                    label=f"{t} thr, out=")
        bad = [r for r in result["results"] if r["policy"] == p and r.get("status") != "ok"]
        for r in bad:
            ax.annotate(r["status"], (r["batch"], 1.0), color="red", fontsize=7, rotation=45)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        batches = sorted({r["batch"] for r in result["results"] if r["policy"] == p})
        ax.set_xticks(batches, [str(b) for b in batches])
        vals = [v for r in rows if r["policy"] == p for v in (r["ratio"], r["ratio_out"])] + [1.0]
        lo, hi = min(vals) / 1.25, max(vals) * 1.25
        ax.set_ylim(lo, hi)
        nice = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100]
        if hi / lo > 3:
            nice = [t for t in nice if t not in (0.8, 0.9, 1.1, 1.25)]
        ticks = [t for t in nice if lo <= t <= hi]
        while len(ticks) > 8:
            ticks = [t for i, t in enumerate(ticks) if i % 2 == 0 or t == 1]
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_yticks(ticks, [f"{t:.2g}" for t in ticks])
        ax.set_title(p)
        ax.set_xlabel("batch")
        ax.set_ylabel("speedup = ort µs / kaiwu µs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(policies):]:
        ax.axis("off")
    m = result.get("machine", {})
    fig.suptitle(f"kaiwu_infer vs onnxruntime {result.get('versions', {}).get('onnxruntime', '')} "
                 f"({m.get('model_name', '')}, {m.get('logical_cpus', '?')} CPUs, {result.get('date', '')[:10]})"
                 "\n> 1: kaiwu_infer faster; solid: run(), dotted: run(out=)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="?", default=os.path.join(here, "results", "dev-2core", "core.json"))
    ap.add_argument("-o", "--output", default="")
    a = ap.parse_args()
    with open(a.json) as f:
        result = json.load(f)
    out = a.output or os.path.splitext(a.json)[0] + ".png"
    print(plot(result, out))


if __name__ == "__main__":
    main()
