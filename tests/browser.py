"""Driving the page in Debian's chromium: the browser's settings and what the page tests share."""

import os
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

import custom_llm_inference as inference
from history import History
from lookahead.outputs import as_json
from ui.render import branch_label
from ui.scripts import STORAGE_KEY

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path(__file__).resolve().parents[1] / "screenshots" / "app.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it)", allow_module_level=True)

# Every expectation waits for what the page signals, up to a deadline that a machine half as fast as a developer's,
# busy with another job, still meets: the page's work (a fit after five precomputed branches, a long text's read)
# can take tens of seconds there.
PAGE_SECONDS = 120
expect.set_options(timeout=PAGE_SECONDS * 1000)


def type_text(page, text: str) -> None:
    """Replace the text as a writer would; the last keystroke fires the input event."""
    box = page.locator("#text textarea")
    box.fill(text[:-1])
    box.press_sequentially(text[-1])


def choose(page, dropdown: str, label: str) -> None:
    """Pick `label` in the dropdown `dropdown` (a selector) from the keyboard, as a writer can: gradio places the
    open list where the box was when it opened, so a click on an option misses when the page moved since."""
    box = page.locator(f"{dropdown} input")
    box.click()
    box.fill(label)
    box.press("Enter")
    expect(box).to_have_value(label)


def expect_suggestions_for(page, text: str, messages: list[dict] | None = None, model_name: str | None = None,
                           panel: str = "") -> dict:
    """Wait until the page shows the engine's suggestions for `text` (in chat mode, after `messages`), in the
    suggestions panel whose ids end in `panel` (the first: ""); return them."""
    expected = inference.lookahead.typed(text, 5, 3, session="browser-expectation", messages=messages,
                                   model_name=model_name)
    expect(page.locator("#text textarea")).to_have_value(text)
    for i, branch in enumerate(expected.branches):
        expect(page.locator(f"#branch{panel}-{i}")).to_have_text(branch_label(branch, expected.lead))
    expect(page.locator(f"#branch{panel}-5")).to_be_hidden()
    expect(page.locator(f"#status{panel}")).to_contain_text(f"{expected.context_tokens:,} context tokens")
    expect(page.locator(f"#status{panel}")).to_contain_text(expected.model)
    return as_json(expected)


def stored_tree(page) -> History:
    return History.from_json(page.evaluate(f"localStorage.getItem({STORAGE_KEY!r})"))


def wait_for_stored_text(page, text: str) -> History:
    deadline = time.monotonic() + PAGE_SECONDS
    while (stored := stored_tree(page)).text != text and time.monotonic() < deadline:
        time.sleep(0.1)
    return stored


def wait_for(condition, seconds: float = PAGE_SECONDS):
    """`condition()`'s first truthy value, polled (the app runs in this process: its state can be read)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("the page's work did not get there in time")


def inserted_at(text: str, caret: int | None, piece: str) -> tuple[str, int | None]:
    """`text` with `piece` inserted at `caret` (None: the end) as the page inserts it (ui/insertion.py), and the
    caret after it."""
    from ui.insertion import Place, inserted

    return inserted(Place(text, caret), piece)


# Where the caret's line is on the screen: a copy of the text box's text up to the caret, laid out as the box lays it
# out, gives the line's offset in the box's text; the box's scroll and place give it on the screen. {top, bottom}.
CARET_LINE_JS = """() => {
  const box = document.querySelector("#text textarea");
  const style = getComputedStyle(box);
  const copy = document.createElement("div");
  for (const name of ["font", "padding", "border", "boxSizing", "letterSpacing", "lineHeight", "overflowWrap",
                      "wordBreak", "tabSize"]) copy.style[name] = style[name];
  Object.assign(copy.style, { position: "absolute", visibility: "hidden", whiteSpace: "pre-wrap",
                              width: box.clientWidth + "px", height: "auto", overflowY: "hidden" });
  copy.textContent = box.value.slice(0, box.selectionStart);
  const mark = document.createElement("span");
  mark.textContent = "|";
  copy.appendChild(mark);
  document.body.appendChild(copy);
  const line = mark.offsetTop - box.scrollTop + box.getBoundingClientRect().top;
  const height = mark.offsetHeight;
  copy.remove();
  return { top: line, bottom: line + height };
}"""


def caret_line(page) -> dict:
    """The caret's line in the text box, as {top, bottom} on the screen (CSS pixels)."""
    return page.evaluate(CARET_LINE_JS)


# Samples the page every 50 ms while updates run (watch_page, then samples): what the writer sees of their text, and
# whether anything covers or greys it, the branches or the plot, any error toast, and the status line's words.
WATCH_JS = """() => {
  window.pageSamples = [];
  const covering = (id) => [...document.querySelectorAll(`#${id} [data-testid=status-tracker]`)]
    .some((tracker) => !tracker.classList.contains("hide") && tracker.getBoundingClientRect().height > 0);
  window.pageWatch = setInterval(() => window.pageSamples.push({
    text: document.querySelector("#text textarea").value,
    covered: ["text", "branches", "plot", "history-tree"].filter(covering),
    errors: [...document.querySelectorAll(".toast-body.error")].map((toast) => toast.innerText),
    status: document.querySelector("#status")?.innerText ?? "",
  }), 50);
}"""


def watch_page(page) -> None:
    page.evaluate(WATCH_JS)


def samples(page) -> list[dict]:
    """What watch_page saw since it started; it stops watching."""
    return page.evaluate("() => { clearInterval(window.pageWatch); return window.pageSamples; }")
