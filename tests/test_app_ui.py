"""The UI's own logic, without a browser."""

import asyncio
import json
import math
import re
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

import custom_llm_inference as inference
from history import History
from lookahead.outputs import (
    Alternative,
    AttributedToken,
    Attribution,
    Branch,
    ComparedToken,
    ComparedWord,
    ForcedTokens,
    LeadTokens,
    ModelComparison,
    NextCompared,
    NextToken,
    ScoredToken,
    Suggestions,
    Target,
    TokenScores,
)
from lookahead.sampling import Sampling
from ui.chat import awaiting_user, messages_for, with_user_message
from ui.controls import MAX_BUTTONS, BranchShape, Draft, as_group
from ui.errors import handled
from ui.heatmap import Listing
from ui.insertion import caret_in, joined
from ui.on_screen import OnScreen
from ui.panels.chat import send_user_message, switch_mode
from ui.panels.constrain import constrain, restore_constraint, unconstrain
from ui.panels.history import KeptSettings, export_history, import_history, move, restore
from ui.panels.sampling import apply_preset, matching_preset
from ui.panels.suggestions import (
    branch_choices,
    force_token,
    ordered_by_fit,
    suggest_at_moved_caret,
    take_branch,
)
from ui.panels.writer import append_text
from ui.render import branch_label, caret_marker, distribution_plot, first_word, insertion, tree_view, visible
from ui.turns import send_reply
from ui.wiring import Wiring

AT_NODE = ("text_box", "conversation_state", "conversation_view", "history_state")


def at(update: dict, *slots) -> tuple:
    """A handler's values for these slots (it answers {slot: value})."""
    return tuple(update[slot] for slot in slots)


def test_whitespace_is_made_visible():
    assert visible(" a\n\tb") == "␣a↵⇥b"


def entry(token_id: int, token: str, prob: float, p_final: float | None = None, valid: bool = True) -> NextToken:
    p_final = prob if p_final is None else p_final
    return NextToken(token_id, token, prob, 0.0, p_final, p_final > 0, valid)


def branch(text: str, token_ids: list[int], prob: float, **fields) -> Branch:
    return Branch(**{"token_ids": token_ids, "text": text, "prob": prob, "p_final": prob, "ends": False,
                     "stop": None, "fit": None, **fields})


def answer(**fields) -> Suggestions:
    """Suggestions as an engine answers them, with these fields."""
    return Suggestions(**{
        "model": "m", "device": "cpu", "context_tokens": 0, "reused_tokens": 0, "truncated_tokens": 0,
        "healed_whitespace": "", "notice": "", "partial": None, "sampling": Sampling(), "branch_mode": "greedy",
        "seed": 0, "distribution": [], "forced": None, "lead": None, "branches": [], **fields})


def test_plot_shows_p_base_and_p_final_for_top_tokens_and_the_rest_as_other():
    plot = distribution_plot([entry(1, " the", 0.5, 0.7), entry(2, "\n", 0.2, 0.3), entry(3, " a", 0.1, 0.0)])
    assert "␣the" in plot and "↵" in plot and "50.0% →  70.0%" in plot
    assert "other" in plot and "20.0% →     0%" in plot
    assert 'data-token-id="3"' in plot and "cut" in plot and "opacity:.4" in plot


def test_plot_bars_follow_the_top_token_whatever_other_holds():
    flat = distribution_plot([entry(1, " a", 0.10), entry(2, " b", 0.05)])  # "other" holds 85%
    widths = re.findall(r"width:([0-9.]+)%", flat)
    assert widths[:4] == ["100.0", "100.0", "50.0", "50.0"], "the top token's bar is full width"
    assert widths[4:] == ["100.0", "100.0"] and "longer than shown" in flat, "other is cut, and says so"
    peaked = distribution_plot([entry(1, " a", 0.9), entry(2, " b", 0.05)])
    assert "longer than shown" not in peaked


def test_plot_shows_a_token_that_is_part_of_a_character_as_such_and_does_not_append_it_alone():
    plot = distribution_plot([entry(1, " \ufffd", 0.3), entry(2, " a", 0.2)])
    assert "\ufffd" not in plot and "␣◌" in plot
    partial = re.search(r'<div class="dist-row" data-token-id="1"[^>]*>', plot).group(0)
    assert "data-partial" in partial and "part of a character" in partial and "cursor:pointer" not in partial
    assert "data-partial" not in re.search(r'<div class="dist-row" data-token-id="2"[^>]*>', plot).group(0)


def test_plot_escapes_html_in_tokens():
    assert "<script>" not in distribution_plot([entry(1, "<script>", 0.1)])


def test_plot_says_what_a_constraint_writes_before_the_choice_it_shows():
    plot = distribution_plot([entry(1, " France", 0.5)], "Paris, <b>")
    assert "The constraint writes Paris,␣&lt;b&gt; first; the choice after it:" in plot
    assert "writes" not in distribution_plot([entry(1, " France", 0.5)])


def shown(text: str, caret: int | None = None, **extra) -> OnScreen:
    result = answer(branches=[branch(" sat", [1, 2], 0.5), branch(" ran", [3], 0.2)],
                    distribution=[entry(7, " dog", 0.1), entry(8, "\ufffd", 0.1)], **extra)
    return OnScreen(text, result, caret)


