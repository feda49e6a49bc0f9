"""Kernels: the IR (index arithmetic, loads, one reduce), the kernelizer, cost counts, OpenCL C codegen."""
