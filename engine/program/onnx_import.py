"""ONNX models in: a ``.onnx`` file (default opset 13 and later) becomes a Program.

Initializers become inputs holding their values (``.npy`` files written to ``weights_dir``);
graph inputs take their shapes from the model, symbolic dimensions from ``dims``. Each ONNX
node is translated into ops of our op set with the builder API, so the program's tensor ids
are the model's value names (sanitised). Values that only depend on constants (shape
arithmetic: Shape, Constant, Gather of a shape, Concat of dims ...) are folded by the
reference interpreter, since ops like Reshape need their shape as a static attribute.

Every unsupported op, dtype or attribute is collected and reported in one GraphError:
``node 17 'attn/Softmax_3' (Softmax): ...``. The ``onnx`` package is an optional extra.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import FormatError, GraphError
from engine.fileio import cache_root
from engine.program.dtypes import DType
from engine.program.init import Init
from engine.program.loader import read_source
from engine.program.opset import broadcast_shapes
from engine.program.program import Program
from engine.program.reference import evaluate
from engine.program.tensor import Tensor, from_tensors

MIN_OPSET = 13
FOLD_ELEMENTS = 1 << 16
"""Constant values up to this size are computed at import; bigger ones stay in the program."""
INLINE_ELEMENTS = 16
"""Initializers up to this size are written inline in graph.json (``values``), bigger ones as .npy."""

# ONNX TensorProto element types we hold.
_DTYPES = {1: DType.F32, 10: DType.F16, 11: DType.F64, 6: DType.I32, 7: DType.I64, 9: DType.BOOL}
_TYPE_NAMES = {0: "undefined", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 8: "string", 12: "uint32",
               13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16"}


class UnsupportedError(Exception):
    """A node the importer cannot translate (collected, then reported together)."""


def sanitize(name: str) -> str:
    """A tensor id from an ONNX value name: letters, digits, ``_`` and ``.``; no leading separators."""
    out = re.sub(r"[^A-Za-z0-9_.]+", "_", name).strip("_.")
    return out or "t"


def _dtype(elem_type: int, what: str) -> DType:
    if elem_type not in _DTYPES:
        raise UnsupportedError(f"{what} has dtype {_TYPE_NAMES.get(elem_type, elem_type)}, not one of "
                               "float, float16, double, int32, int64, bool")
    return _DTYPES[elem_type]


Value = np.ndarray | Tensor
"""A value during import: known (an array) or computed by the program (a builder tensor)."""


@dataclass
class _Import:
    """The state of one import: values by ONNX name, ids in use, problems found."""

    weights: Callable[[str, np.ndarray], Init]
    values: dict[str, Value] = field(default_factory=dict)
    weight_names: set[str] = field(default_factory=set)
    ids: dict[str, str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    model: Any = None

    @functools.cached_property
    def inferred(self) -> dict[str, tuple[tuple[int, ...], DType]]:
        """Static types from ONNX's shape inference: stand-ins for the outputs of failed nodes (computed on demand)."""
        return _inferred_types(self.model)

    def id_of(self, name: str) -> str:
        """The unique, sanitised tensor id of an ONNX value name."""
        if name not in self.ids:
            base = candidate = sanitize(name)
            k = 1
            while candidate in self.taken:
                candidate = f"{base}_{k}"
                k += 1
            self.taken.add(candidate)
            self.ids[name] = candidate
        return self.ids[name]

    def tensor(self, name: str) -> Tensor:
        """The value of ``name`` as a tensor of the program; a known array becomes an input holding it."""
        value = self.values[name]
        if isinstance(value, Tensor):
            return value
        if name not in self.tensors:
            dtype = _from_numpy(value.dtype)
            self.tensors[name] = Tensor.input(self.id_of(name), value.shape, dtype, self.weights(self.id_of(name), value))
        return self.tensors[name]


def _from_numpy(dtype: np.dtype) -> DType:
    for d in DType:
        if d.numpy == dtype:
            return d
    raise UnsupportedError(f"dtype {dtype} is not supported")