def test_an_answer_sends_a_buttons_visibility_only_where_it_changes():
    """Labels alone for buttons that stay shown (gradio builds a component for every property update), an update
    where a button appears or goes, and everything when what the buttons show is not known."""
    two, three = shown("The cat"), [branch(" sat", [1], 0.5), branch(" ran", [3], 0.2), branch(" hid", [4], 0.1)]
    labels = [branch_label(b) for b in three]
    unknown = branch_choices(three)["branches"]
    assert unknown == [*(gr.update(value=label, visible=True) for label in labels),
                       *[gr.update(visible=False)] * (MAX_BUTTONS - 3)]
    more = branch_choices(three, on_screen=two)["branches"]
    assert more == [*labels[:2], gr.update(value=labels[2], visible=True), *[""] * (MAX_BUTTONS - 3)]
    fewer = branch_choices(three[:1], on_screen=two)["branches"]
    assert fewer == [labels[0], gr.update(visible=False), *[""] * (MAX_BUTTONS - 2)]
    assert branch_choices([], on_screen=None)["branches"] == [gr.update(visible=False)] * MAX_BUTTONS


def test_a_branch_is_appended_to_the_text_its_suggestions_were_made_for():
    h = History.start("The cat", "m")
    text, caret, h = take_branch(1, shown("The cat"), h)
    assert caret is None, "at the end, the caret stays at the end"
    assert text == "The cat ran" and h.nodes[-1].token_ids == [3] and h.nodes[-1].settings["branch_mode"] == "greedy"
    assert h.nodes[-1].settings["model"] == "m", "each node records the model"
    provenance = {k: h.nodes[-1].settings[k] for k in ("source", "choices", "prob", "backend")}
    assert provenance == {"source": "branch", "choices": 2, "prob": 0.2, "backend": "cpu"}
    with pytest.raises(gr.Error):
        take_branch(5, shown("The cat"), h)


def test_a_node_records_the_constraint_in_force_where_the_suggestions_were_made():
    from ui.controls import BranchShape, Constraints, Context, Settings

    regex = {"type": "regex", "pattern": "[0-9]+", "start": 99}
    asked = Settings(BranchShape(2, 3), Sampling(), Context("plain text", None, None, "m"), Constraints(regex, None),
                     None)
    h = History.start("The cat", "m")
    take_branch(0, shown("The cat")._replace(settings=asked), h)
    assert h.nodes[-1].settings["constraint"] == {**regex, "start": len("The cat")}, "from the text's end"


def token_click(text: str, suggestions: OnScreen, history: History, token_id: int) -> dict:
    """A click on a plot token, with the suggestions on screen made for the box's text (nothing to compute)."""
    return force_token(Draft(text, "", ""), suggestions, history, None, SimpleNamespace(token_id=token_id), None)


def test_forcing_appends_the_clicked_token_and_refuses_broken_characters():
    h = History.start("The cat", "m")
    text, h = at(token_click("The cat", shown("The cat"), h, 7), "text_box", "history_state")
    assert text == "The cat dog" and h.nodes[-1].kind == "token" and h.nodes[-1].token_ids == [7]
    assert (h.nodes[-1].settings["source"], h.nodes[-1].settings["choices"], h.nodes[-1].settings["prob"]) == (
        "token", 2, 0.1), "the plot's rows were the choices, the token's p_final what the page showed"
    healed = shown("The cat ", healed_whitespace=" ")
    assert token_click("The cat ", healed, History.start("The cat ", "m"), 7)["text_box"] == "The cat dog"
    for token_id in (8, 99):
        with pytest.raises(gr.Error):
            token_click("The cat dog", shown("The cat dog"), h, token_id)
    # a constraint wrote " sat," by itself before the choice the plot shows: a click writes both
    forced = shown("The cat ", healed_whitespace=" ", forced=ForcedTokens([5, 6], "sat,"))
    h = History.start("The cat ", "m")
    text, h = at(token_click("The cat ", forced, h, 7), "text_box", "history_state")
    assert text == "The cat sat, dog" and h.nodes[-1].token_ids == [5, 6, 7]


def test_an_event_sent_before_the_answer_ahead_of_it_acts_on_the_newest_text():
    """The box still shows the text the session wrote there before (the click left the page before the answer to
    the click ahead of it arrived): the session's newest text counts. Once the writer edits, the box's text does."""
    h = History.start("The cat", "m")
    h.add("The cat sat", "branch")
    assert Draft("The cat", "", "0").newest(h) == "The cat sat", "the box is behind: the newest text"
    assert Draft("The cat sat", "", "1").newest(h) == "The cat sat"
    assert Draft("The cat", "", "~1").newest(h) == "The cat", "the writer deleted the branch they had received"
    assert Draft("The cow", "", "0").newest(h) == "The cow", "an edit the base does not know of"
    assert Draft("The cat", "", "7").newest(h) == "The cat", "a base from another tree (an import) is ignored"
    pasted = History.start("", "m")
    pasted.add("A long paste", "type")
    pasted.add("A long paste and a branch", "branch")
    pasted.add("A long paste and a branch, and another", "branch")
    assert Draft("A long paste", "", "~0").newest(pasted) == pasted.text, "clicks sent before the first answer came"
    typed = History.start("The cat", "m")
    typed.add("The cat sat", "type")
    assert Draft("The cat", "", "~0").newest(typed) == "The cat", "the writer deleted what they typed"


def test_insertions_read_right_between_the_words_around_them():
    assert joined("She said", " that", "But") == (" that", " "), "a letter meets a letter: a space between"
    assert joined("It was", " 1888", "!") == (" 1888", ""), "punctuation after it: nothing added"
    assert joined("walk", "ing", " home") == ("ing", ""), "the insertion's start is the model's own"
    assert joined("The cat ", " sat", "") == ("sat", ""), "a space never doubled before it"
    assert joined("The", " cat ", " sat") == (" cat", ""), "... nor after it"
    assert joined("a", "", "b") == ("", "")


DRAFT = "The cat 🐈 slept. Then it woke."


