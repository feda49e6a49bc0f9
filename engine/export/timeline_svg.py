"""The timeline as an SVG picture (written directly: bars on a time axis need no graph layout).

A lane per device with launches and copies as bars to scale (a tooltip per bar names the step, its kernel and
its time), a time axis, and below it the bytes each memory pool holds over the same axis.
"""

from __future__ import annotations

import math
from html import escape

from engine import units
from engine.timeline import Timeline

WIDTH, LEFT, RIGHT = 1000, 90, 20
"""Picture width and margins (px); the bars use what is between."""
LANE, GAP, MEMORY = 26, 6, 54
"""Heights (px): a device lane, the space between rows, a pool's memory chart."""
LAUNCH_FILLS = ("#4878d0", "#6acc64")
"""Neighbouring launches of a lane alternate between these."""
COPY_FILL, MEMORY_FILL = "#ee854a", "#d5bb67"
CHAR = 6.5
"""Approximate width of one character of the 11 px font (px), to decide whether a bar's label fits."""


def timeline_svg(t: Timeline, title: str, short: dict[str, str]) -> str:
    """``t`` drawn as a standalone SVG document titled ``title``."""
    span = t.total or 1.0
    inner = WIDTH - LEFT - RIGHT
    x = lambda s: LEFT + s / span * inner  # noqa: E731
    how = "measured step times of the run" if t.measured else "predicted only: the plan did not run"
    out: list[str] = []
    y = 20
    out.append(_text(8, y, f"{title}: {units.seconds(t.total)}, {units.plural(len(t.bars), 'launch or copy', 'launches and copies')} "
                           f"({how}); steps run one after another", bold=True))
    y += 14
    for lane in t.lanes:
        out.append(_text(8, y + 11, short.get(lane, lane)))
        out.append(_text(8, y + 23, f"{units.seconds(t.lane_seconds(lane))} busy", small=True))
        out.append(f'<rect x="{LEFT}" y="{y}" width="{inner}" height="{LANE}" fill="#f4f4f4"/>')
        n = 0
        for b in (b for b in t.bars if b.lane == lane):
            fill = COPY_FILL if b.kind == "copy" else LAUNCH_FILLS[n % 2]
            n += b.kind == "launch"
            w = max(1.0, b.seconds / span * inner)
            dashed = "" if b.measured else ' fill-opacity="0.45" stroke="#333" stroke-dasharray="3,2"'
            tip = (f"step {b.step + 1}: {b.kind} {b.label} on {b.lane}, {units.seconds(b.seconds)} "
                   f"({'measured' if b.measured else 'predicted'})")
            out.append(f'<rect x="{x(b.start):.2f}" y="{y + 2}" width="{w:.2f}" height="{LANE - 4}" fill="{fill}"'
                       f'{dashed}><title>{escape(tip)}</title></rect>')
            if w > CHAR * (len(b.label) + 1):
                out.append(_text(x(b.start) + 3, y + LANE / 2 + 4, b.label, fill="#fff"))
        y += LANE + GAP
    out += _axis(y, span, x)
    y += 28
    for m in t.memory:
        out.append(_text(8, y + MEMORY / 2, short.get(m.pool, m.pool)))
        out.append(_text(8, y + MEMORY / 2 + 13, "memory", small=True))
        out.append(f'<rect x="{LEFT}" y="{y}" width="{inner}" height="{MEMORY}" fill="#f4f4f4"/>')
        out.append(_memory_path(t, m.held, m.peak, y, x))
        out.append(_text(LEFT + 3, y + 11, f"peak {units.nbytes(m.peak)}", small=True))
        y += MEMORY + GAP
    legend = ("bars: launches (blue, green) and copies (orange) to scale"
              + ("" if t.measured else "; dashed: predicted only") + "; yellow: bytes held per pool over the same time")
    out.append(_text(8, y + 12, legend, small=True))
    height = y + 22
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">'
            f'<rect width="100%" height="100%" fill="#fff"/>' + "".join(out) + "</svg>\n")


def _axis(y: float, span: float, x) -> list[str]:
    """A line under the lanes with about five round ticks."""
    step = 10 ** math.floor(math.log10(span / 5)) if span > 0 else 1.0
    step *= next(f for f in (1, 2, 5, 10) if span / (step * f) <= 6)
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{x(span):.2f}" y2="{y}" stroke="#333"/>']
    tick = 0.0
    while tick <= span * (1 + 1e-9):
        out.append(f'<line x1="{x(tick):.2f}" y1="{y}" x2="{x(tick):.2f}" y2="{y + 4}" stroke="#333"/>')
        out.append(_text(x(tick), y + 15, units.seconds(tick) if tick else "0", small=True, anchor="middle"))
        tick += step
    return out


def _memory_path(t: Timeline, held, peak: int, y: float, x) -> str:
    """Held bytes as a filled step chart: a step's bytes count from the moment it starts."""
    scale = (MEMORY - 14) / peak if peak else 0.0
    base = y + MEMORY
    points = [(x(0.0), base)]
    for i, h in enumerate(held):
        at = x(t.ends[i - 1] if i else 0.0)
        points += [(at, points[-1][1]), (at, base - h * scale)]
    points += [(x(t.total), points[-1][1]), (x(t.total), base)]
    d = " ".join(f"{px:.2f},{py:.2f}" for px, py in points)
    return f'<polygon points="{d}" fill="{MEMORY_FILL}" stroke="#8c7a2a" stroke-width="0.8"/>'


def _text(x: float, y: float, text: str, *, bold: bool = False, small: bool = False, fill: str = "#222",
          anchor: str = "start") -> str:
    weight = ' font-weight="bold"' if bold else ""
    size = ' font-size="10"' if small else ""
    return (f'<text x="{x:.2f}" y="{y:.2f}" fill="{fill}" text-anchor="{anchor}"{weight}{size}>'
            f"{escape(text)}</text>")
