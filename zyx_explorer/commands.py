"""The command palette's explorer commands (ctrl+p): every action of the app, by name."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

COMMANDS = (
    ("Show program", "tab('program')"), ("Show classes", "tab('classes')"), ("Show costs", "tab('costs')"),
    ("Show plan", "tab('plan')"), ("Show source", "tab('source')"), ("Show rewrites", "tab('rewrites')"),
    ("Show results", "tab('results')"), ("Next stage", "stage(1)"), ("Previous stage", "stage(-1)"),
    ("Next iteration", "iteration(1)"), ("Previous iteration", "iteration(-1)"), ("Filter the table", "filter"),
    ("Close the filter", "close_filter"), ("Sort the table", "sort"), ("Back to the previous class", "back"),
    ("Mark the form", "mark"), ("Explain the highlighted form", "explain"), ("Pin the highlighted form", "pin"),
    ("Pin the class to the kernel's device", "pin_device"), ("Unpin the class", "unpin"),
    ("Stop tuning (use what was timed)", "cancel_tuning"), ("Export the stage (SVG)", "export"),
    ("Save a screenshot (SVG)", "screenshot_svg"), ("Help", "help"), ("Quit", "quit"),
)
"""(name, action): every binding of the app has its action here."""


class ExplorerCommands(Provider):
    """Commands that run the app's actions."""

    async def discover(self) -> Hits:
        for name, action in COMMANDS:
            yield DiscoveryHit(name, partial(self.app.run_action, action), help=f"action: {action}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action in COMMANDS:
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self.app.run_action, action), help=f"action: {action}")
