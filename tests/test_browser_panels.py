"""The page as panels: the suggestions panel built twice in one page, on two models, each driven in a real browser."""

import pytest
from playwright.sync_api import sync_playwright

from browser import CHROMIUM, CHROMIUM_ARGS, expect_suggestions_for, inserted_at, type_text  # skips without chromium

TEXT = "The keeper lit the lamp and"


@pytest.fixture(scope="module")
def two_models_page(embedded, tiny_model_dirs):
    """The page with the tiny Llama's suggestions beside the embedded model's."""
    import app

    tiny = tiny_model_dirs["llama"]
    demo, panels = app.build_page(beside=[tiny])
    _, url, _ = app.launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        yield page, tiny, panels
        browser.close()
    demo.close()


def test_two_models_answer_for_the_same_text_and_either_ones_branch_goes_in(two_models_page):
    page, tiny, panels = two_models_page
    assert [panel.suffix for panel in panels["beside"]] == ["-2"]
    type_text(page, TEXT)
    first = expect_suggestions_for(page, TEXT)
    beside = expect_suggestions_for(page, TEXT, model_name=tiny, panel="-2")
    assert first["model"] != beside["model"]
    page.locator("#branch-2-0").click()  # the tiny model's first branch
    taken, _ = inserted_at(TEXT, None, beside["branches"][0]["text"])
    expect_suggestions_for(page, taken, model_name=tiny, panel="-2")
    first = expect_suggestions_for(page, taken)  # the other model's suggestions follow the text
    page.locator("#branch-1").click()  # the embedded model's second branch
    again, _ = inserted_at(taken, None, first["branches"][1]["text"])
    expect_suggestions_for(page, again)
    expect_suggestions_for(page, again, model_name=tiny, panel="-2")