@dataclass
class _Node:
    """What a translator sees of one node: its inputs, attributes and opset."""

    imp: _Import
    proto: Any
    attrs: dict[str, Any]
    opset: int
    used: set[str] = field(default_factory=set)

    @property
    def n_inputs(self) -> int:
        return len(self.proto.input)

    def has(self, i: int) -> bool:
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def t(self, i: int) -> Tensor:
        return self.imp.tensor(self.proto.input[i])

    def const(self, i: int, what: str) -> np.ndarray:
        """Input ``i`` as a known array: ops such as Reshape need it at import time."""
        value = self.imp.values[self.proto.input[i]]
        if isinstance(value, Tensor):
            raise UnsupportedError(f"input {i} ({what}) must be known when importing (an initializer, a Constant or "
                                   "computed from static shapes), but it is computed by the model")
        return value

    def ints(self, i: int, what: str) -> list[int] | None:
        return [int(v) for v in np.asarray(self.const(i, what)).reshape(-1)] if self.has(i) else None

    def attr(self, name: str, default: Any = None) -> Any:
        self.used.add(name)
        return self.attrs.get(name, default)


# -- translators: (node) -> list of output values ----------------------------------------------


def _unary(method: str) -> Callable[[_Node], list[Value]]:
    return lambda n: [getattr(n.t(0), method)()]


def _binary(method: str) -> Callable[[_Node], list[Value]]:
    return lambda n: [getattr(n.t(0), method)(n.t(1))]


def _pow(n: _Node) -> list[Value]:
    base = n.t(0)
    return [base ** n.t(1).cast(base.dtype)]  # ONNX: the result has the base's type


def _variadic(method: str) -> Callable[[_Node], list[Value]]:
    def translate(n: _Node) -> list[Value]:
        out = n.t(0)
        for i in range(1, n.n_inputs):
            out = getattr(out, method)(n.t(i))
        return [out]

    return translate


def _matmul(n: _Node) -> list[Value]:
    a, b = n.t(0), n.t(1)
    va, vb = a.ndim == 1, b.ndim == 1  # numpy semantics: a vector gains an axis that is dropped again
    out = (a.reshape(1, a.shape[0]) if va else a) @ (b.reshape(b.shape[0], 1) if vb else b)
    if va or vb:
        out = out.reshape(out.shape[:-2] + (() if va else out.shape[-2:-1]) + (() if vb else out.shape[-1:]))
    return [out]


def _gemm(n: _Node) -> list[Value]:
    a, b = n.t(0), n.t(1)
    a, b = (a.transpose() if n.attr("transA", 0) else a), (b.transpose() if n.attr("transB", 0) else b)
    out = a @ b
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if n.has(2):
        c = n.t(2)
        out = out + (c * beta if beta != 1.0 else c)
    return [out]


def _leaky_relu(n: _Node) -> list[Value]:
    x = n.t(0)
    return [x.relu() - (-x).relu() * n.attr("alpha", 0.01)]


def _gelu(n: _Node) -> list[Value]:
    x, approximate = n.t(0), n.attr("approximate", "none")
    if approximate == "tanh":
        return [x.gelu()]
    if approximate != "none":
        raise UnsupportedError(f"approximate={approximate!r} (expected 'none' or 'tanh')")
    return [x * 0.5 * ((x * (1 / math.sqrt(2))).erf() + 1)]


def _softmax(method: str) -> Callable[[_Node], list[Value]]:
    return lambda n: [getattr(n.t(0), method)(n.attr("axis", -1))]


