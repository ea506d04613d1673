"""The page as a writer meets it, in a real browser (Debian's Chromium, headless), watched while updates run and not
only after: the text is never covered or greyed, no click, key or tap is refused for coming too soon, and each
action applies as if it had waited for the one before. On a desktop and on a phone-sized screen."""

import re

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import (  # skips without chromium
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOT,
    caret_line,
    choose,
    expect_suggestions_for,
    inserted_at,
    samples,
    stored_tree,
    type_text,
    wait_for,
    wait_for_stored_text,
    watch_page,
)
from ui.render import first_word
from ui.scripts import STORAGE_KEY

VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
PASTE = ("The lighthouse stood at the edge of the world, and every night the keeper climbed its stairs to light "
         "the lamp. Ships passed far out at sea, and none of them knew his name. ") * 4
DRAFT = "The keeper lit the lamp and waited for the storm to pass. But"


@pytest.fixture(params=list(VIEWPORTS))
def page(request, app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        phone = request.param == "phone"
        context = browser.new_context(viewport=VIEWPORTS[request.param], is_mobile=phone, has_touch=phone,
                                      permissions=["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.goto(app_url)
        expect(page.locator("#branch-0")).to_be_visible()
        page.viewport_name = request.param
        yield page
        browser.close()


def branch(text: str, index: int, caret: int | None = None) -> str:
    """The engine's branch `index` for `text` at `caret`, as the page shows it."""
    return inference.lookahead(text, 5, 3, session="writer-expectation", caret=caret)["branches"][index]["text"]


def assert_never_covered_nor_refused(seen: list[dict]) -> None:
    assert seen, "the page was watched"
    assert all(sample["text"] for sample in seen), "the writer's text never vanished"
    assert not [sample["covered"] for sample in seen if sample["covered"]], "nothing covered the text or suggestions"
    assert not [sample["errors"] for sample in seen if sample["errors"]], "no error greeted an action"
    assert not [sample["status"] for sample in seen if re.search(r"queue: \d|processing \|", sample["status"])], \
        "the status line speaks the page's words, not gradio's queue and timer"


def test_a_paste_then_clicks_at_once_apply_in_turn_and_nothing_covers_the_text(page):
    """A paste, a click at once (before the paste's suggestions came), then three clicks in quick succession: each
    applies to the suggestions for the text the action before it left, and the text is watched throughout."""
    box = page.locator("#text textarea")
    watch_page(page)
    page.evaluate("text => navigator.clipboard.writeText(text)", PASTE)
    box.focus()
    page.keyboard.press("Control+A")
    page.keyboard.press("Control+V")
    page.locator("#branch-0").click()
    for index in (1, 2, 0):
        page.locator(f"#branch-{index}").click()
    expected = PASTE
    for index in (0, 1, 2, 0):
        expected = inserted_at(expected, None, branch(expected, index))[0]
    expect(box).to_have_value(expected)  # four clicks' work, each after the one before
    expect_suggestions_for(page, expected)
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    assert_never_covered_nor_refused(samples(page))
    page.screenshot(path=SCREENSHOT.with_name(f"clicks-{page.viewport_name}.png"), full_page=True)


def test_typing_then_a_click_at_once_takes_the_branch_for_the_typed_text(page):
    type_text(page, "The old lighthouse keeper climbed the stairs")
    watch_page(page)
    page.locator("#text textarea").press_sequentially(" and", delay=10)
    page.locator("#branch-3").click()  # the buttons show the suggestions before " and": stale, yet clickable
    typed = "The old lighthouse keeper climbed the stairs and"
    taken = inserted_at(typed, None, branch(typed, 3))[0]
    expect(page.locator("#text textarea")).to_have_value(taken)
    expect_suggestions_for(page, taken)
    assert_never_covered_nor_refused(samples(page))


def caret_at(page, caret: int) -> None:
    """Put the text box's caret at `caret`, as a click into the text would."""
    page.evaluate("at => { const box = document.querySelector('#text textarea'); box.focus();"
                  " box.setSelectionRange(at, at); }", caret)


def test_alt_1_then_alt_w_at_a_caret_before_a_word_insert_in_turn_and_keep_the_words_apart(page):
    """At a caret before "But", Alt+1 and at once Alt+W: the branch, then the next branch's first word after it,
    each separated from "But" by a space where a letter would meet a letter."""
    type_text(page, DRAFT)
    caret = DRAFT.index("But")
    caret_at(page, caret)
    expect(page.locator("#status")).to_contain_text(f"At the caret (character {caret})")
    watch_page(page)
    page.keyboard.press("Alt+1")
    page.keyboard.press("Alt+W")
    text, after = inserted_at(DRAFT, caret, branch(DRAFT, 0, caret))
    word = first_word(branch(text, 0, after))
    text, after = inserted_at(text, after, word)
    expect(page.locator("#text textarea")).to_have_value(text)
    expect(page.locator("#status")).to_contain_text(f"At the caret (character {after})")
    assert not re.search(r"\wBut", text), "no word glued to the next"
    assert_never_covered_nor_refused(samples(page))


def test_a_date_after_a_word_begins_with_its_space(page):
    text = "The lighthouse was built in"
    type_text(page, text)
    expect_suggestions_for(page, text)
    panel = page.locator("#constrain-panel")
    panel.locator("> .label-wrap").click()
    choose(page, "#constraint-preset", "a date (YYYY-MM-DD)")
    expect(page.locator("#constraint-value textarea")).to_have_value(re.compile(r"^ \?"))
    page.locator("#text textarea").press("End")
    page.locator("#constrain").click()
    expect(page.locator("#status")).to_contain_text("constrained (regex)")
    page.locator("#branch-0").click()
    expect(page.locator("#text textarea")).to_have_value(re.compile(r"built in \d"))
    page.locator("#unconstrain").click()


def test_the_phone_shows_the_suggestions_and_plot_with_the_text_and_a_reload_keeps_the_settings(page, app_url):
    box = page.locator("#text textarea").bounding_box()
    plot = page.locator("#plot").bounding_box()
    if page.viewport_name == "phone":
        assert plot["y"] + plot["height"] - box["y"] <= VIEWPORTS["phone"]["height"], "within one screen"
        expect(page.locator(".keys")).to_be_hidden()
        expect(page.locator("#sampling-panel > .label-wrap")).not_to_have_class(re.compile(r"\bopen\b"))
        page.screenshot(path=SCREENSHOT.with_name("phone.png"), full_page=True)
    else:
        expect(page.locator(".keys")).to_be_visible()
    page.locator("#heatmap-panel").scroll_into_view_if_needed()
    if "open" not in (page.locator("#heatmap-panel > .label-wrap").get_attribute("class") or ""):
        page.locator("#heatmap-panel > .label-wrap").click()
    page.locator("#heatmap-on input").check()
    expect(page.locator("#heatmap-text")).to_be_visible()
    question = "What is the capital of France?"
    type_text(page, question)
    expect_suggestions_for(page, question)
    page.locator("#chat-mode label").filter(has_text="chat").click()
    expect(page.locator("#conversation")).to_contain_text(question)
    wait_for(lambda: stored_tree(page).conversation())  # the browser's copy holds the turn: what a reload reads
    page.reload()
    expect(page.locator("#chat-mode input[value=chat]")).to_be_checked()
    expect(page.locator("#conversation")).to_contain_text(question)
    expect(page.locator("#heatmap-on input")).to_be_checked()


def _continue_by_many_tokens(page, text: str) -> None:
    """Start a Continue long enough to still be writing when the test acts, and wait until it has written."""
    type_text(page, text)
    expect_suggestions_for(page, text)
    page.get_by_label("Tokens to continue").fill("256")
    page.locator("#continue").click()
    expect(page.locator("#continue-stop")).to_be_visible()
    page.wait_for_function("(n) => document.querySelector('#text textarea').value.length > n", arg=len(text))


def _written_by_continue(text: str, value: str, typed: str = "") -> str:
    """What Continue wrote into `value` after `text` (before `typed`): a start of its greedy continuation."""
    assert value.startswith(text) and value.endswith(typed), value
    written = value[len(text):len(value) - len(typed)]
    assert written and inference.generate(text, 256, "greedy")["text"].startswith(written), written
    return written


def test_typing_while_continue_writes_stops_it_and_every_character_goes_in_after_what_it_wrote(page):
    _continue_by_many_tokens(page, DRAFT)
    box = page.locator("#text textarea")
    box.press_sequentially(" ZEBRA")
    expect(page.locator("#continuation-status")).to_contain_text("stopped by you")
    expect(box).to_have_value(re.compile(r" ZEBRA$"))
    value = box.input_value()
    _written_by_continue(DRAFT, value, " ZEBRA")
    expect_suggestions_for(page, value)
    expect(page.locator("#continue")).to_be_visible()
    tree = wait_for_stored_text(page, value)
    path = [tree.nodes[node] for node in tree.path()]
    assert [node.kind for node in path[-2:]] == ["continue", "type"], "what Continue wrote, then the writer's keys"


def test_stop_ends_continue_and_keeps_what_it_wrote(page):
    _continue_by_many_tokens(page, DRAFT)
    page.locator("#continue-stop").click()
    expect(page.locator("#continuation-status")).to_contain_text("stopped by you")
    expect(page.locator("#continue-stop")).to_be_hidden()
    value = page.locator("#text textarea").input_value()
    _written_by_continue(DRAFT, value)
    expect_suggestions_for(page, value)


LONG_TEXT = "\n\n".join(f"Paragraph {n}. " + PASTE * 3 for n in range(1, 15))  # ~3,400 words


def assert_caret_line_and_branches_in_view(page, seen: str) -> None:
    viewport = page.viewport_size
    line = caret_line(page)
    assert 0 <= line["top"] and line["bottom"] <= viewport["height"], f"{seen}: the caret's line is in view ({line})"
    for button in page.locator("#branches .branch-btn").all():
        if button.is_visible():
            box = button.bounding_box()
            assert 0 <= box["y"] and box["y"] + box["height"] <= viewport["height"], f"{seen}: a branch is in view"
            assert 0 <= box["x"] and box["x"] + box["width"] <= viewport["width"], f"{seen}: a branch is in view"


def test_a_long_text_keeps_the_caret_line_and_the_branches_in_view_together(page):
    box = page.locator("#text textarea")
    box.fill(LONG_TEXT[:-1])
    box.press_sequentially(LONG_TEXT[-1])
    expect(page.locator("#status")).to_contain_text("context tokens")
    # The writer scrolls the box to paragraph 10 and clicks into its middle.
    middle = LONG_TEXT.index("Paragraph 10.") + len(PASTE)
    page.evaluate("""(at) => {
      const box = document.querySelector("#text textarea");
      box.setSelectionRange(at, at);
      box.blur();
      box.focus();  // the browser scrolls the box to the selection as it gains focus
    }""", middle)
    line = caret_line(page)
    shown = box.bounding_box()
    page.mouse.click(shown["x"] + shown["width"] / 2, (line["top"] + line["bottom"]) / 2)
    at = box.evaluate("(b) => [...b.value.slice(0, b.selectionStart)].length")
    assert LONG_TEXT.index("Paragraph 10.") < at < LONG_TEXT.index("Paragraph 11."), "the caret is in paragraph 10"
    expect(page.locator("#status")).to_contain_text(f"At the caret (character {at:,})")
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    assert_caret_line_and_branches_in_view(page, "a caret in paragraph 10")
    before = box.input_value()
    page.locator("#branch-0").click()
    expect(box).not_to_have_value(before)
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    expect(page.locator("#status")).to_contain_text("At the caret")
    assert_caret_line_and_branches_in_view(page, "a branch taken there")
    page.screenshot(path=SCREENSHOT.with_name(f"long-text-{page.viewport_name}.png"))


def test_a_reload_a_moment_after_the_last_key_keeps_the_text_its_history_and_every_setting(page):
    type_text(page, DRAFT)
    expect_suggestions_for(page, DRAFT)
    if "open" not in (page.locator("#sampling-panel > .label-wrap").get_attribute("class") or ""):
        page.locator("#sampling-panel > .label-wrap").click()  # folded on a phone
    page.locator("#preset label").filter(has_text="creative").click()
    expect(page.locator("#branch-mode input[value=sample]")).to_be_checked()
    page.get_by_label("Lookahead decoding (same text, fewer passes)").uncheck()
    page.get_by_label("Tokens to continue").fill("32")
    page.get_by_label("Tokens to continue").blur()
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    page.locator("#constrain-panel > .label-wrap").click()
    page.locator("#constraint-type label").filter(has_text="regex").click()
    page.locator("#constraint-value textarea").fill("[ a-z]*")
    page.locator("#constrain").click()
    expect(page.locator("#constraint-status")).to_contain_text(f"regex from character {len(DRAFT)}")
    expect(page.locator("body.suggestions-stale")).to_have_count(0)
    box = page.locator("#text textarea")
    box.press("End")
    # The writer reloads before the session has heard of their last keys (on a busy server it may take seconds):
    # the page's edit and caret buttons gone, these keys never leave the browser but in its own copy.
    page.evaluate("() => ['text-edited', 'caret-moved'].forEach((id) => document.getElementById(id).remove())")
    box.press_sequentially(" the sea")
    # and the session's answers to earlier events still arrive, the tree's copy with them (the whole of it here)
    before = page.evaluate(f"localStorage.getItem({STORAGE_KEY!r})")
    page.locator("#history-resync").dispatch_event("click")
    page.wait_for_function(f"(before) => localStorage.getItem({STORAGE_KEY!r}) !== before", arg=before)
    page.reload()
    expect(box).to_have_value(DRAFT + " the sea")
    expect(page.locator("#preset input[value=creative]")).to_be_checked()
    expect(page.locator("#branch-mode input[value=sample]")).to_be_checked()
    expect(page.get_by_label("Lookahead decoding (same text, fewer passes)")).not_to_be_checked()
    expect(page.get_by_label("Tokens to continue")).to_have_value("32")
    expect(page.locator("#status")).to_contain_text("branches sample")
    page.locator("#constrain-panel > .label-wrap").click()
    expect(page.locator("#constraint-status")).to_contain_text(f"regex from character {len(DRAFT)}")
    expect(page.locator("#constraint-value textarea")).to_have_value("[ a-z]*")
    expect(page.locator("#status")).to_contain_text("constrained (regex)")
    tree = wait_for_stored_text(page, DRAFT + " the sea")
    assert tree.nodes[tree.current].kind == "type" and tree.text == DRAFT + " the sea"


def test_a_branch_taken_while_continue_writes_stops_it_then_goes_in_after_what_it_wrote(page):
    _continue_by_many_tokens(page, DRAFT)
    watch_page(page)
    page.keyboard.press("Alt+1")
    expect(page.locator("#continuation-status")).to_contain_text("stopped by you")
    tree = wait_for(lambda: (kept := stored_tree(page)).nodes[kept.current].kind == "branch" and kept)
    path = [tree.nodes[node] for node in tree.path()]
    assert [node.kind for node in path[-2:]] == ["continue", "branch"]
    written = path[-2].text
    _written_by_continue(DRAFT, written)
    assert tree.text == written + branch(written, 0), "the branch the writer took, for the text Continue left"
    expect(page.locator("#text textarea")).to_have_value(tree.text)
    assert_never_covered_nor_refused(samples(page))
