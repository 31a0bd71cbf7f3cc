"""The direct channels-last tensor-core conv of half sessions (backends/cuda/conv_direct.cu)
and the fusions it takes (passes/fuse_conv_add.cc, passes/fuse_relu_into_nhwc_conv.cc on
device sessions): IMPALA-style residual blocks, Atari-style strided stems, odd channel
counts, asymmetric pads, 1x1 and 5x5 windows, odd image sizes and batches. Every case
against onnxruntime (float32 CPU) and against the same session with the direct kernel off
(KAIWU_CONV_DIRECT=0, read when a run's plan is made: cuDNN or im2col then run the fused
nodes) and with the fusions off (KAIWU_CONV_FUSE=0, read when a session is made). The
direct sessions run with KAIWU_CONV_DIRECT_MIN_TILES=1 so that small batches take the
kernel too; the unfused ones with the default bound.

Tolerances (normwise relative error against float32): fp16 5e-3, bf16 3e-2; the two
half sessions against each other the same.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kaiwu_infer as ki
from helpers import env_vars as env
from helpers import run_ort

pytestmark = pytest.mark.skipif(not ki.cuda_available(),
                                reason="kaiwu_infer built without CUDA, or no CUDA device")

TOL = {"fp16": 5e-3, "bf16": 3e-2}


class Builder:
    """An NCHW float32 conv net as torch.onnx.export writes one."""

    def __init__(self, c, seed):
        self.rng = np.random.default_rng(seed)
        self.c = c
        self.nodes, self.inits = [], []
        self.cur = "x"
        self.k = 0

    def name(self, p):
        self.k += 1
        return f"{p}{self.k}"

    def conv(self, m, k, stride=1, pads=(0, 0, 0, 0), relu=False, src=None, bias=True):
        src = src or self.cur
        kh, kw = (k, k) if isinstance(k, int) else k
        w = (self.rng.standard_normal((m, self.c, kh, kw)) * np.sqrt(2.0 / (self.c * kh * kw))).astype(np.float32)
        wn = self.name("W")
        self.inits.append(numpy_helper.from_array(w, wn))
        ins = [src, wn]
        if bias:
            bn = self.name("B")
            self.inits.append(numpy_helper.from_array((0.2 * self.rng.standard_normal(m)).astype(np.float32), bn))
            ins.append(bn)
        out = self.name("conv")
        self.nodes.append(helper.make_node("Conv", ins, [out], kernel_shape=[kh, kw], strides=[stride, stride],
                                           pads=list(pads)))
        self.c = m
        if relu:
            out = self.relu(out)
        self.cur = out
        return out

    def relu(self, src):
        out = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [src], [out]))
        return out

    def pool(self):
        out = self.name("pool")
        self.nodes.append(helper.make_node("MaxPool", [self.cur], [out], kernel_shape=[3, 3], strides=[2, 2],
                                           pads=[1, 1, 1, 1]))
        self.cur = out

    def res(self):
        """x + conv(relu(conv(relu(x)))) (IMPALA's block)."""
        x = self.cur
        self.cur = self.relu(x)
        self.conv(self.c, 3, pads=(1, 1, 1, 1), relu=True)
        y = self.conv(self.c, 3, pads=(1, 1, 1, 1))
        out = self.name("add")
        self.nodes.append(helper.make_node("Add", [x, y], [out]))
        self.cur = out

    def model(self, c_in, h, w):
        self.nodes.append(helper.make_node("Relu", [self.cur], ["y"]))
        graph = helper.make_graph(
            self.nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c_in, h, w])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None, None, None])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=min(onnx.IR_VERSION, 8))
        onnx.checker.check_model(model)
        return model


def impala(seed=0):
    b = Builder(3, seed)
    b.conv(16, 3, pads=(1, 1, 1, 1))
    b.pool()
    b.res()
    b.res()
    b.conv(32, 3, pads=(1, 1, 1, 1))
    b.pool()
    b.res()
    b.pool()   # the same kernel on 5 x 5 images: a smaller tile, less shared memory
    b.res()
    return b.model(3, 40, 36), (3, 40, 36)


def atari(seed=1):
    b = Builder(4, seed)
    b.conv(32, 8, stride=4, relu=True)
    b.conv(64, 4, stride=2, relu=True)
    b.conv(64, 3, relu=True)
    return b.model(4, 52, 60), (4, 52, 60)


