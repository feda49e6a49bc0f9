"""The kernel IR's own lexer: every token of a real kernel is recognised, reduces read as keywords."""

from __future__ import annotations

from pygments.token import Error, Keyword

import engine
import sample_graphs
from engine.devices import NumpyDevice
from engine.pipeline import Options, compile_program
from zyx_explorer.widgets.ir_lexer import KernelIRLexer


def test_ir_lexer_covers_real_kernels():
    c = compile_program(engine.load(sample_graphs.path("softmax.small")), [NumpyDevice()],
                        Options(tune=False, tune_cache=False, execute=False))
    for cand in c.kernelization.candidates.values():
        tokens = list(KernelIRLexer().get_tokens(str(cand.kernel)))
        assert not [v for t, v in tokens if t in Error]
        assert "".join(v for _, v in tokens) == str(cand.kernel) + "\n"
    reduce = [(t, v) for t, v in KernelIRLexer().get_tokens("acc: f32 = sum over r0 < 16 of:") if v.strip()]
    assert reduce[4:6] == [(Keyword, "sum"), (Keyword, "over")]
