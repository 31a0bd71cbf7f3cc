"""A seeded mutation fuzzer over the test policies: malformed models and feeds, each loaded and
run in a child process, where anything but success or a KaiwuError is a finding.

Cases (``make_case(seed, index)``, deterministic): one seed policy (the five torch policies of
``policies.py`` and the onnx.helper game policy), then one mutation of its bytes or its
``ModelProto`` (bytes flipped, cut, inserted; dims, dtypes, attributes, op types, node inputs,
initializer sizes, graph inputs, opsets, names that are not UTF-8, external data), and feeds
that may themselves be wrong (shape, rank, dtype, missing or unknown names, NaN, strings).

Running (``run_campaign``): a few worker processes (``python fuzz_models.py --worker``) take
cases over a pipe; each runs ``Session(model)`` and ``run(feeds)`` with a small memory budget
(``KAIWU_MEMORY_BUDGET``) under an address-space limit, so a size that is allocated before it
is checked shows up as MemoryError. The parent times each case: a worker that dies is a
*crash*, one that does not answer in time a *hang*; either is replaced by a fresh worker.
Outcome classes: ``ok``, ``KaiwuError:<class>`` and the findings ``crash``, ``hang`` and
``other:<exception type>``.

``tests/python/test_fuzz.py`` runs a few hundred cases in CI; ``scripts/fuzz.py`` runs long
campaigns and writes a JSON summary (findings saved as .onnx/.npz reproducers).
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# --------------------------------------------------------------------------------------------
# seed models
# --------------------------------------------------------------------------------------------
SEED_NAMES = ("mlp", "gru_seq", "multi_input", "atari_cnn", "impala_lstm", "game_policy")
# Small models are cheap to load: weight them up so a campaign covers more mutations.
SEED_WEIGHTS = (4, 3, 2, 1, 1, 3)


def _cache_dir() -> str:
    d = os.environ.get("KAIWU_TEST_CACHE", os.path.join(os.path.expanduser("~"), ".cache",
                                                        "kaiwu_infer_tests"))
    os.makedirs(d, exist_ok=True)
    return d


def seed_models() -> dict[str, tuple[bytes, dict[str, np.ndarray]]]:
    """name -> (model bytes, feeds of batch 2). Torch exports are cached per torch version."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    out = {}
    torch_names = [n for n in SEED_NAMES if n != "game_policy"]
    import torch

    path = os.path.join(_cache_dir(), f"fuzz_seeds_torch{torch.__version__}.pkl")
    cached = {}
    if os.path.exists(path):
        try:
            with open(path, "rb") as f:
                cached = pickle.load(f)
        except Exception:  # noqa: BLE001 - corrupt cache: export again
            cached = {}
    if set(torch_names) - set(cached):
        import policies

        cached = {n: policies.export_bytes(n) for n in torch_names}
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(cached, f)
        os.replace(tmp, path)
    import policies
    from game_policy import build_game_policy, game_inputs

    for n in torch_names:
        out[n] = (cached[n], policies.make_inputs(n, 2, seed=1))
    out["game_policy"] = (build_game_policy().SerializeToString(), game_inputs(2, seed=1))
    return out


# --------------------------------------------------------------------------------------------
# mutations
# --------------------------------------------------------------------------------------------
BIG_DIMS = (0, -1, -7, 1 << 31, 1 << 40, 1 << 62, (1 << 63) - 1, 3, 100003)
OPS = ("Add", "Relu", "Conv", "Gemm", "MatMul", "Reshape", "Gather", "Concat", "Softmax", "LSTM",
       "Tile", "Expand", "Pad", "Resize", "Slice", "ConstantOfShape", "Range", "TopK", "Einsum",
       "NoSuchOp", "", "Loop", "If", "Cast", "Transpose", "Split", "Squeeze")
BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\xaf")


@dataclass
class Case:
    """One fuzz case: the model (bytes), how it is loaded, and the feed sets to run."""

    index: int
    seed_model: str
    mutation: str
    model: bytes
    feeds: list = field(default_factory=list)
    external: dict | None = None  # file name -> bytes, written next to the model (load by path)


def _ints(rng, n, lo=-3, hi=1 << 40):
    picks = [int(rng.integers(lo, 8)), int(rng.choice(BIG_DIMS)), int(rng.integers(0, 1 << 20))]
    return [picks[int(rng.integers(0, len(picks)))] for _ in range(n)]


