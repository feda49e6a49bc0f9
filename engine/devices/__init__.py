"""Devices that run kernels: numpy on the host, BLAS library kernels, OpenCL (pyopencl)."""
