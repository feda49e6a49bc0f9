"""``python -m zyx_explorer`` and the ``zyx-explore`` script: ctrl-C while the engine is still being imported
exits 130 quietly, as it does later (``cli.main`` handles it once it runs)."""

import os
import sys

FPS = "120"
"""A key on a big e-graph paints two frames: the cursor, then the class detail it selects.  Textual waits one
frame period between them (1/60 s by default); at 120 frames a second the detail follows within ~8 ms."""


def run() -> int:
    os.environ.setdefault("TEXTUAL_FPS", FPS)  # Textual reads it once, when first imported; the user's value wins
    try:
        from zyx_explorer.cli import main
    except KeyboardInterrupt:
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