def _mutate_proto(model, rng):
    """Applies one ModelProto-level mutation in place; returns its name."""
    from onnx import AttributeProto, TensorProto

    g = model.graph
    kind = rng.choice(["dims", "dtype", "attribute", "op_type", "node_input", "init_size",
                       "graph_io", "remove_node", "duplicate_node", "opset", "external",
                       "attr_tensor", "reverse_nodes"])
    if kind == "dims" and len(g.initializer):
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        if len(t.dims) and rng.random() < 0.8:
            t.dims[int(rng.integers(len(t.dims)))] = int(rng.choice(BIG_DIMS))
        else:
            t.dims.append(int(rng.choice(BIG_DIMS)))
        return f"dims:{t.name}"
    if kind == "dtype":
        if rng.random() < 0.5 and len(g.initializer):
            t = g.initializer[int(rng.integers(len(g.initializer)))]
            t.data_type = int(rng.integers(0, 26))
            return f"dtype:init:{t.name}"
        vi = g.input[int(rng.integers(len(g.input)))]
        vi.type.tensor_type.elem_type = int(rng.integers(0, 26))
        return f"dtype:input:{vi.name}"
    if kind in ("attribute", "attr_tensor"):
        nodes = [n for n in g.node if len(n.attribute)]
        if not nodes:
            return "noop"
        n = nodes[int(rng.integers(len(nodes)))]
        a = n.attribute[int(rng.integers(len(n.attribute)))]
        r = rng.random()
        if a.type == AttributeProto.TENSOR and len(a.t.dims) + 1 > 0 and kind == "attr_tensor":
            a.t.dims.extend([int(rng.choice(BIG_DIMS))])
        elif r < 0.1:
            n.attribute.remove(a)
        elif r < 0.2:
            a.type = int(rng.integers(0, 15))
        elif a.type == AttributeProto.INT:
            a.i = _ints(rng, 1)[0]
        elif a.type == AttributeProto.INTS:
            vals = list(a.ints)
            if vals and rng.random() < 0.5:
                vals[int(rng.integers(len(vals)))] = _ints(rng, 1)[0]
            elif vals and rng.random() < 0.5:
                vals.pop()
            else:
                vals += _ints(rng, int(rng.integers(1, 4)))
            del a.ints[:]
            a.ints.extend(vals)
        elif a.type == AttributeProto.FLOAT:
            a.f = float(rng.choice([np.nan, np.inf, -np.inf, -1.0, 0.0, 1e30]))
        elif a.type == AttributeProto.STRING:
            a.s = bytes(rng.integers(0, 256, int(rng.integers(0, 8)), dtype=np.uint8))
        else:
            a.name = rng.choice(["axis", "perm", "bogus", ""])
        return f"attribute:{n.op_type}.{a.name}"
    if kind == "op_type":
        n = g.node[int(rng.integers(len(g.node)))]
        old = n.op_type
        n.op_type = str(rng.choice(OPS))
        return f"op_type:{old}->{n.op_type}"
    if kind == "node_input":
        n = g.node[int(rng.integers(len(g.node)))]
        names = [v for m in g.node for v in m.output] + [i.name for i in g.input] + ["", "nope"]
        r = rng.random()
        if len(n.input) and r < 0.6:
            n.input[int(rng.integers(len(n.input)))] = str(rng.choice(names))
        elif len(n.input) and r < 0.8:
            del n.input[-1]
        elif r < 0.9 and len(n.output):
            n.output[int(rng.integers(len(n.output)))] = str(rng.choice(names))
        else:
            n.input.append(str(rng.choice(names)))
        return f"node_input:{n.op_type}"
    if kind == "init_size" and len(g.initializer):
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        r = rng.random()
        if t.raw_data and r < 0.4:
            t.raw_data = t.raw_data[: int(rng.integers(0, len(t.raw_data)))]
        elif t.raw_data and r < 0.6:
            t.raw_data = t.raw_data + bytes(int(rng.integers(1, 64)))
        elif r < 0.8:
            t.ClearField("raw_data")
            t.float_data.extend([1.0] * int(rng.integers(0, 8)))
        else:
            t.ClearField("raw_data")
        return f"init_size:{t.name}"
    if kind == "graph_io":
        vi = g.input[int(rng.integers(len(g.input)))] if rng.random() < 0.7 else \
            g.output[int(rng.integers(len(g.output)))]
        shape = vi.type.tensor_type.shape
        r = rng.random()
        if len(shape.dim) and r < 0.5:
            d = shape.dim[int(rng.integers(len(shape.dim)))]
            d.dim_value = int(rng.choice(BIG_DIMS))
        elif r < 0.7:
            shape.dim.add().dim_value = int(rng.choice(BIG_DIMS))
        elif r < 0.85:
            vi.type.tensor_type.ClearField("shape")
        else:
            vi.name = str(rng.choice(["", "renamed", g.node[0].output[0]]))
        return f"graph_io:{vi.name}"
    if kind == "remove_node":
        i = int(rng.integers(len(g.node)))
        op = g.node[i].op_type
        del g.node[i]
        return f"remove_node:{op}"
    if kind == "duplicate_node":
        n = g.node[int(rng.integers(len(g.node)))]
        g.node.add().CopyFrom(n)
        return f"duplicate_node:{n.op_type}"
    if kind == "reverse_nodes":
        nodes = list(g.node)
        del g.node[:]
        g.node.extend(reversed(nodes))
        return "reverse_nodes"
    if kind == "opset":
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                imp.version = int(rng.choice([1, 5, 7, 9, 10, 11, 12, 13, 16, 19, 25, 99, -1]))
        return "opset"
    if kind == "external" and len(g.initializer):
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        loc = str(rng.choice(["w.bin", "w.bin", "missing.bin", "../w.bin", "/etc/hostname", ""]))
        t.external_data.add(key="location", value=loc)
        if rng.random() < 0.5:
            t.external_data.add(key="offset", value=str(rng.choice(["0", "8", "abc", "-1",
                                                                       "99999999999999999999"])))
        if rng.random() < 0.5:
            t.external_data.add(key="length", value=str(rng.choice(["16", "0", "x", "1099511627776"])))
        return f"external:{loc}"
    return "noop"


