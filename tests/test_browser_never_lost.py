"""The writer's text is never lost nor hidden, in a real browser: each test combines two things the page can do that
once left it unable to take text, dropped words, or scrolled the caret out of sight."""

import re

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import (  # skips without chromium
    CHROMIUM,
    CHROMIUM_ARGS,
    caret_line,
    expect_suggestions_for,
    stored_tree,
    type_text,
    wait_for,
)
from lookahead.scheduler import scheduler

DRAFT = "The keeper lit the lamp and waited for the storm to pass. But"
QUESTION = "The keeper was asked whether the storm would pass. He said"
PASTE = ("The lighthouse stood at the edge of the world, and every night the keeper climbed its stairs to light "
         "the lamp. Ships passed far out at sea, and none of them knew his name. ") * 12
LONG_TEXT = "\n\n".join(f"Paragraph {n}. " + PASTE for n in range(1, 6))


@pytest.fixture
def page(app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(app_url)
        expect(page.locator("#branch-0")).to_be_visible()
        yield page
        browser.close()


def expect_toast(page, words: str) -> None:
    expect(page.locator(".toast-body.error").filter(has_text=words)).to_be_visible()


# gradio's own progress where the page shows it ("processing | 115.3/15.2s", "queue: 1/2", a timer), on any element.
GRADIO_PROGRESS_SHOWN = """() => Array.from(document.querySelectorAll(
    '[data-testid=status-tracker], .progress-text, .eta-bar, .meta-text, .meta-text-center'))
  .filter((element) => element.checkVisibility({visibilityProperty: true}) && element.textContent.trim())
  .map((element) => element.textContent.trim())"""


def expect_continue_ready(page) -> None:
    expect(page.locator("#continue")).to_be_visible()
    expect(page.locator("#continue-stop")).to_be_hidden()


def expect_caret_line_in_box(page, seen: str) -> None:
    """The caret's line is within the text box's visible part (and the box on the screen)."""
    box = page.locator("#text textarea").bounding_box()
    wait_for(lambda: box["y"] - 1 <= caret_line(page)["top"] and caret_line(page)["bottom"] <= box["y"] + box["height"]
             + 1)
    line = caret_line(page)
    assert box["y"] - 1 <= line["top"] and line["bottom"] <= box["y"] + box["height"] + 1, f"{seen}: {line}, {box}"


def test_a_refused_continue_changes_nothing_and_the_box_takes_text_at_once(page):
    box = page.locator("#text textarea")
    page.locator("#clear").click()
    expect(box).to_have_value("")
    page.locator("#continue").click()
    expect_toast(page, "Type something to continue.")
    expect_continue_ready(page)
    box.press_sequentially("Hello")
    expect(box).to_have_value("Hello")
    expect_suggestions_for(page, "Hello")
    page.get_by_label("Tokens to continue").fill("99999")
    page.locator("#continue").click()
    expect_toast(page, "Say how many tokens to continue by")
    expect_continue_ready(page)
    box.press("End")
    box.press_sequentially(" there")
    expect(box).to_have_value("Hello there")
    expect_suggestions_for(page, "Hello there")


def test_typing_on_past_a_constraint_keeps_the_text_and_the_suggestions_after_a_reload_too(page):
    box = page.locator("#text textarea")
    type_text(page, QUESTION)
    expect_suggestions_for(page, QUESTION)
    page.locator("#constrain-panel > .label-wrap").click()
    page.locator("#constraint-value textarea").fill(" yes\n no\n it depends")
    box.press("End")
    page.locator("#constrain").click()
    expect(page.locator("#constraint-status")).to_contain_text(f"choice from character {len(QUESTION)}")
    expect(page.locator("#status")).to_contain_text("constrained (choice)")
    box.press("End")
    box.press_sequentially(" March again")
    text = QUESTION + " March again"
    expect_suggestions_for(page, text)  # the free suggestions: the constraint no longer applies
    expect(page.locator("#status")).to_contain_text("not constrained here")
    expect(page.locator("#status")).to_contain_text("Constrain → Off")
    expect(page.locator(".toast-body.error")).to_have_count(0)
    page.reload()
    expect_suggestions_for(page, text)
    expect(page.locator("#status")).to_contain_text("not constrained here")
    box.press("End")
    box.press_sequentially(" keeper")
    expect_suggestions_for(page, text + " keeper")
    wait_for(lambda: stored_tree(page).text == text + " keeper")
    page.reload()
    expect_suggestions_for(page, text + " keeper")
    page.locator("#constrain-panel > .label-wrap").click()
    page.locator("#unconstrain").click()
    expect(page.locator("#constraint-status")).to_contain_text("No constraint")
    expect(page.locator("#status")).not_to_contain_text("not constrained here")


def test_chat_and_back_brings_the_text_back_with_its_caret_line_in_view(page):
    box = page.locator("#text textarea")
    type_text(page, LONG_TEXT)
    expect(page.locator("#status")).to_contain_text("context tokens")
    page.locator("#chat-mode label").filter(has_text="chat").click()
    expect(box).to_have_value("")
    expect(page.locator("#conversation")).to_contain_text("Paragraph 5.")
    page.locator("#chat-mode label").filter(has_text="plain text").click()
    expect(box).to_have_value(LONG_TEXT)
    expect(page.locator("#status")).to_contain_text("context tokens")
    expect_caret_line_in_box(page, "back to plain text")


def test_undo_and_redo_keep_the_caret_line_in_view(page):
    box = page.locator("#text textarea")
    type_text(page, LONG_TEXT)
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    page.locator("#clear").click()
    expect(box).to_have_value("")
    page.locator("#undo").click()
    expect(box).to_have_value(LONG_TEXT)
    expect_caret_line_in_box(page, "after undo")
    page.locator("#redo").click()
    expect(box).to_have_value("")
    page.locator("#undo").click()
    expect(box).to_have_value(LONG_TEXT)
    expect_caret_line_in_box(page, "after redo and undo")


def test_the_first_key_typed_while_continue_has_not_begun_stops_it_and_goes_in(page):
    """The key comes before the Continue has begun (it waits its turn behind the pasted text's suggestions): the Stop
    it presses reaches that Continue, which writes nothing, or at most the token it was on; the key goes in."""
    box = page.locator("#text textarea")
    page.get_by_label("Tokens to continue").fill("256")
    type_text(page, LONG_TEXT)  # its suggestions are being made: the Continue waits its turn behind them
    page.locator("#continue").click()
    box.press("End")
    box.press_sequentially(" Suddenly")
    expect(box).to_have_value(re.compile(r" Suddenly$"))
    expect(page.locator("#continuation-status")).to_contain_text(re.compile("Stopped before it wrote anything|"
                                                                            "stopped by you"))
    value = box.input_value()
    written = value[len(LONG_TEXT):-len(" Suddenly")]
    whole = inference.generate(LONG_TEXT, 256)
    assert len(whole["token_ids"]) == 256, "left alone, it would have written on"
    assert value.startswith(LONG_TEXT) and whole["text"].startswith(written), "what Continue wrote before it stopped"
    assert len(written) < len(whole["text"])
    expect_continue_ready(page)
    expect_suggestions_for(page, value)


def test_continue_keeps_the_words_it_writes_in_view(page):
    box = page.locator("#text textarea")
    type_text(page, LONG_TEXT)
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    page.get_by_label("Tokens to continue").fill("24")
    page.locator("#continue").click()
    expect(page.locator("#continuation-status")).to_contain_text("forward passes")
    expect(box).to_have_value(LONG_TEXT + inference.generate(LONG_TEXT, 24)["text"])
    expect_caret_line_in_box(page, "after Continue")


def test_what_runs_shows_on_one_calm_working_line_never_as_gradios_progress(page, monkeypatch):
    """A Continue held at its first slice (interactive work runs meanwhile, and no share of the time is owed to long
    work): the working line says so, gradio's own progress shows nowhere; the line goes once the Continue has ended, and
    a refused Continue leaves neither the line nor gradio's "Error" behind."""
    monkeypatch.setattr(scheduler, "share", 0.0)
    line = page.locator("#working-line")
    type_text(page, DRAFT)
    expect_suggestions_for(page, DRAFT)
    page.get_by_label("Tokens to continue").fill("8")
    with scheduler.interactive():
        page.locator("#continue").click()
        expect(line).to_have_text(re.compile("Continuing"))
        assert page.evaluate(GRADIO_PROGRESS_SHOWN) == []
    expect(line).to_be_hidden()
    expect_continue_ready(page)
    page.locator("#clear").click()
    expect(page.locator("#text textarea")).to_have_value("")
    page.locator("#continue").click()
    expect_toast(page, "Type something to continue.")
    expect_continue_ready(page)
    expect(line).to_be_hidden()
    expect(page.locator("#continuation-status")).not_to_contain_text("Error")
    assert page.evaluate(GRADIO_PROGRESS_SHOWN) == []
