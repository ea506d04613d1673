"""Starting the app: how long `python app.py` keeps a writer waiting, on a first start and on a later one.

A first start has an empty cache (a new LOOKAHEAD_CACHE_DIR): it converts the embedded model and measures this
CPU's passes. A later start reuses that cache. Each is timed from the process's start to the page answering (its
first HTTP response), and to the first suggestions in headless Chromium (the first branch button shown).

Run: python bench/bench_start.py [--later 3] [--app PATH] (another checkout's app.py: a baseline)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch
from playwright.sync_api import sync_playwright
from serving import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lookahead.cpu_linear import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
WAIT_SECONDS = 900  # a first start on a busy machine


def timed_start(app: Path, cache: Path) -> tuple[float, float]:
    """Seconds from starting `python app.py` to its page answering, and to the first suggestions shown."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "LOOKAHEAD_CACHE_DIR": str(cache), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    url = f"http://127.0.0.1:{port}/"
    start = time.monotonic()
    server = subprocess.Popen([sys.executable, str(app)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                if time.monotonic() - start > WAIT_SECONDS or server.poll() is not None:
                    raise RuntimeError("the app did not start") from None
                time.sleep(0.05)
        page_seconds = time.monotonic() - start
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.locator("#branch-0").wait_for(state="visible", timeout=WAIT_SECONDS * 1000)
            suggestions_seconds = time.monotonic() - start
            browser.close()
        return page_seconds, suggestions_seconds
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--later", type=int, default=3, help="later starts to time (after the first)")
    parser.add_argument("--app", type=Path, default=ROOT / "app.py", help="the app to start")
    arguments = parser.parse_args()
    print(f"{cpu_model()}; {os.cpu_count()} cores; torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as cache:
        first = timed_start(arguments.app, Path(cache))
        later = [timed_start(arguments.app, Path(cache)) for _ in range(arguments.later)]
    print("| start | to the page (s) | to the first suggestions (s) |\n|---|---:|---:|")
    print(f"| first (empty cache) | {first[0]:.1f} | {first[1]:.1f} |")
    print(f"| later (median of {len(later)}) | {statistics.median(p for p, _ in later):.1f} | "
          f"{statistics.median(s for _, s in later):.1f} |")


if __name__ == "__main__":
    main()
