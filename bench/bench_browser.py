"""Click-to-update in a real browser: a writer reads for 1.5 s, clicks a branch, and waits for the new branches.

Headless Chromium (Debian's, through Playwright) drives `python app.py`. The text starts at about
N tokens; each click takes a branch and is timed inside the page, from the click event to the frame
that shows the new status line. Clicks take the first branch (`--branch`), as a writer following
the model's favourite would; `--branch cycle` cycles through the first three. **model** is the
server's own time for the suggestions (the status line's ms); **page** is the rest (the event's
round trip, rendering). Each size runs twice in the same run: with precomputation (the app's
default: while the writer reads, each shown branch's next step is computed) and without it
(LOOKAHEAD_PRECOMPUTE=0), the baseline. Also reported: the server's CPU time per click (all its threads: work
done, and workers spinning between kernels, which the page's own work shares the cores with), the browser's
localStorage growth per click
(the history tree kept for reloads), and the bytes the page received per click (its WebSocket and
server-sent-event frames). `--heatmap both` runs each session twice on the same server, without the
heatmap and with it shown (the text coloured by the model's probabilities, updated with every click),
one after the other: the ratio of their p50s is the heatmap's cost. `--trees DIR ...` serves each checkout's
app.py in turn, in the same run (an earlier commit's worktree: before and after).

Run: python bench/bench_browser.py [--tokens 1000 3000] [--clicks 60] [--heatmap off|on|both] [--trees . DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright
from serving import start_server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
READING_SECONDS = 1.5  # the pace; --reading changes it (a 500-click session at 0.5 s)
PASSAGE = (
    "The harbour town woke slowly. Fishermen hauled their nets along the quay, gulls argued over "
    "scraps, and the baker's boy ran between the houses with a basket of warm loaves. "
)
TOKENS_PER_PASSAGE = 40  # about, for the embedded model's tokenizer


def serve(precompute: bool, tree: Path = ROOT) -> tuple[subprocess.Popen, str]:
    return start_server(lambda port: [sys.executable, str(tree / "app.py")],
                        {"LOOKAHEAD_PRECOMPUTE": "1" if precompute else "0"}, "browser")


# Timed inside the page, as the writer sees it: from the click event to the frame after the status
# line shows the new result (gradio's progress lines, "queue: 1/1 | 0.1s", are not a result). The line
# is read as its markdown's textContent, without the progress tracker beside it: innerText would force
# a layout at every change of the line, work of the bench's own.
TIMING_JS = """() => {
  window.__timing = {clicks: [], updates: []};
  document.addEventListener('click', e => {
    if (e.target.closest('.branch-btn')) window.__timing.clicks.push(performance.now());
  }, true);
  const status = document.querySelector('#status');
  const line = () => (status.querySelector('[data-testid="markdown"]')?.textContent || '').trim();
  let last = line();
  new MutationObserver(() => {
    const now = line();
    if (now !== last && now.includes('context tokens')) {
      last = now;
      requestAnimationFrame(() => window.__timing.updates.push(performance.now()));
    }
  }).observe(status, {subtree: true, childList: true, characterData: true});
}"""


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used, all its threads, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def session(url: str, server: int, tokens: int, clicks: int, branch: str, reading: float, heatmap: bool) -> dict:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        received = [0]  # bytes the page received, counted by Chromium's network events
        devtools = page.context.new_cdp_session(page)
        devtools.send("Network.enable")
        devtools.on("Network.dataReceived", lambda e: received.__setitem__(0, received[0] + e["dataLength"]))
        devtools.on("Network.webSocketFrameReceived",
                    lambda e: received.__setitem__(0, received[0] + len(e["response"]["payloadData"])))
        page.goto(url)
        status = page.locator("#status")
        status.filter(has_text="context tokens").wait_for(timeout=120_000)
        if heatmap:  # the text coloured by the model's probabilities, updated with every click
            page.locator("#heatmap-on input").check()
        page.locator("#text textarea").fill((PASSAGE * (tokens // TOKENS_PER_PASSAGE)).rstrip())
        page.wait_for_function(  # the long text's first suggestions (a cold prefill: minutes at 8k tokens)
            f"(m => m && Number(m[1].replaceAll(',', '')) > {tokens // 2})"
            "(document.querySelector('#status').innerText.match(/([\\d,]+) context/))",
            timeout=600_000,
        )
        time.sleep(3)  # the first suggestions for the long text, then reading
        page.evaluate(TIMING_JS)
        totals, models, stored = [], [], []
        received_before, cpu_before = received[0], cpu_seconds(server)
        for i in range(clicks):
            page.locator(f"#branch-{i % 3 if branch == 'cycle' else int(branch)}").click()
            first_update_after_click = (
                f"(t => t.clicks.length > {i} && t.updates.find(u => u > t.clicks[{i}]))(window.__timing)"
            )
            try:
                page.wait_for_function(first_update_after_click, timeout=60_000, polling=20)
            except Exception:
                page.screenshot(path=f"/tmp/bench_browser_stuck_{tokens}.png", full_page=True)
                print(f"click {i}: no update; status {status.inner_text()!r}", file=sys.stderr)
                raise
            totals.append(page.evaluate(first_update_after_click) - page.evaluate(f"window.__timing.clicks[{i}]"))
            models.append(float(re.search(r"(\d+) ms", status.inner_text()).group(1)))
            stored.append(page.evaluate("Object.values(localStorage).reduce((n, v) => n + v.length, 0)"))
            time.sleep(reading)
        context = int(re.search(r"([\d,]+) context tokens", status.inner_text()).group(1).replace(",", ""))
        per_click, cpu_per_click = (received[0] - received_before) / clicks, (cpu_seconds(server) - cpu_before) / clicks
        browser.close()
    pages = [t - m for t, m in zip(totals, models)]
    edge = max(10, clicks // 10)  # the first and last tenth of the session (10 clicks at least)
    quantile = lambda xs, q: sorted(xs)[int(q * (len(xs) - 1))]  # noqa: E731
    return {
        "context": context, "p50": statistics.median(totals), "p95": quantile(totals, 0.95),
        "model": statistics.median(models), "page": statistics.median(pages),
        "page_first": statistics.median(pages[:edge]), "page_last": statistics.median(pages[-edge:]),
        "storage": (stored[-1] - stored[0]) / max(1, len(stored) - 1), "received": per_click, "cpu": cpu_per_click,
    }


def tree_name(tree: Path) -> str:
    """The checkout's commit, short."""
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or str(tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--clicks", type=int, default=60)
    parser.add_argument("--branch", default="0", help="which branch each click takes: 0-9, or cycle")
    parser.add_argument("--reading", type=float, default=READING_SECONDS, help="seconds between clicks")
    parser.add_argument("--precompute", choices=["both", "on", "off"], default="both")
    parser.add_argument("--heatmap", choices=["off", "on", "both"], default="off",
                        help="with the heatmap shown; both: without it, then with it, on the same server")
    parser.add_argument("--trees", type=Path, nargs="+", default=[ROOT],
                        help="checkouts whose app.py to serve, one after the other (an earlier commit's: before/after)")
    args = parser.parse_args()
    print(f"{args.clicks} clicks on branch {args.branch}, {args.reading} s apart, {os.cpu_count()} CPU cores; "
          "times in ms\n")
    print("| tree | text | precompute | heatmap | context tokens | click→update p50 | p95 | model p50 | page p50 "
          "| page, first / last tenth | server CPU per click | localStorage per click (chars) "
          "| received per click (kB) |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    modes = {"both": (False, True), "on": (True,), "off": (False,)}
    for tokens, precompute, tree in itertools.product(args.tokens, modes[args.precompute], args.trees):
        server, url = serve(precompute, tree)
        p50 = {}
        try:
            for heatmap in modes[args.heatmap]:
                r = session(url, server.pid, tokens, args.clicks, args.branch, args.reading, heatmap)
                p50[heatmap] = r["p50"]
                print(f"| {tree_name(tree)} | ~{tokens} | {'on' if precompute else 'off'} "
                      f"| {'shown' if heatmap else 'off'} "
                      f"| {r['context']} | **{r['p50']:.0f}** | {r['p95']:.0f} | {r['model']:.0f} "
                      f"| {r['page']:.0f} "
                      f"| {r['page_first']:.0f} / {r['page_last']:.0f} | {1000 * r['cpu']:.0f} | {r['storage']:.0f} "
                      f"| {r['received'] / 1000:.1f} |", flush=True)
        finally:
            os.killpg(server.pid, 9)
            server.wait()
        if len(p50) == 2:
            print(f"|  |  |  | shown ÷ off | | **{p50[True] / p50[False]:.2f}×** | | | | | | | |", flush=True)


if __name__ == "__main__":
    main()