def test_suggestions_are_inserted_at_the_caret_and_undo_restores_the_text_exactly():
    caret = DRAFT.index(" slept")
    h = History.start(DRAFT, "m")
    text, new_caret, h = take_branch(1, shown(DRAFT, caret), h)
    assert text == "The cat 🐈 ran slept. Then it woke." and new_caret == caret + len(" ran")
    assert text[new_caret:] == DRAFT[caret:], "the text after the caret is kept, byte for byte"
    assert h.nodes[-1].kind == "branch" and h.nodes[-1].settings["caret"] == caret
    # a word only, a plot token, and text typed beside Append go in at the caret too
    text, new_caret, h = take_branch(0, shown(DRAFT, caret), History.start(DRAFT, "m"), word=True)
    assert (text, new_caret) == ("The cat 🐈 sat slept. Then it woke.", caret + 4)
    assert h.nodes[-1].kind == "branch", "a one-word branch taken as a word is the whole branch, its tokens known"
    two_words = OnScreen(DRAFT, answer(branches=[branch(" sat up", [1, 2, 5], 0.5)]), caret)
    text, new_caret, h = take_branch(0, two_words, History.start(DRAFT, "m"), word=True)
    word = h.nodes[-1]
    assert (text, new_caret) == ("The cat 🐈 sat slept. Then it woke.", caret + 4)
    assert word.kind == "word" and word.token_ids == [] and word.settings["branch_token_ids"] == [1, 2, 5]
    update = token_click(DRAFT, shown(DRAFT, caret), History.start(DRAFT, "m"), 7)
    assert at(update, "text_box", "caret_sync") == ("The cat 🐈 dog slept. Then it woke.", str(caret + 4))
    healed = shown(DRAFT, caret + 1, healed_whitespace=" ")  # before "slept": a space keeps the words apart
    update = token_click(DRAFT, healed, History.start(DRAFT, "m"), 7)
    assert at(update, "text_box", "caret_sync") == ("The cat 🐈 dog slept. Then it woke.", str(caret + 4))
    h = History.start(DRAFT, "m")
    update = append_text(Draft(DRAFT, str(caret), ""), "!", None, h)
    assert at(update, "text_box", "caret_sync") == ("The cat 🐈! slept. Then it woke.", str(caret + 1))
    assert at(move(h, "undo"), "text_box", "caret_sync") == (DRAFT, ""), "undo: the text exactly, the caret at the end"
    assert at(move(h, "redo"), "text_box")[0] == "The cat 🐈! slept. Then it woke."


def test_a_caret_move_that_read_the_text_before_a_click_landed_is_skipped():
    history = History.start("The cat ran", "m")  # a click's insertion: its own suggestions are shown
    assert suggest_at_moved_caret(Draft("The cat", "4", ""), history, None, None) == gr.skip()
    assert history.text == "The cat ran" and len(history.nodes) == 1, "nothing recorded"


def test_the_caret_the_page_sends():
    assert [caret_in(DRAFT, c) for c in ("", None, "0", "9", str(len(DRAFT)), "999")] == [None, None, 0, 9, None, None]
    assert first_word(" stepped into the") == " stepped" and first_word("house, and") == "house"
    assert first_word(", and then") == "," and first_word("  ") == "  "
    marker = caret_marker(DRAFT, DRAFT.index(" slept"))
    assert "The cat 🐈<mark" in marker and "▌</mark> slept. Then it woke." in marker and caret_marker(DRAFT, None) == ""
    branches = [branch("a", [1], 0.1, fit=-0.5), branch("b", [2], 0.1), branch("c", [3], 0.1, fit=0.25)]
    assert [b.text for b in ordered_by_fit(branches)] == ["c", "a", "b"]
    assert branch_label(branch(" sat", [1], 0.5, fit=0.123)).endswith("fit +0.12")


def test_undo_and_redo_walk_the_tree_and_say_when_there_is_nowhere_to_go():
    h = History.start("a", "m")
    h.add("ab", "append")
    h.add("abc", "append")
    assert move(h, "undo")["text_box"] == "ab" and move(h, "undo")["text_box"] == "a"
    assert move(h, "undo") == gr.skip(), "a notice, not an error: nothing changes"
    assert h.text == "a"
    assert move(h, "redo")["text_box"] == "ab" and move(h, "redo")["text_box"] == "abc"
    assert move(h, "redo") == gr.skip() and h.text == "abc"


def test_tree_view_marks_the_current_node_and_forks_and_escapes_text():
    h = History.start("<b>", "m")
    h.add("<b> x", "append")
    h.undo()
    h.add("<b> y", "append")
    view = tree_view(h)
    assert "<b>" not in view.replace('<div id="tree"', "")
    assert view.count("data-current") == 1 and "├ " in view and "└ " in view
    h.add("<b> one y", "branch")  # an insertion inside the text: what it inserted
    assert "branch</span> +one␣" in tree_view(h)
    assert [insertion("abc", t) for t in ("abc", "abcd", "xabc", "abxc", "abxyc", "ac", "abd")] == [
        "", "d", "x", "x", "xy", None, None]


def test_tree_view_shows_a_window_around_the_current_node_however_long_the_session():
    h = History.start("Start", "m")
    for i in range(500):
        h.add(h.text + f" {i}", "branch")
    sizes = []
    for node in (500, 250, 0):
        h.select(node)
        view = tree_view(h, rows=60)
        assert view.count('class="tree-node"') == 60 and f'data-node="{node}"' in view
        assert view.count("data-current") == 1
        sizes.append(len(view))
    assert len(tree_view(h, rows=10**6)) > 5 * max(sizes), "the whole tree would be far larger"
    h.select(500)
    assert "⋯ 441 earlier lines" in tree_view(h, rows=60) and "later" not in tree_view(h, rows=60)


def test_import_errors_are_shown_not_raised_as_tracebacks():
    with pytest.raises(gr.Error, match="Could not import"):
        import_history(History.start("a", "m"), SimpleNamespace(json="{}"))
    exported = History.start("kept", "m").to_json()
    text, imported = at(import_history(History.start("a", "m"), SimpleNamespace(json=exported)), "text_box",
                        "history_state")
    assert text == "kept" and imported.to_json() == exported


