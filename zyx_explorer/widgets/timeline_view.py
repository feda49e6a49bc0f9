"""The timeline drawn in text: a lane per device with its launches and copies as bars to scale, the memory each
pool holds over the same time axis, and the longest steps.  It redraws itself to its width, so that it reads
at 80 columns as at 160."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual import events
from textual.widgets import Static

from engine import Timeline, units

LAUNCH_STYLES = ("bold green", "bold cyan")
"""Neighbouring launches alternate between these, so that two bars that touch stay two."""
COPY_STYLE = "bold magenta"
LEVELS = " ▁▂▃▄▅▆▇█"
RIGHT = 11
"""Columns right of the bars: a lane's busy seconds, a pool's peak bytes."""
LONGEST = 8
"""How many steps the list of the longest shows."""


def timeline_text(sections: Sequence[tuple[str, Timeline]], width: int, short: Mapping[str, str]) -> Text:
    """Each (title, timeline) of ``sections`` drawn ``width`` columns wide, all on the time scale of the longest
    (so that a what-if compares with the real plan by eye)."""
    out = Text()
    if not sections:
        return Text("no plan at this stage yet")
    span = max(t.total for _, t in sections) or 1.0
    label = max(6, *(len(short.get(n, n)) for _, t in sections for n in (*t.lanes, *(m.pool for m in t.memory))))
    cols = max(10, width - label - 2 - RIGHT)
    for title, t in sections:
        how = ("measured: each step's measured time" if t.measured
               else "predicted only: the plan did not run, bars are the plan's predictions")
        out.append(f"{title}: {units.seconds(t.total)} over {units.plural(len(t.bars), 'launch or copy', 'launches and copies')}"
                   f" ({how})\n", style="bold")
        out.append(f"{'':{label}}  0{'─' * (cols - 2)}┤ {units.seconds(span):>{RIGHT - 1}}\n", style="dim")
        for lane in t.lanes:
            out.append(f"{short.get(lane, lane):<{label}}  ")
            out.append_text(_lane(t, lane, cols, span))
            out.append(f" {units.seconds(t.lane_seconds(lane)):>{RIGHT - 1}}\n", style="dim")
        for m in t.memory:
            out.append(f"{short.get(m.pool, m.pool):<{label}}  ", style="dim")
            out.append(_memory(t, m.held, m.peak, cols, span), style="yellow")
            out.append(f" {units.nbytes(m.peak):>{RIGHT - 1}}\n", style="dim")
        out.append("longest steps:\n", style="bold")
        for b in t.busiest(LONGEST):
            share = b.seconds / t.total if t.total else 0.0
            out.append(f"  {b.step + 1:>4} {b.kind:<6} {short.get(b.lane, b.lane):<{label}} {units.seconds(b.seconds):>9} "
                       f"{share:>4.0%}  {b.label}\n")
        out.append("\n")
    out.append("█ launch  ▒ copy  ▏ shorter than a column; right: a lane's busy time; yellow: the bytes a pool holds "
               "(▁ to █: 0 to its peak, shown right)\n",
               style="dim")
    return out


def _lane(t: Timeline, lane: str, cols: int, span: float) -> Text:
    """The bars of ``lane`` over ``cols`` cells of ``span / cols`` seconds each."""
    cells: list[tuple[str, str]] = [(" ", "")] * cols
    n = 0
    for b in t.bars:
        if b.lane != lane:
            continue
        style = COPY_STYLE if b.kind == "copy" else LAUNCH_STYLES[n % 2]
        n += b.kind == "launch"
        first = min(cols - 1, int(b.start / span * cols))
        last = min(cols, round(b.end / span * cols))
        if last <= first:  # shorter than a cell: a thin mark, unless a longer bar has the cell
            if cells[first][0] == " ":
                cells[first] = ("▏", style)
            continue
        for i in range(first, last):
            cells[i] = ("▒" if b.kind == "copy" else "█", style)
    text = Text()
    for char, style in cells:
        text.append(char, style=style)
    return text


def _memory(t: Timeline, held: Sequence[int], peak: int, cols: int, span: float) -> str:
    """Held bytes over time, one level per cell: the most held during the cell; a cell where no step starts
    shows what the last step before it left."""
    most: list[int | None] = [None] * cols
    left: list[int | None] = [None] * cols
    for i, h in enumerate(held):
        cell = min(cols - 1, int((t.ends[i - 1] if i else 0.0) / span * cols))
        level = round(h / peak * (len(LEVELS) - 1)) if peak else 0
        most[cell], left[cell] = max(most[cell] or 0, level), level
    out, carried = [], 0
    for m, after in zip(most, left):
        out.append(LEVELS[carried if m is None else m])
        carried = carried if after is None else after
    return "".join(out)


class TimelineView(Static):
    """The timeline sections, redrawn to the widget's width when it changes."""

    def __init__(self, sections: Sequence[tuple[str, Timeline]], short: Mapping[str, str], **kw) -> None:
        super().__init__(**kw)
        self.sections, self.short = sections, short

    def show(self, sections: Sequence[tuple[str, Timeline]]) -> None:
        self.sections = sections
        self.update(timeline_text(sections, self.size.width, self.short))

    def on_resize(self, event: events.Resize) -> None:
        self.update(timeline_text(self.sections, event.size.width, self.short))
