"""Idle means idle: what the server does once every text is read and nobody asks anything, and what a session keeps.

One `python app.py`, driven by headless Chromium as writers would: a first tab pastes a ~50,000-character text (past
the model's context), and waits until its suggestions are exact (the text read whole, the map of futures drawn); then
nobody does anything. Reported: the server's CPU (all its threads, in cores: 1.0 is one core busy) in each window of
WINDOW_SECONDS after that, and how long until it stayed under IDLE_CORES. Then a second tab pastes another such text,
and the same. The server's resident memory (RSS) is read when the model is loaded, and once each tab's text is read:
what a session at the model's full context keeps.

Run: python bench/bench_idle.py [--characters 50000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psutil
from playwright.sync_api import sync_playwright
from serving import start_server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
WINDOW_SECONDS = 2.0
IDLE_CORES = 0.05  # a twentieth of a core: the server's own heartbeat and bookkeeping
PAGE_SECONDS = 600  # a cold full-context read on two slow cores, and the map after it
PASSAGE = ("The keeper climbed the stairs at dusk, trimmed the wick, wound the clockwork and wrote the weather in "
           "the log: wind from the west, a swell running, two ships standing off the point until the tide turned. ")


def story(characters: int, tab: int) -> str:
    """A text of about `characters`, no two paragraphs alike (numbered), different in each tab."""
    paragraphs, n = [], 0
    while sum(map(len, paragraphs)) < characters:
        paragraphs.append(f"{tab}.{n}. {PASSAGE}\n\n")
        n += 1
    return "".join(paragraphs)


def cores(process: psutil.Process, seconds: float) -> float:
    """The process's CPU time over the next `seconds`, all threads, in cores."""
    start = process.cpu_times()
    time.sleep(seconds)
    end = process.cpu_times()
    return (end.user + end.system - start.user - start.system) / seconds


def settle(process: psutil.Process, seconds: float) -> tuple[list[float], float | None]:
    """The CPU of each window over `seconds`, and the time from the first window until it stayed idle (None: never)."""
    windows = [cores(process, WINDOW_SECONDS) for _ in range(int(seconds / WINDOW_SECONDS))]
    busy = [i for i, used in enumerate(windows) if used >= IDLE_CORES]
    quiet_from = 0 if not busy else busy[-1] + 1
    return windows, None if quiet_from == len(windows) else quiet_from * WINDOW_SECONDS


def paste_and_wait(browser, url: str, text: str) -> float:
    """A tab that pastes `text` and waits until its suggestions are exact and its map drawn; seconds it took."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    page.locator("#status").filter(has_text="context tokens").wait_for(timeout=PAGE_SECONDS * 1000)
    box = page.locator("#text textarea")
    start = time.perf_counter()
    box.fill(text[:-1])
    box.press_sequentially(text[-1])
    status = "document.querySelector('#status')?.innerText || ''"
    page.wait_for_function(f"() => ({status}).includes('Partial')", timeout=PAGE_SECONDS * 1000)  # its first answer
    page.wait_for_function(f"() => {{ const s = {status}; return s.includes('context tokens') && "
                           "!s.includes('Partial'); }", timeout=PAGE_SECONDS * 1000)
    page.locator("#futures .futures-icicle").wait_for(state="attached", timeout=PAGE_SECONDS * 1000)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--characters", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each idle stretch is watched")
    args = parser.parse_args()
    server, url = start_server(lambda port: [sys.executable, str(ROOT / "app.py")], {}, "idle")
    process = psutil.Process(server.pid)
    gib = 1024 ** 3
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox",
                                                                        "--disable-gpu"])
            warm = browser.new_page()
            warm.goto(url)
            warm.locator("#status").filter(has_text="context tokens").wait_for(timeout=PAGE_SECONDS * 1000)
            warm.close()
            settle(process, 2 * WINDOW_SECONDS)
            loaded = process.memory_info().rss
            print(f"model loaded, one empty tab: RSS {loaded / gib:.2f} GiB", flush=True)
            print("\n| tabs with a full-context text | read and mapped in (s) | CPU each 2 s window after (cores) "
                  "| idle after (s) | RSS (GiB) | over the loaded model (GiB) |\n|---:|---:|---|---:|---:|---:|",
                  flush=True)
            for tab in (1, 2):
                seconds = paste_and_wait(browser, url, story(args.characters, tab))
                windows, quiet = settle(process, args.seconds)
                rss = process.memory_info().rss
                quiet = "never" if quiet is None else f"{quiet:.0f}"
                print(f"| {tab} | {seconds:.0f} | {' '.join(f'{w:.2f}' for w in windows)} | {quiet} | {rss / gib:.2f} "
                      f"| {(rss - loaded) / gib:.2f} |", flush=True)
            browser.close()
    finally:
        os.killpg(server.pid, 9)


if __name__ == "__main__":
    main()
