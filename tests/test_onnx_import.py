"""ONNX import, checked against onnxruntime: the committed models, every device's plan, random graphs, errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import engine
from engine import GraphError, load_onnx
from engine.devices import native
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover as discover_opencl
from engine.pipeline import Options, compile_program
from engine.program.onnx_import import sanitize
from sample_graphs import onnx_models
from zyx_explorer.cli import main

MODELS = {name: Path(onnx_models.__file__).parent / f"{name}.onnx" for name in onnx_models.MODELS}
NATIVE = native.discover()[0][:1]
CPU_OPENCL = [d for d in discover_opencl() if not d.is_gpu][:1]
DEVICE_SETS = {"numpy": [NumpyDevice()], "numpy+blas": [NumpyDevice(), LibraryDevice()], "native": NATIVE,
               "opencl": CPU_OPENCL}
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def onnxruntime_outputs(model_path, program: engine.Program) -> dict[str, np.ndarray]:
    """onnxruntime's outputs, fed the values our program gives its graph inputs."""
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    values = program.input_values()
    unused = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}  # inputs only shapes read
    feeds = {i.name: values[sanitize(i.name)] if sanitize(i.name) in values else np.zeros(i.shape, unused[i.type])
             for i in session.get_inputs()}
    return {sanitize(o.name): v for o, v in zip(session.get_outputs(), session.run(None, feeds))}


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# -- the committed models ---------------------------------------------------------------------------


def test_committed_models_are_what_the_script_writes(tmp_path):
    for written in onnx_models.build(tmp_path):
        assert written.read_bytes() == MODELS[written.stem].read_bytes(), f"run python -m sample_graphs.onnx_models ({written.stem})"
    assert sum(p.stat().st_size for p in MODELS.values()) < 1 << 20


@pytest.mark.parametrize("name", onnx_models.MODELS)
def test_reference_matches_onnxruntime(name, tmp_path):
    program = load_onnx(MODELS[name], weights_dir=tmp_path)
    want = onnxruntime_outputs(MODELS[name], program)
    got = engine.run_reference(program)
    assert set(got) == set(want)
    for out, value in want.items():
        assert got[out].dtype == value.dtype
        np.testing.assert_allclose(got[out], value, **TOLERANCE, err_msg=f"{name}: {out}")


@pytest.mark.parametrize("devices", DEVICE_SETS)
@pytest.mark.parametrize("name", onnx_models.MODELS)
def test_every_device_plan_matches_onnxruntime(name, devices, tmp_path):
    if not DEVICE_SETS[devices]:
        pytest.skip(f"no {devices} device here")
    program = load_onnx(MODELS[name], weights_dir=tmp_path)
    compilation = compile_program(program, DEVICE_SETS[devices], Options(tune=False, tune_cache=False))
    assert compilation.verification.ok, compilation.verification
    assert {s.device for s in compilation.plan.launches()} <= {d.name for d in DEVICE_SETS[devices]}
    for out, value in onnxruntime_outputs(MODELS[name], program).items():
        np.testing.assert_allclose(compilation.execution.outputs[out], value, **TOLERANCE, err_msg=f"{name}: {out}")


def test_model_names_become_tensor_ids(tmp_path):
    program = load_onnx(MODELS["gpt"], weights_dir=tmp_path)
    ids = {n.id for n in program.nodes} | {i.name for i in program.inputs}
    assert {"wte.weight", "input_ids", "masked", "probs", "logits", "ln_1"} <= ids
    tokens = next(i for i in program.inputs if i.name == "input_ids")
    assert tokens.dtype == engine.DType.I64 and tokens.value().min() >= 0 and tokens.value().max() < 32
    assert sanitize("/attn/Softmax_output_0") == "attn_Softmax_output_0"
    model = _model([helper.make_node("Relu", ["a/b"], ["a_b"]), helper.make_node("Neg", ["a_b"], ["a:b"])],
                   [_f32("a/b", [2])], [_f32("a:b", [2])])
    program = load_onnx(_save(model, tmp_path), weights_dir=tmp_path)
    assert [i.name for i in program.inputs] == ["a_b"] and [n.id for n in program.nodes] == ["a_b_1", "a_b_2"]


