"""Regenerates the SVG screenshots of the explorer shown in the README: ``python screenshots/make.py``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import engine
import sample_graphs
from engine.fileio import write_atomic
from zyx_explorer.app import ExplorerApp

HERE = Path(__file__).parent


async def _shoot(sample: str, keys: list[str], target: Path) -> None:
    app = ExplorerApp(engine.load(sample_graphs.path(sample)), sample_graphs.path(sample))
    async with app.run_test(size=(120, 32)) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        write_atomic(target, app.export_screenshot(title=f"zyx-explore {sample}"))


def main() -> None:
    asyncio.run(_shoot("attention.small", ["down"] * 15, HERE / "program.svg"))


if __name__ == "__main__":
    main()
