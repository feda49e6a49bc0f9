"""Every variant of a workload's heavy kernels on the CUDA device, checked against the numpy device and timed
beside torch (eager and torch.compile) in the same process: the loop for iterating on one NVRTC kernel family
(the implicit GEMM of a convolution, the row kernels held in registers) without a whole compare.py run.

    python benchmarks/cuda_variants.py [conv_relu layernorm softmax:8192 layernorm:8192 ...] [--repeats 20]
                                       [--default-only]

A name is a sample (``sample_graphs``) or one of compare.py's ``--gpu`` workloads at a size (``softmax:8192``).
Each kernel of the workload's candidates that holds a reduce or row stages and is at least 1 MiB of traffic is
timed in the default variant, the tuner's shared seeds and the device's own (``CublasDevice.seeds``); a cuBLAS
call on the buffers' strides also through ``cupy.matmul``, which copies strided operands and a permuted result; a
siblings kernel's paired products also as two calls.  A sample with attention is also timed by torch with each fp32 backend of its scaled-dot-product attention.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from compare import _torch, _torch_time, gpu_workloads  # this script's folder: run it as compare.py is

import sample_graphs
from engine import load
from engine.devices import cuda_blas
from engine.devices.numpy_device import NumpyDevice
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.pipeline import Options, compile_program
from engine.tuning.space import seeds

EXTRA = (Variant(local_size=64, upcast=8, tile=8, smem=8), Variant(local_size=64, upcast=8, tile=8, smem=16),
         Variant(local_size=128, upcast=4, tile=16, smem=8), Variant(local_size=256, upcast=4, tile=16, smem=8),
         Variant(local_size=128, upcast=4, tile=8, smem=8), Variant(local_size=256, upcast=4, tile=8, smem=32))
"""Implicit-GEMM tiles beyond the device's seeds, timed here to choose the seeds."""


def program(name: str):
    if ":" in name:
        kind, n = name.split(":")
        return gpu_workloads(int(n), int(n))[kind], kind
    return load(sample_graphs.path(name)), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=["conv_relu", "layernorm", "softmax:8192", "layernorm:8192"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--default-only", action="store_true", help="only the default variant (the cuBLAS forms)")
    args = parser.parse_args()
    (device,) = cuda_blas.discover()[:1]
    torch = _torch()
    host = NumpyDevice()
    rng = np.random.default_rng(0)
    for name in args.names:
        prog, kind = program(name)
        c = compile_program(prog, [host], Options(tune=False, tune_cache=False, execute=False))
        values = prog.input_values()
        if torch is not None:
            eager = _torch_time(torch, kind or prog, values, args.repeats)
            compiled = _torch_time(torch, kind or prog, values, args.repeats, compiled=True)
            print(f"\n== {name}: torch eager {eager * 1e3:.4f} ms, torch.compile {compiled * 1e3:.4f} ms", flush=True)
            if kind is None and any(node.op == "attention" for node in prog.nodes):
                _attention_backends(torch, prog, values, args.repeats)
        for cand in c.kernelization.candidates.values():
            k = cand.kernel
            moved = k.moved_bytes
            if (k.reduce is None and not k.stages) or moved < 1 << 20 or not device.supports(k):
                continue
            print(f"-- {cand.name if hasattr(cand, 'name') else k.name} {k.name} shape {k.shape} "
                  f"{'row ' + str(k.row_size) if k.stages else ''} moves {moved / 2**20:.1f} MiB", flush=True)
            ins = [rng.standard_normal(b.numel).astype(b.dtype.numpy) for b in k.inputs]
            want = [np.full(b.numel, np.nan, b.dtype.numpy) for b in k.output_types]
            host.launch(host.compile(k), ins, want)
            gins = [device.upload(x) for x in ins]
            variants = [DEFAULT_VARIANT] if args.default_only else [DEFAULT_VARIANT, *device.seeds(k), *EXTRA,
                                                                     *seeds(k, True)]
            for v in dict.fromkeys(variants):
                if device.variant_error(k, v) is not None:
                    continue
                try:
                    t0 = time.perf_counter()
                    compiled_k = device.compile(k, v)
                    build = time.perf_counter() - t0
                    forms = [(str(v), compiled_k)]
                    if isinstance(compiled_k, cuda_blas.Matmul) and compiled_k.strided is not None:
                        forms.append((f"{v} by cupy.matmul (copies)", replace(compiled_k, strided=None)))
                    if isinstance(compiled_k, cuda_blas.Siblings) and compiled_k.paired is not None:
                        forms.append((f"{v} as two calls (not paired)", replace(compiled_k, paired=None)))
                    for label, form in forms:
                        _time(device, label, form, k, gins, want, moved, build, args.repeats)
                except Exception as e:  # a build or launch failure is reported, the rest still run
                    print(f"   {v!s:44} FAILED {str(e).splitlines()[0][:200]}", flush=True)


def _time(device, label: str, compiled, k, gins, want, moved: int, build: float, repeats: int) -> None:
    """One line: ``compiled``'s best launch time, checked against the numpy device's outputs ``want``."""
    outs = [device.upload(np.full(b.numel, np.nan, b.dtype.numpy)) for b in k.output_types]
    device.launch(compiled, gins, outs)
    err = max(float(np.max(np.abs(device.download(o, b).reshape(-1) - w))) for o, b, w in
              zip(outs, k.output_types, want))
    scale = max(float(np.max(np.abs(w))) for w in want)
    best = min(device.launch(compiled, gins, outs) for _ in range(repeats))
    ok = "ok" if err <= 1e-4 * max(scale, 1.0) else f"WRONG (max err {err:.3g})"
    print(f"   {label:44} {best * 1e3:8.4f} ms  {moved / best / 1e9:7.0f} GB/s  build {build:.2f} s  {ok}", flush=True)


def _attention_backends(torch, prog, values, repeats: int) -> None:
    """torch's time with each scaled-dot-product-attention backend that takes fp32: which one its default picks,
    and what the math backend (cuBLAS SGEMMs and a softmax, as ours) takes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel(backend):
                eager = _torch_time(torch, prog, values, repeats)
                compiled = _torch_time(torch, prog, values, repeats, compiled=True)
        except RuntimeError as e:  # the backend has no kernel for these inputs
            print(f"   torch with {backend.name} only: {str(e).splitlines()[0][:200]}", flush=True)
            continue
        print(f"   torch with {backend.name} only: eager {eager * 1e3:.4f} ms, torch.compile {compiled * 1e3:.4f} ms",
              flush=True)


if __name__ == "__main__":
    main()
