"""The command palette's explorer commands (ctrl+p): every binding of the app, by its long name, with its key."""

from __future__ import annotations

from functools import partial

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider


class ExplorerCommands(Provider):
    """Commands that run the app's actions; each shows the key that does the same (what ``?`` lists too)."""

    def _commands(self) -> list[tuple[str, str, str]]:
        """(long name, key, action) of every binding whose action is available now (c only while tuning)."""
        app = self.app
        return [(b.tooltip or b.description, app.get_key_display(b), b.action) for b in app.BINDINGS
                if isinstance(b, Binding) and app.check_action(b.action, ()) is not False]

    async def discover(self) -> Hits:
        for name, key, action in self._commands():
            yield DiscoveryHit(name, partial(self.app.run_action, action), help=f"key: {key}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, key, action in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self.app.run_action, action), help=f"key: {key}")
