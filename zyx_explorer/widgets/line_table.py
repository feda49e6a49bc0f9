"""A virtualised table: fixed columns, drawing only the visible rows (``render_line``), for 100k-row panes."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region
from textual.strip import Strip

from zyx_explorer.rows import Row
from zyx_explorer.widgets.cursor_view import CursorView


@dataclass(frozen=True)
class Column:
    label: str
    width: int
    right: bool = False
    """Right-justify (numbers)."""
    flex: bool = False
    """Takes the width the fixed columns leave (``width`` when the table is not laid out yet, ``MIN_FLEX`` at
    least): a long text column that shrinks on a narrow terminal instead of pushing the numbers off screen,
    and grows on a wide one instead of leaving it empty."""


MIN_FLEX = 8


def matches(query: str, text: str) -> bool:
    """Every whitespace-separated term of ``query`` is in ``text``; a ``~term`` matches its letters in order."""
    text = text.lower()
    for term in query.lower().split():
        if term.startswith("~"):
            it = iter(text)
            if not all(ch in it for ch in term[1:]):
                return False
        elif term not in text:
            return False
    return True


class LineTable(CursorView):
    """Fixed columns under a header line, one line per row; sort by a column and filter by text."""

    HEADER = 1
    COMPONENT_CLASSES: ClassVar = {"line-table--header", "line-table--cursor"}
    DEFAULT_CSS = """
    LineTable { height: 1fr; }
    LineTable > .line-table--header { text-style: bold; background: $panel; }
    LineTable > .line-table--cursor { background: $accent 40%; }
    LineTable:focus > .line-table--cursor { background: $accent; color: $text; }
    """

    def __init__(self, columns: Sequence[Column], **kwargs) -> None:
        super().__init__(**kwargs)
        self._columns = list(columns)
        self.rows: list[Row] = []
        self.shown: list[Row] = []
        self.query_text = ""
        self.sort_column: int | None = None
        self._styles: dict[str, Style] = {}
        self._lines: dict[int, str] = {}
        """Formatted text of the shown rows, by index (cleared when rows, filter, sort or columns change)."""
        self._base = self._header = self._cursor = Style()
        self._widths: tuple[int, ...] = ()
        self._widths_for = -1
        """The view width ``_widths`` were computed for (-1: to compute)."""

    # -- data ------------------------------------------------------------------------------

    def set_rows(self, rows: Sequence[Row], keep: Hashable | None = None) -> None:
        """Replace the rows (keeping the cursor on ``keep``, or on the current key, when still shown)."""
        keep = self.current_key if keep is None else keep
        self.rows = list(rows)
        self._refilter(keep)

    def set_filter(self, text: str) -> None:
        self.query_text = text
        self._refilter(self.current_key)

    def sort_by(self, column: int | None) -> None:
        """Sort by ``column`` (None: the order rows were given in)."""
        self.sort_column = column
        self._refilter(self.current_key)

    def _refilter(self, keep: Hashable | None) -> None:
        rows = [r for r in self.rows if matches(self.query_text, r.search or " ".join(r.cells))] if self.query_text else self.rows
        if self.sort_column is not None:
            i = self.sort_column
            rows = sorted(rows, key=lambda r: r.sort[i] if r.sort else r.cells[i])
        self.shown = list(rows)
        self._lines.clear()
        self.set_extent()
        index = next((i for i, r in enumerate(self.shown) if r.key == keep), 0) if keep is not None else 0
        self.cursor = index
        self.refresh()

    @property
    def columns(self) -> list[Column]:
        return self._columns

    @columns.setter
    def columns(self, columns: Sequence[Column]) -> None:
        self._columns = list(columns)
        self._widths_for = -1
        self._lines.clear()

    def widths(self) -> tuple[int, ...]:
        """Each column's width at the current view width (flex columns share what the fixed ones leave)."""
        view = self.scrollable_content_region.width
        if self._widths_for != view:
            flex = [c for c in self.columns if c.flex]
            fixed = sum(c.width + 1 for c in self.columns if not c.flex) + len(flex) + 1
            share = (view - fixed) // len(flex) if flex and view > 0 else None
            self._widths = tuple(c.width if not c.flex or share is None else max(MIN_FLEX, share) for c in self.columns)
            self._widths_for = view
            self._lines.clear()
        return self._widths

    def canvas_width(self) -> int:
        return sum(w + 1 for w in self.widths())

    def _on_resize(self, event: events.Resize) -> None:
        """Flex columns follow the width: the lines formatted for the old one are dropped (CursorView's handler
        then sizes the canvas)."""
        self.widths()

    @property
    def row_count(self) -> int:
        return len(self.shown)

    def key_at(self, index: int) -> Hashable:
        return self.shown[index].key

    def move_to(self, key: Hashable) -> bool:
        """Put the cursor on the row of ``key``; False if it is not shown."""
        for i, row in enumerate(self.shown):
            if row.key == key:
                self.cursor = i
                return True
        return False

    # -- drawing ---------------------------------------------------------------------------

    def _style(self, spec: str) -> Style:
        style = self._styles.get(spec)
        if style is None:
            style = self._styles[spec] = Style.parse(spec) if spec else Style()
        return style

    def render_lines(self, crop: Region) -> list[Strip]:
        """Resolve the styles once per render pass (``rich_style`` is costly), then draw the lines."""
        self._base = self.rich_style
        self._header = self._base + self.get_component_rich_style("line-table--header")
        self._cursor = self.get_component_rich_style("line-table--cursor")
        return super().render_lines(crop)

    def _format(self, cells: Sequence[str]) -> str:
        parts = []
        for column, width, cell in zip(self.columns, self.widths(), cells):
            text = cell if len(cell) <= width else cell[: width - 1] + "…"
            parts.append(text.rjust(width) if column.right else text.ljust(width))
        return " ".join(parts) + " "

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x = round(self.scroll_x)
        base = self._base
        if y == 0:
            header = self._format([c.label for c in self.columns])
            return Strip([Segment(header, self._header)]).crop(scroll_x, scroll_x + width).extend_cell_length(
                width, self._header)
        index = round(self.scroll_y) + y - 1
        if index >= len(self.shown):
            return Strip.blank(width, base)
        row = self.shown[index]
        style = base + self._style(row.style)
        if index == self.cursor:
            style += self._cursor
        line = self._lines.get(index)
        if line is None:
            line = self._lines[index] = self._format(row.cells)
        strip = Strip([Segment(line, style)])
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, style)
