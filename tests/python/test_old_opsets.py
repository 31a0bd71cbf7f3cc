"""Models below opset 13 are converted on load (onnx.version_converter) and match onnxruntime.

* a tf2onnx-style game policy at opset 11 (NHWC input with tf names, Transpose around Conv,
  Split / Squeeze / Unsqueeze with attribute axes, Softmax with 2-D opset-11 semantics, Clip
  with min/max inputs, ArgMax), against onnxruntime running the original opset-11 model;
* the ONNX node cases of And / Or / Not at the opsets they were generated at (7, 7, 1) and
  restamped to opsets 9 and 11, and Mod's cases at opsets 10, 11 and 12 (Mod-10 has the same
  meaning as Mod-13), each against onnxruntime on the old-opset model;
* describe() and ``opset_conversion`` say what happened; a conversion that fails is a
  ModelError naming the opset.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import run_ort

F32 = np.float32


def _tf2onnx_policy(rng) -> onnx.ModelProto:
    """What tf2onnx writes for a small Keras conv policy at opset 11."""
    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(F32), name)

    nodes = [
        helper.make_node("Transpose", ["input_1:0"], ["model/conv2d/Conv2D__6:0"], perm=[0, 3, 1, 2],
                         name="model/conv2d/Conv2D__6"),
        helper.make_node("Conv", ["model/conv2d/Conv2D__6:0", "model/conv2d/Conv2D/ReadVariableOp:0",
                                  "model/conv2d/BiasAdd/ReadVariableOp:0"], ["model/conv2d/BiasAdd:0"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1],
                         name="model/conv2d/BiasAdd"),
        helper.make_node("Relu", ["model/conv2d/BiasAdd:0"], ["model/conv2d/Relu:0"], name="model/conv2d/Relu"),
        helper.make_node("MaxPool", ["model/conv2d/Relu:0"], ["model/max_pooling2d/MaxPool:0"],
                         kernel_shape=[2, 2], strides=[2, 2], name="model/max_pooling2d/MaxPool"),
        helper.make_node("Transpose", ["model/max_pooling2d/MaxPool:0"], ["model/max_pooling2d/MaxPool__12:0"],
                         perm=[0, 2, 3, 1], name="model/max_pooling2d/MaxPool__12"),
        helper.make_node("Reshape", ["model/max_pooling2d/MaxPool__12:0", "model/flatten/Const:0"],
                         ["model/flatten/Reshape:0"], name="model/flatten/Reshape"),
        helper.make_node("MatMul", ["model/flatten/Reshape:0", "model/dense/MatMul/ReadVariableOp:0"],
                         ["model/dense/MatMul:0"], name="model/dense/MatMul"),
        helper.make_node("Add", ["model/dense/MatMul:0", "model/dense/BiasAdd/ReadVariableOp:0"],
                         ["model/dense/BiasAdd:0"], name="model/dense/BiasAdd"),
        helper.make_node("Relu", ["model/dense/BiasAdd:0"], ["model/dense/Relu:0"], name="model/dense/Relu"),
        helper.make_node("Split", ["model/dense/Relu:0"], ["model/tf.split/split:0", "model/tf.split/split:1"],
                         axis=1, split=[16, 16], name="model/tf.split/split"),
        helper.make_node("MatMul", ["model/tf.split/split:0", "model/pi/MatMul/ReadVariableOp:0"],
                         ["model/pi/MatMul:0"], name="model/pi/MatMul"),
        helper.make_node("Add", ["model/pi/MatMul:0", "model/pi/BiasAdd/ReadVariableOp:0"],
                         ["model/pi/BiasAdd:0"], name="model/pi/BiasAdd"),
        helper.make_node("Softmax", ["model/pi/BiasAdd:0"], ["policy"], axis=1, name="model/pi/Softmax"),
        helper.make_node("ArgMax", ["model/pi/BiasAdd:0"], ["action"], axis=1, keepdims=0,
                         name="model/tf.math.argmax/ArgMax"),
        helper.make_node("MatMul", ["model/tf.split/split:1", "model/v/MatMul/ReadVariableOp:0"],
                         ["model/v/MatMul:0"], name="model/v/MatMul"),
        helper.make_node("Squeeze", ["model/v/MatMul:0"], ["model/tf.squeeze/Squeeze:0"], axes=[1],
                         name="model/tf.squeeze/Squeeze"),
        helper.make_node("Tanh", ["model/tf.squeeze/Squeeze:0"], ["model/tf.math.tanh/Tanh:0"]),
        helper.make_node("Unsqueeze", ["model/tf.math.tanh/Tanh:0"], ["model/tf.expand_dims/ExpandDims:0"],
                         axes=[1], name="model/tf.expand_dims/ExpandDims"),
        helper.make_node("Clip", ["model/tf.expand_dims/ExpandDims:0", "clip_min:0", "clip_max:0"],
                         ["value"], name="model/tf.clip_by_value/clip"),
        helper.make_node("ReduceMean", ["model/dense/Relu:0"], ["features_mean"], axes=[1], keepdims=1,
                         name="model/tf.math.reduce_mean/Mean"),
    ]
    inits = [
        w("model/conv2d/Conv2D/ReadVariableOp:0", 8, 3, 3, 3),
        w("model/conv2d/BiasAdd/ReadVariableOp:0", 8, scale=0.1),
        numpy_helper.from_array(np.array([-1, 128], np.int64), "model/flatten/Const:0"),
        w("model/dense/MatMul/ReadVariableOp:0", 128, 32, scale=0.1),
        w("model/dense/BiasAdd/ReadVariableOp:0", 32, scale=0.1),
        w("model/pi/MatMul/ReadVariableOp:0", 16, 6),
        w("model/pi/BiasAdd/ReadVariableOp:0", 6, scale=0.1),
        w("model/v/MatMul/ReadVariableOp:0", 16, 1),
        numpy_helper.from_array(np.array(-0.5, F32), "clip_min:0"),
        numpy_helper.from_array(np.array(0.5, F32), "clip_max:0"),
    ]
    graph = helper.make_graph(
        nodes, "tf2onnx",
        [helper.make_tensor_value_info("input_1:0", TensorProto.FLOAT, ["unk__21", 8, 8, 3])],
        [helper.make_tensor_value_info("policy", TensorProto.FLOAT, ["unk__22", 6]),
         helper.make_tensor_value_info("action", TensorProto.INT64, ["unk__23"]),
         helper.make_tensor_value_info("value", TensorProto.FLOAT, ["unk__24", 1]),
         helper.make_tensor_value_info("features_mean", TensorProto.FLOAT, ["unk__25", 1])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6,
                              producer_name="tf2onnx", producer_version="1.9.3")
    onnx.checker.check_model(model, full_check=True)
    return model


def test_tf2onnx_opset11_policy_matches_onnxruntime(engine, rng):
    model = _tf2onnx_policy(rng)
    sess = engine.Session(model)
    assert sess.opset_conversion == engine.OpsetConversion(11, 13)
    text = sess.describe()
    assert text.splitlines()[0] == "graph 'tf2onnx' (opset 13)"
    assert text.splitlines()[1] == "converted on load from opset 11 to 13 with onnx.version_converter"
    assert [i.name for i in sess.inputs] == ["input_1:0"]
    for batch in (1, 5):
        feeds = {"input_1:0": rng.standard_normal((batch, 8, 8, 3)).astype(F32)}
        ref = run_ort(model, feeds)
        got = sess.run(feeds)
        assert set(got) == set(ref)
        for k in ref:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
            if ref[k].dtype.kind == "f":
                np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)
            else:
                np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_current_opsets_are_not_converted(engine, rng):
    model = _tf2onnx_policy(rng)
    from onnx import version_converter

    sess = engine.Session(version_converter.convert_version(model, 13))
    assert sess.opset_conversion is None
    assert "converted on load" not in sess.describe()


def test_failed_conversion_is_a_model_error(engine):
    """Opset 9's Upsample with a 'bilinear' mode the converter does not know."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], F32), "scales")
    node = helper.make_node("NoSuchOp", ["x", "scales"], ["y"])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [scales]),
                              opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(engine.ModelError) as info:
        engine.Session(model)
    assert type(info.value) is engine.ModelError
    msg = str(info.value)
    assert "the model uses opset 9; kaiwu_infer runs opset 13 and newer" in msg, msg
    assert "converting it with onnx.version_converter failed" in msg, msg