def test_an_export_names_its_format_and_an_import_reads_any_format_saying_what_it_left_out(monkeypatch):
    said, warned = [], []
    monkeypatch.setattr(gr, "Info", said.append)
    monkeypatch.setattr(gr, "Warning", warned.append)
    history = History.start("Once", "m")
    history.add("Once upon", "branch", [1, 2])
    (exported,) = at(export_history(history, "loom"), "history_file")
    file = json.loads(exported)
    assert file["name"] == "history.loom.json" and "token ids (1 node)" in said.pop()
    text, imported = at(import_history(History.start("a", "m"), SimpleNamespace(json=file["text"])), "text_box",
                        "history_state")
    assert text == "Once upon" and [n.text for n in imported.nodes] == ["Once", "Once upon"]
    assert "Read a loom tree of 2 nodes" in said.pop()
    session = Path(__file__).parent / "fixtures" / "history" / "sample-mikupad-session.json"
    import_history(History.start("a", "m"), SimpleNamespace(json=session.read_text()))
    assert "API key" in said.pop() and "written with llama-3.1-8b" in warned.pop()
    with pytest.raises(gr.Error, match="Could not import that file: not a history this app reads"):
        import_history(History.start("a", "m"), SimpleNamespace(json='{"pages": []}'))


def test_presets_round_trip_through_the_controls():
    def matching(branch_mode: str = "greedy", **settings) -> str:
        return matching_preset(Sampling(**settings), BranchShape(4, 2, branch_mode, seed=7))["preset"]

    for name in ("greedy", "balanced", "creative"):
        values = apply_preset(name)
        assert matching(values["branch_mode"], **values["sampling"].as_dict()) == name
    assert matching(temperature=0.33) == "custom"
    assert matching(presence_penalty=0.5) == "custom", "a presence penalty is no preset's"


def test_the_sampling_panels_values_read_from_its_json_boxes_as_the_handlers_take_them():
    assert as_group(asdict(BranchShape(4, 2, seed=7)), BranchShape) == BranchShape(4, 2, seed=7)
    assert as_group({"temperature": 0.7, "top_p": 0.9}, Sampling) == Sampling(temperature=0.7, top_p=0.9)
    with pytest.raises(ValueError):
        as_group({"temperature": -1.0}, Sampling)  # checked as the sliders' values are
    assert as_group({"a": 1}, dict) == {"a": 1} and as_group(None, Sampling) is None


def test_a_cut_branch_says_so():
    assert branch_label(branch(" x", [1], 0.2, p_final=0.0)).endswith("cut")
    assert branch_label(branch(" x", [1], 0.2, p_final=0.5)).endswith("50%")
    lead = LeadTokens([1, 2, 3], " stairs of the", 0.92)
    assert branch_label(branch(" stairs of the old", [1], 0.9), lead) == "…␣old  ·  90%", "the choice, after …"
    assert branch_label(branch("The keeper", [1], 0.2), LeadTokens([4], "", 0.99)).startswith(
        "The␣keeper"), "a lead that only completes the text's whitespace writes nothing to leave out"
    assert branch_label(branch(" x", [1], 0.2, p_final=0.5, stop=",")).startswith("␣x✂")


def test_the_constrain_panel_builds_the_apis_constraint_and_stop_strings():
    from ui.constrain import constraint_from, in_force, stop_strings

    assert constraint_from("choice", "yes\nno\n", "plain text", 4, "abcdef") == {
        "type": "choice", "value": ["yes", "no"], "start": 4}
    assert constraint_from("regex", "[0-9]+", "chat", 4, "abcdef")["start"] == 0, "chat: from the reply's start"
    assert constraint_from("regex", "[0-9]+", "plain text", 99, "abc")["start"] == 3
    assert in_force({"type": "regex", "value": "x", "start": 10}, "abc")["start"] == 3, "after an undo: from the end"
    assert stop_strings("\\n\n.\n") == ["\n", "."] and stop_strings("") is None
    with pytest.raises(gr.Error):
        constraint_from("regex", "  ", "plain text", 0, "abc")


def test_a_kept_constraint_comes_back_where_it_still_holds():
    kept = json.dumps({"type": "regex", "value": "[ a-z]*", "start": 3})
    assert restore_constraint(kept, "abc xyz")["constraint_state"] == {"type": "regex", "value": "[ a-z]*",
                                                                       "start": 3}
    assert "regex** from character 3" in restore_constraint(kept, "abc xyz")["constraint_status"]
    for other in ("", "not json", '{"type": "regex", "value": "(", "start": 0}', '{"type": "poem", "start": 0}',
                  '{"type": "regex", "value": "x"}', "[1, 2]"):
        assert restore_constraint(other, "abc")["constraint_state"] is None, other
    assert constrain("regex", "[a-z]*", "plain text", 1, "ab")["constraint_kept"] == json.dumps(
        {"type": "regex", "value": "[a-z]*", "start": 1})
    assert unconstrain()["constraint_kept"] == ""


KEPT = KeptSettings({"heatmap_on": gr.Checkbox(False), "chat_mode": gr.Radio(["plain text", "chat"]),
                     "temperature": gr.Slider(0.05, 2, value=1), "stops": gr.Textbox()})


def kept_values(update: dict) -> list:
    """The values a restore sets the kept settings to (None: left as they are)."""
    return [setting.get("value") for setting in update["kept_settings"]]


