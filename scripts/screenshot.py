"""Retake the README's screenshot: start the app, set up a page showing its features in headless Chromium, save a PNG.

    python scripts/screenshot.py

It serves `python app.py` on a free loopback port with the embedded model, drives Debian's chromium
(`/usr/bin/chromium`, as the browser tests do) through Playwright, and stops the app when done, even
on failure. The page: a paragraph with a branch taken, the "balanced" preset (so the plot's p_base and
p_final differ), a "Stop at" string, the heatmap on, a "why?" answered, and the Constrain panel open where the
columns stay about as long as each other.
`--width 390 --out /tmp/phone.png` takes the same page as a phone shows it.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
TEXT = ("The old lighthouse keeper climbed the stairs and looked out over the sea. The storm had passed, "
        "but the waves were still high, and somewhere out there a small boat was")
STOP_AT = r"\n"  # the box's own notation for a newline
HEATMAP_TOKEN = "waves"  # the heatmap token whose alternatives are shown
FIRST_PAGE_TIMEOUT_MS = 600_000  # the model loads and warms up before the first suggestions
STEP_TIMEOUT_MS = 120_000
# A Gradio output that is waiting or running shows a status overlay (".wrap.full" without ".hide").
BUSY_JS = "() => [...document.querySelectorAll('.wrap.full')].some(e => !e.classList.contains('hide'))"


def free_port(port: int = 0) -> int:
    """`port` if nothing listens on it (0: any free port); raises OSError if it is taken."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        return s.getsockname()[1]


def start_app(port: int, log) -> subprocess.Popen:
    """`python app.py` on 127.0.0.1:`port`, with the embedded model and nothing sent anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOKAHEAD_") and k != "SPACE_ID"}
    env.update(GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_app(app: subprocess.Popen) -> None:
    """Stop the app and anything it started (its own process group)."""
    if app.poll() is not None:
        return
    os.killpg(app.pid, signal.SIGTERM)
    try:
        app.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(app.pid, signal.SIGKILL)
        app.wait()


def wait_for_server(url: str, app: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if app.poll() is not None:
            raise RuntimeError(f"the app exited with status {app.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"the app did not serve {url} within {timeout_s:.0f} s")


def settle(page: Page, quiet_s: float = 1.0) -> None:
    """Wait until no event is waiting or running, and none has started for `quiet_s` (chained events included)."""
    time.sleep(0.3)  # let the click's event reach the queue and its overlay appear
    quiet_since = time.monotonic()
    deadline = time.monotonic() + STEP_TIMEOUT_MS / 1000
    while time.monotonic() - quiet_since < quiet_s:
        if time.monotonic() > deadline:
            raise RuntimeError("the page was still busy after a step")
        if page.evaluate(BUSY_JS):
            page.wait_for_function(f"!({BUSY_JS})()", timeout=STEP_TIMEOUT_MS)
            quiet_since = time.monotonic()
        time.sleep(0.1)
    errors = page.locator(".toast-body.error")
    if errors.count():
        raise RuntimeError(f"the page shows an error: {errors.first.inner_text()}")


def unfold(page: Page, panel: str) -> None:
    """Open a panel the page folded (a phone starts with those below the suggestions folded)."""
    toggle = page.locator(f"#{panel} > .label-wrap")
    if "open" not in (toggle.get_attribute("class") or ""):
        toggle.click()


def set_up(page: Page, phone: bool) -> None:
    """The state the screenshot shows, each step waited for."""
    expect(page.locator("#branch-0")).to_be_visible(timeout=FIRST_PAGE_TIMEOUT_MS)
    settle(page)
    for panel in ("why-panel", "sampling-panel", "history-panel", "heatmap-panel"):
        unfold(page, panel)
    box = page.locator("#text textarea")
    box.fill(TEXT[:-1])
    box.press_sequentially(TEXT[-1])  # the last keystroke fires the input event, as a writer's would
    settle(page)
    page.locator("#branch-0").click()  # a branch taken: the history shows it
    settle(page)
    page.locator("#preset").get_by_text("balanced").click()  # p_final differs from p_base, some tokens cut
    settle(page)
    page.locator("#stops textarea").fill(STOP_AT)
    page.locator("#stops textarea").blur()
    settle(page)
    page.locator("#heatmap-on input").check()
    settle(page)
    if not phone:  # the Constrain panel, open where it keeps the right column about as long as the left
        open_constrain_panel(page)
    page.locator("#plot .why").first.click()
    expect(page.locator("#why-view")).to_contain_text("next:", timeout=STEP_TIMEOUT_MS)
    settle(page)
    page.mouse.move(0, 0)  # no hover effects in the picture
    page.locator("#heatmap .tk").filter(has_text=HEATMAP_TOKEN).first.focus()  # its alternatives, under the legend
    page.evaluate("window.scrollTo(0, 0)")
    time.sleep(0.5)


def columns(page: Page) -> list[dict]:
    """The page's two columns (the text's and the plot's) as boxes in page pixels: x, y, width, height; on a phone,
    where the columns' contents are one list (page.css), the row that holds them."""
    boxes = [page.locator(selector).locator("xpath=ancestor::*[contains(@class, 'column')][1]").bounding_box()
             for selector in ("#text", "#plot")]
    return boxes if all(boxes) else [page.locator("#main-row").bounding_box()]


