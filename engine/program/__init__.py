"""Tensor programs: dtypes, the op set, graph.json, the builder API, lowering, the reference interpreter."""
