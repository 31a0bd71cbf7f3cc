"""Where the fixed host cost of one small GPU run goes: kaiwu_infer device-resident runs
(torch CUDA feeds, DeviceArray results) against their parts, and PyTorch's CUDA-graph step
against its parts, on the same device in one run. us per call, best of 5 blocks.

    PYTHONPATH=python python bench/run_overhead.py [--policy mlp,gru_seq] [--batch 1,1024]
        [--precision fp16] [--calls 2000]

Rows: the whole kaiwu run in each I/O form (device feeds and results; the caller's stream
given; preallocated device outputs; pinned io_buffers), the DLPack handshake of the feeds
alone (what run() asks of each torch tensor), the bare device round trip (event record and
wait, an empty launch and wait), and PyTorch's graph step (input copy, replay, synchronize)
with each part alone. io_stats per kaiwu run says how many graph launches, stream waits and
copies a run made.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))


def per_call_us(fn, calls):
    for _ in range(max(calls // 10, 20)):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        best = min(best, (time.perf_counter() - t0) / (calls // 5))
    return 1e6 * best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="mlp,gru_seq")
    ap.add_argument("--batch", default="1,1024")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    import torch

    import kaiwu_infer as ki
    import policies

    dev = torch.device("cuda")
    x = torch.zeros(16, device=dev)
    ev = torch.cuda.Event()
    torch.cuda.synchronize()
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    rows = [("torch.cuda.synchronize() idle", per_call_us(torch.cuda.synchronize, args.calls)),
            ("event record + synchronize", per_call_us(lambda: (ev.record(), ev.synchronize()), args.calls)),
            ("x.add_(1) + synchronize", per_call_us(lambda: (x.add_(1), torch.cuda.synchronize()), args.calls))]
    for label, us in rows:
        print(f"  {label:58s} {us:8.1f} us", flush=True)

    for name in args.policy.split(","):
        data = policies.export_bytes(name)
        module, _, ins, outs, _ = policies.build(name)
        tmod = module.to(dev).eval()
        sess = ki.Session(data, device="cuda", precision=args.precision)
        for b in [int(v) for v in args.batch.split(",")]:
            feeds = policies.make_inputs(name, b, seed=b)
            dfeeds = {k: torch.from_numpy(v).to(dev) for k, v in feeds.items()}
            res = sess.run(dfeeds, output_device="cuda")
            douts = {k: torch.from_dlpack(v).clone() for k, v in res.items()}
            bufs = sess.io_buffers(b)
            for k, v in feeds.items():
                bufs.inputs[k][...] = v
            stream = torch.cuda.current_stream()
            torch.cuda.synchronize()

            def handshake():
                for t in dfeeds.values():
                    t.__dlpack_device__()
                    t.__dlpack__(stream=1)

            sess.io_stats(reset=True)
            n_counted = 200
            for _ in range(n_counted):
                sess.run(dfeeds, output_device="cuda")
            st = sess.io_stats()
            per = {k: v / n_counted for k, v in st.items() if isinstance(v, (int, float)) and v}
            print(f"== {name} {args.precision} batch {b}: io_stats per run {per}", flush=True)
            rows = [
                ("kaiwu run(device feeds, output_device='cuda')",
                 per_call_us(lambda: sess.run(dfeeds, output_device="cuda"), args.calls)),
                ("kaiwu run(..., output_device='cuda', stream=current)",
                 per_call_us(lambda: sess.run(dfeeds, output_device="cuda", stream=stream), args.calls)),
                ("kaiwu run(device feeds, out=device tensors)",
                 per_call_us(lambda: sess.run(dfeeds, out=douts), args.calls)),
                ("kaiwu run(pinned io_buffers, out=pinned)",
                 per_call_us(lambda: sess.run(bufs.inputs, out=bufs.outputs), args.calls)),
                ("DLPack handshake of the feeds alone", per_call_us(handshake, args.calls)),
            ]
            try:
                from bench_cuda import torch_graph, torch_graph_device_step
                half = args.precision != "fp32"
                step = torch_graph_device_step(tmod, ins, feeds, half)
                tag = "autocast fp16" if half else "fp32"
                rows.append((f"torch graph step ({tag}): copy_, replay, sync", per_call_us(step, args.calls)))
                _, _, g = torch_graph(tmod, ins, feeds, half)
                rows.append((f"torch graph replay + sync alone ({tag})",
                             per_call_us(lambda: (g.replay(), stream.synchronize()), args.calls)))
            except Exception as e:  # a module autocast cannot capture
                print(f"  torch graph step: {e!r}"[:200])
            for label, us in rows:
                print(f"  {label:58s} {us:8.1f} us", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
