"""Renderers: a kernel in a variant as source text (``base``: the C-style emitter they share; ``opencl``, ``rows``,
``c``, ``cuda``: its subclasses). What variant applies and how it launches is ``engine.kernel.schedule``'s."""
