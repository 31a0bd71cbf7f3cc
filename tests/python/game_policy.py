"""A TF-style game policy built with onnx.helper, shaped like tf2onnx output.

The graph reproduces what tf2onnx emits for a TensorFlow game policy:

* dilated convolutions as SpaceToBatchND -> Conv -> BatchToSpaceND, i.e.
  Pad -> Reshape -> Transpose -> Reshape -> [Transpose] Conv [Transpose]
  -> Reshape -> Transpose -> Reshape -> Slice (``dilated_conv``),
* Split followed by Concat of all pieces (tf.split / tf.concat round trips),
* ones_like as Shape -> ConstantOfShape, and a fill by Expand of a constant,
* an embedding lookup (Gather) of unit ids,
* dense layers as MatMul + Add, and elementwise tails (Mul/Add/Tanh chains).

``with_game_ops=True`` adds OneHot, ScatterND, GatherND and a bilinear Resize.
Their kernels are being added on another branch; keep the flag off until the
engine registers them (``game_ops_available``).

Builders here are shared by tests/python/test_passes.py and bench/bench_optimizer.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, seed: int = 0):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type: str, inputs, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, values, dtype=np.int64, hint: str = "c") -> str:
        arr = np.asarray(values, dtype=dtype)
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def weight(self, shape, scale: float | None = None, hint: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const(self.rng.standard_normal(shape) * s, np.float32, hint)

    def model(self, inputs, outputs, opset: int = OPSET, name: str = "game_policy") -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


def tf_paddings(size: int, k: int, rate: int, padding: str):
    """TF's required_space_to_batch_paddings for one spatial dim: (pad, crop)."""
    if padding == "SAME":
        total = rate * (k - 1)
        start, end = total // 2, total - total // 2
    else:
        start = end = 0
    extra = (-(size + start + end)) % rate
    return (start, end + extra), (0, extra)


