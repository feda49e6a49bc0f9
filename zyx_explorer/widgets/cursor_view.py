"""A virtualised list of one-line rows with a row cursor: the base of the explorer's tables and lists.

Subclasses hold the rows and draw them (``render_line``); this class moves the cursor, scrolls to it, redraws
only the two rows a cursor move changes, and posts ``Highlighted`` / ``Selected``.  Its virtual height is never
below the view's height, so rows that come and go within one screen change no size: a size change makes
Textual lay the whole screen out and repaint every widget, which is what made keys slow on big e-graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView


class CursorView(ScrollView, can_focus=True):
    """Rows under ``HEADER`` fixed lines; subclasses implement ``row_count``, ``key_at``, ``canvas_width`` and
    ``render_line``, and call ``set_extent`` when their rows change."""

    HEADER: ClassVar[int] = 0
    """Lines above the rows (a table's column labels)."""
    SELECT: ClassVar = Binding("enter", "select", "Select", show=False, key_display="enter", id="select",
                               tooltip="Follow a child link / explain a form / select a row / a program tensor: its "
                                       "class, kernel, plan step")
    """What enter does in each of the explorer's tables and lists (the help screen lists it)."""
    BINDINGS: ClassVar = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        SELECT,
    ]

    cursor: reactive[int] = reactive(0, always_update=True, repaint=False)
    """Index of the highlighted row (``watch_cursor`` repaints the two rows that change, not the whole view)."""

    class Highlighted(Message):
        def __init__(self, view: CursorView, key: Hashable) -> None:
            super().__init__()
            self.table, self.key = view, key

        @property
        def control(self) -> CursorView:
            return self.table

    class Selected(Highlighted):
        """Enter (or a double click) on a row."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._drawn = 0
        """The cursor row last drawn (only it and the new one are redrawn when the view does not scroll)."""
        self.follow: Callable[[Hashable], None] | None = None
        """Called with the new key within the cursor move itself: what it updates is painted in the same frame
        as the cursor (a ``Highlighted`` message is handled after that frame, and paints one more)."""

    @property
    def row_count(self) -> int:
        raise NotImplementedError

    def key_at(self, index: int) -> Hashable:
        raise NotImplementedError

    def canvas_width(self) -> int:
        """Cells a row is wide."""
        raise NotImplementedError

    @property
    def current_key(self) -> Hashable | None:
        return self.key_at(self.cursor) if 0 <= self.cursor < self.row_count else None

    def set_extent(self) -> None:
        """Size the virtual canvas for the current rows (at least the view's height)."""
        size = Size(self.canvas_width(), max(self.row_count + self.HEADER, self.scrollable_content_region.height))
        if size != self.virtual_size:
            self.virtual_size = size

    def on_resize(self, event: events.Resize) -> None:
        self.set_extent()

    # -- cursor ----------------------------------------------------------------------------

    def validate_cursor(self, value: int) -> int:
        return max(0, min(value, self.row_count - 1)) if self.row_count else 0

    def watch_cursor(self, value: int) -> None:
        body = max(1, self.size.height - self.HEADER)
        top = round(self.scroll_y)
        if value < top:
            self.scroll_to(y=value, animate=False, immediate=True)
        elif value >= top + body:
            self.scroll_to(y=value - body + 1, animate=False, immediate=True)
        if round(self.scroll_y) == top:
            for index in {self._drawn, value}:
                self.refresh(Region(0, index - top + self.HEADER, self.size.width, 1))
        else:
            self.refresh()
        self._drawn = value
        if self.row_count:
            key = self.key_at(value)
            if self.follow is not None:
                self.follow(key)
            self.post_message(self.Highlighted(self, key))

    def action_move(self, delta: int) -> None:
        self.cursor += delta

    def action_page(self, direction: int) -> None:
        self.cursor += direction * max(1, self.size.height - self.HEADER - 1)

    def action_jump(self, index: int) -> None:
        self.cursor = index if index >= 0 else self.row_count - 1

    def action_select(self) -> None:
        if self.row_count:
            self.post_message(self.Selected(self, self.key_at(self.cursor)))

    def on_click(self, event: events.Click) -> None:
        if event.y < self.HEADER:
            return
        index = round(self.scroll_y) + event.y - self.HEADER
        if 0 <= index < self.row_count:
            self.cursor = index
            if event.chain > 1:
                self.action_select()