def test_a_stored_tree_is_restored_and_an_unreadable_one_ignored():
    saved = History.start("from last visit", "m")
    saved.add("from last visit, more", "append")
    fresh = History.start("default", "m")
    text, conversation, restored = at(restore(saved.to_json(), None, None, fresh, KEPT), "text_box",
                                      "conversation_state", "history_state")
    assert text == "from last visit, more" and restored == saved
    for unreadable in ('{"format": "something else"}', None):
        unchanged = restore(unreadable, None, None, fresh, KEPT)
        assert "text_box" not in unchanged and unchanged["history_state"] is fresh, "the box is left as it is"


def test_a_reload_keeps_every_setting_and_chat_mode_with_its_tree():
    saved = History.start("", "m")
    send_user_message("", "What is 2+2?", [], saved)
    settings = '{"heatmap_on": true, "chat_mode": "chat", "temperature": 0.7, "stops": "."}'
    kept = restore(saved.to_json(), settings, None, History.start("default", "m"), KEPT)
    assert kept_values(kept) == [True, "chat", 0.7, "."] and kept["chat_panel"]["visible"]
    assert kept["conversation_state"] == [{"role": "user", "content": "What is 2+2?"}]
    assert kept_values(restore(saved.to_json(), "not json", None, History.start("default", "m"), KEPT)) == [None] * 4
    wrong = '{"heatmap_on": "yes", "chat_mode": "poetry", "temperature": 7, "stops": 3}'  # another page's values
    assert kept_values(restore(saved.to_json(), wrong, None, History.start("default", "m"), KEPT)) == [None] * 4
    alone = restore(None, settings, None, History.start("default", "m"), KEPT)
    assert kept_values(alone) == [True, None, 0.7, "."], "chat mode comes back only with its conversation"


def test_a_reload_keeps_the_text_typed_last_where_the_tree_does_not_hold_it_yet():
    saved = History.start("The keeper", "m")
    typed_at = saved.current
    draft = lambda text, node=typed_at: json.dumps({"text": text, "node": node})  # noqa: E731
    page = restore(saved.to_json(), None, draft("The keeper lit"), History.start("default", "m"), KEPT)
    assert page["text_box"] == "The keeper lit" and page["text_base"] == f"~{typed_at}", "the writer's: recorded next"
    saved.add("The keeper l", "type")  # the session recorded an earlier keystroke
    assert restore(saved.to_json(), None, draft("The keeper lit"), History.start("d", "m"), KEPT)["text_box"] == \
        "The keeper lit"
    saved.add("The keeper lit the lamp", "branch")  # then a branch was taken: the tree moved on
    assert restore(saved.to_json(), None, draft("The keeper lit"), History.start("d", "m"), KEPT)["text_box"] == \
        "The keeper lit the lamp"
    assert restore(saved.to_json(), None, "not json", History.start("d", "m"), KEPT)["text_box"] == saved.text


def test_chat_turns_are_recorded_in_the_history_and_come_back_with_its_nodes():
    h = History.start("", "m")
    text, conversation, h = at(send_user_message("", "What is 2+2?", [], h), "text_box", "conversation_state",
                               "history_state")
    assert text == "" and conversation == [{"role": "user", "content": "What is 2+2?"}]
    h.add("2+2 equals 4.", "branch")
    text, conversation, h = at(send_reply("2+2 equals 4.", conversation, h), "text_box", "conversation_state",
                               "history_state")
    assert conversation[-1] == {"role": "assistant", "content": "2+2 equals 4."} and text == ""
    with pytest.raises(ValueError, match="Send a user message first"):
        send_reply("more", conversation, h)
    text, conversation, view, h = at(move(h, "undo"), *AT_NODE)
    assert text == "2+2 equals 4." and conversation == view == [{"role": "user", "content": "What is 2+2?"}]
    assert messages_for("chat", "Be brief.", conversation)[0] == {"role": "system", "content": "Be brief."}
    assert messages_for("plain text", "Be brief.", conversation) is None
    assert awaiting_user("chat", "", []) and not awaiting_user("chat", "", conversation)
    assert "assistant: 2+2␣equals␣4." in tree_view(h), "a turn's line says what was said"


def test_hidden_and_untouched_chat_fields_arriving_as_none_are_empty():
    """gradio sends None for the hidden system prompt and an untouched message box."""
    assert messages_for("chat", None, None) == []
    assert messages_for("chat", None, [{"role": "user", "content": "Hi"}]) == [{"role": "user", "content": "Hi"}]
    assert awaiting_user("chat", None, None)
    with pytest.raises(ValueError, match="Type the user's message"):
        with_user_message("", None, None)


def test_switching_to_chat_makes_the_text_the_users_first_message_and_undo_brings_it_back():
    h = History.start("Tell me about lighthouses", "m")
    panel, box, conversation, view, h = at(switch_mode("chat", "Tell me about lighthouses", None, h), "chat_panel",
                                           *AT_NODE)
    assert conversation == view == [{"role": "user", "content": "Tell me about lighthouses"}]
    assert box["value"] == "" and panel["visible"] is True and h.conversation() == conversation
    text, conversation, h = at(move(h, "undo"), "text_box", "conversation_state", "history_state")
    assert text == "Tell me about lighthouses" and conversation == [], "nothing is lost"
    box, kept = at(switch_mode("chat", "a reply begun", [{"role": "user", "content": "Hi"}], h), "text_box",
                   "conversation_state")
    assert kept == [{"role": "user", "content": "Hi"}] and "value" not in box, "a chat under way is kept, and the box"
    box, kept = at(switch_mode("plain text", "a reply begun", kept, h), "text_box", "conversation_state")
    assert "value" not in box and kept == [{"role": "user", "content": "Hi"}], "text typed meanwhile is not overwritten"


