"""The futures panel in a real browser: the map at the caret as blocks, a block's numbers under the pointer, a click
zooming to it and "↑ out" back, "insert" putting its path at the caret as a branch goes in, and the map following
the new text; on a phone, the panel fits and the text stays in view. Against the engine's own map."""

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import CHROMIUM, CHROMIUM_ARGS, inserted_at, type_text  # skips without chromium
from ui.futures import bits
from ui.panels.futures import CUTOFF, DEPTH
from ui.render import visible

TEXT = "The keeper lit the lamp and the ship sailed home"
CARET = TEXT.index(" the ship")
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def browser():
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def put_caret(page, text: str, caret: int) -> None:
    """The arrow keys move the caret to `caret`, as a writer would; the suggestions there come first."""
    box = page.locator("#text textarea")
    box.press("Control+End")
    for _ in range(len(text) - caret):
        box.press("ArrowLeft")
    expect(page.locator("#status")).to_contain_text(f"At the caret (character {caret})")


def test_the_map_at_the_caret_zooms_and_a_blocks_path_goes_in_there(app_url, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app_url)
    type_text(page, TEXT)
    put_caret(page, TEXT, CARET)
    futures = page.locator("#futures")
    expect(futures.locator('.future-block rect[stroke-width="3"]').first).to_be_attached()  # the writer's own path
    expected = inference.multiverse.typed(TEXT, DEPTH, CUTOFF, caret=CARET, session="browser-expectation")
    first = futures.locator(".future-block").nth(1)  # the likeliest next token's block
    node = expected.nodes[int(first.get_attribute("data-node"))]
    assert node.depth == 1 and not node.on_text

    first.hover()
    caption = futures.locator(".futures-caption")
    for words in (f"“{visible(node.text)}”", "p ", "mass ", f"{bits(node.mass):.2f} bits", "entropy"):
        expect(caption).to_contain_text(words)

    first.click()
    expect(futures.locator(".futures-zoom")).to_contain_text(f"zoom {bits(node.mass):.2f} bits")
    expect(futures.locator(f'.future-block[data-node="{node.id}"]')).to_have_attribute("height", "320.00")
    futures.locator(".futures-out").click()
    expect(futures.locator(".futures-zoom")).to_have_count(0)
    expect(futures.locator(f'.future-block[data-node="{node.id}"]')).not_to_have_attribute("height", "320.00")

    drawn = futures.locator(".futures").get_attribute("data-map")
    futures.locator(f'.future-block[data-node="{node.id}"]').click()
    futures.locator(".futures-insert").click()
    text, caret = inserted_at(TEXT, CARET, node.text)
    expect(page.locator("#text textarea")).to_have_value(text)
    assert text.startswith(TEXT[:CARET]) and text.endswith(TEXT[CARET:].lstrip())
    assert " " in text[caret - 1:caret + 1] or not text[caret].isalnum(), "the path and the words after it apart"
    expect(page.locator("#status")).to_contain_text(f"At the caret (character {caret})")
    expect(futures.locator(".futures")).not_to_have_attribute("data-map", drawn)  # the map follows the new text
    expect(futures.locator(".futures-zoom")).to_have_count(0)
    expect(page.locator(".toast-body.error")).to_have_count(0)


def test_on_a_phone_the_panel_fits_and_the_text_stays_in_view(app_url, browser):
    page = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    page.goto(app_url)
    type_text(page, TEXT)
    box = page.locator("#text textarea")
    expect(page.locator("#futures .future-block").nth(1)).to_be_attached()
    expect(box).to_be_in_viewport()
    toggle = page.locator("#futures-panel > .label-wrap")
    if "open" not in (toggle.get_attribute("class") or ""):
        toggle.click()
    expect(page.locator("#futures .future-block").nth(1)).to_be_visible()
    for part in ("#futures-panel", "#futures .futures-icicle", "#futures-compare"):
        place = page.locator(part).bounding_box()
        assert place["x"] >= 0 and place["x"] + place["width"] <= PHONE["width"], part
    page.evaluate("window.scrollTo(0, 0)")
    expect(box).to_be_in_viewport()