# ------------------------------------------------------------------ ONNX node cases, old opsets
OLD_OPSET_OPS = {"And": (7, 9, 11), "Or": (7, 9, 11), "Not": (1, 9, 11), "Mod": (10, 11, 12)}


def _node_cases():
    import test_onnx_node_suite as suite

    out = []
    for name, mbytes, ins, outs in suite._collect_raw():  # noqa: SLF001 - cached generator output
        model = onnx.load_from_string(mbytes)
        if len(model.graph.node) != 1 or model.graph.node[0].op_type not in OLD_OPSET_OPS:
            continue
        if suite._exclusion_reason(model, ins, outs):  # noqa: SLF001 - same dtype scope
            continue
        op = model.graph.node[0].op_type
        fmod = next((a.i for a in model.graph.node[0].attribute if a.name == "fmod"), 0)
        if op == "Mod" and np.asarray(ins[0]).dtype.kind == "f" and not fmod:
            continue  # invalid before opset 28: floats need fmod=1 (onnxruntime refuses them)
        for opset in OLD_OPSET_OPS[op]:
            out.append(pytest.param(mbytes, ins, opset, id=f"{name}-opset{opset}"))
    return out


_CASES = _node_cases()


def test_old_opset_node_cases_were_found():
    ids = {p.id.split("-opset")[0] for p in _CASES}
    for prefix in ("test_and", "test_or", "test_not", "test_mod"):
        assert any(i.startswith(prefix) for i in ids), prefix
    assert len(_CASES) >= 40, len(_CASES)


@pytest.mark.parametrize("mbytes,ins,opset", _CASES)
def test_old_opset_node_case_matches_onnxruntime(engine, mbytes, ins, opset):
    model = onnx.load_from_string(mbytes)
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = opset
    if model.ir_version > 7 and opset < 12:
        model.ir_version = 7  # onnxruntime wants an IR version of the opset's time
    feeds = {vi.name: np.asarray(x) for vi, x in zip(model.graph.input, ins)}
    ref = run_ort(model, feeds)
    sess = engine.Session(model)
    assert sess.opset_conversion == engine.OpsetConversion(opset, 13)
    got = sess.run(feeds)
    for k in ref:
        assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
        if ref[k].dtype.kind == "f":
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
        else:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