def _layer_norm(n: _Node) -> list[Value]:
    if len(n.proto.output) > 1 and any(n.proto.output[1:]):
        raise UnsupportedError("only the output Y is supported (not Mean or InvStdDev)")
    x = n.t(0)
    axis = n.attr("axis", -1) % x.ndim
    n.attr("stash_type")
    eps = n.attr("epsilon", 1e-5)
    scale, bias = n.t(1), (n.t(2) if n.has(2) else None)
    if axis == x.ndim - 1:
        return [x.layernorm(scale, bias, axis=-1, eps=eps)]
    flat = x.reshape(x.shape[:axis] + (math.prod(x.shape[axis:]),)).layernorm(axis=-1, eps=eps).reshape(x.shape)
    flat = flat * scale
    return [flat if bias is None else flat + bias]


def _batch_norm(n: _Node) -> list[Value]:
    if n.attr("training_mode", 0):
        raise UnsupportedError("training_mode=1 (only inference is supported)")
    n.attr("momentum")
    x, scale, bias, mean, var = (n.t(i) for i in range(5))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    gain = (var + n.attr("epsilon", 1e-5)).sqrt().recip() * scale
    return [(x - mean.reshape(shape)) * gain.reshape(shape) + bias.reshape(shape)]


def _reduce(method: str, axes_input_from: int) -> Callable[[_Node], list[Value]]:
    def translate(n: _Node) -> list[Value]:
        x = n.t(0)
        axes = n.ints(1, "axes") if n.opset >= axes_input_from else n.attr("axes")
        keep = bool(n.attr("keepdims", 1))
        if not axes:
            if n.attr("noop_with_empty_axes", 0):
                return [x]
            axes = None
        return [getattr(x, method)(None if axes is None else tuple(axes), keepdim=keep)]

    return translate


def _reshape(n: _Node) -> list[Value]:
    x, shape = n.t(0), n.ints(1, "shape")
    if not n.attr("allowzero", 0):
        shape = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(shape)]
    return [x.reshape(tuple(shape))]


def _transpose(n: _Node) -> list[Value]:
    x = n.t(0)
    perm = n.attr("perm") or list(reversed(range(x.ndim)))
    return [x.permute(*perm)]


def _unsqueeze(n: _Node) -> list[Value]:
    x, axes = n.t(0), n.ints(1, "axes") or []
    rank = x.ndim + len(axes)
    axes = {a % rank for a in axes}
    dims = iter(x.shape)
    return [x.reshape(tuple(1 if i in axes else next(dims) for i in range(rank)))]


def _squeeze(n: _Node) -> list[Value]:
    x = n.t(0)
    axes = n.ints(1, "axes")
    drop = {a % x.ndim for a in axes} if axes else {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in drop):
        raise UnsupportedError(f"cannot squeeze axes {sorted(drop)} of shape {list(x.shape)}: not all of size 1")
    return [x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in drop))]


def _flatten(n: _Node) -> list[Value]:
    x = n.t(0)
    axis = n.attr("axis", 1) % (x.ndim + 1) if x.ndim else 0
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


def _expand(n: _Node) -> list[Value]:
    x = n.t(0)
    return [x.expand(broadcast_shapes(x.shape, tuple(n.ints(1, "shape"))))]


def _concat(n: _Node) -> list[Value]:
    parts = [n.t(i) for i in range(n.n_inputs) if n.has(i)]
    return [parts[0].concat(*parts[1:], axis=n.attr("axis"))]


def _slice(n: _Node) -> list[Value]:
    x = n.t(0)
    starts, ends = n.ints(1, "starts"), n.ints(2, "ends")
    axes = n.ints(3, "axes") or list(range(len(starts)))
    steps = n.ints(4, "steps") or [1] * len(starts)
    if any(s < 1 for s in steps):
        raise UnsupportedError(f"steps {steps}: only positive steps are supported")
    big = 1 << 62  # INT64_MAX and friends: clamp so they stay Python-slice friendly
    starts, ends = [max(min(v, big), -big) for v in starts], [max(min(v, big), -big) for v in ends]
    return [x.slice(starts, ends, axes, steps)]


