"""How fast the explorer opens and answers keys on a big e-graph (not run in CI): ``python benchmarks/tui_responsiveness.py``.

The program is a deep stack of residual layers (``h = relu(h @ w + b) + h``, 360 of them by default: 5,041 e-classes
as lowered, ~7,900 saturated). Measured with Textual's Pilot in a headless 140x40 terminal:

- open: from ``run_test`` to the first frame; first paint of the classes table: to the first line the classes
  table draws with rows (the ``egraph`` stage, while the rest still compiles);
- the UI's share of each stage arriving (``_refresh``: rows, detail, costs, plan, rewrites), per stage;
- key latency on the classes tab once compiled: down, pagedown, end, home, and ``/`` then typing a filter
  (every keystroke re-filters all rows): from the key sent to the first frame it caused (the cursor moved) and to
  the last (the class detail redrawn), read from ``App._display``; ``pilot.press`` itself idles ~40 ms, so its
  duration is not the latency.

Targets: open and first paint < 2 s, keys < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import Init, Program, Tensor, from_tensors
from engine.devices import LibraryDevice, NumpyDevice
from engine.pipeline import Options
from zyx_explorer.app import ExplorerApp
from zyx_explorer.widgets.classes_table import ClassesTable


def deep_program(layers: int, width: int = 8) -> Program:
    h = Tensor.input("x", (4, width), init=Init.normal(seed=1))
    for i in range(layers):
        w = Tensor.input(f"w{i}", (width, width), init=Init.normal(seed=i, std=1 / math.sqrt(width)))
        b = Tensor.input(f"b{i}", (width,), init=Init.normal(seed=i + 7))
        h = (h @ w + b).relu() + h
    return from_tensors([h.named("y")], "deep", f"{layers} residual layers")


async def measure(layers: int, repeats: int) -> None:
    program = deep_program(layers)
    app = ExplorerApp(program, Path("deep.json"), devices=[NumpyDevice(threads=2), LibraryDevice(threads=2)],
                      options=Options(tune=False, extractor="greedy"))
    painted: dict[str, float] = {}
    refreshes: list[tuple[str, float]] = []
    draw, refresh = ClassesTable.render_line, ExplorerApp._refresh

    def render_line(table, y):
        if table.row_count and "classes" not in painted:
            painted["classes"] = time.perf_counter()
            painted["classes rows"] = table.row_count
        return draw(table, y)

    def timed_refresh(self):
        start = time.perf_counter()
        refresh(self)
        refreshes.append((self.viewed, time.perf_counter() - start))

    frames: list[float] = []
    display = ExplorerApp._display

    def timed_display(self, screen, renderable):
        display(self, screen, renderable)
        if renderable is not None:
            frames.append(time.perf_counter())

    ClassesTable.render_line = render_line  # type: ignore[method-assign]
    ExplorerApp._refresh = timed_refresh  # type: ignore[method-assign]
    ExplorerApp._display = timed_display  # type: ignore[method-assign]
    start = time.perf_counter()
    async with app.run_test(size=(140, 40)) as pilot:
        opened = time.perf_counter() - start
        await pilot.press("2")
        while "classes" not in painted:
            await pilot.pause(0.005)
        while not app.compiled:
            await pilot.pause(0.05)
        compiled = time.perf_counter() - start
        await pilot.pause()
        eg = app.session.compilation.egraph
        print(f"program: {layers} layers, {len(program.nodes)} nodes; e-graph {app.session.graphs['egraph'].num_classes}"
              f" classes lowered, {eg.num_classes} final")
        print(f"open (first frame):                {opened * 1e3:8.0f} ms")
        print(f"first paint of the classes table:  {(painted['classes'] - start) * 1e3:8.0f} ms"
              f"  ({painted['classes rows']} rows)")
        print(f"compilation finished:              {compiled * 1e3:8.0f} ms  (engine work, in the worker)")
        print("UI update per stage:               " + ", ".join(f"{s} {t * 1e3:.0f} ms" for s, t in refreshes[1:]))
        table = app.query_one(ClassesTable)
        print(f"keys on the classes tab ({table.row_count} rows), median / max of {repeats}:")
        for name, keys, reset in (("down", ["down"], None), ("pagedown", ["pagedown"], None),
                                  ("end", ["end"], "home"), ("home", ["home"], "end"),
                                  ("/ filter (per key)", ["slash", *"relu"], "escape")):
            times = []
            for _ in range(repeats):
                for key in keys:
                    frames.clear()
                    t = time.perf_counter()
                    await pilot.press(key)
                    end = time.perf_counter()
                    times.append(((frames[0] if frames else end) - t, (frames[-1] if frames else end) - t))
                if reset:
                    await pilot.press(reset)
            first, last = ([t[i] * 1e3 for t in times] for i in (0, 1))
            print(f"  {name:20s} first frame {statistics.median(first):6.1f} / {max(first):6.1f} ms,"
                  f"  settled {statistics.median(last):6.1f} / {max(last):6.1f} ms")
        print(f"  filter 'relu' leaves {table.row_count} rows" if table.query_text else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=360)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(measure(args.layers, args.repeats))


if __name__ == "__main__":
    main()
