"""Clicks first: visitor B's clicks while visitor A's long job runs, against B alone, on one `python app.py`.

B writes a ~600-token text and takes the first branch, again and again (the call a click makes, /lookahead on the
text plus the branch), timed by the client. Both cases run by default; `--reading` or `--share` runs one.

At reading pace (`--reading`): B reads the suggestions for READING_SECONDS before each click. B's clicks are timed
alone, then while A's long job runs, started through A's own gradio_client session:
  explain      A asks "why?" by integrated gradients (32 points) over a 2,048-token window
  continue     A continues a text by 256 tokens
  paste        A pastes an ~8k-token text: A's suggestions come at once from its last tokens, the rest is read
               in the background (lookahead/reading.py)
  paste-cold   the same, with B's clicks from the moment A's request is sent, while A's first answer is read
  paste-whole  the same on a server that reads every text whole within the call (LOOKAHEAD_FIRST_ANSWER_SECONDS=0),
               as before partial answers: the baseline
Reported: B's median click alone and during A's job, their ratio (the cost of sharing the two cores: A's job ran
alone while B read, which is its share of B's click, so the target is at most 1.2x), B's slowest click alone and
during A's job (a click that waited for all of it), their ratio (the same target), and whether A's job was still
running when B's clicks ended (so they were measured against it). A's explanation is then replaced by a newer
question of A's, which cancels it (it would run minutes more).

Back to back (`--share`): A's shorter explanation (integrated gradients, 8 points, a 512-token window of the writer's
~600-token text) alone, then while B clicks with no pause until it ends: A's time against alone (clicks first would
starve it; its fair share keeps it within 4x) and B's clicks against B's alone, back to back too (the target is at
most 1.5x).
Run: python bench/bench_clicks_first.py [--clicks 5] [--jobs explain continue paste paste-cold paste-whole]
     [--reading] [--share]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from serving import start_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from api_client import Client  # noqa: E402

PASSAGE = (
    "The harbour town woke slowly. Fishermen hauled their nets along the quay, gulls argued over scraps, and the "
    "baker's boy ran between the houses with a basket of warm loaves. "
)
WRITER_TEXT = "Chapter one. " + PASSAGE * 18  # ~600 tokens
LONG_TEXT = "Chapter two. " + PASSAGE * 64  # past 2,048 tokens: the explanation's window is full
PASTE = "".join(f"{i}. {PASSAGE}" for i in range(230))  # ~8k tokens, no two paragraphs alike
JOBS = {
    "explain": lambda client: client.submit(LONG_TEXT, None, "integrated_gradients", 32, 2048,
                                            api_name="/attribution"),
    "continue": lambda client: client.submit(LONG_TEXT[:3000], 256, "greedy", api_name="/generate"),
    "paste": lambda client: client.submit(PASTE, 5, 3, api_name="/lookahead"),
    "paste-cold": lambda client: client.submit(PASTE, 5, 3, api_name="/lookahead"),
    "paste-whole": lambda client: client.submit(PASTE, 5, 3, api_name="/lookahead"),
}
READS = ("paste", "paste-cold")  # A's job is a read of its text
SERVER_ENV = {"paste-whole": {"LOOKAHEAD_FIRST_ANSWER_SECONDS": "0"}}  # a server of its own, with this set
READING_SECONDS = 1.5  # a writer reads the suggestions before the next click (bench_browser.py's pace)
READING_TABLE = (f"B's clicks {READING_SECONDS} s apart:\n\n| A's long job | B's click alone (ms) | during A's job "
                 "(ms) | ratio | B's slowest click alone (ms) | during (ms) | ratio | A's job still running after |\n"
                 "|---|---:|---:|---:|---:|---:|---:|---|")
SHARE_TABLE = ("\nB's clicks back to back:\n\n| A's explanation alone (s) | under B's clicks (s) | ratio | B's click "
               "alone (ms) | during (ms) | ratio | B's clicks |\n|---:|---:|---:|---:|---:|---:|---:|")


def still_running(name: str, visitor_a: Client, job) -> bool:
    """Whether A's job is still under way: for a paste, whether A's text is still being read."""
    if name in READS:
        return visitor_a.predict(PASTE, 5, 3, api_name="/lookahead")["partial"] is not None
    return not job.done()


def start_writing(writer: Client) -> tuple[str, dict]:
    """The writer's text and the first branch shown for it, once its suggestions are exact."""
    result = writer.predict(WRITER_TEXT, 5, 3, api_name="/lookahead")
    while result["partial"]:  # on a slow machine even this text is read in the background first
        time.sleep(0.5)
        result = writer.predict(WRITER_TEXT, 5, 3, api_name="/lookahead")
    return WRITER_TEXT, result["branches"][0]


