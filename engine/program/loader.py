"""Reading graph.json into a validated Program, every mistake reported at its JSON location.

``SizeLimits`` refuse, before anything big is allocated, files whose tensors, node count or
nesting would exhaust memory (or the parser's stack), each with a located message.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from engine import units
from engine.errors import CycleError, FormatError, GraphError, ShapeError, TensorNameError
from engine.fileio import UnsafeFileError, read_bounded
from engine.program.dtypes import DType
from engine.program.init import Init, parse_init
from engine.program.lowering import infer
from engine.program.opset import OPS
from engine.program.program import FORMAT_VERSION, Input, Node, Program

_TOP_KEYS = {"version", "name", "description", "inputs", "nodes", "outputs"}


@dataclass(frozen=True)
class SizeLimits:
    """The largest graph.json the loader accepts, and where its .npy files may be."""

    file_bytes: int = 256 << 20
    nodes: int = 100_000
    depth: int = 100
    """JSON nesting (objects and lists inside each other)."""
    rank: int = 32
    tensor_bytes: int = 16 << 30
    """Bytes of any one tensor, input or node."""
    input_bytes: int = 64 << 30
    """Bytes of all inputs together (they are materialised to run the program)."""
    npy_anywhere: bool = False
    """Whether a .npy path may lead outside the graph's folder (absolute, ``..``, a symlink out)."""


def _bytes(n: int) -> str:
    if n.bit_length() > 100:  # beyond any float (and, whole, beyond int-to-text limits)
        return f"about 2^{n.bit_length() - 1} bytes"
    return f"{n:,} bytes" + (f" ({units.nbytes(n)})" if n >= 2**30 else "")


def _check_size(shape: tuple[int, ...], itemsize: int, limits: SizeLimits, location: str) -> int:
    """The tensor's bytes; ShapeError when its rank or size is beyond ``limits``."""
    if len(shape) > limits.rank:
        raise ShapeError(f"{len(shape)} axes: at most {limits.rank} axes are supported", location)
    nbytes = math.prod(shape) * itemsize
    if nbytes > limits.tensor_bytes:
        raise ShapeError(f"shape {list(shape)} needs {_bytes(nbytes)}: more than the limit of "
                         f"{_bytes(limits.tensor_bytes)} per tensor", location)
    return nbytes


