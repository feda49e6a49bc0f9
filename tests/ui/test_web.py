"""``zyx-explore serve``: the explorer in a real headless Chromium through textual-serve.  The page's WebSocket
traffic (the app's screen output) is read to check that the page shows the app and that a key pressed in the
browser reaches the app and changes the pane shown."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

import sample_graphs
from zyx_explorer import serve
from zyx_explorer.cli import main

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
RECORD = """
window.received = [];
const Native = window.WebSocket;
window.WebSocket = function (...args) {
  const ws = new Native(...args);
  ws.addEventListener("message", async (e) => {
    const d = e.data;
    window.received.push(typeof d === "string" ? d : d instanceof Blob ? await d.text() : new TextDecoder().decode(d));
  });
  return ws;
};
window.WebSocket.prototype = Native.prototype;
"""
"""Keeps every message the page's WebSocket receives, as text, in ``window.received``."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    """The explorer on mlp.small served on a free port of 127.0.0.1; its URL."""
    port = _free_port()
    env = {**os.environ, "ZYX_EXPLORE_CACHE": str(tmp_path / "cache")}
    server = subprocess.Popen([sys.executable, "-m", "zyx_explorer", "serve", str(sample_graphs.path("mlp.small")),
                               "--port", str(port), "--no-tune", "--no-opencl", "--no-native"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, server.stdout.read().decode()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:  # the server and the explorer processes it started for the page
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
def test_the_page_shows_the_app_and_a_key_changes_the_pane(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.add_init_script(RECORD)
            page.goto(served)
            page.wait_for_function("window.received.join('').includes('1 Program')", timeout=60_000)
            page.wait_for_function("window.received.join('').includes('executed')", timeout=60_000)  # compiled
            before = len(page.evaluate("window.received.join('')"))
            assert "peak memory" not in page.evaluate("window.received.join('')")  # the plan pane is not shown
            page.locator(".textual-terminal").click()
            page.keyboard.press("4")
            page.wait_for_function(f"window.received.join('').slice({before}).includes('peak memory')",
                                   timeout=30_000)
        finally:
            browser.close()


def test_it_listens_on_this_machine_only_by_default():
    parser = argparse.ArgumentParser()
    serve.arguments(parser)
    assert parser.parse_args(["graph.json"]).host == "127.0.0.1"


def test_a_bad_file_is_refused_before_serving(capsys):
    assert main(["serve", "no-such-file.json", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "no-such-file.json" in err and "Traceback" not in err
