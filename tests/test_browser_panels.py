"""Two models side by side on the page: the "Compare with…" choice puts a second model's suggestions panel beside the
first (under it on a phone), both following the text; either one's branch goes in; the heatmap colours the text by
where they part. Driven in a real browser, against the engine's own answers."""

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import (  # skips without chromium
    CHROMIUM,
    CHROMIUM_ARGS,
    choose,
    expect_suggestions_for,
    inserted_at,
    type_text,
    wait_for,
)

TEXT = "The keeper lit the lamp and"
SHOTS = Path(__file__).resolve().parents[1] / "screenshots"


@pytest.fixture(scope="module")
def app_url(embedded, tiny_model_dirs):
    """The page as `python app.py` serves it (no second model chosen)."""
    import app

    demo, panels = app.build_page()
    _, url, _ = app.launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    yield url, panels
    demo.close()


@pytest.fixture
def browser():
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def test_a_second_model_chosen_answers_beside_the_first_and_either_ones_branch_goes_in(app_url, browser,
                                                                                       tiny_model_dirs):
    url, panels = app_url
    tiny = tiny_model_dirs["llama"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    expect(page.locator("#suggestions-2")).to_be_hidden()
    type_text(page, TEXT)
    first = expect_suggestions_for(page, TEXT)
    choose(page, "#compare-model", tiny)
    beside = expect_suggestions_for(page, TEXT, model_name=tiny, panel="-2")
    expect(page.locator("#plot-heading-2")).to_contain_text(tiny)
    expect(page.locator("#plot-heading")).to_contain_text(inference.default_model_name())
    one, two = (page.locator(f"#suggestions{panel}").bounding_box() for panel in ("", "-2"))
    assert two["x"] >= one["x"] + one["width"] - 1 and abs(two["y"] - one["y"]) < 5, "side by side on a desktop"
    assert first["model"] != beside["model"]
    expect(page.locator("#answer-sync-2")).to_be_hidden()  # the page's own bookkeeping never shows
    page.screenshot(path=str(SHOTS / "compare-desktop.png"))
    page.locator("#branch-2-0").click()  # the tiny model's first branch
    taken, _ = inserted_at(TEXT, None, beside["branches"][0]["text"])
    expect_suggestions_for(page, taken, model_name=tiny, panel="-2")
    first = expect_suggestions_for(page, taken)  # the other model's suggestions follow the text
    page.locator("#branch-1").click()  # the embedded model's second branch
    again, _ = inserted_at(taken, None, first["branches"][1]["text"])
    expect_suggestions_for(page, again)
    expect_suggestions_for(page, again, model_name=tiny, panel="-2")
    expect(page.locator("body.suggestions-stale, body.suggestions-stale-2")).to_have_count(0)
    choose(page, "#compare-model", "nothing")
    expect(page.locator("#suggestions-2")).to_be_hidden()
    expect(page.locator("#plot-heading")).not_to_contain_text(inference.default_model_name())


def test_with_one_model_a_click_sends_only_its_own_event(app_url, browser):
    """No round trip follows a click for a second panel nobody chose, and the ledger's waits for the writer's pause:
    each would come between the click and its suggestions on screen."""
    url, _ = app_url
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    handlers = {d["id"]: d["api_name"] for d in page.request.get(url + "config").json()["dependencies"]}
    joined = []
    sent = ("/queue/join", "/gradio_api/run/")  # queued, or straight to the server (a click)
    page.on("request", lambda r: any(path in r.url for path in sent)
            and joined.append(handlers[r.post_data_json["fn_index"]]))
    page.goto(url)
    type_text(page, TEXT)
    first = expect_suggestions_for(page, TEXT)
    wait_for(lambda: "show_ledger" in joined)  # the ledger that follows the typing, sent (later on a busy machine)
    joined.clear()
    page.locator("#branch-0").click()
    expect_suggestions_for(page, inserted_at(TEXT, None, first["branches"][0]["text"])[0])
    assert joined[0] == "take_branch_and_suggest"
    page.wait_for_timeout(1000)
    assert not any(name.startswith("suggest_beside") for name in joined)
    assert "show_ledger" in joined, "the ledger follows once the writer pauses"


def test_the_heatmap_colours_the_text_by_where_the_two_models_part(app_url, browser, tiny_model_dirs):
    url, _ = app_url
    tiny = tiny_model_dirs["llama"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    type_text(page, TEXT)
    expect_suggestions_for(page, TEXT)
    page.locator("#heatmap-on input").check()
    page.get_by_label("where the models part").click()  # not check(): the page may turn it back before it looks
    expect(page.locator(".toast-body.warning")).to_contain_text("Choose a model to compare with first")
    expect(page.get_by_label("probability")).to_be_checked()  # meanwhile the first model's colours
    choose(page, "#compare-model", tiny)
    page.get_by_label("where the models part").check()
    compared = inference.compare(TEXT, [inference.default_model_name(), tiny], k=1, n_branches=0, session="expected")
    expect(page.locator("#heatmap")).to_contain_text("part most")
    spans = page.locator("#heatmap-text .tk")
    expect(spans).to_have_count(len(compared["tokens"]))
    from ui.heatmap import PARTING, SecondView, bucket

    for i, token in enumerate(compared["tokens"]):
        index = bucket(None, PARTING, SecondView(None, token["js"], None, []))
        expect(spans.nth(i)).to_have_class(f"tk b{'u' if index is None else index}")
    most = max(compared["tokens"][1:], key=lambda t: t["js"])
    expect(page.locator("#disagreements div").first).to_contain_text(most["token"].strip())
    spans.nth(compared["tokens"].index(most)).hover()
    expect(page.locator(".second-model")).to_contain_text(f"{most['js']:.3f} bits apart")
    page.screenshot(path=str(SHOTS / "compare-heatmap.png"), full_page=True)


def test_on_a_phone_the_second_panel_comes_under_the_first(app_url, browser, tiny_model_dirs):
    url, _ = app_url
    tiny = tiny_model_dirs["llama"]
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.goto(url)
    type_text(page, TEXT)
    expect_suggestions_for(page, TEXT)
    choose(page, "#compare-model", tiny)
    expect_suggestions_for(page, TEXT, model_name=tiny, panel="-2")
    one, two = (page.locator(f"#suggestions{panel}").bounding_box() for panel in ("", "-2"))
    assert two["y"] >= one["y"] + one["height"] - 1, "one under the other"
    assert one["width"] <= 390 and two["width"] <= 390, "nothing wider than the phone"
    page.locator("#branch-2-0").tap()
    expect(page.locator("#text textarea")).not_to_have_value(TEXT)
    page.screenshot(path=str(SHOTS / "compare-phone.png"), full_page=True)


def test_a_long_texts_heatmap_shows_its_progress_then_fills_in_by_itself(app_url, browser, monkeypatch):
    """A long paste with the heatmap on: its first tokens coloured with the progress under them, then, with no
    click, the whole heatmap, as the engine scores the text."""
    from lookahead import reading
    from lookahead.outputs import ScoredToken
    from reference import next_logits
    from ui.heatmap import bucket

    url, _ = app_url
    reader = inference.backend().reader
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 1.0)  # partial answers on, with a small window
    monkeypatch.setitem(reader._windows, inference.default_model_name(), 96)
    text = " ".join(f"{i}. The keeper lit the lamp and watched the ships pass the rocks." for i in range(60))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    page.locator("#heatmap-on input").check()
    type_text(page, text)
    model, tokenizer = inference.load_model(inference.default_model_name())
    ids = tokenizer(text)["input_ids"]
    expect(page.locator("#heatmap-progress")).to_contain_text(f"of {len(ids):,} tokens")
    expect(page.locator("#heatmap-progress")).to_have_count(0)
    prob = float(next_logits(model, ids[:-1]).float().softmax(-1)[ids[-1]])  # one pass, no cache
    last = ScoredToken(ids[-1], "", 0, 0, prob, None, None, None, None)
    expect(page.locator("#heatmap-text .tk").last).to_have_class(f"tk b{bucket(last, 'probability')}")
    reader.stop()