def _split(n: _Node) -> list[Value]:
    x = n.t(0)
    axis = n.attr("axis", 0) % x.ndim
    count = len(n.proto.output)
    sizes = n.ints(1, "split") if n.has(1) else n.attr("split")
    if sizes is None:
        n.attr("num_outputs")
        size = x.shape[axis]
        part = -(-size // count)
        sizes = [min(part, size - part * k) for k in range(count)]
    outs, offset = [], 0
    for s in sizes:
        outs.append(x.slice([offset], [offset + s], [axis]))
        offset += s
    return outs


def _gather(n: _Node) -> list[Value]:
    return [n.t(0).gather(n.t(1), n.attr("axis", 0))]


def _where(n: _Node) -> list[Value]:
    return [n.t(0).where(n.t(1), n.t(2))]


def _cast(n: _Node) -> list[Value]:
    n.attr("saturate")
    return [n.t(0).cast(_dtype(n.attr("to"), "the target"))]


def _constant(n: _Node) -> list[Value]:
    from onnx import numpy_helper

    given = [k for k in n.attrs if k in ("value", "value_float", "value_floats", "value_int", "value_ints")]
    if len(given) != 1:
        raise UnsupportedError(f"attributes {sorted(n.attrs)}: expected one of value, value_float(s), value_int(s)")
    key = given[0]
    raw = n.attr(key)
    if key == "value":
        _dtype(raw.data_type, "the value")
        return [numpy_helper.to_array(raw)]
    return [np.asarray(raw, np.float32 if "float" in key else np.int64)]


def _constant_of_shape(n: _Node) -> list[Value]:
    from onnx import numpy_helper

    value = n.attr("value")
    fill = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value)
    return [np.full(tuple(n.ints(0, "shape")), fill.reshape(-1)[0], fill.dtype)]


def _shape(n: _Node) -> list[Value]:
    shape = n.imp.values[n.proto.input[0]].shape
    return [np.asarray(shape[n.attr("start", 0) : n.attr("end", len(shape))], np.int64)]


def _identity(n: _Node) -> list[Value]:
    return [n.imp.values[n.proto.input[0]]]


def _dropout(n: _Node) -> list[Value]:
    if len(n.proto.output) > 1 and n.proto.output[1]:
        raise UnsupportedError("the mask output is not supported")
    if n.has(2) and bool(np.asarray(n.const(2, "training_mode"))):
        raise UnsupportedError("training_mode=true (only inference is supported)")
    n.attr("seed")
    return _identity(n)


def _clip(n: _Node) -> list[Value]:
    x = n.t(0)
    if n.has(1):
        x = x.maximum(n.t(1).cast(x.dtype))
    if n.has(2):
        x = x.minimum(n.t(2).cast(x.dtype))
    return [x]