def test_chat_and_back_to_plain_text_with_no_reply_begun_brings_the_text_back_and_chat_again_takes_it_again():
    h = History.start("The keeper", "m")
    prose = "The keeper climbed the stairs"  # typed, not yet recorded when the writer switched
    box, conversation, h = at(switch_mode("chat", prose, None, h), "text_box", "conversation_state", "history_state")
    assert box["value"] == "" and conversation == [{"role": "user", "content": prose}]
    box, conversation, h = at(switch_mode("plain text", "", conversation, h), "text_box", "conversation_state",
                              "history_state")
    assert box["value"] == prose == h.text and conversation == [] == h.conversation(), "the text, whole"
    box, conversation = at(switch_mode("chat", prose, conversation, h), "text_box", "conversation_state")
    assert box["value"] == "" and conversation == [{"role": "user", "content": prose}]
    _, conversation, h = at(move(h, "undo"), "text_box", "conversation_state", "history_state")
    assert h.text == prose and conversation == [], "undo from the new chat: the plain text"


def test_a_reply_answering_no_user_message_is_refused_not_sent_as_a_turn():
    with pytest.raises(ValueError, match="no user message comes before it"):
        with_user_message("Some plain text", "Hello", [])
    after_reply = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    with pytest.raises(ValueError, match="no user message comes before it"):
        with_user_message("more", "Next question", after_reply)


def test_handlers_turn_failures_into_messages_and_log_only_bugs(caplog):
    def refuses(x):
        raise ValueError("x must be positive")

    def breaks(x):
        return None.strip()

    def streams(x):
        yield 1
        raise KeyError("lost")

    with pytest.raises(gr.Error, match="x must be positive") as refused:
        handled(refuses)(1)
    assert refused.value.print_exception is False and not caplog.records, "bad input is not a bug"
    with pytest.raises(gr.Error, match="went wrong on our side \\(AttributeError\\); nothing you wrote is lost"):
        handled(breaks)(1)
    with pytest.raises(gr.Error, match="KeyError"):
        list(handled(streams)(1))
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR"] and caplog.records[0].exc_info, \
        "a bug is logged with its traceback"


def scored(pieces: list[str], probs: list[float | None]) -> tuple[str, Listing]:
    """A text and a token_probabilities-like listing of it."""
    tokens, start = [], 0
    for i, (piece, prob) in enumerate(zip(pieces, probs)):
        tokens.append(ScoredToken(i, piece, start, start + len(piece), prob, None if prob is None else math.log(prob),
                                  1 if prob is None or prob > 0.5 else 7, 1.0,
                                  None if prob is None else (Alternative(99, " x", 0.6),)))
        start += len(piece)
    return "".join(pieces), Listing("m", tokens)


def compared(token: ScoredToken, logprob: list, js: float | None, top: list | None) -> ComparedToken:
    return ComparedToken(token.token_id, token.token, token.start, token.end, logprob, [None, None], js, top)


def test_the_heatmap_is_sent_whole_once_then_from_the_first_token_that_changed():
    import json

    from ui.heatmap import heatmap_message

    text, result = scored(["The", " cat", " sat"], [None, 0.2, 0.7])
    message, shown = heatmap_message(text, result, "probability", 10, None)
    assert "frame" in json.loads(message) and 'data-i="2"' in json.loads(message)["frame"]
    longer, result2 = scored(["The", " cat", " sat", " on"], [None, 0.2, 0.7, 0.9])
    delta, shown2 = heatmap_message(longer, result2, "probability", 10, shown)
    delta = json.loads(delta)
    assert (delta["base"], delta["id"]) == (shown.id, shown2.id) and delta["keep"] == 3 and delta["first"] == 0
    assert delta["spans"].count('class="tk') == 1 and ">␣on<" not in delta["spans"] and "> on<" in delta["spans"]
    rescored, result3 = scored(["The", " cat", " sat", " on"], [None, 0.2, 0.3, 0.9])  # a changed score
    assert json.loads(heatmap_message(rescored, result3, "probability", 10, shown2)[0])["keep"] == 2
    assert "frame" in json.loads(heatmap_message(longer, result2, "rank", 10, shown2)[0]), "another colouring: whole"


def test_the_heatmaps_window_moves_along_a_long_text():
    import json

    from ui.heatmap import HEATMAP_TOKENS, heatmap_message

    text, result = scored(["a"] * (HEATMAP_TOKENS + 5), [None] + [0.9] * (HEATMAP_TOKENS + 4))
    _, shown = heatmap_message(text, result, "probability", 10, None)
    longer, result2 = scored(["a"] * (HEATMAP_TOKENS + 7), [None] + [0.9] * (HEATMAP_TOKENS + 6))
    delta = json.loads(heatmap_message(longer, result2, "probability", 10, shown)[0])
    assert delta["first"] == 7 and delta["keep"] == HEATMAP_TOKENS + 5 and "… 7 earlier tokens …" in delta["earlier"]
    assert delta["spans"].count('class="tk') == 2


def test_numbers_read_the_same_way_everywhere():
    from ui.render import percent, times

    assert [percent(p) for p in (0.281, 0.0005, 1.3e-07, 0.0)] == ["28.1%", "0.05%", "< 0.01%", "0%"]
    assert [times(r) for r in (3_121_010, 12_400, 240.4, 2.46)] == ["3.1M×", "12k×", "240×", "2.5×"]
    plot = distribution_plot([entry(1, " the", 0.999, 0.999), entry(2, " a", 1.3e-07, 1.3e-07)])
    assert "< 0.01%" in plot and "e-0" not in plot
    assert branch_label(branch(" a", [1], 2e-6)).endswith("< 0.01%")


def test_why_shows_the_explained_window_and_why_its_probability_differs_from_the_plots():
    from ui.render import attribution_view

    text = "one two three four"
    tokens = [AttributedToken(i, t, s, s + len(t), score) for i, (t, s, score)
              in enumerate([("one", 0, None), (" two", 3, None), (" three", 7, 0.7), (" four", 13, 0.3)])]
    result = Attribution(Target(5, " five", 0.374), "input_x_gradient", 1, 2, 2, tokens)
    view = attribution_view(text, result, shown_prob=0.281)
    assert "⋯ 2 earlier tokens, outside the explained window" in view and ">one<" not in view
    assert "last <b>2 tokens</b>" in view and "37.4%" in view and "the plot's 28.1% reads the whole text" in view
    assert "the plot's" not in attribution_view(text, result, shown_prob=0.374)


