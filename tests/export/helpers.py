import subprocess

import sample_graphs
from engine import load
from engine.devices import LibraryDevice, NumpyDevice
from engine.pipeline import Compilation, compile_program

SAMPLES = ("mlp.small", "attention.small", "transpose_fusion.small", "conv_relu.small", "softmax.small")

_CACHE: dict[str, Compilation] = {}


def compiled(name: str) -> Compilation:
    """``name`` compiled (and run) for numpy and BLAS, once per session."""
    if name not in _CACHE:
        _CACHE[name] = compile_program(load(sample_graphs.path(name)), [NumpyDevice(), LibraryDevice()])
    return _CACHE[name]


def render_svg(source: str) -> str:
    """``source`` through ``dot -Tsvg``, failing on any error or warning (e.g. an lhead to no cluster)."""
    done = subprocess.run(["dot", "-Tsvg"], input=source.encode(), capture_output=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert not done.stderr.strip(), done.stderr.decode()
    return done.stdout.decode()

