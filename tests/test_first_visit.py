"""A new visitor's first visit, in a real browser: a fresh page, nothing typed in the optional fields,
each mode and panel tried once in the order a person would. The app's log must show no exception:
a visitor is told what went wrong in words (gr.Error, printed nowhere), never through a traceback."""

import logging

from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import (  # skips without chromium
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOT,
    expect_suggestions_for,
    wait_for_stored_text,
)
from ui.history_updates import DEFAULT_TEXT

ERROR_TOASTS = ".toast-body.error"


def no_error_shown(page) -> None:
    expect(page.locator(ERROR_TOASTS)).to_have_count(0)


def test_a_new_visitor_tries_every_mode_and_panel_once_and_meets_no_error(app_url, capfd, caplog):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()  # nothing stored yet
        page.goto(app_url)
        shown = expect_suggestions_for(page, DEFAULT_TEXT)

        # Undo before anything was done: a notice, not an error.
        page.locator("#undo").click()
        expect(page.locator(".toast-body", has_text="Nothing to undo")).to_be_visible()
        no_error_shown(page)

        # A branch, then a token from the plot, each as soon as it is shown.
        page.locator("#branch-0").click()
        text = DEFAULT_TEXT + shown["branches"][0]["text"]
        shown = expect_suggestions_for(page, text)
        token = shown["distribution"][1]
        page.locator(f'.dist-row[data-token-id="{token["token_id"]}"]').click()
        text += token["token"]
        expect_suggestions_for(page, text)

        # The heatmap: on, and a token hovered.
        page.locator("#heatmap-on input").check()
        expect(page.locator("#heatmap .tk").first).to_be_visible()
        page.locator("#heatmap .tk").last.hover()
        expect(page.locator("#token-details")).to_contain_text("rank")

        # Continue by a few tokens, then append typed text.
        page.get_by_label("Tokens to continue").fill("6")
        page.locator("#continue").click()
        text += inference.generate(text, 6, "greedy")["text"]
        expect_suggestions_for(page, text)
        page.locator("#extra textarea").fill(" Then")
        page.locator("#append").click()
        text += " Then"
        expect_suggestions_for(page, text)

        # A preset and back; a line of the history tree.
        page.locator("#preset").get_by_text("creative").click()
        expect(page.locator("#status")).to_contain_text("branches sample")
        page.locator("#preset").get_by_text("greedy").click()
        expect(page.locator("#status")).to_contain_text("branches greedy")
        page.locator("#tree .tree-node").first.click()
        expect_suggestions_for(page, DEFAULT_TEXT)
        page.locator("#tree .tree-node", has_text="append").click()
        expect_suggestions_for(page, text)

        # Chat, the system prompt untouched: the text opens the conversation as the user's message.
        page.locator("#chat-mode label").filter(has_text="chat").click()
        expect(page.locator("#conversation")).to_contain_text("Then")
        expect(page.locator(".toast-body", has_text="the user's first message")).to_be_visible()
        conversation = [{"role": "user", "content": text}]
        shown = expect_suggestions_for(page, "", conversation)
        no_error_shown(page)
        page.locator("#branch-0").click()
        reply = shown["branches"][0]["text"]
        expect_suggestions_for(page, reply, conversation)
        page.locator("#send-reply").click()
        expect(page.locator("#status")).to_contain_text("Write the user's message")
        conversation.append({"role": "assistant", "content": reply})
        page.locator("#user-message textarea").fill("Say more.")
        page.locator("#send-user").click()
        conversation.append({"role": "user", "content": "Say more."})
        expect_suggestions_for(page, "", conversation)
        page.screenshot(path=SCREENSHOT.with_name("first-visit-chat.png"), full_page=True)

        # Back to plain text, an export, a reload.
        page.locator("#chat-mode label").filter(has_text="plain text").click()
        page.locator("#text textarea").fill("Plain again")
        page.locator("#text textarea").press("Control+Enter")
        expect_suggestions_for(page, "Plain again")
        with page.expect_download():
            page.locator("#export").click()
        assert wait_for_stored_text(page, "Plain again").text == "Plain again"  # the browser's copy, then reload
        page.reload()
        expect_suggestions_for(page, "Plain again")
        no_error_shown(page)
        browser.close()

    log = capfd.readouterr()
    assert "Traceback" not in log.err + log.out, "an exception reached the app's log"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "an error was logged"
