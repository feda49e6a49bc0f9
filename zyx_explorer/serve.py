"""``zyx-explore serve FILE``: the explorer in a web browser, through textual-serve.

textual-serve starts one explorer process per page opened (the same command a terminal user types, with a web
driver instead of the terminal), so the browser shows the very app the terminal does.  It listens on 127.0.0.1
by default: the explorer runs code on this machine, and ``--host`` opening it wider is the user's decision.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_PORT = 8000


DESCRIPTION = ("Serve the explorer on FILE to a web browser (one explorer per page opened). Every other option is "
               "the explorer's own (e.g. --no-tune).")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="a graph.json, ONNX (.onnx) or egraph-serialize file")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 opens it to all)")


def command(file: Path, explorer_args: Sequence[str]) -> str:
    """The shell command textual-serve runs per page: this Python running the explorer on ``file``."""
    return shlex.join([sys.executable, "-m", "zyx_explorer", str(file.resolve()), *explorer_args])


def serve(file: Path, explorer_args: Sequence[str], host: str, port: int) -> None:
    """Serve until interrupted; raises OSError when the address cannot be listened on (e.g. the port is taken)."""
    from textual_serve.server import Server

    print(f"serving the explorer on {file} at http://{host}:{port} (ctrl+c stops)", flush=True)
    Server(command(file, explorer_args), host=host, port=port, title=f"zyx-explore {file.name}").serve()