def _spatial(n: _Node, x: Tensor, kernel: Sequence[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """strides, dilations and [(before, after)] pads of a 2-D conv or pool node."""
    if x.ndim != 4 or len(kernel) != 2:
        raise UnsupportedError(f"only 2-D inputs [N, C, H, W] are supported, got shape {list(x.shape)}")
    auto_pad = n.attr("auto_pad", "NOTSET")
    strides, dilations = list(n.attr("strides") or [1, 1]), list(n.attr("dilations") or [1, 1])
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):  # output size ceil(in / stride); the odd element after (UPPER)
        pairs = []
        for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pairs.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return strides, dilations, pairs
    if auto_pad not in ("NOTSET", "VALID"):
        raise UnsupportedError(f"auto_pad={auto_pad} (expected NOTSET, VALID, SAME_UPPER or SAME_LOWER)")
    pads = n.attr("pads") or [0, 0, 0, 0]
    return strides, dilations, [(pads[0], pads[2]), (pads[1], pads[3])]


def _conv(n: _Node) -> list[Value]:
    x, w = n.t(0), n.t(1)
    strides, dilations, pads = _spatial(n, x, n.attr("kernel_shape") or w.shape[2:])
    if len({p for pair in pads for p in pair}) == 1:
        padding = pads[0][0]
    else:  # asymmetric padding: pad first
        x, padding = x.pad(((0, 0), (0, 0), *pads)), 0
    bias = n.t(2) if n.has(2) else None
    return [x.conv2d(w, bias, stride=tuple(strides), padding=padding, dilation=tuple(dilations), groups=n.attr("group", 1))]


def _pool(op: str) -> Callable[[_Node], list[Value]]:
    def translate(n: _Node) -> list[Value]:
        x, kernel = n.t(0), n.attr("kernel_shape") or []
        if len(n.proto.output) > 1 and n.proto.output[1]:
            raise UnsupportedError("the Indices output is not supported")
        if n.attr("ceil_mode", 0):
            raise UnsupportedError("ceil_mode=1 is not supported")
        if n.attr("storage_order", 0):
            raise UnsupportedError("storage_order=1 is not supported")
        strides, dilations, pads = _spatial(n, x, kernel)
        if op == "maxpool2d":
            return [x.maxpool2d(kernel, strides, pads, dilations)]
        return [x.avgpool2d(kernel, strides, pads, dilations, bool(n.attr("count_include_pad", 0)))]

    return translate


def _or_equal(method: str) -> Callable[[_Node], list[Value]]:
    """LessOrEqual and GreaterOrEqual as (a < b) or (a == b): false for NaN, as in ONNX."""
    def translate(n: _Node) -> list[Value]:
        a, b = n.t(0), n.t(1)
        return [getattr(a, method)(b).logical_or(a.eq(b))]

    return translate


def _pad(n: _Node) -> list[Value]:
    mode = n.attr("mode", "constant")
    if mode != "constant":
        raise UnsupportedError(f"mode={mode!r} (only constant padding)")
    x, pads = n.t(0), n.ints(1, "pads")
    axes = [a % x.ndim for a in n.ints(3, "axes") or range(x.ndim)]
    value = np.asarray(n.const(2, "constant_value")).item() if n.has(2) else 0
    half = len(pads) // 2
    widths = {a: (pads[k], pads[half + k]) for k, a in enumerate(axes)}
    return [x.pad(tuple(widths.get(a, (0, 0)) for a in range(x.ndim)), value)]


def _range(n: _Node) -> list[Value]:
    start, limit, delta = (n.const(i, what) for i, what in enumerate(("start", "limit", "delta")))
    if not delta:
        raise UnsupportedError("delta is 0")
    return [np.arange(start, limit, delta, dtype=np.asarray(start).dtype)]


def _global_average_pool(n: _Node) -> list[Value]:
    x = n.t(0)
    return [x.mean(tuple(range(2, x.ndim)), keepdim=True)]


_OPS: dict[str, Callable[[_Node], list[Value]]] = {
    "MatMul": _matmul, "Gemm": _gemm,
    "Add": _binary("__add__"), "Sub": _binary("__sub__"), "Mul": _binary("__mul__"), "Div": _binary("__truediv__"),
    "Pow": _pow, "Neg": _unary("__neg__"), "Abs": _unary("abs"), "Sqrt": _unary("sqrt"),
    "Reciprocal": _unary("recip"), "Exp": _unary("exp"), "Log": _unary("log"), "Tanh": _unary("tanh"),
    "Sigmoid": _unary("sigmoid"), "Relu": _unary("relu"), "LeakyRelu": _leaky_relu, "Erf": _unary("erf"),
    "Gelu": _gelu, "Softmax": _softmax("softmax"), "LogSoftmax": _softmax("log_softmax"),
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "ReduceSum": _reduce("sum", 13), "ReduceMean": _reduce("mean", 18), "ReduceMax": _reduce("max", 18),
    "Reshape": _reshape, "Transpose": _transpose, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Flatten": _flatten, "Expand": _expand, "Concat": _concat, "Slice": _slice, "Split": _split,
    "Gather": _gather, "Where": _where, "Equal": _binary("eq"), "Less": _binary("cmplt"),
    "Greater": _binary("cmpgt"), "Not": _unary("logical_not"),
    "LessOrEqual": _or_equal("cmplt"), "GreaterOrEqual": _or_equal("cmpgt"), "And": _binary("logical_and"),
    "Or": _binary("logical_or"), "Range": _range, "Pad": _pad, "Cast": _cast, "Constant": _constant,
    "ConstantOfShape": _constant_of_shape, "Shape": _shape, "Identity": _identity, "Dropout": _dropout,
    "Conv": _conv, "MaxPool": _pool("maxpool2d"), "AveragePool": _pool("avgpool2d"),
    "GlobalAveragePool": _global_average_pool, "Clip": _clip, "Min": _variadic("minimum"), "Max": _variadic("maximum"),
}
SUPPORTED_OPS = tuple(sorted(_OPS))


def _fold(n: _Node, outs: list[Value], names: list[str]) -> list[Value]:
    """Outputs computed from known inputs only, as arrays (by the reference interpreter), when small.

    Float weights are not folded (a Gather of an embedding stays in the program, where it can be seen).
    """
    inputs = [n.imp.values[name] for name in names]
    if not inputs or not all(isinstance(v, np.ndarray) for v in inputs):
        return outs
    if any(name in n.imp.weight_names and v.dtype.kind == "f" for name, v in zip(names, inputs)):
        return outs
    tensors = [o for o in outs if isinstance(o, Tensor)]
    if not tensors or any(math.prod(t.shape) > FOLD_ELEMENTS for t in tensors):
        return outs
    if any(o.op == "input" for o in tensors):  # Identity of an initializer: keep it as it is
        return outs
    named = {f"o{k}": o for k, o in enumerate(outs) if isinstance(o, Tensor)}
    program = from_tensors(named)
    got = evaluate(program.lower(), program.input_values())
    return [got[f"o{k}"] if isinstance(o, Tensor) else o for k, o in enumerate(outs)]


def _attributes(proto: Any) -> dict[str, Any]:
    from onnx import helper

    def text(v: Any) -> Any:  # string attributes come as bytes
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else v

    return {a.name: text(helper.get_attribute_value(a)) for a in proto.attribute}


def _location(k: int, proto: Any) -> str:
    return f"node {k} {proto.name!r} ({proto.op_type})" if proto.name else f"node {k} ({proto.op_type})"


MAX_MODEL_BYTES = 2 << 30
"""protobuf cannot parse a message over 2 GiB; bigger models keep their weights in external files."""


def _read(path: Path) -> Any:
    try:
        import onnx
    except ImportError:
        raise GraphError("reading ONNX models needs the onnx package: pip install 'zyx-explore[onnx]'",
                         source=str(path)) from None
    data = read_source(path, MAX_MODEL_BYTES, "an ONNX model", "protobuf's own limit; keep big weights external")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning-like errors, ValueError ...
        raise FormatError(f"not an ONNX model (the protobuf does not parse: {type(e).__name__})", source=str(path)) from None
    if model.ir_version == 0 or not model.HasField("graph") or not (model.graph.node or model.graph.output):
        raise FormatError("not an ONNX model (it has no graph)", source=str(path))
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(path.parent))
        except Exception as e:
            raise GraphError(f"cannot load the external weights: {e}", source=str(path)) from None
    return model


