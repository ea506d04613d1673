"""Writing in the middle of a draft, in a real browser (Debian's Chromium, headless, driven by Playwright), on a
desktop and on a phone-sized screen: the caret drives the suggestions, a branch goes in at the caret and the rest
of the text stays, the caret moves past it, and undo restores the text exactly."""

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOT, type_text  # skips without chromium
from lookahead.outputs import as_json
from ui.render import branch_label, first_word

DRAFT = ("The old lighthouse keeper climbed the stairs and looked out over the sea.\n"
         "The storm had passed, and the boats were coming home.")
CARET = DRAFT.index(" looked")  # the middle of the first paragraph
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(params=list(VIEWPORTS))
def page(request, app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORTS[request.param], is_mobile=request.param == "phone",
                                   has_touch=request.param == "phone").new_page()
        page.goto(app_url)
        expect(page.locator("#branch-0")).to_be_visible()
        page.viewport_name = request.param
        yield page
        browser.close()


def expect_suggestions_at(page, text: str, caret: int, messages: list[dict] | None = None) -> dict:
    """Wait until the page shows the engine's suggestions for `text` at `caret` (in chat mode, a reply after
    `messages`), fit included; return them."""
    expected = inference.lookahead.typed(text, 5, 3, session="browser-expectation", caret=caret, messages=messages)
    expect(page.locator("#text textarea")).to_have_value(text)
    for i, branch in enumerate(expected.branches):
        expect(page.locator(f"#branch-{i}")).to_have_text(branch_label(branch, expected.lead))
    expect(page.locator("#status")).to_contain_text(f"At the caret (character {caret})")
    expect(page.locator(".caret-marker")).to_contain_text(text[max(0, caret - 20):caret] + "▌" + text[caret:][:20])
    return as_json(expected)


def caret_of(page) -> int:
    return page.evaluate("document.querySelector('#text textarea').selectionStart")


def test_the_caret_drives_the_suggestions_and_a_branch_goes_in_there(page):
    type_text(page, DRAFT)
    expect(page.locator("#text textarea")).to_have_value(DRAFT)
    box = page.locator("#text textarea")
    box.press("Control+Home")
    for _ in range(CARET):  # the arrow keys move the caret, as a writer would
        box.press("ArrowRight")
    shown = expect_suggestions_at(page, DRAFT, CARET)
    assert all(b["fit"] is not None for b in shown["branches"])

    page.locator("#branch-1").click()
    branch = shown["branches"][1]["text"]
    text = DRAFT[:CARET] + branch + DRAFT[CARET:]
    after = CARET + len(branch)
    shown = expect_suggestions_at(page, text, after)
    assert text[after:] == DRAFT[CARET:], "the rest of the text, kept"
    expect(page.locator("#text textarea")).to_have_value(text)
    page.wait_for_function(f"document.querySelector('#text textarea').selectionStart === {after}")

    box.focus()
    page.keyboard.press("Alt+W")  # the first branch's next word only
    word = first_word(shown["branches"][0]["text"])
    worded = text[:after] + word + text[after:]
    expect_suggestions_at(page, worded, after + len(word))
    assert caret_of(page) == after + len(word)
    if page.viewport_name == "phone":
        page.screenshot(path=SCREENSHOT.with_name("phone-caret.png"), full_page=True)

    page.locator("#undo").click()
    expect(page.locator("#text textarea")).to_have_value(text)
    page.locator("#undo").click()
    expect(page.locator("#text textarea")).to_have_value(DRAFT)
    expect(page.locator("#status")).not_to_contain_text("At the caret")  # back at the end of the text
    at_the_end = inference.lookahead.typed(DRAFT, 5, 3, session="browser-expectation")
    expect(page.locator("#branch-0")).to_have_text(branch_label(at_the_end.branches[0], at_the_end.lead))


def test_a_caret_inside_a_chat_reply(page):
    question = "What is 2+2?"
    type_text(page, question)
    expect(page.locator("#branch-0")).not_to_have_text("")
    page.locator("#chat-mode label").filter(has_text="chat").click()  # the text becomes the user's message
    expect(page.locator("#conversation")).to_contain_text(question)
    conversation = [{"role": "user", "content": question}]
    reply = "The answer is 4, of course."
    type_text(page, reply)
    box = page.locator("#text textarea")
    box.press("End")
    caret = reply.index(" 4")
    for _ in range(len(reply) - caret):
        box.press("ArrowLeft")
    shown = expect_suggestions_at(page, reply, caret, conversation)
    page.locator("#branch-0").click()
    branch = shown["branches"][0]["text"]
    expect(box).to_have_value(reply[:caret] + branch + reply[caret:])
    expect_suggestions_at(page, reply[:caret] + branch + reply[caret:], caret + len(branch), conversation)


def test_typing_fast_in_the_middle_of_the_text_keeps_every_keystroke_where_it_was_typed(page):
    """Each keystroke tells the server where the caret is; the page must not move the caret back there a few
    frames later, when the next keystrokes have already moved it on."""
    type_text(page, DRAFT)
    box = page.locator("#text textarea")
    box.press("Control+Home")
    for _ in range(CARET):
        box.press("ArrowRight")
    typed = " quietly and slowly"
    box.press_sequentially(typed, delay=8)
    expect(box).to_have_value(DRAFT[:CARET] + typed + DRAFT[CARET:])
    expect_suggestions_at(page, DRAFT[:CARET] + typed + DRAFT[CARET:], CARET + len(typed))
