"""The app in a real browser: Debian's Chromium, headless, driven by Playwright."""

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

import custom_llm_inference as inference
from browser import (  # skips without chromium
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOT,
    choose,
    expect_suggestions_for,
    type_text,
    wait_for,
    wait_for_stored_text,
)
from history import History
from history.formats import FORMAT_LABELS, OWN, import_tree
from lookahead import reading
from lookahead.scheduler import scheduler
from ui.heatmap import ACCEPTED_CLASS, HEATMAP_TOKENS, bucket, shown_text
from ui.render import branch_label, percent, visible


@pytest.fixture(scope="module")
def page(app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(permissions=["clipboard-read", "clipboard-write"],
                                      viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(app_url)
        yield page
        browser.close()


def test_write_click_keyboard_and_undo(page):
    expect(page.locator("#branch-0")).to_be_visible()  # suggestions for the starting text
    text = "The robot opened the door and saw"
    type_text(page, text)
    shown = expect_suggestions_for(page, text)
    plot = page.locator("#plot .distribution")
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
    expected = inference.generate(text, 12, "greedy")
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


def test_paste_cut_delete_and_the_browsers_undo_all_refresh(page):
    """Edits that are not typed keys, with a real clipboard: each must bring suggestions for the new text."""
    box = page.locator("#text textarea")
    pasted = "Pasted text about the ocean and its"
    page.evaluate("text => navigator.clipboard.writeText(text)", pasted)
    box.click()
    box.press("Control+a")
    box.press("Control+v")
    expect_suggestions_for(page, pasted)
    box.press("Control+a")
    box.press("Delete")
    expect(page.locator("#status")).to_contain_text("Type something")
    expect(page.locator("#branch-0")).to_be_hidden()
    box.press("Control+z")  # the browser's own undo
    expect_suggestions_for(page, pasted)
    box.press("End")
    for _ in range(len(" its")):
        box.press("Shift+ArrowLeft")
    box.press("Control+x")
    cut = pasted.removesuffix(" its")
    shown = expect_suggestions_for(page, cut)
    assert page.evaluate("navigator.clipboard.readText()") == " its"
    page.locator("#branch-0").click()
    expect_suggestions_for(page, cut + shown["branches"][0]["text"])


def test_ctrl_enter_refreshes(page):
    box = page.locator("#text textarea")
    box.fill("Set without an input event")
    box.press("Control+Enter")
    expect_suggestions_for(page, "Set without an input event")


def test_a_number_typed_into_a_sliders_box_applies_on_enter(page):
    expect_suggestions_for(page, page.locator("#text textarea").input_value())
    if "open" not in (page.locator("#sampling-panel > .label-wrap").get_attribute("class") or ""):
        page.locator("#sampling-panel > .label-wrap").click()  # folded on a phone
    number = page.locator("input[type=number][aria-label='number input for Branches']")
    for branches in ("3", "5"):  # and back: the tests after this one share the page
        number.fill(branches)
        number.press("Enter")
        expect(page.locator("button[id^=branch-]:visible")).to_have_count(int(branches))
        expect(number).to_be_focused()


def test_a_branch_taken_at_once_after_a_setting_changes_is_answered_with_that_setting(page):
    box = page.locator("#text textarea")
    text = box.input_value()
    expect_suggestions_for(page, text)
    number = page.locator("input[type=number][aria-label='number input for Branches']")
    number.fill("2")
    number.press("Enter")
    page.locator("#branch-0").click()  # before the refresh the setting asks for has answered
    expect(box).not_to_have_value(text)
    taken = box.input_value()
    expected = inference.lookahead.typed(taken, 2, 3, session="browser-setting")
    expect(page.locator("#branch-2")).to_be_hidden()
    for i, branch in enumerate(expected.branches):
        expect(page.locator(f"#branch-{i}")).to_have_text(branch_label(branch, expected.lead))
    number.fill("5")  # the tests after this one share the page
    number.press("Enter")
    expect_suggestions_for(page, taken)


def test_branches_after_a_lead_show_the_choice_and_the_plot_names_the_lead(page):
    text = "The keeper climbed the stairs of the old lighthouse every night. " * 4 + "The keeper climbed the"
    type_text(page, text)
    shown = expect_suggestions_for(page, text)  # each label: "…" for the lead, then the choice
    assert shown["lead"]["text"] == " stairs of the"
    expect(page.locator("#branch-0")).to_contain_text("…␣old")
    expect(page.locator("#plot")).to_contain_text("The model all but certainly writes ␣stairs␣of␣the first")
    page.locator("#branch-1").click()
    expect_suggestions_for(page, text + shown["branches"][1]["text"])


def test_presets_forcing_undo_redo_fork_and_export_import(page, tmp_path):
    text = "My grandmother kept a small garden where"
    type_text(page, text)
    greedy = expect_suggestions_for(page, text)

    # Forcing: any token in the plot, here the fourth, is appended as is.
    forced = greedy["distribution"][3]
    page.locator(f'.dist-row[data-token-id="{forced["token_id"]}"]').click()
    forced_text = text + forced["token"]
    expect_suggestions_for(page, forced_text)

    # Undo, redo, undo, then a different choice: a sibling, the old path kept.
    page.locator("#undo").click()
    expect_suggestions_for(page, text)
    page.locator("#redo").click()
    expect_suggestions_for(page, forced_text)
    page.locator("#undo").click()
    expect_suggestions_for(page, text)
    page.locator("#branch-0").click()
    branched = text + greedy["branches"][0]["text"]
    expect_suggestions_for(page, branched)
    tree = page.locator("#tree")
    expect(tree.locator(".tree-node[data-current]")).to_contain_text("branch")
    old_path = tree.locator(".tree-node", has_text="token")
    expect(old_path).to_have_count(1)
    old_path.click()
    expect_suggestions_for(page, forced_text)

    # Appending typed text.
    page.locator("#extra textarea").fill(" roses")
    page.locator("#append").click()
    appended = forced_text + " roses"
    expect_suggestions_for(page, appended)

    # A preset moves the controls and the branches then sample from p_final with the seed.
    page.locator("#preset").get_by_text("balanced").click()
    expect(page.locator("#temperature input[type=number]")).to_have_value("0.7")
    sampling, mode = inference.PRESETS["balanced"]
    sampled = inference.lookahead.typed(
        appended, 5, 3, sampling=sampling, branch_mode=mode, seed=0, session="browser-b"
    )
    for i, branch in enumerate(sampled.branches):
        expect(page.locator(f"#branch-{i}")).to_have_text(branch_label(branch, sampled.lead))
    expect(page.locator("#status")).to_contain_text("branches sample (seed 0)")
    cut = [d for d in sampled.distribution[:10] if not d.kept]
    expect(page.locator("#plot .distribution")).to_contain_text("cut" if cut else "→")
    page.screenshot(path=SCREENSHOT.with_name("sampling.png"), full_page=True)
    page.locator("#preset").get_by_text("greedy").click()
    expect(page.locator("#status")).to_contain_text("branches greedy")

    # Export, wander off, import: the same tree and text come back.
    with page.expect_download() as download:
        page.locator("#export").click()
    exported = Path(download.value.path()).read_text()
    tree_before = tree.inner_html()
    page.locator("#branch-1").click()
    expect(page.locator("#text textarea")).not_to_have_value(appended)
    saved = tmp_path / "history.json"
    saved.write_text(exported)
    page.locator("#import input[type=file]").set_input_files(saved)
    expect_suggestions_for(page, appended)
    assert tree.inner_html() == tree_before
    assert History.from_json(exported).to_json() == exported


def write_and_take_the_first_branch(page, text: str) -> str:
    """Type `text`, wait for its suggestions, take the first branch and wait for the next; the text now."""
    type_text(page, text)
    shown = expect_suggestions_for(page, text)
    page.locator("#branch-0").click()
    taken = text + shown["branches"][0]["text"]
    expect_suggestions_for(page, taken)
    return taken


def test_a_reload_keeps_the_text_and_the_tree(page):
    kept = write_and_take_the_first_branch(page, "Kept across a reload:")
    tree_before = page.locator("#tree").inner_html()
    page.reload()
    expect_suggestions_for(page, kept)
    assert page.locator("#tree").inner_html() == tree_before


def test_the_stored_tree_is_kept_from_changes_alone_and_two_tabs_never_mix_theirs(page):
    text = "A copy kept by changes:"
    taken = write_and_take_the_first_branch(page, text)
    page.locator("#undo").click()
    shown = expect_suggestions_for(page, text)
    stored = wait_for_stored_text(page, text)
    assert taken in [n.text for n in stored.nodes], "the branch taken is in the browser's copy"
    message = json.loads(page.locator("#history-sync textarea").input_value())
    assert "whole" not in message and len(message["nodes"]) <= 2, "an update carries only what changed"

    other = page.context.new_page()  # the same browser's second tab reads the same copy ...
    other.goto(page.url)
    expect_suggestions_for(other, text)
    other.locator("#branch-1").click()  # ... and goes its own way
    elsewhere = text + shown["branches"][1]["text"]
    expect_suggestions_for(other, elsewhere)
    assert wait_for_stored_text(page, elsewhere).text == elsewhere
    page.locator("#redo").click()  # the first tab's next change: its copy is whole again, not mixed
    expect_suggestions_for(page, taken)
    stored = wait_for_stored_text(page, taken)
    assert elsewhere not in [n.text for n in stored.nodes]
    other.close()


def test_the_heatmap_colours_the_text_shows_alternatives_and_rewinds_to_one(page):
    text = "The cat sat on the mat. The dog"
    type_text(page, text)
    expect_suggestions_for(page, text)
    page.locator("#heatmap-on input").check()
    expected = inference.token_probabilities(text, 5, session="heatmap-expectation")["tokens"]
    shown = page.locator("#heatmap .tk")
    expect(shown).to_have_count(len([t for t in expected if t["end"] > t["start"]]))
    assert "".join(shown.all_inner_texts()) == text

    i = next(i for i, t in enumerate(expected) if t["token"] == " sat")
    page.locator(f'#heatmap .tk[data-i="{i}"]').hover()
    details = page.locator("#token-details")
    expect(details).to_contain_text(percent(expected[i]["prob"]))
    expect(details).to_contain_text(f"rank {expected[i]['rank']}")
    alternative = next(a for a in expected[i]["alternatives"] if a["token_id"] != expected[i]["token_id"])
    details.locator(f'[data-token-id="{alternative["token_id"]}"]').click()
    rewound = text[: expected[i]["start"]] + alternative["token"]
    expect_suggestions_for(page, rewound)
    expect(page.locator("#heatmap .tk").last).to_have_text(alternative["token"])
    expect(page.locator("#tree")).to_contain_text("rewind")
    tree = wait_for_stored_text(page, rewound)
    assert text in [n.text for n in tree.nodes], "the text rewound from stays in the tree"
    forked = tree.nodes[tree.current]
    assert text not in [n.text for n in tree.nodes if n.parent == forked.id], "a fork, not a step after the old text"

    type_text(page, rewound + " and")  # typing updates the colours
    expect(page.locator("#heatmap .tk").last).to_have_text(" and")
    page.locator("#heatmap-mode label").filter(has_text="rank").click()
    expect(page.locator("#heatmap")).to_contain_text("top 100")
    page.locator("#heatmap-on input").uncheck()
    expect(page.locator("#heatmap .tk")).to_have_count(0)



def test_chat_mode_writes_the_reply_after_the_conversation(page):
    question = "What is 2+2?"
    type_text(page, question)
    expect_suggestions_for(page, question)
    page.locator("#chat-mode label").filter(has_text="chat").click()  # the text becomes the user's message
    expect(page.locator("#system-prompt")).to_be_visible()
    conversation = [{"role": "user", "content": question}]
    shown = expect_suggestions_for(page, "", conversation)
    expect(page.locator("#conversation")).to_contain_text(question)
    page.locator("#branch-0").click()
    reply = shown["branches"][0]["text"]
    shown = expect_suggestions_for(page, reply, conversation)
    page.locator("#send-reply").click()
    expect(page.locator("#status")).to_contain_text("Write the user's message")
    expect(page.locator("#conversation")).to_contain_text(reply.strip())
    expect(page.locator("#text textarea")).to_have_value("")
    page.locator("#system-prompt textarea").fill("You answer briefly.")
    page.locator("#user-message textarea").fill("And 3+3?")
    page.locator("#send-user").click()
    conversation = [{"role": "system", "content": "You answer briefly."}, *conversation,
                    {"role": "assistant", "content": reply}, {"role": "user", "content": "And 3+3?"}]
    expect_suggestions_for(page, "", conversation)
    page.locator("#chat-mode label").filter(has_text="plain text").click()
    expect(page.locator("#system-prompt")).to_be_hidden()


def test_switching_the_model_keeps_the_text_and_suggests_from_the_new_one(page, tiny_model_dirs):
    text = "Switching models keeps this text"
    type_text(page, text)
    expect_suggestions_for(page, text)
    tiny = tiny_model_dirs["llama"]
    choose(page, "#model", tiny)
    expect_suggestions_for(page, text, model_name=tiny)
    expect(page.locator("#status")).to_contain_text(tiny)
    choose(page, "#model", inference.default_model_name())
    expect_suggestions_for(page, text)


def test_the_constrain_panel_makes_branches_the_plot_and_continue_obey(page):
    text = "Is the sea blue? Answer: "
    type_text(page, text)
    expect_suggestions_for(page, text)
    page.locator("#constrain-panel").get_by_text("Constrain", exact=True).first.click()
    choose(page, "#constraint-preset", "yes / no / maybe")
    expect(page.locator("#constraint-value textarea")).to_have_value("yes\nno\nmaybe")
    page.locator("#text textarea").evaluate(
        "el => { el.focus(); el.setSelectionRange(el.value.length, el.value.length); }")
    page.locator("#constrain").click()
    constraint = {"type": "choice", "value": ["yes", "no", "maybe"], "start": len(text)}
    expected = inference.lookahead.typed(text, 5, 3, session="browser-expectation", constraint=constraint)
    for i, branch in enumerate(expected.branches):
        expect(page.locator(f"#branch-{i}")).to_have_text(branch_label(branch, expected.lead))
    assert {b.text for b in expected.branches} <= {"yes", "no", "maybe"}
    expect(page.locator("#status")).to_contain_text("constrained (choice)")
    expect(page.locator("#constraint-status")).to_contain_text(f"from character {len(text)}")
    expect(page.locator("#plot")).to_contain_text("✗")
    page.screenshot(path=SCREENSHOT.with_name("constrain.png"), full_page=True)
    page.get_by_label("Tokens to continue").fill("8")
    page.locator("#continue").click()
    continued = inference.generate(text, 8, constraint=constraint)
    assert continued["text"] in ("yes", "no", "maybe")
    expect(page.locator("#text textarea")).to_have_value(text + continued["text"])
    page.locator("#unconstrain").click()
    expect(page.locator("#constraint-status")).to_contain_text("No constraint")
    expect_suggestions_for(page, text + continued["text"])


def test_why_beside_a_token_colours_the_text_by_what_drives_it_and_the_method_can_change(page):
    text = "The capital of France is"
    type_text(page, text)
    shown = expect_suggestions_for(page, text)
    top = shown["distribution"][0]
    page.locator("#plot .why").first.click()
    expected = inference.attribution(text, top["token_id"], "input_x_gradient", session="browser-expectation")
    view = page.locator("#why-view")
    expect(view).to_contain_text("next: input x gradient")
    expect(view).to_contain_text(f"gives it {percent(expected['target']['prob'])}")
    strongest = max(expected["tokens"], key=lambda t: t["score"])
    expect(view).to_contain_text(f"{100 * strongest['score']:.0f}%")
    expect(page.locator("#text textarea")).to_have_value(text)  # asking why appends nothing
    page.locator("#why-method").get_by_text("attention").click()
    expect(view).to_contain_text("next: attention")
    page.screenshot(path=SCREENSHOT.with_name("why.png"), full_page=True)


def test_why_on_a_branch_and_on_a_heatmap_token(page):
    text = "The capital of France is Paris. The capital of Italy is"
    type_text(page, text)
    shown = expect_suggestions_for(page, text)
    page.locator("#why-method").get_by_text("input_x_gradient").click()
    page.locator("#branch-1").hover()  # a chip over the branch asks why
    page.locator("#branch-why").click()
    first = shown["branches"][1]["token_ids"][0]
    expected = inference.attribution(text, first, "input_x_gradient", session="browser-expectation")
    view = page.locator("#why-view")
    expect(view).to_contain_text(f"Why {visible(expected['target']['token'])}")
    expect(view).to_contain_text(f"gives it {percent(expected['target']['prob'])}")
    strongest = max(expected["tokens"], key=lambda t: t["score"])
    coloured = view.locator('span[style*="rgba(234,88,12,0.85)"]')  # the strongest token, in the full colour
    expect(coloured).to_have_text(text[strongest["start"] : strongest["end"]])
    expect(page.locator("#text textarea")).to_have_value(text)  # asking why takes no branch
    page.locator("#branch-2").focus()  # from the keyboard: a focused branch, then "?"
    page.keyboard.press("?")
    third = inference.attribution(text, shown["branches"][2]["token_ids"][0], session="browser-expectation")
    expect(view).to_contain_text(f"Why {visible(third['target']['token'])} next")
    expect(view).to_contain_text(f"gives it {percent(third['target']['prob'])}")
    expect(page.locator("#text textarea")).to_have_value(text)

    page.locator("#heatmap-on input").check()
    scored = inference.token_probabilities(text, 5, session="heatmap-expectation")["tokens"]
    i = next(i for i, t in enumerate(scored) if t["token"] == " Italy")
    page.locator(f'#heatmap .tk[data-i="{i}"]').hover()
    page.locator("#token-details .why-token").click()
    expected = inference.attribution(text, None, "input_x_gradient", session="browser-expectation", at_token=i)
    assert expected["target"]["token_id"] == scored[i]["alternatives"][0]["token_id"]
    expect(view).to_contain_text("where you wrote ␣Italy")
    expect(view).to_contain_text(f"gives it {percent(expected['target']['prob'])}")
    expect(view.locator("span")).to_have_count(i)  # the text before the token

    page.locator("#why-method").get_by_text("integrated_gradients").click()  # the same question, another method
    expect(view).to_contain_text("integrated gradients, 16 steps")
    expect(view).to_contain_text("where you wrote ␣Italy")
    page.screenshot(path=SCREENSHOT.with_name("why-heatmap.png"), full_page=True)
    page.locator("#heatmap-on input").uncheck()


def test_a_click_updates_the_heatmap_by_its_new_tokens_alone(page):
    """The heatmap's spans before the click stay the same elements; only the branch's tokens are added, and
    the view equals the whole view drawn afresh, its window of the last 400 tokens moving along."""
    text = ("The harbour town woke slowly. Fishermen hauled their nets along the quay, gulls argued over scraps. "
            * 24).rstrip()  # ~530 tokens: past the heatmap's 400
    type_text(page, text)
    shown = expect_suggestions_for(page, text)
    page.locator("#heatmap-on input").check()
    expect(page.locator("#heatmap .earlier")).to_be_visible()
    page.evaluate("document.querySelectorAll('#heatmap .tk').forEach(t => t.dataset.probe = t.dataset.i)")
    taken = text + shown["branches"][0]["text"]
    page.locator("#branch-0").click()
    expect_suggestions_for(page, taken)
    tokens = inference.token_probabilities.typed(taken, 5, session="heatmap-expectation").tokens
    first = len(tokens) - HEATMAP_TOKENS
    expect(page.locator("#heatmap .tk").first).to_have_attribute("data-i", str(first))
    expect(page.locator("#heatmap .earlier")).to_have_text(f"… {first} earlier tokens … ")
    spans = page.evaluate("[...document.querySelectorAll('#heatmap .tk')].map(t => "
                          "[Number(t.dataset.i), t.className, t.textContent, t.dataset.probe ?? null])")
    drawn = [i for i in range(first, len(tokens)) if tokens[i].end > tokens[i].start]

    def accepted(token) -> str:  # the branch's tokens, written mostly by the model, are underlined
        return f" {ACCEPTED_CLASS}" if 2 * (token.end - max(token.start, len(text))) > token.end - token.start else ""

    assert [(i, c, t) for i, c, t, _ in spans] == [
        (i, f"tk b{bucket(tokens[i], 'probability') if tokens[i].prob is not None else 'u'}{accepted(tokens[i])}",
         shown_text(taken[tokens[i].start : tokens[i].end]))
        for i in drawn]
    kept = [probe for *_, probe in spans if probe is not None]
    assert len(kept) >= len(spans) - len(shown["branches"][0]["token_ids"]) - 1, "the old spans stayed"

    page.evaluate("document.getElementById('heatmap-resync').click()")  # what a page that missed one asks
    expect(page.locator("#heatmap .tk[data-probe]")).to_have_count(0)  # the whole view, drawn afresh
    after = expect_suggestions_for(page, taken)
    again = taken + after["branches"][0]["text"]
    page.locator("#branch-0").click()  # and the next click's change applies to it
    expect_suggestions_for(page, again)
    tokens = inference.token_probabilities(again, 5, session="heatmap-expectation")["tokens"]
    expect(page.locator("#heatmap .tk").last).to_have_attribute("data-i", str(len(tokens) - 1))
    assert "".join(page.locator("#heatmap .tk").all_inner_texts()) == "".join(
        shown_text(again[t["start"] : t["end"]]) for t in tokens[len(tokens) - HEATMAP_TOKENS :])
    page.locator("#heatmap-on input").uncheck()


def test_typing_overtakes_a_running_why_and_stop_ends_it(page):
    """A long "why?" (integrated gradients over 512 tokens) runs while the writer keeps typing: their suggestions
    come while it runs; Stop ends it, and the view keeps what it showed."""
    text = "The keeper climbed the stairs to the lamp, and counted the ships on the dark sea. " * 30
    type_text(page, text)
    expect_suggestions_for(page, text)
    page.locator("#why-method").get_by_text("integrated_gradients").click()  # asks nothing yet: no question
    page.locator("#plot .why").first.click()

    def explaining() -> list:
        """The explanations running (the map of futures that follows each answer is a long job too)."""
        return [job for job in scheduler.running() if job.kind == "attribution"]

    job = wait_for(lambda: next(iter(explaining()), None))
    with scheduler.interactive():  # as clicks of another visitor would, this holds the explanation to its share
        typed = text + "Then the fog came"
        type_text(page, typed)
        expect_suggestions_for(page, typed)
        assert not job.cancelled and explaining() == [job], "the suggestions came while the explanation ran"
        page.locator("#why-stop").click()
        wait_for(lambda: explaining() == [])
    assert job.cancelled
    expect(page.locator("#why-view")).not_to_contain_text("next:")  # nothing was explained, and nothing broke
    expect(page.locator(".toast-body.error")).to_have_count(0)


def test_a_long_paste_answers_at_once_labelled_partial_then_exactly(page, monkeypatch):
    """A text too long to read at once: the first suggestions come from its last tokens, labelled, while it is
    read; the page asks again by itself and shows the exact ones when the read ends."""
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 1.0)
    monkeypatch.setitem(inference.backend().reader._windows, inference.default_model_name(), 128)
    text = "".join(f"{i}. The keeper climbed the stairs to the lamp and counted the ships on the sea. "
                   for i in range(60))  # ~1.4k tokens
    type_text(page, text)
    status = page.locator("#status")
    expect(status).to_contain_text("Partial")
    expect(status).to_contain_text("from the last 128 of")
    expect(status).not_to_contain_text("(0 of")  # a later ask shows the read's progress
    page.screenshot(path=SCREENSHOT.with_name("partial.png"), full_page=True)
    expect(status).not_to_contain_text("Partial")
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 0)  # the expectation reads the text whole
    expect_suggestions_for(page, text)
    expect(page.locator(".toast-body.error")).to_have_count(0)