def _default_opset(model: Any) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 0


def _input_init(imp: _Import, model: Any, name: str, dtype: DType) -> Init:
    """Random values; integer inputs that index a Gather are drawn from that axis's range (token ids)."""
    init = Init.for_name(imp.id_of(name))
    if dtype.is_int:
        for node in model.graph.node:
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
                data = imp.values.get(node.input[0])
                if data is not None and data.shape:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % len(data.shape)
                    return Init.uniform(init.params["seed"], 0, data.shape[axis])
    return init


def _graph_inputs(imp: _Import, model: Any, dims: Mapping[str, int], problems: list[str]) -> None:
    """Tensors for the graph inputs that are not initializers."""
    missing: dict[str, list[str]] = {}
    for proto in model.graph.input:
        if proto.name in imp.values:
            continue
        kind = proto.type.WhichOneof("value")
        if kind != "tensor_type":
            problems.append(f"graph input {proto.name!r}: a {kind or 'missing'} type, not a tensor")
            continue
        ttype = proto.type.tensor_type
        try:
            dtype = _dtype(ttype.elem_type, f"graph input {proto.name!r}")
        except UnsupportedError as e:
            problems.append(str(e))
            continue
        if not ttype.HasField("shape"):
            problems.append(f"graph input {proto.name!r} has no shape in the model")
            continue
        shape = []
        for k, d in enumerate(ttype.shape.dim):
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            elif d.dim_param and d.dim_param in dims:
                shape.append(dims[d.dim_param])
            else:
                missing.setdefault(d.dim_param or f"{proto.name}[{k}] (unnamed)", []).append(proto.name)
                shape.append(1)
        imp.values[proto.name] = Tensor.input(imp.id_of(proto.name), tuple(shape), dtype,
                                              _input_init(imp, model, proto.name, dtype))
    symbolic = {d.dim_param for p in model.graph.input for d in p.type.tensor_type.shape.dim if d.dim_param}
    for name in dims:
        if name not in symbolic:
            problems.append(f"--dim {name}: the model has no symbolic dimension {name!r} "
                            f"(it has: {', '.join(sorted(symbolic)) or 'none'})")
    if missing:
        named = "; ".join(f"{dim} (in {', '.join(sorted(set(users)))})" for dim, users in missing.items())
        example = next((d for d in missing if " " not in d), "batch")
        problems.append(f"symbolic dimensions need a value: {named}; give them with --dim {example}=VALUE")


