"""Where the GPU time of a policy goes: per-kernel device time per run (torch.profiler / CUPTI)
of a kaiwu_infer session and of the same module in PyTorch (eager, fp32 or autocast fp16), side
by side, for each policy and batch. Device-resident feeds; CUDA graphs off in kaiwu_infer so that
every kernel is seen by name (a graph replays the same kernels).

    PYTHONPATH=python python bench/profile_cuda_kernels.py --policies impala_lstm --batch 1024 \
        --precision fp16 [--top 10] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
os.environ.setdefault("KAIWU_CUDA_GRAPHS", "0")


def kernel_times(fn, runs):
    """{kernel name: (device µs per run, launches per run)} over `runs` calls of fn."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        if t > 0:
            t0, c0 = out.get(e.key, (0.0, 0.0))
            out[e.key] = (t0 + t / runs, c0 + e.count / runs)
    return out


def short(name, n=90):
    name = name.replace("void ", "")
    return name if len(name) <= n else name[: n - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="mlp,atari_cnn,impala_lstm,gru_seq,multi_input")
    ap.add_argument("--batch", default="1,256,1024")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch

    import kaiwu_infer as ki
    import policies

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    half = args.precision != "fp32"
    lines = [f"# GPU kernel time per run: kaiwu_infer {args.precision} vs PyTorch eager "
             f"({'autocast fp16' if half else 'fp32'})", "",
             f"- device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}",
             f"- command: {' '.join(k + '=' + os.environ[k] for k in sorted(os.environ) if k.startswith('KAIWU_'))} "
             f"PYTHONPATH=python python bench/profile_cuda_kernels.py {' '.join(sys.argv[1:])}", ""]
    for name in args.policies.split(","):
        data = policies.export_bytes(name)
        module, _, ins, _, _ = policies.build(name)
        tmod = module.to("cuda").eval()
        sess = ki.Session(data, device="cuda", precision=args.precision)
        for b in [int(x) for x in args.batch.split(",")]:
            feeds = policies.make_inputs(name, b, seed=b)
            dfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            targs = [dfeeds[n] for n in ins]

            def torch_run():
                mode = torch.autocast("cuda", dtype=torch.float16) if half else contextlib.nullcontext()
                with torch.no_grad(), mode:
                    return tmod(*targs)

            rows = {"kaiwu": kernel_times(lambda: sess.run(dfeeds, output_device="cuda"), args.runs)}
            try:
                rows["torch"] = kernel_times(torch_run, args.runs)
            except Exception as e:  # a module autocast cannot run (e.g. a -1e9 mask fill in fp16)
                print(f"{name} b{b}: torch {'autocast ' if half else ''}failed: {e!r}"[:300])
                rows["torch"] = {}
                if half:  # then PyTorch in float32
                    half = False
                    try:
                        del rows["torch"]
                        rows["torch (fp32: autocast failed)"] = kernel_times(torch_run, args.runs)
                    finally:
                        half = True
            tot = {k: sum(t for t, _ in v.values()) for k, v in rows.items()}
            launches = {k: sum(c for _, c in v.values()) for k, v in rows.items()}
            tk = [k for k in rows if k.startswith("torch")][0]
            ratio = tot[tk] / tot["kaiwu"] if tot["kaiwu"] and tot[tk] else float("nan")
            lines += [f"## {name} batch {b}: kaiwu {tot['kaiwu']:.1f} us in {launches['kaiwu']:.0f} kernels, "
                      f"{tk} {tot[tk]:.1f} us in {launches[tk]:.0f} kernels ({tk} / kaiwu {ratio:.2f})", ""]
            for eng, ks in rows.items():
                lines += [f"{eng}:", "", "| us/run | launches/run | kernel |", "|---:|---:|---|"]
                for k, (t, c) in sorted(ks.items(), key=lambda kv: -kv[1][0])[: args.top]:
                    lines.append(f"| {t:.1f} | {c:.0f} | `{short(k)}` |")
                lines.append("")
            print("\n".join(lines[-(2 * args.top + 12):]), flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