_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""A string (unrolled: constant memory for long strings) or a bracket."""


def _too_deep(text: str, depth: int) -> FormatError | None:
    """An error at the first bracket nested deeper than ``depth`` (strings skipped), or None."""
    level = 0
    for m in _TOKENS.finditer(text):
        ch = m.group()[0]
        if ch in "[{":
            level += 1
            if level > depth:
                line = text.count("\n", 0, m.start()) + 1
                column = m.start() - text.rfind("\n", 0, m.start())
                # the place is in the message: a location would make the error look like a JSON syntax error
                return FormatError(f"nested too deeply: more than {depth} levels at line {line} column {column}")
        elif ch in "]}":
            level -= 1
    return None
_INPUT_KEYS = {"shape", "dtype", "init"}
_NODE_KEYS = {"id", "op", "args", "attrs"}


def load(path: str | Path, limits: SizeLimits = SizeLimits()) -> Program:
    """Read and validate a graph.json file; raises GraphError naming the file and place."""
    path = Path(path)
    data = read_source(path, limits.file_bytes, "a graph.json file", "store big values in .npy files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
    return loads(text, base_dir=path.resolve().parent, source=str(path), limits=limits)


def read_source(path: Path, limit: int, kind: str, advice: str) -> bytes:
    """The bytes of the file ``path`` (``kind``, e.g. "an ONNX model"): a located GraphError when it is missing, a
    folder, not a regular file (a FIFO would block), over ``limit`` bytes (with ``advice``) or unreadable."""
    try:
        if path.is_dir():
            raise GraphError(f"is a directory, not {kind}", source=str(path))
        size = path.stat().st_size
        if size > limit:
            raise FormatError(f"{size:,} bytes: more than the limit of {limit:,} bytes for {kind} ({advice})",
                              source=str(path))
        return read_bounded(path, limit)
    except FileNotFoundError:
        raise GraphError("no such file", source=str(path)) from None
    except UnsafeFileError:
        raise GraphError("not a regular file (a pipe or a device is not read)", source=str(path)) from None
    except OSError as e:
        raise GraphError(f"cannot read: {e.strerror}", source=str(path)) from None


def loads(text: str, base_dir: Path | None = None, source: str = "", limits: SizeLimits = SizeLimits()) -> Program:
    """Parse graph.json text; ``base_dir`` resolves relative .npy paths."""
    try:
        deep = _too_deep(text, limits.depth)
        if deep is not None:
            raise deep
        duplicated: list[dict] = []
        try:
            doc = json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, duplicated),
                             parse_constant=lambda name: _nonstandard(text, name), parse_float=lambda literal: _finite(text, literal))
        except json.JSONDecodeError as e:
            raise FormatError(f"invalid JSON: {e.msg}", f"line {e.lineno} column {e.colno}") from None
        except ValueError as e:  # an integer longer than Python's digit limit
            raise FormatError(f"invalid JSON: {e}") from None
        if duplicated:
            _find_duplicate(doc, "")
        reject_unencodable(doc, text)
        return parse(doc, base_dir or Path.cwd(), limits)
    except GraphError as e:
        raise e.within("", source) from None
    except RecursionError:
        raise FormatError("nested too deeply", source=source) from None


_SPELLED = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def _finite(text: str, literal: str) -> float:
    """A JSON number; one beyond f64 (1e400) is an error, not infinity, as a constant beyond its dtype is."""
    value = float(literal)
    if math.isinf(value):
        raise FormatError(f"the number {literal} is too large for f64; write the string \"inf\" for infinity",
                          _first_use(text, literal))
    return value


def _nonstandard(text: str, name: str) -> NoReturn:
    """Reject Python's JSON extensions NaN, Infinity and -Infinity, located at their first use."""
    spelled = _SPELLED[name]
    raise FormatError(f"invalid JSON: {name} is not JSON; write the string {spelled!r} instead",
                      _first_use(text, name))


def _first_use(text: str, token: str) -> str:
    """``line L column C`` of the first ``token`` of ``text`` outside strings ("" if not found)."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: " " * len(m.group()), text)
    found = re.search(r"(?<![\w.+-])" + re.escape(token) + r"(?![\w.])", unquoted)
    if found is None:
        return ""
    line = text.count("\n", 0, found.start()) + 1
    return f"line {line} column {found.start() - text.rfind(chr(10), 0, found.start())}"


class _Duplicated(dict):
    """A decoded JSON object in which the key ``duplicate`` appeared more than once."""

    duplicate: str = ""


def _unique_keys(pairs: list[tuple[str, Any]], duplicated: list[dict]) -> dict[str, Any]:
    """A decoded object; one with a repeated key becomes a _Duplicated, also noted in ``duplicated``."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and not isinstance(out, _Duplicated):
            out = _Duplicated(out)
            out.duplicate = key
            duplicated.append(out)
        out[key] = value
    return out


def _find_duplicate(value: Any, location: str) -> None:
    """Raise at the JSON path of the first key that appears twice in one object (the hook cannot know paths)."""
    if isinstance(value, _Duplicated):
        key = value.duplicate
        raise FormatError(f"the key {key!r} appears twice in one object", f"{location}.{key}" if location else key)
    if isinstance(value, dict):
        for key, item in value.items():
            _find_duplicate(item, f"{location}.{key}" if location else key)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            _find_duplicate(item, f"{location}[{k}]")


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: decoded alone (not in a pair) it is a string no output can encode."""


def reject_unencodable(doc: Any, text: str) -> None:
    """FormatError at the first string of ``doc`` (decoded from ``text``) that holds a lone surrogate."""
    if _ESCAPED_SURROGATE.search(text):  # only then is a walk over the document needed
        _check_encodable(doc, "")


def _check_encodable(value: Any, location: str) -> None:
    """Raise at the JSON path of the first string (key or value) holding a lone surrogate (``"\\udc00"``)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise FormatError(f"the string holds a lone surrogate \\u{ord(value[e.start]):04x} (not a character; "
                              "it cannot be printed or written)", location) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            shown = key.encode("utf-8", "backslashreplace").decode()
            where = f"{location}.{shown}" if location else shown
            _check_encodable(key, where)
            _check_encodable(item, where)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            _check_encodable(item, f"{location}[{k}]")


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _expect(value: Any, kind: type | tuple[type, ...], what: str, location: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))):
        raise FormatError(f"expected {what}, got {json.dumps(value)[:60]}", location)
    return value


