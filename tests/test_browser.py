"""The app in a real browser: Debian's Chromium, headless, driven by Playwright."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as cli
from app import branch_label

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path(__file__).resolve().parents[1] / "screenshots" / "app.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def page(app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(app_url)
        yield page
        browser.close()


def type_text(page, text: str) -> None:
    """Replace the text as a writer would; the last keystroke fires the input event."""
    box = page.locator("#text textarea")
    box.fill(text[:-1])
    box.press_sequentially(text[-1])


def expect_suggestions_for(page, text: str) -> dict:
    """Wait until the page shows the engine's suggestions for `text`; return them."""
    expected = cli.lookahead(text, 5, 3, session="browser-expectation")
    expect(page.locator("#text textarea")).to_have_value(text)
    for i, branch in enumerate(expected["branches"]):
        expect(page.locator(f"#branch-{i}")).to_have_text(branch_label(branch), timeout=30_000)
    expect(page.locator("#branch-5")).to_be_hidden()
    expect(page.locator("#status")).to_contain_text(f"{expected['context_tokens']} context tokens")
    return expected


def test_write_click_keyboard_and_undo(page):
    expect(page.locator("#branch-0")).to_be_visible(timeout=60_000)  # suggestions for the starting text
    text = "The robot opened the door and saw"
    type_text(page, text)
    shown = expect_suggestions_for(page, text)
    plot = page.locator("#distribution")
    expect(plot).to_contain_text("%")
    expect(plot).to_contain_text("other")
    top = shown["distribution"][0]
    expect(plot.locator(".dist-row").first).to_contain_text(f"{100 * top['prob']:.1f}%")

    page.locator("#branch-2").click()
    clicked = text + shown["branches"][2]["text"]
    shown = expect_suggestions_for(page, clicked)

    page.locator("#text textarea").focus()
    page.keyboard.press("Alt+1")
    keyed = clicked + shown["branches"][0]["text"]
    expect_suggestions_for(page, keyed)

    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=SCREENSHOT, full_page=True)

    page.locator("#undo").click()
    expect_suggestions_for(page, clicked)
    page.locator("#undo").click()
    expect_suggestions_for(page, text)


def test_continue_streams_greedy_text_and_colours_its_sources(page):
    text = "one two three four, one two three four, one two three four, one two"
    type_text(page, text)
    expect_suggestions_for(page, text)
    page.get_by_label("Tokens to continue").fill("12")
    page.locator("#continue").click()
    expected = cli.generate(text, 12, "greedy")
    expect_suggestions_for(page, text + expected["text"])
    expect(page.locator("#continuation-status")).to_contain_text(f"{len(expected['token_ids'])} tokens in")
    expect(page.locator("#continuation")).to_contain_text("n-gram draft")  # the legend
    page.screenshot(path=SCREENSHOT.with_name("continue.png"), full_page=True)
    page.locator("#undo").click()
    expect_suggestions_for(page, text)


def test_clear_and_errors_leave_the_page_usable(page):
    page.locator("#clear").click()
    expect(page.locator("#text textarea")).to_have_value("")
    expect(page.locator("#status")).to_contain_text("Type something")
    expect(page.locator("#branch-0")).to_be_hidden()
    type_text(page, "Back to writing")
    expect_suggestions_for(page, "Back to writing")


def test_ctrl_enter_refreshes(page):
    box = page.locator("#text textarea")
    box.fill("Set without an input event")  # fill() changes the value without firing Gradio's input
    box.press("Control+Enter")
    expect_suggestions_for(page, "Set without an input event")