def odd(seed=2):
    b = Builder(24, seed)
    b.conv(32, 3, pads=(1, 2, 0, 1), relu=True)   # asymmetric pads
    b.conv(8, 1)                                   # pointwise, M = 8
    b.conv(24, 5, stride=2, pads=(2, 2, 2, 2), relu=True)
    b.conv(16, (1, 3), pads=(0, 1, 0, 1), bias=False)
    b.conv(40, 3, pads=(1, 1, 1, 1))               # M = 40: cuDNN / im2col
    return b.model(24, 11, 13), (24, 11, 13)


def planes(seed=3):
    b = Builder(8, seed)
    b.conv(16, 3, pads=(1, 1, 1, 1), relu=True)
    b.conv(32, 3, stride=2, pads=(1, 1, 1, 1), relu=True)
    b.res()
    return b.model(8, 17, 16), (8, 17, 16)


NETS = {"impala": impala, "atari": atari, "odd": odd, "planes": planes}


class Direct:
    """A session whose plans take the direct kernel at any tile count."""

    def __init__(self, data, precision):
        self.sess = ki.Session(data, device="cuda", precision=precision)

    def run(self, feeds, **kw):
        with env(KAIWU_CONV_DIRECT_MIN_TILES="1"):
            return self.sess.run(feeds, **kw)

    def io_stats(self, **kw):
        return self.sess.io_stats(**kw)

    def describe(self):
        return self.sess.describe()


def rel_err(got, ref):
    return float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))


def nodes_per_run(sess, feeds):
    sess.io_stats(reset=True)
    sess.run(feeds)
    sess.run(feeds)
    st = sess.io_stats()
    return st["graph_nodes"] // max(st["graph_launches"], 1)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("net", sorted(NETS))
def test_direct_conv_matches_onnxruntime_and_cudnn(net, precision):
    model, shape = NETS[net]()
    data = model.SerializeToString()
    direct = Direct(data, precision)
    with env(KAIWU_CONV_DIRECT="0"):
        other = ki.Session(data, device="cuda", precision=precision)
    with env(KAIWU_CONV_FUSE="0"):
        unfused = ki.Session(data, device="cuda", precision=precision)
    fired = direct.describe()
    if net in ("impala", "planes"):
        assert "fuse_nhwc_conv_add" in fired and "fuse_relu_into_nhwc_conv" in fired, fired
    assert "fuse_nhwc_conv_add" not in unfused.describe()
    for batch in (1, 5, 37):
        rng = np.random.default_rng(batch)
        feeds = {"x": rng.standard_normal((batch,) + shape).astype(np.float32)}
        ref = run_ort(model, feeds)["y"].astype(np.float64)
        got = direct.run(feeds)["y"]
        assert got.shape == ref.shape
        assert rel_err(got, ref) < TOL[precision], (batch, rel_err(got, ref))
        with env(KAIWU_CONV_DIRECT="0"):
            alt = other.run(feeds)["y"]
        assert rel_err(alt, ref) < TOL[precision], (batch, rel_err(alt, ref))
        assert rel_err(got, alt.astype(np.float64)) < TOL[precision]
        plain = unfused.run(feeds)["y"]
        assert rel_err(plain, ref) < TOL[precision], (batch, rel_err(plain, ref))


def test_direct_conv_runs_fewer_nodes_than_the_fallback():
    """A residual block is two launches with the direct kernel (ReLU and Add inside the
    convs); the cuDNN / im2col fallback adds the ReLU copy and the epilogue passes."""
    model, shape = impala()
    data = model.SerializeToString()
    feeds = {"x": np.random.default_rng(4).standard_normal((8,) + shape).astype(np.float32)}
    direct = Direct(data, "fp16")
    with env(KAIWU_CONV_DIRECT="0"):
        other = ki.Session(data, device="cuda", precision="fp16")
        n_other = nodes_per_run(other, feeds)
    n_direct = nodes_per_run(direct, feeds)
    assert n_direct < n_other, (n_direct, n_other)


def test_direct_conv_device_resident_feeds_and_nan():
    """Device-resident feeds give the host path's result; a NaN input pixel stays
    confined to its receptive field (no stale shared memory between tiles)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    model, shape = impala()
    sess = Direct(model.SerializeToString(), "fp16")
    x = np.random.default_rng(5).standard_normal((6,) + shape).astype(np.float32)
    host = sess.run({"x": x})["y"]
    dev = sess.run({"x": torch.from_numpy(x).cuda()}, output_device="cuda")["y"]
    np.testing.assert_array_equal(torch.from_dlpack(dev).cpu().numpy(), host)
    x[3, 0, 5, 5] = np.nan
    y = sess.run({"x": x})["y"]
    assert np.isfinite(y[[0, 1, 2, 4, 5]]).all()
    np.testing.assert_array_equal(y[[0, 1, 2, 4, 5]], host[[0, 1, 2, 4, 5]])
