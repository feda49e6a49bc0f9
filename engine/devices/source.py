"""What a device actually runs for a kernel variant, as text for the explorer's source pane (``Device.source``):
OpenCL C on an OpenCL device, the native C function (its shared prelude folded), the numpy program of the numpy
device, the matmul call of the BLAS device, cuBLAS calls and CUDA C on a CUDA device.  Showing OpenCL C for a
kernel that runs on numpy would describe code that never ran.  The renderings devices share live here."""

from __future__ import annotations

import re

from engine.devices.base import Device, Source
from engine.devices.chunk_plan import Plan
from engine.kernel.ir import Acc, Const, Expr, Kernel, Load, Op, Where
from engine.kernel.render import opencl
from engine.kernel.schedule import DEFAULT_VARIANT, Variant

REDUCE_UFUNCS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply"}


def device_source(device: Device | None, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
    """What ``device`` runs for ``kernel`` in ``variant`` (``Device.source``); OpenCL C, the portable kernel
    source, when no device is known."""
    return device.source(kernel, variant) if device is not None else opencl_source(kernel, variant)


def opencl_source(kernel: Kernel, variant: Variant) -> Source:
    """The OpenCL C of ``kernel`` in ``variant``."""
    return Source("OpenCL C", "c", opencl.generate(kernel, variant))


def fold_prelude(text: str, function: str) -> str:
    """The C source from the kernel's function on; the includes, typedefs and declarations every native kernel
    shares before it become one comment line."""
    match = re.search(rf"^[^\n#]*\b{re.escape(function)}\w*\(", text, re.MULTILINE)
    if match is None:
        return text
    folded = text[: match.start()].count("\n")
    return f"/* {folded} lines of shared prelude (includes, typedefs, OpenMP reductions, vector math) folded */\n" + \
        text[match.start():]


def numpy_program(p: Plan, kind: str) -> str:
    """The numpy calls a plan makes per chunk, one line per node: a ufunc writing a reused buffer, a view of an
    input, the reduce, or (``blas``) the batched ``np.matmul`` of the contraction's two factors."""
    names: dict[Expr, str] = {}

    def name(e: Expr) -> str:
        return names.setdefault(e, f"t{len(names)}")

    def line(e: Expr) -> str:
        target = name(e)
        if isinstance(e, Load):
            return f"{target} = in{e.input}[{e.index}]  # a view, no copy"
        if isinstance(e, Const):
            return f"{target} = {getattr(e.value, 'value', e.value)!r}  # {e.dtype}"
        if isinstance(e, Acc):
            return f"{target} = acc{e.stage}"
        if isinstance(e, Where):
            return f"{target} = np.where(in bounds, {name(e.then)}, {name(e.otherwise)})"
        assert isinstance(e, Op)
        fn = p.ufuncs.get(e)
        args = ", ".join(name(a) for a in e.args)
        if fn is not None and fn.ufunc is not None:
            slot = p.slots.get(e)
            out = "" if slot is None else f", out=out{-1 - slot}" if slot < 0 else f", out=buf{slot}"
            return f"{target} = np.{fn.ufunc.__name__}({args}{out})"
        return f"{target} = {e.op}({args})  # numpy, rounded to {e.dtype}"

    k = p.kernel
    chunks = p.chunk_count
    lines = [f"# {kind}: {k.name} over {list(k.shape)} in {chunks} chunk{'s' if chunks != 1 else ''}"]
    first = len(k.inputs)
    lines += [f"in{first + i} = {w}  # copied once per launch" for i, w in enumerate(p.windows)]
    if k.reduce is not None:
        head = f"# reduce {k.reduce.op} over {', '.join(f'{v.name} < {v.size}' for v in k.reduce.vars)}"
        if p.factors is not None or p.dot is not None:
            a, b = p.factors or p.dot  # type: ignore[misc]
            lines += [head + ": a contraction", *(line(e) for e in p.body),
                      f"acc0 = np.matmul({name(a)}, {name(b)})  # batched, reshaped to (batch, m, k) @ (batch, k, n)"]
        else:
            combine = REDUCE_UFUNCS.get(k.reduce.op, k.reduce.op)
            lines += [head, *(line(e) for e in p.body), f"acc0 = np.{combine}.reduce({name(k.reduce.body)}, axis=reduce axes)"]
    lines += ["# outputs", *(line(e) for e in p.outputs if e not in names)]
    lines += [f"out{i} = {name(e)}" for i, e in enumerate(k.outputs) if p.slots.get(e) != -1 - i]
    return "\n".join(lines)
