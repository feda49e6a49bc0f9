"""Kernels: the IR (index arithmetic, loads, one reduce), the kernelizer, cost counts, the variant schedule
(``schedule``) and the renderers that turn a kernel into source (``render``)."""