def npy_writer(directory: Path, prefix: str) -> Callable[[str, np.ndarray], Init]:
    """Writes each big initializer as ``directory/PREFIX.ID.npy`` (small ones are inline values)."""

    def write(tensor_id: str, value: np.ndarray) -> Init:
        if value.size <= INLINE_ELEMENTS:
            return Init("values", {"values": value.tolist()}) if value.size else Init("zeros")
        path = directory / f"{prefix}.{tensor_id}.npy"
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, np.ascontiguousarray(value), allow_pickle=False)
        tmp.replace(path)
        return Init("npy", {"path": str(path)})

    return write


def cache_weights_dir(path: Path) -> Path:
    """Where an opened model's weights go when no directory is given: beside the tuning cache, by the model's hash."""
    return cache_root() / "onnx" / hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def load_onnx(path: str | Path, dims: Mapping[str, int] | None = None, weights_dir: str | Path | None = None,
              weights_prefix: str | None = None) -> Program:
    """Import the ONNX model at ``path``; raises one GraphError listing every problem.

    ``dims`` gives symbolic dimensions; big initializers are written as ``PREFIX.ID.npy`` files to
    ``weights_dir`` (default: the cache directory, keyed by the model's hash; prefix: the model's stem).
    """
    path = Path(path)
    model = _read(path)
    directory = Path(weights_dir) if weights_dir is not None else cache_weights_dir(path)
    imp = _Import(npy_writer(directory.resolve(), weights_prefix or path.stem), model=model)
    try:
        program = _translate(imp, model, dict(dims or {}))
    except GraphError as e:
        raise e.within("", str(path)) from None
    return Program(program.inputs, program.nodes, program.outputs, program.name, program.description, directory.resolve())


