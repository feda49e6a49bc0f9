"""Would one launch for swiglu_mlp's two up-projections beat two?  cuBLAS through torch (fp32, TF32 off).

    python benchmarks/grouped_gemm.py   # on a machine with torch and a CUDA GPU (h200.sh --grouped: the set-up)

swiglu_mlp multiplies one normalised (512, 1024) activation by two (1024, 4096) weights.  Each product alone is 128
output tiles of 128 x 128, under one wave of the GPU's multiprocessors.  Timed per form, the median of 50 CUDA-event
windows after a warm-up: the two products as two calls; one strided-batched call over the weights stacked (batch 2,
the activation's batch stride 0); one product with the weights side by side (1024, 8192).
"""

from __future__ import annotations

import statistics

import torch


def median_ms(fn, repeats: int = 50) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def forms(rows: int, gen: torch.Generator) -> tuple[float, float, float]:
    """The three forms' ms for a (rows, 1024) activation, each form's result checked against two calls'."""
    x = torch.randn(rows, 1024, device="cuda", generator=gen)
    stacked = torch.randn(2, 1024, 4096, device="cuda", generator=gen) / 32
    gate, up = stacked[0], stacked[1]
    wide = torch.cat([gate, up], dim=1)
    expected = torch.cat([x @ gate, x @ up], dim=1)
    assert torch.allclose(torch.cat(list(torch.bmm(x.expand(2, -1, -1), stacked)), dim=1), expected, atol=1e-4)
    assert torch.allclose(x @ wide, expected, atol=1e-4)
    return (median_ms(lambda: (x @ gate, x @ up)), median_ms(lambda: torch.bmm(x.expand(2, -1, -1), stacked)),
            median_ms(lambda: x @ wide))


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows in (512, 2048):
        two, batched, side = forms(rows, gen)
        print(f"({rows}, 1024) @ 2 x (1024, 4096), ms: two calls {two:.4f}, strided batch of 2 {batched:.4f}, "
              f"side by side {side:.4f}")


if __name__ == "__main__":
    main()
