"""The ``T`` screen: where the time of the plan went (a lane per device, memory per pool, the longest steps)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header

from engine import Timeline
from zyx_explorer.widgets.timeline_view import TimelineView


class TimelineScreen(Screen[None]):
    """The timelines of the plan (and of the pinned what-if); escape, q or t goes back."""

    BINDINGS: ClassVar = [Binding("escape,q,T", "dismiss", "Back", id="timeline-close")]
    AUTO_FOCUS = "#timeline-scroll"

    def __init__(self, sections: Sequence[tuple[str, Timeline]], short: Mapping[str, str]) -> None:
        super().__init__()
        self.sections, self.short = sections, short

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="timeline-scroll"):
            yield TimelineView(self.sections, self.short, id="timeline")
        yield Footer()