def test_a_token_outside_the_servers_top_n_is_striped_and_said_to_be_below_them_never_given_a_number():
    from ui.heatmap import heatmap_view

    text, result = scored(["The", " cat", " sat"], [None, 0.2, 0.7])
    result.tokens[1] = result.tokens[1]._replace(prob=None, logprob=None, rank=None, rank_above=20)
    for mode in ("probability", "rank"):
        view = heatmap_view(text, result, mode, 10)
        assert 'class="tk bo"' in view
        assert "outside the server's top 20</span>" in view, "the legend names the stripes"
        assert '"below 60.0%","&gt; 20","outside the server\'s top 20","≥ 1.00"' in view.replace("&#x27;", "'")


def test_a_comparison_colours_each_token_by_where_the_models_part_and_lists_where_they_part_most():
    import math

    from ui.heatmap import PARTING, PREFERENCE, bucket, heatmap_view, partings, with_comparison

    text, result = scored(["The", " cat", " sat"], [None, 0.2, 0.7])
    tokens = [compared(t, logprob, js, top) for t, (logprob, js, top) in zip(result.tokens, [
        ([None, None], None, None), ([math.log(0.2), math.log(0.8)], 0.6, [" dog", " cat"]),
        ([math.log(0.7), math.log(0.7)], 0.001, [" sat", " sat"])])]
    comparison = ModelComparison(["m", "/models/other"], "token", None, tokens, None, NextCompared([], None), [])
    second = TokenScores("/models/other", 3, 0, 0, [t._replace(alternatives=(Alternative(5, " y", 0.5),))
                                                   for t in result.tokens])
    merged = with_comparison(TokenScores("m", 3, 0, 0, result.tokens), comparison, second)
    assert [bucket(t, PARTING, merged.second(i)) for i, t in enumerate(merged.tokens)] == [None, 0, 4]
    assert bucket(merged.tokens[1], PREFERENCE, merged.second(1)) == 0, \
        "the second model finds ' cat' 4x likelier: 2 bits"
    assert merged.second(1).log2_ratio == pytest.approx(2.0)
    assert [p.text for p in partings(merged.places, PARTING)] == [" cat", " sat"]
    view = heatmap_view(text, merged, PARTING, 10)
    assert "Where A (m) and B (other) part most" in view and "A would write &#x27;␣dog&#x27;" in view
    assert "data-b=" in view and "0.600" in view


def test_compared_per_word_each_token_takes_its_words_log_probability():
    import math

    from ui.heatmap import PARTING, PREFERENCE, bucket, with_comparison

    text, result = scored(["The", " ca", "t", " sat"], [None, 0.2, 0.9, 0.7])
    words = [ComparedWord(0, 3, "The", [None, None]),
             ComparedWord(3, 7, " cat", [math.log(0.18), math.log(0.02)]),
             ComparedWord(7, 11, " sat", [math.log(0.5), math.log(0.5)])]
    merged = with_comparison(TokenScores("a", 4, 0, 0, result.tokens),
                             ModelComparison(["a", "b"], "word", None, None, words, NextCompared([], None), []), None)
    assert [merged.second(i).log2_ratio if merged.second(i) else None
            for i in range(len(merged.tokens))][1:] == pytest.approx([math.log2(0.02 / 0.18)] * 2 + [0.0])
    assert bucket(merged.tokens[1], PARTING, merged.second(1)) is None, "no divergence per word"
    assert bucket(merged.tokens[2], PREFERENCE, merged.second(2)) == 4, "the first model finds ' cat' 9x likelier"


def test_a_second_models_panel_asks_nothing_while_none_is_chosen_or_for_what_it_shows():
    from dataclasses import replace

    from ui.controls import BranchShape, Constraints, Context, Settings
    from ui.panels.compare import compare_with
    from ui.panels.suggestions import suggest_beside

    settings = Settings(BranchShape(5, 3, "greedy", 0, False), Sampling(), Context("plain text", None, None, ""),
                        Constraints(None, None), None)
    h = History.start("The cat", "m")
    assert suggest_beside(Draft("The cat", "", "0"), None, h, settings, None) == gr.skip()
    chosen = replace(settings, context=replace(settings.context, model_name="other"))
    already = OnScreen("The cat", answer(), None, 1, chosen)
    assert suggest_beside(Draft("The cat", "", "0"), already, h, chosen, None) == gr.skip()
    assert compare_with("m", "")["beside"] == [gr.update(visible=False)] * 2
    shown_both = compare_with("m", "other")
    assert shown_both["beside"] == [gr.update(visible=True)] * 2 and shown_both["headings"][1].endswith("other")
    with pytest.raises(gr.Error, match="already come from"):
        compare_with("m", "m")


def test_a_page_event_whose_work_its_session_cancelled_changes_nothing_and_says_nothing():
    """A newer question, Stop or a closed tab cancels the session's model work: the event it cut short keeps what
    the page shows (no red message: the writer did nothing wrong); an API call is told."""
    from lookahead.scheduler import Cancelled

    def stopped(*_):
        raise Cancelled("the read was cancelled")

    def streamed(*_):
        yield "first"
        raise Cancelled("the read was cancelled")

    skip = gr.skip()
    assert handled(stopped, keep_when_cancelled=True)() == skip
    assert list(handled(streamed, keep_when_cancelled=True)()) == ["first", skip]
    with pytest.raises(gr.Error, match="the read was cancelled"):
        handled(stopped)()
    with pytest.raises(gr.Error, match="the read was cancelled"):
        list(handled(streamed)())