def clicks(writer: Client, text: str, branch: dict, times: Iterable, pause: float = 0.0) -> list[float]:
    """A click for each of `times`, each `pause` seconds after the last answer (the writer reading it): it takes the
    first branch shown and gets the next suggestions. Seconds per click."""
    seconds = []
    for _ in times:
        time.sleep(pause)
        text += branch["text"]
        start = time.perf_counter()
        branch = writer.predict(text, 5, 3, api_name="/lookahead")["branches"][0]
        seconds.append(time.perf_counter() - start)
    return seconds


def clicks_at_reading_pace(name: str, url: str, n: int) -> str:
    """B's n clicks at reading pace alone, then during A's job `name`: the report's row."""
    writer = Client(url, verbose=False)
    alone_seconds = clicks(writer, *start_writing(writer), range(n), READING_SECONDS)
    alone = statistics.median(alone_seconds)
    writer = Client(url, verbose=False)
    writing = start_writing(writer)  # B is writing when A's job starts
    visitor_a = Client(url, verbose=False)
    job = JOBS[name](visitor_a)
    if name != "paste-cold":
        time.sleep(3)  # A's job is under way (its first slices run)
    seconds = clicks(writer, *writing, range(n), READING_SECONDS)
    during = statistics.median(seconds)
    ran_throughout = "yes" if still_running(name, visitor_a, job) else "no: it ended first"
    if name == "explain":  # A asks a newer question, which cancels the long one (minutes on a CPU)
        visitor_a.predict("Stop here.", None, "saliency", 1, 8, api_name="/attribution")
    try:
        job.result(timeout=3600)
    except Exception:  # noqa: BLE001 - the cancelled explanation ends so
        pass
    while name in READS and still_running(name, visitor_a, job):  # its read ends before the next job
        time.sleep(1)
    return (f"| {name} | {1000 * alone:.0f} | {1000 * during:.0f} | {during / alone:.2f}× | "
            f"{1000 * max(alone_seconds):.0f} | {1000 * max(seconds):.0f} | {max(seconds) / max(alone_seconds):.2f}× "
            f"| {ran_throughout} |")


def explanation_under_clicks(url: str, n: int) -> str:
    """A's explanation alone, then while B clicks back to back until it ends: the report's row (A's seconds alone and
    under the clicks, B's median click alone and during, and how many clicks B made meanwhile)."""
    explain = (WRITER_TEXT, None, "integrated_gradients", 8, 512)
    visitor_a, writer = Client(url, verbose=False), Client(url, verbose=False)
    start = time.perf_counter()
    visitor_a.predict(*explain, api_name="/attribution")
    alone = time.perf_counter() - start
    click_alone = statistics.median(clicks(writer, *start_writing(writer), range(n)))
    writing = start_writing(writer)
    start = time.perf_counter()
    job = visitor_a.submit(*explain, api_name="/attribution")
    seconds = clicks(writer, *writing, iter(job.done, True))  # until A's explanation is done
    job.result()
    shared, click_during = time.perf_counter() - start, statistics.median(seconds)
    return (f"| {alone:.1f} | {shared:.1f} | {shared / alone:.2f}× | {1000 * click_alone:.0f} | "
            f"{1000 * click_during:.0f} | {click_during / click_alone:.2f}× | {len(seconds)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clicks", type=int, default=5)
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    parser.add_argument("--reading", action="store_true", help="only B's clicks at reading pace during A's jobs")
    parser.add_argument("--share", action="store_true", help="only A's explanation under B's back-to-back clicks")
    args = parser.parse_args()
    servers: dict[str, tuple[subprocess.Popen, str]] = {}

    def url(name: str) -> str:
        """A warm server for A's job `name` (one per environment it needs)."""
        env = SERVER_ENV.get(name, {})
        if str(env) not in servers:
            servers[str(env)] = start_server(lambda port: [sys.executable, str(ROOT / "app.py")], env, "clicks_first")
            Client(servers[str(env)][1], verbose=False).predict("Warm-up.", 2, 2, api_name="/lookahead")
        return servers[str(env)][1]

    try:
        if args.reading or not args.share:
            print(READING_TABLE, flush=True)
            for name in args.jobs:
                print(clicks_at_reading_pace(name, url(name), args.clicks), flush=True)
        if args.share or not args.reading:
            print(SHARE_TABLE, flush=True)
            print(explanation_under_clicks(url("explain"), args.clicks), flush=True)
    finally:
        for server, _ in servers.values():
            os.killpg(server.pid, 9)


if __name__ == "__main__":
    main()