def test_import_command_writes_graph_json_and_npy_that_load_back(tmp_path, capsys):
    out = tmp_path / "cnn.json"
    assert main(["import", str(MODELS["cnn"]), "-o", str(out)]) == 0
    assert "cnn.conv1.weight.npy" in {p.name for p in tmp_path.iterdir()}
    reloaded = engine.load(out)
    want = onnxruntime_outputs(MODELS["cnn"], reloaded)
    np.testing.assert_allclose(engine.run_reference(reloaded)["probs"], want["probs"], **TOLERANCE)
    assert main(["import", str(MODELS["cnn"]), "-o", str(out)]) == 2
    assert "use --force" in capsys.readouterr().err


# -- errors: one located message, exit 2 -------------------------------------------------------------


def test_every_unsupported_node_is_listed_at_once(tmp_path, capsys):
    nodes = [helper.make_node("Cos", ["x"], ["a"], name="act/Cos_1"),
             helper.make_node("MaxPool", ["x4"], ["p"], name="pool/MaxPool", kernel_shape=[2, 2], ceil_mode=1),
             helper.make_node("Softmax", ["a"], ["s"], name="attn/Softmax_3", axis=1, bogus=2),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], name="TopK_9")]
    model = _model(nodes, [_f32("x", [2, 3]), _f32("x4", [1, 1, 4, 4])], [_f32("v", [2, 1]), _f32("p", [1, 1, 2, 2])],
                   [numpy_helper.from_array(np.array([1], np.int64), "k")])
    path = _save(model, tmp_path)
    with pytest.raises(GraphError) as info:
        load_onnx(path, weights_dir=tmp_path)
    message = str(info.value)
    for line in ("node 0 'act/Cos_1' (Cos): the op Cos is not supported",
                 "node 1 'pool/MaxPool' (MaxPool): ceil_mode=1 is not supported",
                 "node 2 'attn/Softmax_3' (Softmax): attribute bogus not supported",
                 "node 3 'TopK_9' (TopK): the op TopK is not supported"):
        assert line in message
    assert message.startswith(f"{path}: cannot import this model (4 problems)")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "attn/Softmax_3" in err


def test_symbolic_dimensions_need_values(tmp_path):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_f32("x", ["batch", "seq", 4])], [_f32("y", ["batch", "seq", 4])])
    path = _save(model, tmp_path)
    with pytest.raises(GraphError, match=r"symbolic dimensions need a value: batch \(in x\); seq \(in x\); give them with --dim batch=VALUE"):
        load_onnx(path, weights_dir=tmp_path)
    program = load_onnx(path, {"batch": 2, "seq": 3}, weights_dir=tmp_path)
    assert program.inputs[0].shape == (2, 3, 4)
    assert main(["check", str(path), "--dim", "batch=2", "--dim", "seq=3"]) == 0
    assert main(["check", str(path), "--dim", "batch=2", "--dim", "seq=3", "--dim", "heads=2"]) == 2


@pytest.mark.parametrize(("model", "message"), [
    (_model([helper.make_node("Relu", ["x"], ["y"])], [_f32("x", [2])], [_f32("y", [2])], opset=12),
     "opset 12: only opset 13 and later"),
    (_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.UINT8, [2])],
            [_f32("y", [2])]), "graph input 'x' has dtype uint8"),
    (_model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "c"], ["y"], name="r")], [_f32("x", [2])], [_f32("y", [2])]),
     "node 2 'r' (Reshape): input 1 (shape) must be known when importing"),
    (_model([helper.make_node("Relu", ["z"], ["y"], name="r")], [_f32("x", [2])], [_f32("y", [2]), _f32("w", [2])]),
     "node 0 'r' (Relu): reads 'z' before any node or input defines it"),
    (_model([helper.make_node("Relu", ["x"], ["y"])], [_f32("x", [2])], [_f32("w", [2])]),
     "graph output 'w' is not defined by any node or input"),
])
def test_located_errors(model, message, tmp_path):
    with pytest.raises(GraphError, match=re.escape(message)):
        load_onnx(_save(model, tmp_path), weights_dir=tmp_path)


