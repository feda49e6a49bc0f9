"""What the explorer's parts tell each other: the compilation worker tells the app, a pane tells the main screen
what the user asked for (the screen decides what every pane then shows)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from engine import ClassId, Variant

# -- from the compilation worker to the app ------------------------------------------------------------------


@dataclass
class StageDone(Message):
    """A stage arrived (``""``: the compilation is over)."""

    stage: str


@dataclass
class TuneProgress(Message):
    """One more variant timed: what the tuner is at, as text."""

    text: str


@dataclass
class CompileFailed(Message):
    error: str


# -- from a pane to the main screen --------------------------------------------------------------------------


@dataclass
class ShowClass(Message):
    """Show e-class ``cid`` in the classes pane (a child link, a plan step, a rewrite)."""

    cid: ClassId
    tab: bool = False
    """Switch to the classes pane."""
    stage: str | None = None
    """The first stage that has the class: viewing an earlier one moves to it."""


@dataclass
class ShowKernel(Message):
    """Show kernel candidate ``candidate`` in the source pane (a costs row, a variant, a Launch step, a form)."""

    candidate: str
    variant: tuple[str, Variant] | None = None
    """(device, variant) to show; None: the one the plan launches."""
    tab: bool = False
    """Switch to the source pane."""


@dataclass
class LocateTensor(Message):
    """Enter on a program tensor: where it went (its class, the kernel that computes it, that plan step)."""

    tensor: str


@dataclass
class OpenClass(Message):
    """Enter on a class row: its forms (in the class detail) take the keys."""

    cid: ClassId
