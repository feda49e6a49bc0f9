"""The command palette's explorer commands (ctrl+p): every key of the main screen, by its long name, with its key."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from zyx_explorer.screens.main import KEYS


class ExplorerCommands(Provider):
    """Commands that run the explorer's actions; each shows the key that does the same (what ``?`` lists too)."""

    def _commands(self) -> list[tuple[str, str, Callable[[], Awaitable[bool]]]]:
        """(long name, key, what runs) of every key whose action is available now (c only while tuning); an action
        runs where its key would (the main screen, or the app for ``app.`` ones)."""
        app = self.app
        return [(b.tooltip or b.description, app.get_key_display(b), partial(app.run_action, b.action, self.screen))
                for b in KEYS if app.check_action(b.action.removeprefix("app."), ()) is not False]

    async def discover(self) -> Hits:
        for name, key, run in self._commands():
            yield DiscoveryHit(name, run, help=f"key: {key}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, key, run in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), run, help=f"key: {key}")