def _check_keys(obj: Mapping[str, Any], allowed: set[str], location: str) -> None:
    for key in obj:
        if key not in allowed:
            raise FormatError(f"unknown key {key!r}{_suggest(key, allowed)} (allowed: {', '.join(sorted(allowed))})",
                              f"{location}.{key}" if location else key)


def parse(doc: Any, base_dir: Path, limits: SizeLimits = SizeLimits()) -> Program:
    """Validate a decoded graph.json document."""
    _expect(doc, dict, "a JSON object with inputs, nodes and outputs", "")
    _check_keys(doc, _TOP_KEYS, "")
    version = doc.get("version", FORMAT_VERSION)
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise FormatError(f"unsupported version {doc['version']!r} (this reader knows version {FORMAT_VERSION})", "version")
    name = _expect(doc.get("name", ""), str, "a string", "name")
    description = _expect(doc.get("description", ""), str, "a string", "description")
    for key in ("inputs", "nodes", "outputs"):
        if key not in doc:
            raise FormatError(f"missing the {key!r} key", "")
    inputs = _parse_inputs(_expect(doc["inputs"], dict, "an object of name -> input", "inputs"), base_dir, limits)
    types = {i.name: (i.shape, i.dtype) for i in inputs}
    raw_nodes = _expect(doc["nodes"], list, "a list of nodes", "nodes")
    if len(raw_nodes) > limits.nodes:
        raise FormatError(f"{len(raw_nodes):,} nodes: more than the limit of {limits.nodes:,}", "nodes")
    nodes = [_parse_node(raw, i) for i, raw in enumerate(raw_nodes)]
    order = _dependency_order(nodes, types)
    typed: list[Node] = []
    for i in order:
        node_id, op, args, attrs = nodes[i]
        try:
            shape, dtype = infer(op, [types[a] for a in args], attrs)
            complete = OPS[op].complete(attrs)
            _check_size(shape, dtype.itemsize, limits, "")
        except GraphError as e:
            raise e.within(f"nodes[{i}]") from None
        types[node_id] = (shape, dtype)
        typed.append(Node(node_id, op, args, complete, shape, dtype))
    outputs = _parse_outputs(doc["outputs"], types)
    return Program(tuple(inputs), tuple(typed), outputs, name, description, base_dir)


