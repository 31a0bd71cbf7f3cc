"""Malformed models and oversized shapes: every one ends in a typed KaiwuError naming the place.

Issue 18 ran 3,000 malformed models and feeds; 22 ended outside KaiwuError:
18 ``MemoryError: std::bad_alloc`` (declared dims allocated before they were checked against
the data or any budget), 3 ``UnicodeDecodeError`` (a name or string attribute that is not
UTF-8) and 1 plain ``ValueError`` (a non-numeric external-data offset). Each is reduced here
to a small model built with onnx.helper; the test checks the exact exception class and the
parts of the message that name the tensor, node, attribute or input dimension.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

F32 = np.float32
HUGE = 1 << 40  # elements: 4 TiB of float32


def _model(nodes, inputs, outputs, inits=(), opset=17, metadata=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    for k, v in (metadata or {}).items():
        m.metadata_props.add(key=k, value=v)
    return m


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def _tensor(name, dtype, dims, raw=None, field=None):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    if field is not None:
        getattr(t, field[0]).extend(field[1])
    return t


def _add_of(t):
    return _model([helper.make_node("Add", ["x", t.name], ["y"])], [X], [Y], [t])


def _patched(model, placeholder: str, raw: bytes) -> bytes:
    """The model's bytes with `placeholder` replaced by `raw` (same length): protobuf string
    fields refuse non-UTF-8 text when set from Python, so bad bytes are written this way."""
    assert len(raw) == len(placeholder)
    data = model.SerializeToString()
    assert data.count(placeholder.encode()) >= 1
    return data.replace(placeholder.encode(), raw)


def _external(tmp_path, dims, file_bytes, extra=()):
    (tmp_path / "w.bin").write_bytes(file_bytes)
    t = _tensor("w", TensorProto.FLOAT, dims)
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="w.bin")
    for k, v in extra:
        t.external_data.add(key=k, value=v)
    path = tmp_path / "m.onnx"
    onnx.save(_add_of(t), str(path))
    return str(path)


def _const_shape_model(op, shape_value, extra_inputs=(), **attrs):
    shp = numpy_helper.from_array(np.asarray(shape_value, np.int64), "shp")
    return _model([helper.make_node(op, [*extra_inputs, "shp"], ["c"], **attrs),
                   helper.make_node("Add", ["x", "c"], ["y"])] if op == "ConstantOfShape" else
                  [helper.make_node(op, [*extra_inputs, "shp"], ["y"], **attrs)],
                  [X], [Y], [shp])


def _tile_weight():
    w = numpy_helper.from_array(np.ones((2, 4), F32), "w")
    rep = numpy_helper.from_array(np.array([HUGE, HUGE], np.int64), "rep")
    return _model([helper.make_node("Tile", ["w", "rep"], ["t"]),
                   helper.make_node("Add", ["x", "t"], ["y"])], [X], [Y], [w, rep])


def _range_const():
    cs = [numpy_helper.from_array(np.array(v, F32), n) for n, v in
          (("start", 0.0), ("limit", 1e11), ("delta", 1.0))]
    return _model([helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
                   helper.make_node("Add", ["x", "r"], ["y"])], [X], [Y], cs)


def _pad_input():
    pads = numpy_helper.from_array(np.array([0, 0, HUGE, HUGE], np.int64), "pads")
    return _model([helper.make_node("Pad", ["x", "pads"], ["y"])], [X], [Y], [pads])


def _bad_node_name():
    n = helper.make_node("Relu", ["x"], ["y"], name="NODE_NAME_HERE")
    return _patched(_model([n], [X], [Y]), "NODE_NAME_HERE", b"relu\xff\xfe\xfd_layer1")


def _bad_string_attribute():
    scales = numpy_helper.from_array(np.array([1, 2], F32), "scales")
    n = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=b"lin\xffear")
    return _model([n], [X], [Y], [scales])


def _bad_metadata():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y], metadata={"author": "VALUE_HERE"})
    return _patched(m, "VALUE_HERE", b"caf\xe9 teams")


# (id, build(tmp_path) -> model, feeds or None, exception class name, message parts)
# Feeds given: the model loads, and the run (its plan) raises.
CASES = [
    # -- 18 x std::bad_alloc: declared sizes allocated before they were checked
    ("raw_data_shorter_than_dims",
     lambda p: _add_of(_tensor("w", TensorProto.FLOAT, [HUGE], raw=b"\0" * 16)), None,
     "ModelError", ["tensor 'w'", "16 bytes of raw data", "(1099511627776,)", "4398046511104"]),
    ("float_data_shorter_than_dims",
     lambda p: _add_of(_tensor("w", TensorProto.FLOAT, [HUGE], field=("float_data", [1, 2, 3, 4]))),
     None, "ModelError", ["tensor 'w'", "holds 4 values", "needs 1099511627776"]),
    ("int64_data_shorter_than_dims",
     lambda p: _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [X], [Y],
                      [_tensor("s", TensorProto.INT64, [HUGE], field=("int64_data", [2, 4]))]),
     None, "ModelError", ["tensor 's'", "holds 2 values", "needs 1099511627776"]),
    ("initializer_without_data",
     lambda p: _add_of(_tensor("w", TensorProto.FLOAT, [1 << 20, 1 << 20])), None,
     "ModelError", ["tensor 'w'", "holds 0 values", "(1048576, 1048576)"]),
    ("dims_overflow_64_bits",
     lambda p: _add_of(_tensor("w", TensorProto.FLOAT, [1 << 32] * 3, raw=b"\0" * 16)), None,
     "ModelError", ["tensor 'w'", "(4294967296, 4294967296, 4294967296)", "does not fit in 64 bits"]),
    ("negative_dim",
     lambda p: _add_of(_tensor("w", TensorProto.FLOAT, [-4], raw=b"\0" * 16)), None,
     "ModelError", ["tensor 'w'", "negative dimension"]),
    ("constant_value_shorter_than_dims",
     lambda p: _model([helper.make_node("Constant", [], ["c"], name="big_const",
                                        value=_tensor("v", TensorProto.FLOAT, [HUGE], raw=b"\0" * 4)),
                       helper.make_node("Add", ["x", "c"], ["y"])], [X], [Y]), None,
     "ModelError", ["big_const", "value", "4 bytes of raw data", "(1099511627776,)"]),
    ("constant_of_shape_value_attribute",
     lambda p: _model([helper.make_node("ConstantOfShape", ["shp"], ["c"], name="fill",
                                        value=_tensor("v", TensorProto.FLOAT, [HUGE], raw=b"\0" * 4)),
                       helper.make_node("Add", ["x", "c"], ["y"])], [X], [Y],
                      [numpy_helper.from_array(np.array([2, 4], np.int64), "shp")]), None,
     "ModelError", ["fill", "value", "4 bytes of raw data"]),
    ("external_file_shorter_than_dims",
     lambda p: _external(p, [HUGE], b"\0" * 16), None,
     "ModelError", ["tensor 'w'", "w.bin", "too short", "4398046511104 bytes", "the file has 16"]),
    ("external_offset_past_end",
     lambda p: _external(p, [4], b"\0" * 16, [("offset", "1000000000000")]), None,
     "ModelError", ["tensor 'w'", "too short", "offset 1000000000000"]),
    ("external_length_mismatch",
     lambda p: _external(p, [HUGE], b"\0" * 16, [("length", "16")]), None,
     "ModelError", ["tensor 'w'", "external data length 16", "4398046511104 bytes"]),
    ("constant_of_shape_huge_at_load",
     lambda p: _const_shape_model("ConstantOfShape", [1 << 20, 1 << 20]), None,
     "ModelError", ["ConstantOfShape node", "(1048576, 1048576)", "4.0 TiB", "memory budget"]),
    ("tile_of_weight_at_load", lambda p: _tile_weight(), None,
     "ModelError", ["Tile node", "does not fit in 64 bits"]),
    ("range_at_load", lambda p: _range_const(), None,
     "ModelError", ["Range node", "output 0 would have shape (99999997952,)", "memory budget"]),
    ("expand_of_input_at_plan",
     lambda p: _const_shape_model("Expand", [1 << 16, 1 << 16, 1, 1], ["x"]),
     {"x": np.ones((2, 4), F32)},
     "InputError", ["Expand node", "(65536, 65536, 2, 4)", "memory budget", "x=(2, 4)"]),
    ("tile_of_input_at_plan",
     lambda p: _const_shape_model("Tile", [1 << 20, 1 << 20], ["x"]), {"x": np.ones((2, 4), F32)},
     "InputError", ["Tile node", "(2097152, 4194304)", "memory budget",
                    "input 'x' dimension 0 ('batch') is 2"]),
    ("pad_of_input_at_plan", lambda p: _pad_input(), {"x": np.ones((2, 4), F32)},
     "InputError", ["Pad node", "(1099511627778, 1099511627780)", "does not fit in 64 bits",
                   "input 'x' dimension 0 ('batch') is 2"]),
    ("constant_of_shape_from_input_shape",
     lambda p: _model([helper.make_node("Shape", ["x"], ["s"]),
                       helper.make_node("Mul", ["s", "k"], ["s2"]),
                       helper.make_node("ConstantOfShape", ["s2"], ["y"], name="fill_from_batch")],
                      [X], [Y], [numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "k")]),
     {"x": np.ones((3, 4), F32)},
     "InputError", ["fill_from_batch", "(3145728, 4194304)", "memory budget",
                    "input 'x' dimension 0 ('batch') is 3"]),
    # -- 3 x UnicodeDecodeError: names and string attributes that are not UTF-8
    ("node_name_not_utf8", lambda p: _bad_node_name(), None,
     "ModelError", ["node #0 (Relu)", "node name is not valid UTF-8", "relu\\xff\\xfe\\xfd_layer1"]),
    ("string_attribute_not_utf8", lambda p: _bad_string_attribute(), None,
     "ModelError", ["Resize node", "attribute 'mode' is not valid UTF-8", "lin\\xffear"]),
    ("metadata_not_utf8", lambda p: _bad_metadata(), None,
     "ModelError", ["metadata 'author'", "not valid UTF-8", "caf\\xe9 teams"]),
    # -- 1 x plain ValueError: std::stoll on an external-data offset
    ("external_offset_not_a_number",
     lambda p: _external(p, [4], b"\0" * 16, [("offset", "12abc")]), None,
     "ModelError", ["tensor 'w'", "external data offset '12abc'", "not a non-negative integer"]),
]


def test_issue_has_22_cases():
    assert len(CASES) == 22


@pytest.mark.parametrize("build,feeds,cls,parts", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_malformed_model_raises_typed_error(engine, tmp_path, build, feeds, cls, parts):
    model = build(tmp_path)
    with pytest.raises(engine.KaiwuError) as info:
        sess = engine.Session(model)
        sess.run(feeds)
    assert type(info.value) is getattr(engine, cls), f"{type(info.value).__name__}: {info.value}"
    if feeds is not None:  # the model itself loads; only its plan is too large
        engine.Session(model)
    msg = str(info.value)
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_more_names_that_are_not_utf8(engine):
    """Every name that reaches Python is checked: input names and dimension names too."""
    x = helper.make_tensor_value_info("INPUT_NAME", TensorProto.FLOAT, ["DIMNAME", 4])
    m = _model([helper.make_node("Relu", ["INPUT_NAME"], ["y"])], [x], [Y])
    with pytest.raises(engine.ModelError, match=r"name of a graph input is not valid UTF-8"):
        engine.Session(_patched(m, "INPUT_NAME", b"obs\xc3\x28ervat"))
    with pytest.raises(engine.ModelError, match=r"input 'INPUT_NAME': a dimension name .*b\\xffatch"):
        engine.Session(_patched(m, "DIMNAME", b"b\xffatchs"))


def test_feed_names_python_cannot_encode(engine):
    """A feed key with a lone surrogate is an unknown input, not a UnicodeEncodeError."""
    sess = engine.Session(_model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y]))
    with pytest.raises(engine.InputError, match=r"unknown input 'x\\udcff'"):
        sess.run({"x\udcff": np.ones((2, 4), F32)})


def test_plan_over_budget_names_the_batch_dimension(engine):
    """Each buffer fits, the arena does not: InputError naming the input dimension."""
    w = numpy_helper.from_array(np.full((4, 256), 0.01, F32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Tanh", ["r"], ["t"]), helper.make_node("ReduceSum", ["t"], ["y"])]
    sess = engine.Session(_model(nodes, [X], [Y], [w]), memory_budget=3 << 20)
    sess.run({"x": np.ones((16, 4), F32)})  # small batches fit
    with pytest.raises(engine.InputError) as info:
        sess.run({"x": np.ones((2048, 4), F32)})
    msg = str(info.value)
    for part in ("the execution plan needs", "largest intermediate", "(2048, 256)",
                 "memory budget (3.0 MiB", "input 'x' dimension 0 ('batch') is 2048"):
        assert part in msg, msg
    sess.run({"x": np.ones((16, 4), F32)})  # the session is still usable


def test_memory_budget_option_and_environment(engine, tmp_path):
    w = np.ones((256, 256), F32)  # 256 KiB
    m = _model([helper.make_node("MatMul", ["x2", "w"], ["y"])],
               [helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["b", 256])], [Y],
               [numpy_helper.from_array(w, "w")])
    engine.Session(m, memory_budget=1 << 20)
    with pytest.raises(engine.ModelError, match=r"tensor 'w' \(shape \(256, 256\), float32, 256.0 KiB\)"):
        engine.Session(m, memory_budget=100_000)
    with pytest.raises(engine.InputError, match="memory_budget must be a positive number"):
        engine.Session(m, memory_budget=0)
    assert engine.default_memory_budget() > 0
    # $KAIWU_MEMORY_BUDGET sets the default (read when a session is made).
    import subprocess
    code = ("import kaiwu_infer as k, onnx, sys; m = onnx.load(sys.argv[1]); "
            "print(k.default_memory_budget());\n"
            "try:\n  k.Session(m)\nexcept k.ModelError as e:\n  print('ModelError', e)")
    onnx.save(m, str(tmp_path / "m.onnx"))
    env = dict(os.environ, KAIWU_MEMORY_BUDGET="100K",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.onnx")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines()[0] == str(100 * 1024), out.stderr
    assert "ModelError" in out.stdout and "memory budget (100.0 KiB" in out.stdout


def test_server_state_larger_than_budget(engine):
    """A recurrent-state input whose declared dims exceed the budget: InputError at start."""
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 1 << 20, 1 << 20])
    hn = helper.make_tensor_value_info("hn", TensorProto.FLOAT, ["batch", 1 << 20, 1 << 20])
    m = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["h"], ["hn"])],
               [X, h], [Y, hn])
    with pytest.raises(engine.InputError, match=r"state input 'h': a batch of 4 rows .* memory budget"):
        engine.InferenceServer(m, max_batch=4, state={"h": "hn"})


# ---------------------------------------------------------------- found by the fuzzer (fuzz_models.py)
def _constant_value_of_wrong_type():
    n = helper.make_node("Constant", [], ["c"], name="c0",
                         value=numpy_helper.from_array(np.ones(4, F32), "v"))
    n.attribute[0].type = onnx.AttributeProto.FLOATS  # still holds the tensor
    return _model([n, helper.make_node("Add", ["x", "c"], ["y"])], [X], [Y])


def _dilated_conv_chain_without_input():
    """The start of tf2onnx's SpaceToBatch chain, with a Transpose that lost its input."""
    shape = numpy_helper.from_array(np.array([-1, 1, 4, 4], np.int64), "s2")
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), F32), "w")
    nodes = [helper.make_node("Transpose", [], ["t"], perm=[3, 5, 0, 1, 2, 4], name="orphan"),
             helper.make_node("Reshape", ["t", "s2"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["c"]),
             helper.make_node("Add", ["x", "c"], ["y"])]
    return _model(nodes, [X], [Y], [shape, w])


def _squeeze_scalar():
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Squeeze", ["s", "axes"], ["y"], name="squeeze_scalar")]
    return _model(nodes, [X], [Y], [axes])


def _gather_with_two_outputs():
    idx = numpy_helper.from_array(np.array([0], np.int64), "idx")
    return _model([helper.make_node("Gather", ["x", "idx"], ["y", "extra"], name="g2")], [X],
                  [Y], [idx])


FUZZ_FOUND = [
    ("constant_value_of_wrong_type", _constant_value_of_wrong_type, None, "ModelError",
     ["Constant node 'c0'", "attribute 'value' has the wrong type"]),
    ("dilated_conv_chain_without_input", _dilated_conv_chain_without_input, None, "ModelError",
     ["Transpose node 'orphan'", "input 0 is required but missing"]),
    ("squeeze_of_a_scalar", _squeeze_scalar, {"x": np.ones((2, 4), F32)}, "InputError",
     ["squeeze_scalar", "axis 0 is out of range for rank 0"]),
    ("node_with_more_outputs_than_its_op", _gather_with_two_outputs, {"x": np.ones((2, 4), F32)},
     "InputError", ["Gather node 'g2'", "output 1 is not produced by Gather (the node lists 2"]),
]


@pytest.mark.parametrize("build,feeds,cls,parts", [pytest.param(*c[1:], id=c[0]) for c in FUZZ_FOUND])
def test_fuzz_findings_raise_typed_errors(engine, build, feeds, cls, parts):
    """Each crashed the process (SIGSEGV) or raised InternalError before its fix."""
    with pytest.raises(engine.KaiwuError) as info:
        engine.Session(build()).run(feeds)
    assert type(info.value) is getattr(engine, cls), f"{type(info.value).__name__}: {info.value}"
    for part in parts:
        assert part in str(info.value), str(info.value)