def dilated_conv(b: GraphBuilder, x: str, *, c_in: int, c_out: int, hw, k: int, rate,
                 padding: str = "SAME", layout: str = "NHWC", group: int = 1,
                 neg_ends: bool = True, w: str | None = None, bias: str | None = None):
    """tf.nn.atrous_conv2d as tf2onnx exports it (SpaceToBatchND/BatchToSpaceND).

    ``rate`` is an int or (rh, rw); ``hw`` the input's (H, W). Returns
    (output name, (H_out, W_out), weight name, bias name).
    """
    rh, rw = (rate, rate) if isinstance(rate, int) else rate
    (pt, pb), (ct, cb) = tf_paddings(hw[0], k, rh, padding)
    (pl, pr), (cl, cr) = tf_paddings(hw[1], k, rw, padding)
    hb, wb = (hw[0] + pt + pb) // rh, (hw[1] + pl + pr) // rw
    ho, wo = hb - k + 1, wb - k + 1
    w = w or b.weight((c_out, c_in // group, k, k))
    bias = bias or b.weight((c_out,), scale=0.1, hint="b")
    nhwc = layout == "NHWC"
    if nhwc:
        pads = [0, pt, pl, 0, 0, pb, pr, 0]
        s1, perm1, s2 = [-1, hb, rh, wb, rw, c_in], [2, 4, 0, 1, 3, 5], [-1, hb, wb, c_in]
        s3, perm2, s4 = [rh, rw, -1, ho, wo, c_out], [2, 3, 0, 4, 1, 5], [-1, ho * rh, wo * rw, c_out]
        axes = [1, 2]
    else:
        pads = [0, 0, pt, pl, 0, 0, pb, pr]
        s1, perm1, s2 = [-1, c_in, hb, rh, wb, rw], [3, 5, 0, 1, 2, 4], [-1, c_in, hb, wb]
        s3, perm2, s4 = [rh, rw, -1, c_out, ho, wo], [2, 3, 4, 0, 5, 1], [-1, c_out, ho * rh, wo * rw]
        axes = [2, 3]
    y = b.op("Pad", [x, b.const(pads)])
    y = b.op("Reshape", [y, b.const(s1)])
    y = b.op("Transpose", [y], perm=perm1)
    y = b.op("Reshape", [y, b.const(s2)])
    if nhwc:
        y = b.op("Transpose", [y], perm=[0, 3, 1, 2])
    y = b.op("Conv", [y, w, bias], kernel_shape=[k, k], group=group)
    if nhwc:
        y = b.op("Transpose", [y], perm=[0, 2, 3, 1])
    y = b.op("Reshape", [y, b.const(s3)])
    y = b.op("Transpose", [y], perm=perm2)
    y = b.op("Reshape", [y, b.const(s4)])
    full = (ho * rh, wo * rw)
    if ct or cb or cl or cr:
        if neg_ends:  # BatchToSpaceND crops as negative ends (0 crop: to the end)
            ends = [-cb if cb else np.iinfo(np.int64).max, -cr if cr else np.iinfo(np.int64).max]
        else:
            ends = [full[0] - cb, full[1] - cr]
        y = b.op("Slice", [y, b.const([ct, cl]), b.const(ends), b.const(axes)])
    return y, (full[0] - ct - cb, full[1] - cl - cr), w, bias


def game_ops_available() -> bool:
    """True when the engine loads OneHot, ScatterND, GatherND and Resize (the loader
    rejects a model naming an op without a kernel)."""
    try:
        import kaiwu_infer
    except Exception:  # noqa: BLE001
        return False
    b = GraphBuilder()
    f = np.float32
    oh = b.op("OneHot", ["i", b.const(4), b.const([0.0, 1.0], f)])
    sc = b.op("ScatterND", [oh, b.const([[0]]), b.const(np.zeros((1, 4)), f)])
    gn = b.op("GatherND", [sc, b.const([[1]])])
    rs = b.op("Resize", [b.op("Reshape", [gn, b.const([1, 1, 1, 4])]), "", b.const([1, 1, 2, 2], f)])
    x = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    try:
        kaiwu_infer.Session(b.model([x], [helper.make_tensor_value_info(rs, TensorProto.FLOAT, None)]))
        return True
    except Exception:  # noqa: BLE001
        return False


BOARD = (15, 15)   # H, W of the board planes
PLANES = 8         # input channels (NHWC)
UNITS = 16         # unit slots
VOCAB = 32         # unit type ids
EMBED = 8
ACTIONS = 15 * 15


def build_game_policy(*, with_game_ops: bool = False, seed: int = 0) -> onnx.ModelProto:
    """The policy: board [N,15,15,8] float, unit_ids [N,16] int64 -> logits, value, aux."""
    b = GraphBuilder(seed)
    h, w = BOARD
    board = "board"
    # Trunk: three dilated 3x3 convolutions (rates 1 stand-in via rate 2, 3, 2) with Relu.
    y, hw, _, _ = dilated_conv(b, board, c_in=PLANES, c_out=16, hw=(h, w), k=3, rate=2)
    y = b.op("Relu", [y])
    y, hw, _, _ = dilated_conv(b, y, c_in=16, c_out=16, hw=hw, k=3, rate=3, neg_ends=False)
    y = b.op("Relu", [y])
    # tf.split into channel groups and tf.concat back (a no-op round trip).
    parts = b.op("Split", [y, b.const([8, 8])], n_out=2, axis=3)
    y = b.op("Concat", parts, axis=3)
    y, hw, _, _ = dilated_conv(b, y, c_in=16, c_out=16, hw=hw, k=3, rate=2, padding="SAME")
    # TF-style batch norm as Mul + Add with per-channel constants, then Relu.
    y = b.op("Mul", [y, b.weight((16,), scale=0.5, hint="bn_scale")])
    y = b.op("Add", [y, b.weight((16,), scale=0.1, hint="bn_shift")])
    trunk = b.op("Relu", [y])
    # Policy head: 1x1 conv to one plane, flatten, plus a ones_like bias (Shape->ConstantOfShape).
    pol = b.op("Transpose", [trunk], perm=[0, 3, 1, 2])
    pol = b.op("Conv", [pol, b.weight((1, 16, 1, 1)), b.weight((1,), scale=0.1, hint="b")])
    pol = b.op("Reshape", [pol, b.const([-1, ACTIONS])])
    ones = b.op("ConstantOfShape", [b.op("Shape", [pol])],
                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
    pol = b.op("Add", [pol, b.op("Mul", [ones, b.weight((1,), scale=0.1, hint="temp")])])
    # Unit embeddings: Gather, mean over units.
    emb = b.op("Gather", [b.weight((VOCAB, EMBED), scale=1.0, hint="embed"), "unit_ids"], axis=0)
    emb = b.op("ReduceMean", [emb], axes=[1], keepdims=0)
    # Value head: global mean of the trunk, concat with embeddings, MatMul+Add, Relu, MatMul+Add, Tanh.
    g = b.op("ReduceMean", [trunk], axes=[1, 2], keepdims=0)
    v = b.op("Concat", [g, emb], axis=1)
    v = b.op("Add", [b.op("MatMul", [v, b.weight((16 + EMBED, 32))]), b.weight((32,), scale=0.1, hint="b")])
    v = b.op("Relu", [v])
    v = b.op("Add", [b.op("MatMul", [v, b.weight((32, 1))]), b.weight((1,), scale=0.1, hint="b")])
    v = b.op("Tanh", [b.op("Mul", [v, b.const([0.5], np.float32)])])
    # A full_like(value, 2.0) via Expand of a Constant node (structural).
    two = b.op("Constant", [], value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]))
    fill = b.op("Expand", [two, b.op("Shape", [v])])
    value = b.op("Mul", [v, fill])
    outputs = [helper.make_tensor_value_info(pol, TensorProto.FLOAT, None),
               helper.make_tensor_value_info(value, TensorProto.FLOAT, None)]
    if with_game_ops:
        # One-hot of unit ids, summed; GatherND of trunk cells; ScatterND onto logits; bilinear Resize.
        oh = b.op("OneHot", ["unit_ids", b.const(VOCAB), b.const([0.0, 1.0], np.float32)], axis=-1)
        oh = b.op("ReduceSum", [oh, b.const([1])], keepdims=0)
        idx = b.const(np.stack([np.zeros(4), np.arange(4), np.arange(4)], 1).astype(np.int64)[None].repeat(1, 0))
        cells = b.op("GatherND", [trunk, idx], batch_dims=0)
        upd = b.op("ScatterND", [b.op("Reshape", [pol, b.const([-1])]), b.const([[0], [1]]),
                                 b.const([0.0, 0.0], np.float32)])
        small = b.op("Transpose", [trunk], perm=[0, 3, 1, 2])
        big = b.op("Resize", [small, "", b.const([1.0, 1.0, 2.0, 2.0], np.float32)], mode="linear")
        for o in (oh, cells, upd, big):
            outputs.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    inputs = [helper.make_tensor_value_info("board", TensorProto.FLOAT, ["N", h, w, PLANES]),
              helper.make_tensor_value_info("unit_ids", TensorProto.INT64, ["N", UNITS])]
    return b.model(inputs, outputs)


def game_inputs(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"board": rng.standard_normal((batch, BOARD[0], BOARD[1], PLANES)).astype(np.float32),
            "unit_ids": rng.integers(0, VOCAB, (batch, UNITS)).astype(np.int64)}
