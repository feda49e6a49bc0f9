"""The rewrite rules, grouped by what they know about: algebra, movement (views), matmul."""

from __future__ import annotations

from engine.egraph.pattern import Rule
from engine.egraph.rules import algebra, matmul, movement

ALL_RULES: tuple[Rule, ...] = (*algebra.RULES, *movement.RULES, *matmul.RULES)


def default_rules(fast_math: bool = False) -> list[Rule]:
    """The exact rules, plus the fast-math ones (valid for finite, in-range values) when asked."""
    return [rule for rule in ALL_RULES if rule.exact or fast_math]


def rules_named(*names: str) -> list[Rule]:
    """The rules with these names; a KeyError names any that does not exist."""
    by_name = {rule.name: rule for rule in ALL_RULES}
    return [by_name[name] for name in names]


assert len({rule.name for rule in ALL_RULES}) == len(ALL_RULES), "rule names must be unique"