def test_an_export_as_loom_is_named_so_and_reads_back_and_a_loom_file_replaces_the_tree(page):
    taken = write_and_take_the_first_branch(page, "Exported as loom:")
    session = wait_for_stored_text(page, taken)
    choose(page, "#export-format", "loom")
    with page.expect_download() as download:
        page.locator("#export").click()
    assert download.value.suggested_filename == "history.loom.json"
    exported = import_tree(Path(download.value.path()).read_text())
    assert [n.text for n in exported.nodes] == [n.text for n in session.nodes] and exported.text == taken
    expect(page.get_by_text("loom keeps the text, the tree")).to_be_visible()

    page.locator("#import input[type=file]").set_input_files(files=[
        {"name": "broken.json", "mimeType": "application/json", "buffer": b'{"pages": []}'}])
    expect(page.locator(".toast-body.error")).to_contain_text("Could not import that file: not a history")
    expect(page.locator("#text textarea")).to_have_value(taken)  # the tree is kept

    sample = Path(__file__).parent / "fixtures" / "history" / "sample.loom.json"
    page.locator("#import input[type=file]").set_input_files(sample)
    current = import_tree(sample.read_text()).text
    expect_suggestions_for(page, current)
    expect(page.get_by_text("Read a loom tree of 5 nodes")).to_be_visible()
    expect(page.locator("#tree")).to_contain_text("lamp.")
    assert wait_for_stored_text(page, current).text == current
    choose(page, "#export-format", FORMAT_LABELS[OWN])