def _mutate_bytes(data: bytes, rng) -> tuple[bytes, str]:
    b = bytearray(data)
    kind = rng.choice(["flip", "cut", "insert", "zero", "utf8"])
    if kind == "flip":
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
    elif kind == "cut":
        b = b[: int(rng.integers(len(b)))]
    elif kind == "insert":
        i = int(rng.integers(len(b)))
        b[i:i] = bytes(rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8))
    elif kind == "zero":
        i = int(rng.integers(len(b)))
        b[i:i + int(rng.integers(1, 64))] = bytes(min(64, len(b) - i))
    else:  # a name or string replaced by bytes that are not UTF-8 (same length)
        import onnx

        m = onnx.load_from_string(bytes(data))
        texts = [n.name for n in m.graph.node if n.name] + [v.name for v in m.graph.input] + \
                [t.name for t in m.graph.initializer] + [o for n in m.graph.node for o in n.output]
        texts = [t for t in texts if len(t) >= 4]
        if texts:
            t = str(rng.choice(texts)).encode()
            bad = BAD_UTF8[int(rng.integers(len(BAD_UTF8)))]
            new = (bad + t)[: len(t)]
            b = bytearray(bytes(b).replace(t, new, 1))
    return bytes(b), f"bytes:{kind}"


def _mutate_feeds(feeds: dict, rng) -> tuple[dict, str]:
    f = {k: np.array(v) for k, v in feeds.items()}
    name = str(rng.choice(list(f)))
    x = f[name]
    kind = rng.choice(["dtype", "rank", "dim", "missing", "unknown", "nan", "strings", "big_batch",
                       "noncontig", "scalar", "int_range"])
    if kind == "dtype":
        f[name] = x.astype(rng.choice([np.float64, np.int32, np.int64, np.uint8, np.bool_,
                                       np.float16, np.int8, np.complex64]))
    elif kind == "rank":
        f[name] = x[None] if rng.random() < 0.5 or x.ndim == 0 else x.reshape(-1)
    elif kind == "dim" and x.ndim:
        shape = list(x.shape)
        shape[int(rng.integers(len(shape)))] = int(rng.choice([0, 1, 3, 7]))
        f[name] = np.resize(x, shape)
    elif kind == "missing":
        del f[name]
    elif kind == "unknown":
        f[str(rng.choice(["bogus", "\udcff", ""]))] = x
    elif kind == "nan" and x.dtype.kind == "f":
        x = x.copy()
        x.flat[:: max(1, x.size // 7)] = rng.choice([np.nan, np.inf, -np.inf])
        f[name] = x
    elif kind == "strings":
        f[name] = np.full(x.shape, "a", dtype=object)
    elif kind == "big_batch" and x.ndim:
        f = {k: np.repeat(v, 300, axis=0) if v.ndim else v for k, v in f.items()}
    elif kind == "noncontig" and x.ndim >= 2:
        f[name] = np.asfortranarray(x)
    elif kind == "scalar":
        f[name] = np.asarray(x.reshape(-1)[0])
    elif kind == "int_range" and x.dtype.kind in "iu":
        f[name] = x + np.asarray(1 << 20, dtype=x.dtype) if x.dtype.itemsize >= 4 else -x
    return f, f"feeds:{kind}:{name}"


def make_case(seeds: dict, seed: int, index: int) -> Case:
    """The deterministic case ``index`` of campaign ``seed``."""
    import onnx

    rng = np.random.default_rng([seed, index])
    names = list(SEED_NAMES)
    p = np.array(SEED_WEIGHTS, float)
    seed_name = str(rng.choice(names, p=p / p.sum()))
    data, feeds = seeds[seed_name]
    r = rng.random()
    external = None
    if r < 0.25:
        data, mutation = _mutate_bytes(data, rng)
    elif r < 0.85:
        model = onnx.load_from_string(data)
        mutation = _mutate_proto(model, rng)
        while rng.random() < 0.3:  # sometimes stack a few
            mutation += "," + _mutate_proto(model, rng)
        if "external" in mutation:
            external = {"w.bin": bytes(int(rng.choice([0, 16, 4096])))}
        data = model.SerializeToString()
    else:
        mutation = "none"
    feed_sets = [feeds]
    if mutation == "none" or rng.random() < 0.3:
        bad, what = _mutate_feeds(feeds, rng)
        feed_sets.append(bad)
        mutation += "+" + what
    return Case(index, seed_name, mutation, data, feed_sets, external)


# --------------------------------------------------------------------------------------------
# the worker (child process)
# --------------------------------------------------------------------------------------------
def _worker_main() -> None:
    import resource

    limit = int(os.environ.get("KAIWU_FUZZ_ADDRESS_SPACE", "0"))
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import kaiwu_infer

    out = sys.stdout.buffer
    inp = sys.stdin.buffer
    workdir = tempfile.mkdtemp(prefix="kaiwu_fuzz_")
    out.write(b"ready\n")
    out.flush()
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        (n,) = struct.unpack("<I", head)
        case: Case = pickle.loads(inp.read(n))
        outcomes = []
        if case.mutation == "selftest:crash":  # the harness's own tests
            os.kill(os.getpid(), 11)
        if case.mutation == "selftest:hang":
            time.sleep(3600)
        try:
            src = case.model
            if case.external is not None:
                for fname, blob in case.external.items():
                    with open(os.path.join(workdir, fname), "wb") as f:
                        f.write(blob)
                src = os.path.join(workdir, "model.onnx")
                with open(src, "wb") as f:
                    f.write(case.model)
            sess = kaiwu_infer.Session(src, threads=1)
            outcomes.append("load:ok")
            for feeds in case.feeds:
                try:
                    sess.run(feeds)
                    outcomes.append("run:ok")
                except kaiwu_infer.KaiwuError as e:
                    outcomes.append(f"run:KaiwuError:{type(e).__name__}")
        except kaiwu_infer.KaiwuError as e:
            outcomes.append(f"load:KaiwuError:{type(e).__name__}")
        except BaseException as e:  # noqa: BLE001 - every other exception is a finding
            outcomes.append(f"other:{type(e).__name__}: {str(e)[:300]}")
        out.write((json.dumps({"index": case.index, "outcomes": outcomes}) + "\n").encode())
        out.flush()


# --------------------------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, env):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.buf = b""
        line = self._readline(120.0)
        if line != b"ready":
            raise RuntimeError(f"fuzz worker did not start (got {line!r})")

    def _readline(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return b""  # EOF: the worker died
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def send(self, case: Case) -> None:
        blob = pickle.dumps(case, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(struct.pack("<I", len(blob)) + blob)
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass
class Result:
    cases: int = 0
    seconds: float = 0.0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    findings: list = field(default_factory=list)  # (index, seed model, mutation, what)
    internal: list = field(default_factory=list)  # cases that raised InternalError

    def summary(self) -> dict:
        return {"cases": self.cases, "seconds": round(self.seconds, 1),
                "outcomes": dict(sorted(self.outcomes.items())), "findings": self.findings,
                "internal_errors": self.internal}


def _classify(outcomes: list[str]) -> list[str]:
    return [o for o in outcomes if o.startswith("other:")]


def run_campaign(cases: int, *, seed: int = 0, **kw) -> Result:
    """Runs ``cases`` fuzz cases of campaign ``seed``; keywords as for ``run_cases``."""
    seeds = seed_models()
    return run_cases((make_case(seeds, seed, i) for i in range(cases)), **kw)


def run_cases(cases, *, workers: int = 2, timeout: float = 30.0, budget: str = "512M",
              address_space: int = 6 << 30, save_dir: str | None = None,
              progress=None) -> Result:
    """Runs the ``Case`` objects of an iterable on ``workers`` child processes, each with
    $KAIWU_MEMORY_BUDGET=``budget`` and an address-space limit of ``address_space`` bytes."""
    env = dict(os.environ, KAIWU_MEMORY_BUDGET=budget, KAIWU_FUZZ_ADDRESS_SPACE=str(address_space),
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = Result()
    t0 = time.monotonic()
    pool = [_Worker(env) for _ in range(max(1, workers))]
    pending = iter(cases)
    exhausted = False
    busy: dict[int, tuple[Case, float]] = {}  # worker slot -> (case, start)
    try:
        while not exhausted or busy:
            for slot, w in enumerate(pool):
                if slot not in busy and not exhausted:
                    case = next(pending, None)
                    if case is None:
                        exhausted = True
                        continue
                    try:
                        w.send(case)
                    except BrokenPipeError:
                        pool[slot] = w = _Worker(env)
                        w.send(case)
                    busy[slot] = (case, time.monotonic())
            fds = {pool[s].proc.stdout.fileno(): s for s in busy}
            waits = [max(0.0, timeout - (time.monotonic() - st)) for _, st in busy.values()]
            ready, _, _ = select.select(list(fds), [], [], min(waits) if waits else 0.1)
            now = time.monotonic()
            for slot in list(busy):
                case, start = busy[slot]
                w = pool[slot]
                line = None
                if w.proc.stdout.fileno() in ready or b"\n" in w.buf:
                    line = w._readline(0.01)
                if line is None and now - start < timeout:
                    continue
                if line is None:
                    what = f"hang (no answer in {timeout:.0f} s)"
                    outcomes = ["hang"]
                elif line == b"":
                    w.proc.wait()
                    what = f"crash (exit {w.proc.returncode})"
                    outcomes = ["crash"]
                else:
                    outcomes = json.loads(line)["outcomes"]
                    bad = _classify(outcomes)
                    what = "; ".join(bad) if bad else None
                    if any(o.endswith(":InternalError") for o in outcomes):
                        # A KaiwuError, but one that says "a bug in kaiwu_infer": kept apart.
                        result.internal.append((case.index, case.seed_model, case.mutation))
                        if save_dir:
                            _save(case, save_dir)
                for o in outcomes:
                    result.outcomes[o.split(": ")[0]] += 1  # "other:MemoryError: ..." -> type
                if what:
                    result.findings.append((case.index, case.seed_model, case.mutation, what))
                    if save_dir:
                        _save(case, save_dir)
                if outcomes in (["hang"], ["crash"]):
                    w.kill()
                    pool[slot] = _Worker(env)
                del busy[slot]
                result.cases += 1
                if progress and result.cases % 100 == 0:
                    progress(result)
    finally:
        for w in pool:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
            w.kill()
    result.seconds = time.monotonic() - t0
    return result


def _save(case: Case, save_dir: str) -> None:
    os.makedirs(save_dir, exist_ok=True)
    stem = os.path.join(save_dir, f"case{case.index:06d}_{case.seed_model}")
    with open(stem + ".onnx", "wb") as f:
        f.write(case.model)
    with open(stem + ".feeds.pkl", "wb") as f:
        pickle.dump({"mutation": case.mutation, "feeds": case.feeds, "external": case.external}, f)


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker_main()
