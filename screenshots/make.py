"""Regenerates the explorer's screenshots shown in the README, one SVG per pane: ``python screenshots/make.py``.

The explorer runs headless on the quick start's sample (``zyx-explore`` with no file) over every device found
(OpenCL too, when a runtime is installed), tuned, so the costs pane shows real variants; times differ from run to run.
One tuning cache serves every pane, so only the first compilation tunes.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path

import engine
import sample_graphs
from engine.fileio import write_atomic
from zyx_explorer.app import ExplorerApp

HERE = Path(__file__).parent
SIZE = (160, 48)


def _output_class(app: ExplorerApp) -> None:
    app.main.select_class(next(iter(app.session.compilation.egraph.output_classes().values())), tab=True)


def _launched_kernel(app: ExplorerApp) -> None:
    app.main.action_tab("costs")
    c = app.session.compilation
    app.main.query_one("#costs").move_to(c.plan_kernels()[-1].candidate)


PANES: dict[str, tuple[list[str], Callable[[ExplorerApp], None] | None]] = {
    "program": (["down"] * 6, None),
    "classes": (["2"], _output_class),
    "costs": ([], _launched_kernel),
    "plan": (["4", "down", "down", "down", "down"], None),
    "source": (["enter"], _launched_kernel),
    "rewrites": (["6", "down", "down"], None),
    "results": (["7"], None),
    "help": (["question_mark"], None),
    "timeline": (["T"], None),
}


async def _shoot(sample: str, pane: str, target: Path) -> None:
    keys, before = PANES[pane]
    app = ExplorerApp(engine.load(sample_graphs.path(sample)), sample_graphs.path(sample))
    async with app.run_test(size=SIZE) as pilot:
        while not app.compiled:
            await pilot.pause(0.1)
        await pilot.pause()
        if before is not None:
            before(app)
            await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause(0.3)
        write_atomic(target, app.export_screenshot(title=f"zyx-explore {sample}: {pane}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("panes", nargs="*", metavar="PANE", help=f"panes to shoot (default: all of {', '.join(PANES)})")
    parser.add_argument("--sample", default=sample_graphs.DEFAULT)
    args = parser.parse_args()
    unknown = set(args.panes) - set(PANES)
    if unknown:
        parser.error(f"unknown panes: {', '.join(sorted(unknown))}")
    for pane in args.panes or PANES:
        target = HERE / f"tui_{pane}.svg"
        asyncio.run(_shoot(args.sample, pane, target))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