def _parse_inputs(raw: dict[str, Any], base_dir: Path, limits: SizeLimits) -> list[Input]:
    inputs = []
    total = 0
    for name, spec in raw.items():
        loc = f"inputs.{name}"
        if not name:
            raise TensorNameError("an input name must not be empty", loc)
        _expect(spec, dict, "an object with shape, dtype and init", loc)
        _check_keys(spec, _INPUT_KEYS, loc)
        if "shape" not in spec:
            raise FormatError("missing the 'shape' key", loc)
        shape = spec["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise ShapeError(f"expected a list of integers, got {json.dumps(shape)[:60]}", f"{loc}.shape")
        if any(d < 0 for d in shape):
            raise ShapeError(f"dimensions must be >= 0, got {shape}", f"{loc}.shape")
        try:
            dtype = DType.parse(spec.get("dtype", "f32"))
        except GraphError as e:
            raise e.within(f"{loc}.dtype") from None
        total += _check_size(tuple(shape), dtype.itemsize, limits, f"{loc}.shape")
        if total > limits.input_bytes:
            raise ShapeError(f"the inputs hold {_bytes(total)} together up to here: more than the limit of "
                             f"{_bytes(limits.input_bytes)}", loc)
        try:
            init = (parse_init(spec["init"], tuple(shape), dtype, base_dir, limits.npy_anywhere) if "init" in spec
                    else Init.for_name(name))
        except GraphError as e:
            raise e.within(f"{loc}.init") from None
        inputs.append(Input(name, tuple(shape), dtype, init))
    return inputs


def _parse_node(raw: Any, i: int) -> tuple[str, str, tuple[str, ...], dict[str, Any]]:
    loc = f"nodes[{i}]"
    _expect(raw, dict, "a node object with id, op, args and attrs", loc)
    _check_keys(raw, _NODE_KEYS, loc)
    for key in ("id", "op"):
        if key not in raw:
            raise FormatError(f"missing the {key!r} key", loc)
    node_id = _expect(raw["id"], str, "a string id", f"{loc}.id")
    if not node_id:
        raise TensorNameError("a node id must not be empty", f"{loc}.id")
    op = _expect(raw["op"], str, "an op name", f"{loc}.op")
    if op not in OPS:
        raise GraphError(f"unknown op {op!r}{_suggest(op, OPS)}", f"{loc}.op")
    args = _expect(raw.get("args", []), list, "a list of tensor names", f"{loc}.args")
    for j, arg in enumerate(args):
        _expect(arg, str, "a tensor name", f"{loc}.args[{j}]")
    attrs = _expect(raw.get("attrs", {}), dict, "an object of attributes", f"{loc}.attrs")
    return node_id, op, tuple(args), attrs


def _dependency_order(nodes: list[tuple[str, str, tuple[str, ...], dict]], types: dict) -> list[int]:
    """Node indices ordered so every node follows its arguments (the file may list them in any order)."""
    index: dict[str, int] = {}
    for i, (node_id, *_rest) in enumerate(nodes):
        if node_id in types:
            raise TensorNameError(f"id {node_id!r} is already the name of an input", f"nodes[{i}].id")
        if node_id in index:
            raise TensorNameError(f"duplicate id {node_id!r} (also nodes[{index[node_id]}])", f"nodes[{i}].id")
        index[node_id] = i
    for i, (_id, _op, args, _attrs) in enumerate(nodes):
        for j, arg in enumerate(args):
            if arg not in types and arg not in index:
                raise TensorNameError(f"unknown tensor {arg!r}{_suggest(arg, [*types, *index])}", f"nodes[{i}].args[{j}]")
    order: list[int] = []
    state = [0] * len(nodes)  # 0 unvisited, 1 on the stack, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        stack = [(root, 0)]
        state[root] = 1
        while stack:
            i, j = stack.pop()
            deps = [index[a] for a in nodes[i][2] if a in index]
            if j < len(deps):
                stack.append((i, j + 1))
                d = deps[j]
                if state[d] == 1:
                    cycle = [nodes[k][0] for k, _ in stack[[k for k, _ in stack].index(d):]] + [nodes[d][0]]
                    raise CycleError(f"cycle: {' -> '.join(reversed(cycle))}", f"nodes[{d}]")
                if state[d] == 0:
                    state[d] = 1
                    stack.append((d, 0))
            else:
                state[i] = 2
                order.append(i)
    return order


def _parse_outputs(raw: Any, types: dict) -> tuple[str, ...]:
    _expect(raw, list, "a list of tensor names", "outputs")
    if not raw:
        raise FormatError("a program needs at least one output", "outputs")
    seen: dict[str, int] = {}
    for k, name in enumerate(raw):
        _expect(name, str, "a tensor name", f"outputs[{k}]")
        if name not in types:
            raise TensorNameError(f"unknown tensor {name!r}{_suggest(name, types)}", f"outputs[{k}]")
        if name in seen:
            raise TensorNameError(f"{name!r} is listed twice (also outputs[{seen[name]}])", f"outputs[{k}]")
        seen[name] = k
    return tuple(raw)
