"""Who wrote what, in a real browser: a branch taken, the writer's words typed after it, the ledger's numbers on the
page, the same after a reload (the tree this browser keeps is all they are worked out from), the accepted tokens
underlined in the heatmap, and the export for analysis downloaded."""

import json

from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import (  # skips without chromium
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOT,
    expect_suggestions_for,
    inserted_at,
    type_text,
    wait_for_stored_text,
)
from ui.heatmap import ACCEPTED_CLASS
from ui.ledger import ledger
from ui.logprobs_export import FILE_NAME

TEXT = "The keeper climbed the stairs"
TYPED = " and sang"


def expect_ledger(page, book) -> None:
    """The page's ledger shows `book`'s numbers."""
    numbers = {"writer-chars": f"{book.writer_chars:,}", "model-chars": f"{book.model_chars:,}",
               "model-share": f"{100 * book.model_share:.1f}%", "selection-bits": f"{book.selection_bits:.2f}",
               "writer-bits": f"{book.writer_bits:.2f}", "model-bits": f"{book.model_bits:.2f}"}
    for name, value in numbers.items():
        expect(page.locator(f"#ledger-{name}")).to_have_text(value)


def test_the_ledger_counts_a_branch_and_the_writers_words_and_a_reload_keeps_it(app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True).new_page()
        page.goto(app_url)
        type_text(page, TEXT)
        shown = expect_suggestions_for(page, TEXT)
        page.locator("#branch-0").click()
        taken, _ = inserted_at(TEXT, None, shown["branches"][0]["text"])
        expect_suggestions_for(page, taken)
        written = taken + TYPED
        type_text(page, written)
        expect_suggestions_for(page, written)
        stored = wait_for_stored_text(page, written)
        scores = inference.token_probabilities.typed(written, 5, session="ledger-browser-expected", partial=False)
        book = ledger(stored, scores.tokens)
        assert (book.writer_chars, book.model_chars) == (len(TEXT) + len(TYPED), len(taken) - len(TEXT))
        assert len(book.choices) == 1 and book.choices[0].choices == len(shown["branches"])
        expect(page.locator("#ledger")).to_contain_text("Show the heatmap")  # no scoring for the ledger alone
        page.locator("#heatmap-on input").check()
        expect_ledger(page, book)

        page.reload()
        expect_suggestions_for(page, written)
        expect_ledger(page, book)

        expect(page.locator(f"#heatmap-text .tk.{ACCEPTED_CLASS}")).to_have_count(book.model_tokens)
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.locator("#ledger-panel").scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOT.with_name("ledger.png"))
        with page.expect_download() as download:
            page.locator("#export-analysis").click()
        assert download.value.suggested_filename == FILE_NAME
        exported = json.loads(open(download.value.path(), encoding="utf-8").read())
        content = exported["logprobs"]["content"]
        assert exported["text"] == written and len(content) == len(scores.tokens)
        assert sum(entry["author"] == "model" for entry in content) == book.model_tokens
        browser.close()