def column_bottoms(page: Page) -> tuple[float, float]:
    """Where the text's and the plot's columns end."""
    return tuple(box["y"] + box["height"] for box in columns(page))


def open_constrain_panel(page: Page) -> None:
    """Open the Constrain panel, and close it again if it would leave a large empty area under the text's column."""
    toggle = page.locator("#constrain-panel").get_by_text("Constrain", exact=True).first
    toggle.click()
    settle(page)
    left, right = column_bottoms(page)
    if right > left + 200:
        toggle.click()
        settle(page)


def shoot(page: Page, out: Path, margin: int = 16) -> None:
    """The app from its title to the end of its columns, without the empty sides and Gradio's footer."""
    page.evaluate("window.scrollTo(0, 0)")  # bounding boxes are then page coordinates
    boxes = columns(page)
    left = max(0, min(box["x"] for box in boxes) - margin)
    right = min(page.viewport_size["width"], max(box["x"] + box["width"] for box in boxes) + margin)
    bottom = max(column_bottoms(page)) + margin
    footer = page.locator("footer")
    if footer.count():
        bottom = min(bottom, footer.first.bounding_box()["y"])
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=out, full_page=True, clip={"x": left, "y": 0, "width": right - left, "height": bottom})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png", help="the PNG to write")
    parser.add_argument("--port", type=int, default=None, help="the app's port (default: a free one)")
    parser.add_argument("--width", type=int, default=1400, help="the browser's width in CSS pixels (390: a phone)")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        parser.error(f"{CHROMIUM} is missing: apt-get install -y chromium")
    try:
        port = free_port(args.port or 0)
    except OSError:
        parser.error(f"port {args.port} is taken")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill stops the app too (the finally below)
    url = f"http://127.0.0.1:{port}/"
    phone = args.width < 600
    with tempfile.NamedTemporaryFile("w+", prefix="screenshot-app-", suffix=".log") as log:
        app = start_app(port, log)
        try:
            wait_for_server(url, app)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    context = browser.new_context(viewport={"width": args.width, "height": 844 if phone else 900},
                                                  is_mobile=phone, has_touch=phone)
                    page = context.new_page()
                    page.goto(url)
                    set_up(page, phone)
                    shoot(page, args.out)
                finally:
                    browser.close()
        except BaseException:
            log.seek(0)
            print("The app's output:\n" + log.read()[-4000:], file=sys.stderr)
            raise
        finally:
            stop_app(app)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