def test_a_constraint_that_does_not_compile_is_not_set_and_the_message_says_why_in_full():
    from ui.panels.constrain import constrain

    with pytest.raises(gr.Error, match=r"Not constrained: .*does not compile: .*unclosed character class"):
        constrain("regex", "[0-9", "plain text", 0, "abc")
    assert constrain("regex", "[0-9]+", "plain text", 0, "abc")["constraint_state"]["value"] == "[0-9]+"


def test_continue_refuses_more_tokens_than_the_page_offers():
    from ui.controls import Constraints, Context
    from ui.panels.continuation import MAX_PAGE_TOKENS, continue_text

    context = Context("plain text", None, None, "m")
    with pytest.raises(gr.Error, match=f"1 to {MAX_PAGE_TOKENS}"):
        next(continue_text(Draft("The cat", "", "0"), 1000, True, History.start("The cat", "m"), context,
                           Constraints(None, None), None))


def test_a_stop_asked_before_its_continue_began_ends_it_before_it_writes_and_the_box_keeps_the_writers_text():
    """The writer typed " sat" (not yet recorded), pressed Continue and at once a key: the Stop reached the server
    before the Continue began. It writes nothing, and the box keeps what the writer had typed."""
    from ui.controls import Constraints, Context
    from ui.panels.continuation import STOPS, continue_text

    STOPS.ask("anonymous", "run-early")
    context = Context("plain text", None, None, "m")
    answers = list(continue_text(Draft("The cat sat", "", "~0"), 8, True, History.start("The cat", "m"), context,
                                 Constraints(None, None), None, "run-early"))
    assert [answer["text_box"] for answer in answers] == ["The cat sat"]
    assert answers[-1]["continuation_status"] == "Stopped before it wrote anything."
    assert not STOPS.asked("anonymous", "run-early"), "the run's Stop is let go as it ends"


def test_a_page_event_sends_what_gradios_own_processing_would():
    """The page's events turn gradio's pre- and postprocessing off (a worker-thread hop per component): each answer is
    postprocessed in the handler instead, and gradio's own path, run over the same answer, sends the same."""
    with gr.Blocks() as demo:
        status, chat, text = gr.Markdown(), gr.Chatbot(), gr.Textbox()
        buttons, conversation, trigger = [gr.Button(), gr.Button()], gr.State(), gr.Button()
        slots = dict(status=status, conversation_view=chat, text_box=text, branches=buttons,
                     conversation_state=conversation)
        turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello **there**"}]
        answer = {"status": "  **3 branches**\n", "conversation_view": turns, "text_box": "Once",
                  "branches": [gr.update(value="a", visible=True)], "conversation_state": turns}
        listener = Wiring(slots).handler(lambda: answer, {}, list(slots))
        ours = trigger.click(**listener)
        raw = {status: answer["status"], chat: turns, text: "Once", buttons[0]: answer["branches"][0],
               buttons[1]: gr.update(visible=False), conversation: turns}
        own = trigger.click(lambda: raw, None, listener["outputs"])  # gradio's postprocessing, as by default
    assert listener["preprocess"] is False and listener["postprocess"] is False
    sent = [asyncio.run(demo.postprocess_data(demo.fns[event["id"]], demo.fns[event["id"]].fn(), None))
            for event in (ours, own)]
    assert sent[0] == sent[1]
    assert sent[0][listener["outputs"].index(status)] == "**3 branches**"  # gradio's Markdown strips it


def test_a_click_skips_gradios_queue_except_on_zerogpu(monkeypatch):
    """What the writer waits for after a click is its round trip: it goes to the server directly, its turn in the
    session and its share of the interactive slots kept by the session order (ui/ordering.py). ZeroGPU keeps it
    queued."""
    from app import demo

    clicks = [fn for fn in demo.fns.values() if fn.name in ("take_branch_and_suggest", "take_word_and_suggest",
                                                             "force_token")]
    assert len(clicks) > 10 and not any(fn.queue for fn in clicks)
    refreshes = [fn for fn in demo.fns.values() if fn.name == "suggest"]
    assert refreshes and all(fn.queue for fn in refreshes), "a refresh stays queued"
    with gr.Blocks():
        slots = dict(history_state=gr.State(), status=gr.Markdown())
        monkeypatch.setenv("SPACES_ZERO_GPU", "true")
        listener = Wiring(slots).handler(lambda history: {}, dict(history="history_state"), ["status"], direct=True)
    assert "queue" not in listener


def test_a_text_that_no_longer_fits_the_constraint_gets_free_suggestions_that_say_so(embedded):
    """The writer typed on past a constraint's options: the suggestions keep coming, as without the constraint (the
    API's own), the status says it does not apply and how to release it; the text is never refused."""
    from ui.controls import BranchShape, Constraints, Context, Settings
    from ui.panels.suggestions import suggest

    asked = "The keeper was asked whether the storm would pass. He said"
    text = asked + " March"
    constraint = {"type": "choice", "value": [" yes", " no"], "start": len(asked)}
    context = Context("plain text", None, None, inference.default_model_name())
    settings = Settings(BranchShape(5, 3), Sampling(), context, Constraints(constraint, None), None)
    with pytest.raises(inference.ConstraintMismatch, match="does not fit the choice constraint"):
        inference.lookahead(text, 5, 3, constraint=constraint)
    answer = suggest(Draft(text, "", "~0"), History.start(asked, "m"), settings, None)
    free = inference.lookahead(text, 5, 3, session="free")
    assert [b.text for b in answer["shown_state"].result.branches] == [b["text"] for b in free["branches"]]
    assert "not constrained here" in answer["status"] and "Constrain → Off" in answer["status"]
    assert "constrained (choice)" not in answer["status"]
