"""``python -m zyx_explorer`` and the ``zyx-explore`` script: ctrl-C while the engine is still being imported
exits 130 quietly, as it does later (``cli.main`` handles it once it runs)."""

import sys


def run() -> int:
    try:
        from zyx_explorer.cli import main
    except KeyboardInterrupt:
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
