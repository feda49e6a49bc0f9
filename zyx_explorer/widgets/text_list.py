"""A list of styled one-line items (rich ``Text``) with a cursor: the class detail's forms and child links."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.strip import Strip

from zyx_explorer.widgets.cursor_view import CursorView


class TextList(CursorView):
    """Items are ``(key, text)``; a line wider than the view ends in an ellipsis (no horizontal scrolling)."""

    COMPONENT_CLASSES: ClassVar = {"text-list--cursor"}
    DEFAULT_CSS = """
    TextList { height: 1fr; overflow-x: hidden; }
    TextList > .text-list--cursor { background: $accent 40%; }
    TextList:focus > .text-list--cursor { background: $accent; color: $text; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.items: list[tuple[Hashable, Text]] = []
        self._strips: dict[int, list[Segment]] = {}
        self._base = self._cursor = Style()

    def set_items(self, items: Sequence[tuple[Hashable, Text]], cursor: int = 0) -> None:
        """Replace the items and put the cursor on index ``cursor`` (clamped)."""
        self.items = list(items)
        self._strips.clear()
        self.set_extent()
        self.cursor = cursor
        self.refresh()

    @property
    def row_count(self) -> int:
        return len(self.items)

    def key_at(self, index: int) -> Hashable:
        return self.items[index][0]

    def text_at(self, index: int) -> Text:
        return self.items[index][1]

    def index_of(self, key: Hashable) -> int | None:
        return next((i for i, (k, _) in enumerate(self.items) if k == key), None)

    def canvas_width(self) -> int:
        return self.scrollable_content_region.width

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()

    def render_lines(self, crop: Region) -> list[Strip]:
        """Resolve the styles once per render pass, then draw the lines."""
        self._base = self.rich_style
        self._cursor = self.get_component_rich_style("text-list--cursor")
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index = round(self.scroll_y) + y
        if index >= len(self.items):
            return Strip.blank(width, self._base)
        segments = self._strips.get(index)
        if segments is None:
            text = self.items[index][1].copy()
            text.truncate(width, overflow="ellipsis")
            segments = self._strips[index] = list(text.render(self.app.console))
        style = self._base + self._cursor if index == self.cursor else self._base
        return Strip(Segment.apply_style(segments, style)).extend_cell_length(width, style)