def _translate(imp: _Import, model: Any, dims: dict[str, int]) -> Program:
    from onnx import numpy_helper

    problems = imp.problems
    opset = _default_opset(model)
    if opset < MIN_OPSET:
        raise GraphError(f"default-domain opset {opset}: only opset {MIN_OPSET} and later are supported "
                         "(convert with onnx.version_converter)")
    graph = model.graph
    for t in graph.initializer:
        try:
            _dtype(t.data_type, f"initializer {t.name!r}")
            imp.values[t.name] = numpy_helper.to_array(t)
            imp.weight_names.add(t.name)
            imp.id_of(t.name)
        except UnsupportedError as e:
            problems.append(str(e))
    _graph_inputs(imp, model, dims, problems)
    for k, proto in enumerate(graph.node):
        if proto.domain not in ("", "ai.onnx"):
            problems.append(f"{_location(k, proto)}: domain {proto.domain!r} is not supported (only the default domain)")
        elif proto.op_type not in _OPS:
            problems.append(f"{_location(k, proto)}: the op {proto.op_type} is not supported")
    defined = set(imp.values)
    for k, proto in enumerate(graph.node):
        undefined = [name for name in proto.input if name and name not in defined]
        if undefined:
            problems.append(f"{_location(k, proto)}: reads {', '.join(map(repr, undefined))} before any node or "
                            "input defines it")
        defined.update(proto.output)
    problems += [f"graph output {o.name!r} is not defined by any node or input" for o in graph.output
                 if o.name not in defined]
    for k, proto in enumerate(graph.node):
        if proto.op_type in _OPS and proto.domain in ("", "ai.onnx"):
            _translate_node(imp, k, proto, opset)
        else:
            for name in proto.output:
                if name in imp.inferred:
                    imp.values[name] = Tensor.input(imp.id_of(name), *imp.inferred[name])
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        raise GraphError(f"cannot import this model ({count}):\n  " + "\n  ".join(problems))
    outputs: dict[str, Tensor] = {}
    for proto in graph.output:
        value, out_id = imp.tensor(proto.name), imp.id_of(proto.name)
        # an output that is another value (Identity of an input) gets its own node, under the model's name
        outputs[out_id] = value if value.name == out_id else value.reshape(value.shape).named(out_id)
    return from_tensors(outputs, name=graph.name or "onnx", description=f"imported from ONNX (opset {opset})")


def _inferred_types(model: Any) -> dict[str, tuple[tuple[int, ...], DType]]:
    """name -> (shape, dtype) of every value ONNX's shape inference types statically (empty if it fails)."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # inference is only a help for error reports
        return {}
    out = {}
    for info in inferred.graph.value_info:
        ttype = info.type.tensor_type
        if ttype.elem_type in _DTYPES and ttype.HasField("shape") and all(d.HasField("dim_value") for d in ttype.shape.dim):
            out[info.name] = (tuple(d.dim_value for d in ttype.shape.dim), _DTYPES[ttype.elem_type])
    return out


def _translate_node(imp: _Import, k: int, proto: Any, opset: int) -> None:
    """Translate one node into ``imp.values``; a problem is recorded (its outputs stay unknown)."""
    if any(name and name not in imp.values for name in proto.input):
        return  # depends on a node that failed: that node's problem is already reported
    node = _Node(imp, proto, _attributes(proto), opset)
    try:
        outs = _OPS[proto.op_type](node)
        unused = sorted(set(node.attrs) - node.used)
        if unused:
            raise UnsupportedError(f"attribute{'s' if len(unused) > 1 else ''} {', '.join(unused)} not supported")
        outs = _fold(node, outs, [i for i in proto.input if i])
    except UnsupportedError as e:
        imp.problems.append(f"{_location(k, proto)}: {e}")
        return
    except GraphError as e:
        imp.problems.append(f"{_location(k, proto)}: {e.message}")
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError) as e:  # a malformed node
        imp.problems.append(f"{_location(k, proto)}: malformed ({type(e).__name__}: {e})")
    else:
        for name, value in zip(proto.output, outs):
            if name:
                imp.values[name] = value.named(imp.id_of(name)) if _unnamed(value) else value
        return
    for name in proto.output:  # stand-ins typed by ONNX's shape inference, so later nodes are checked too
        if name in imp.inferred:
            imp.values[name] = Tensor.input(imp.id_of(name), *imp.inferred[name])


def _unnamed(value: Value) -> bool:
    return isinstance(value, Tensor) and value.op != "input" and value.name is None