@pytest.mark.parametrize("content", [b"not a model at all \xff\x00", b"", b"{\"inputs\": {}}"])
def test_malformed_files_exit_2_without_a_traceback(content, tmp_path, capsys):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not an ONNX model" in err and "Traceback" not in err
    assert main(["check", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err


# -- random ONNX graphs against onnxruntime -------------------------------------------------------------

UNARY = ["Relu", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Erf", "Reciprocal", "Identity"]
"""Not Sqrt or Log: a NaN reaching the branch a Where does not take gives NaN here (docs/graph-format.md)."""
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


def _step(draw, kind: str, value: str, shape: list[int], out: str, init, rng) -> tuple[list, list[int]] | None:
    """The nodes of one random step from ``value`` to ``out`` and the new shape (None: the step does not apply)."""
    rank = len(shape)
    if kind == "unary":
        return [helper.make_node(draw(st.sampled_from(UNARY)), [value], [out])], shape
    if kind == "leaky":
        return [helper.make_node("LeakyRelu", [value], [out], alpha=0.1)], shape
    if kind == "binary":
        other = shape[draw(st.integers(0, rank)):]  # a suffix of the shape: broadcasts
        weight = init(rng.normal(size=other).astype(np.float32))
        return [helper.make_node(draw(st.sampled_from(BINARY)), [value, weight], [out])], shape
    if kind == "reduce":
        axes = sorted(set(draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank))))
        keep = draw(st.booleans()) or len(axes) == rank
        op = draw(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax"]))
        new = [1 if i in axes else d for i, d in enumerate(shape)] if keep else [d for i, d in enumerate(shape) if i not in axes]
        return [helper.make_node(op, [value, init(np.array(axes, np.int64))], [out], keepdims=int(keep))], new
    if kind == "transpose":
        perm = draw(st.permutations(range(rank)))
        return [helper.make_node("Transpose", [value], [out], perm=list(perm))], [shape[p] for p in perm]
    if kind == "slice":
        axis, step = draw(st.integers(0, rank - 1)), draw(st.integers(1, 3))
        start, end = draw(st.integers(-5, 5)), draw(st.integers(-5, 6))
        size = len(range(*slice(start, end, step).indices(shape[axis])))
        if size == 0:
            return None
        args = [init(np.array([v], np.int64)) for v in (start, end, axis, step)]
        return [helper.make_node("Slice", [value, *args], [out])], [size if i == axis else d for i, d in enumerate(shape)]
    if kind == "concat":
        axis = draw(st.integers(0, rank - 1))
        other = [draw(st.integers(1, 3)) if i == axis else d for i, d in enumerate(shape)]
        part = init(rng.normal(size=other).astype(np.float32))
        new = [d + other[axis] if i == axis else d for i, d in enumerate(shape)]
        return [helper.make_node("Concat", [value, part], [out], axis=axis)], new
    if kind == "gather":
        axis = draw(st.integers(0, rank - 1))
        idx_shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
        idx = init(rng.integers(-shape[axis], shape[axis], idx_shape).astype(np.int64))
        return [helper.make_node("Gather", [value, idx], [out], axis=axis)], shape[:axis] + idx_shape + shape[axis + 1 :]
    if kind == "where":  # a mask: -30 where x <= 0.2 (-inf is checked by the gpt model and the Where case)
        cond = f"{out}_cond"
        return [helper.make_node("Greater", [value, init(np.float32(0.2))], [cond]),
                helper.make_node("Where", [cond, value, init(np.float32(-30))], [out])], shape
    if kind == "softmax":
        return [helper.make_node("Softmax", [value], [out], axis=draw(st.integers(-rank, rank - 1)))], shape
    if kind == "matmul":
        n = draw(st.integers(1, 3))
        weight = init(rng.normal(size=(shape[-1], n)).astype(np.float32))
        return [helper.make_node("MatMul", [value, weight], [out])], shape[:-1] + [n]
    if kind in ("pool", "conv"):
        if rank != 4:
            return None
        kernel = [draw(st.integers(1, min(d, 3))) for d in shape[2:]]
        pads = [draw(st.integers(0, k - 1)) for k in kernel * 2]
        strides = [draw(st.integers(1, 2)) for _ in kernel]
        out_hw = [(d + pads[i] + pads[i + 2] - k) // s + 1 for i, (d, k, s) in enumerate(zip(shape[2:], kernel, strides))]
        if kind == "conv":
            o = draw(st.integers(1, 3))
            weight = init(rng.normal(size=(o, shape[1], *kernel)).astype(np.float32))
            return [helper.make_node("Conv", [value, weight], [out], pads=pads, strides=strides)], [shape[0], o, *out_hw]
        op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
        extra = {"count_include_pad": draw(st.integers(0, 1))} if op == "AveragePool" else {}
        return [helper.make_node(op, [value], [out], kernel_shape=kernel, pads=pads, strides=strides, **extra)], \
            shape[:2] + out_hw
    axis = draw(st.integers(0, rank))  # unsqueeze
    return [helper.make_node("Unsqueeze", [value, init(np.array([axis], np.int64))], [out])], shape[:axis] + [1] + shape[axis:]


KINDS = ["unary", "leaky", "binary", "reduce", "transpose", "slice", "concat", "gather", "where", "softmax", "matmul",
         "unsqueeze", "pool", "conv"]


@st.composite
def onnx_graphs(draw):
    """A chain of 1 to 5 random steps of supported ops on one input x (shapes tracked here, all of rank 1 to 4;
    pooling and Conv on rank 4)."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    in_shape, nodes, inits, value = list(shape), [], [], "x"
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    def init(array):
        inits.append(numpy_helper.from_array(np.asarray(array), f"c{len(inits)}"))
        return inits[-1].name

    for k in range(draw(st.integers(1, 5))):
        step = _step(draw, draw(st.sampled_from(KINDS)), value, shape, f"v{k}", init, rng)
        if step is None or not step[1] or len(step[1]) > 4:
            continue
        new_nodes, shape = step
        nodes += new_nodes
        value = f"v{k}"
    nodes.append(helper.make_node("Identity", [value], ["y"]))
    return _model(nodes, [_f32("x", in_shape)], [_f32("y", shape)], inits)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(onnx_graphs())
def test_random_onnx_graphs_match_onnxruntime(tmp_path_factory, model):
    note(helper.printable_graph(model.graph))
    directory = tmp_path_factory.mktemp("random")
    path = _save(model, directory)
    program = load_onnx(path, weights_dir=directory)
    want = onnxruntime_outputs(path, program)["y"]
    got = engine.run_reference(program)["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **TOLERANCE, equal_nan=True)


# -- every supported op, one small model each, against onnxruntime ------------------------------------------

F, I64, BOOLEAN = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _i64(*values):
    return np.array(values, np.int64)


def _op_case(op, inputs, initializers=None, opset=18, outputs=("y",), pre=(), **attrs):
    """One node (after optional ``pre`` nodes): graph inputs are name -> (elem type, shape); initializers name -> array."""
    initializers = initializers or {}
    args = attrs.pop("args", None)
    args = [*inputs, *initializers] if args is None else args
    nodes = [*pre, helper.make_node(op, args, list(outputs), name=f"{op}_0", **attrs)]
    return _model(nodes, [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                  [helper.make_empty_tensor_value_info(o) for o in outputs],
                  [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()], opset)


def _positive(op, **kw):
    """``op`` of |x| + 0.5 (for Sqrt, Log, Pow, Div)."""
    pre = [helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("Add", ["ax", "half"], ["px"])]
    return _op_case(op, {"x": (F, [2, 3])}, {"half": np.float32(0.5), **kw.pop("inits", {})}, pre=pre,
                    args=["px", *kw.pop("more", [])], **kw)


X23 = {"x": (F, [2, 3])}
X4 = {"x": (F, [2, 4, 5, 5])}
OP_CASES = {
    "MatMul": _op_case("MatMul", {"x": (F, [2, 3, 4])}, {"w": np.ones((4, 5), np.float32) * 0.3}),
    "MatMul_vector": _op_case("MatMul", {"x": (F, [4])}, {"w": np.arange(20, dtype=np.float32).reshape(4, 5)}),
    "Gemm": _op_case("Gemm", {"a": (F, [4, 3]), "b": (F, [5, 4])}, {"c": np.arange(5, dtype=np.float32)},
                     transA=1, transB=1, alpha=0.5, beta=2.0),
    "Add": _op_case("Add", X23, {"b": np.float32([1, 2, 3])}),
    "Sub": _op_case("Sub", {"x": (F, [2, 3]), "b": (F, [2, 1])}),
    "Mul": _op_case("Mul", {"x": (F, [2, 3]), "b": (F, [3])}),
    "Div": _positive("Div", inits={"d": np.float32([3])}, more=["d"]),
    "Pow": _positive("Pow", inits={"e": np.float32([0.5, 2, 3])}, more=["e"]),
    **{op: _op_case(op, X23) for op in ["Neg", "Abs", "Reciprocal", "Exp", "Tanh", "Sigmoid", "Relu", "Erf", "Identity"]},
    "Sqrt": _positive("Sqrt"),
    "Log": _positive("Log"),
    "LeakyRelu": _op_case("LeakyRelu", X23, alpha=0.2),
    "Gelu": _op_case("Gelu", X23, opset=20),
    "Gelu_tanh": _op_case("Gelu", X23, opset=20, approximate="tanh"),
    "Softmax": _op_case("Softmax", X23, axis=0),
    "LogSoftmax": _op_case("LogSoftmax", X23, axis=1),
    "LayerNormalization": _op_case("LayerNormalization", {"x": (F, [2, 3, 4])},
                                   {"s": np.linspace(0.5, 2, 12, dtype=np.float32).reshape(3, 4),
                                    "b": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}, axis=1, epsilon=0.01),
    "BatchNormalization": _op_case("BatchNormalization", {"x": (F, [2, 3, 2, 2])},
                                   {"s": np.float32([1, 2, 3]), "b": np.float32([0, 1, -1]), "m": np.float32([0.5, 0, -1]),
                                    "v": np.float32([1, 0.5, 2])}, epsilon=0.1),
    "ReduceSum": _op_case("ReduceSum", {"x": (F, [2, 3, 4])}, {"axes": _i64(0, -1)}, keepdims=0),
    "ReduceMean": _op_case("ReduceMean", {"x": (F, [2, 3, 4])}, {"axes": _i64(1)}),
    "ReduceMean_17": _op_case("ReduceMean", {"x": (F, [2, 3, 4])}, opset=17, axes=[1, 2], keepdims=0),
    "ReduceMax": _op_case("ReduceMax", {"x": (F, [2, 3, 4])}),
    "Reshape": _op_case("Reshape", {"x": (F, [2, 3, 4])}, {"s": _i64(0, -1)}),
    "Transpose": _op_case("Transpose", {"x": (F, [2, 3, 4])}),
    "Unsqueeze": _op_case("Unsqueeze", X23, {"a": _i64(0, -1)}),
    "Squeeze": _op_case("Squeeze", {"x": (F, [1, 3, 1])}),
    "Flatten": _op_case("Flatten", {"x": (F, [2, 3, 4])}, axis=2),
    "Expand": _op_case("Expand", {"x": (F, [3, 1])}, {"s": _i64(2, 1, 4)}),
    "Concat": _op_case("Concat", {"x": (F, [2, 1]), "z": (F, [2, 3])}, {"c": np.ones((2, 2), np.float32)}, axis=-1),
    "Slice": _op_case("Slice", {"x": (F, [5, 6])}, {"s": _i64(4, 1), "e": _i64(-100, 10**12), "a": _i64(1, 0),
                                                   "st": _i64(2, 3)}),
    "Split": _op_case("Split", {"x": (F, [5, 2])}, outputs=("y", "z"), num_outputs=2),
    "Split_sizes": _op_case("Split", {"x": (F, [2, 6])}, {"s": _i64(1, 2, 3)}, outputs=("y", "z", "w"), axis=1),
    "Gather": _op_case("Gather", {"x": (F, [3, 4])}, {"i": _i64([0, -1], [3, 1])}, axis=1),
    "Gather_scalar": _op_case("Gather", {"x": (F, [3, 4])}, {"i": np.int64(2)}),
    "Where": _op_case("Where", {"c": (BOOLEAN, [2, 3]), "x": (F, [2, 3])}, {"z": np.float32(-np.inf)}),
    "Equal": _op_case("Equal", {"x": (I64, [2, 3]), "z": (I64, [3])}),
    "Less": _op_case("Less", {"x": (F, [2, 3]), "z": (F, [2, 3])}),
    "Greater": _op_case("Greater", {"x": (F, [2, 3])}, {"z": np.float32(0)}),
    "Not": _op_case("Not", {"c": (BOOLEAN, [4])}),
    "LessOrEqual": _op_case("LessOrEqual", {"x": (I64, [2, 3]), "z": (I64, [3])}),
    "GreaterOrEqual": _op_case("GreaterOrEqual", {"x": (F, [2, 3])}, {"z": np.float32([0, np.nan, -1])}),
    "And": _op_case("And", {"c": (BOOLEAN, [2, 3]), "d": (BOOLEAN, [3])}),
    "Or": _op_case("Or", {"c": (BOOLEAN, [2, 3]), "d": (BOOLEAN, [2, 1])}),
    "Pad": _op_case("Pad", {"x": (F, [2, 3, 4])}, {"p": _i64(1, 0, 2, -1), "v": np.float32(-2), "a": _i64(0, -1)}),
    "Pad_all_axes": _op_case("Pad", {"x": (I64, [2, 3])}, {"p": _i64(0, 1, 2, 0)}),
    "Range": _op_case("Range", {}, {"s": np.int64(2), "l": np.int64(11), "d": np.int64(3)}),
    "Range_float": _op_case("Add", {"x": (F, [4])}, {"r": np.float32(0.5), "l": np.float32(4.4), "d": np.float32(1)},
                            args=["x", "rf"],
                               pre=[helper.make_node("Range", ["r", "l", "d"], ["rf"])]),
    "Cast": _op_case("Cast", {"x": (I64, [2, 3])}, to=TensorProto.FLOAT),
    "Constant": _op_case("Constant", {}, args=[], value_floats=[1.0, 2.5]),
    "ConstantOfShape": _op_case("ConstantOfShape", {}, {"s": _i64(2, 3)},
                                value=numpy_helper.from_array(np.array([7], np.int64))),
    "Shape": _op_case("Shape", {"x": (F, [2, 3, 4])}, start=1),
    "Dropout": _op_case("Dropout", X23, {"r": np.float32(0.5)}, opset=13),
    "Conv": _op_case("Conv", X4, {"w": np.linspace(-1, 1, 4 * 2 * 3 * 3, dtype=np.float32).reshape(4, 2, 3, 3),
                                  "b": np.float32([1, 2, 3, 4])}, group=2, strides=[2, 2], pads=[0, 1, 1, 0]),
    "Conv_dilated": _op_case("Conv", X4, {"w": np.linspace(-1, 1, 3 * 4 * 2 * 2, dtype=np.float32).reshape(3, 4, 2, 2)},
                             dilations=[2, 1], strides=[1, 2], pads=[1, 1, 1, 1]),
    "Conv_same": _op_case("Conv", {"x": (F, [1, 2, 7, 6])}, {"w": np.linspace(-1, 1, 36, dtype=np.float32).reshape(2, 2, 3, 3)},
                          auto_pad="SAME_UPPER", strides=[2, 3]),
    "MaxPool_same_lower": _op_case("MaxPool", X4, kernel_shape=[2, 3], auto_pad="SAME_LOWER"),
    "MaxPool": _op_case("MaxPool", X4, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "AveragePool": _op_case("AveragePool", X4, kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1]),
    "AveragePool_count_pad": _op_case("AveragePool", X4, kernel_shape=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    "GlobalAveragePool": _op_case("GlobalAveragePool", X4),
    "Clip": _op_case("Clip", X23, {"lo": np.float32(-0.5)}),
    "Clip_both": _op_case("Clip", X23, {"lo": np.float32(-0.5), "hi": np.float32(0.25)}),
    "Min": _op_case("Min", {"x": (F, [2, 3]), "z": (F, [3]), "w": (F, [2, 1])}),
    "Max": _op_case("Max", {"x": (F, [2, 3]), "z": (F, [3])}),
}


def test_every_supported_op_has_a_case():
    from engine.program.onnx_import import SUPPORTED_OPS

    covered = {node.op_type for model in OP_CASES.values() for node in model.graph.node}
    assert sorted(set(SUPPORTED_OPS) - covered) == []


@pytest.mark.parametrize("case", OP_CASES)
def test_op_matches_onnxruntime(case, tmp_path):
    path = _save(OP_CASES[case], tmp_path)
    program = load_onnx(path, weights_dir=tmp_path)
    got = engine.run_reference(program)
    for name, want in onnxruntime_outputs(path, program).items():
        assert got[name].shape == want.shape and got[name].dtype == want.dtype, (name, got[name].shape, want.shape)
        np.testing.assert_allclose(got[name], want, **TOLERANCE, err_msg=f"{case}: {name}")


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(onnx_graphs())
def test_random_onnx_graphs_plans_match_onnxruntime(tmp_path_factory, model):
    """The compiled plan (numpy and BLAS, cost-model times) of random graphs, against onnxruntime."""
    note(helper.printable_graph(model.graph))
    directory = tmp_path_factory.mktemp("random_plan")
    path = _save(model, directory)
    program = load_onnx(path, weights_dir=directory)
    compilation = compile_program(program, DEVICE_SETS["numpy+blas"], Options(tune=False, tune_cache=False))
    assert compilation.verification.ok, compilation.verification
    np.testing.assert_allclose(compilation.execution.outputs["y"], onnxruntime_outputs(path, program)["y"],
                               **TOLERANCE, equal_nan=True)
