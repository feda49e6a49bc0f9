"""A Pygments lexer for the kernel IR's text, so that its highlighting is ours and not the Python lexer's (whose
token set changes between Pygments releases: 2.21 made ``sum`` a builtin, and the snapshots with it)."""

from __future__ import annotations

from typing import ClassVar

from pygments.lexer import RegexLexer, words
from pygments.token import Keyword, Name, Number, Operator, Punctuation, Text, Whitespace


class KernelIRLexer(RegexLexer):
    """``kernel k(in0: f32[16]) -> (out0: f32[16])``, ``for g0 < 16:``, ``acc: f32 = sum over r0 < 16 of:``."""

    name = "zyx kernel IR"
    aliases: ClassVar = ["zyx-ir"]
    tokens: ClassVar = {
        "root": [
            (r"\s+", Whitespace),
            (words(("kernel", "for", "over", "of"), suffix=r"\b"), Keyword),
            (r"(sum|max|min|prod)(?=\s+over\b)", Keyword),
            (r"\b(bool|[fiu](8|16|32|64))\b", Keyword.Type),
            (r"\b[a-z_][a-z0-9_]*(?=\()", Name.Function),
            (r"-?\d+\.\d*(e[+-]?\d+)?|-?\d+e[+-]?\d+|\binf\b|\bnan\b", Number.Float),
            (r"\d+", Number.Integer),
            (r"[A-Za-z_]\w*", Name),
            (r"->|[-+*/%<>=]", Operator),
            (r"[()\[\],:]", Punctuation),
            (r".", Text),
        ],
    }
