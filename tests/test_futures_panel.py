"""The futures panel without a browser: the icicle's geometry, zooming, the comparison's colours, inserting a
block, and its controls within the API's bounds."""

import html
import math
from types import SimpleNamespace

import gradio as gr
import pytest

import custom_llm_inference as inference
from history import History
from lookahead.outputs import FutureNode, Multiverse
from lookahead.sampling import Sampling
from ui.controls import BranchShape, Constraints, Context, Draft, Settings
from ui.errors import handled
from ui.futures import BELOW_B, HEIGHT_PX, bits, futures_view, icicle, parting, path_ids
from ui.insertion import Place
from ui.panels.futures import MIN_CUTOFF, NO_SECOND, Asked, Drawn, FuturesView, insert_future, map_futures, zoom


def node(id, parent, token, mass, prob, depth, rest, text="", token_id=None, on_text=False, ends=False):
    return FutureNode(id, parent, 100 + id if token_id is None else token_id, token, text or token, prob, prob, mass,
                      depth, 1.5, rest, on_text, ends)


# The text itself; " the" (0.5) with " sea" (0.3) under it; " a" (0.2); 0.3 unlisted at the root.
NODES = [
    FutureNode(0, None, None, "", "", 1.0, 1.0, 1.0, 0, 4.0, 0.3, False, False),
    node(1, 0, " the", 0.5, 0.5, 1, 0.2),
    node(2, 1, " sea", 0.3, 0.6, 2, 0.3, " the sea"),
    node(3, 0, " a", 0.2, 0.2, 1, 0.2),
]


def futures(nodes=NODES, model="a", context_tokens=4) -> Multiverse:
    return Multiverse(model, "cpu", context_tokens, 0, 0, "", "", Sampling(), 2, 0.1, None, 2, nodes)


def drawn(text="The ship sailed to", caret=None, nodes=NODES) -> Drawn:
    asked = Asked(Place(text, caret), 2, 0.1, Sampling(), Context("plain text", None, None, "a"),
                  Constraints(None, None), None)
    return Drawn(asked, futures(nodes), None, 0, 7)


def test_each_block_is_as_tall_as_its_mass_nested_under_its_parent_and_the_rest_is_blank():
    blocks = {block.node.id: block for block in icicle(NODES)}
    assert [(b.column, b.top, b.height) for b in blocks.values()] == [(0, 0, 1), (1, 0, 0.5), (2, 0, 0.3),
                                                                     (1, 0.5, 0.2)]
    assert blocks[3].top + blocks[3].height == pytest.approx(1 - NODES[0].rest), "the root's rest stays blank"
    assert blocks[2].height < blocks[1].height, "a child never outgrows its parent"


def test_a_zoomed_block_fills_the_height_and_its_subtree_is_renormalised_to_it():
    blocks = icicle(NODES, focus=1)
    assert [(b.node.id, b.column, b.top, b.height) for b in blocks] == [(1, 0, 0, 1), (2, 1, 0, pytest.approx(0.6))]
    view = futures_view(futures(), 1)
    assert f"zoom {bits(0.5):.2f} bits" in view and 'class="futures-out" data-node="0"' in view
    assert 'data-insert="1"' in view, "the zoomed block can be inserted"
    assert 'data-insert' not in futures_view(futures()), "the text itself is nothing to insert"


def test_blocks_too_short_to_see_are_left_out_with_their_subtrees():
    assert [b.node.id for b in icicle(NODES, min_height=0.4)] == [0, 1]


def test_a_block_is_labelled_when_tall_enough_and_says_its_numbers():
    view = futures_view(futures())
    assert view.count("<svg class=\"future-block\"") == len(NODES)
    assert f'height="{0.5 * HEIGHT_PX:.2f}"' in view and ">␣the</text>" in view
    assert "p 60.0% · mass 30.0% · 1.74 bits · entropy after it 1.50 bits" in view  # " the sea"
    assert "&lt;b&gt;" in futures_view(futures([NODES[0], node(1, 0, "<b>", 0.5, 0.5, 1, 0.5)]))


def test_the_writers_own_next_tokens_are_outlined():
    own = [NODES[0]._replace(on_text=True), node(1, 0, " sea", 0.001, 0.001, 1, 0.001, on_text=True)]
    view = futures_view(futures(own))
    assert view.count('stroke-width="3"') == 1 and "your own next tokens" in view


def test_a_second_models_map_colours_blocks_by_where_they_part_and_marks_those_below_its_cutoff():
    b = [NODES[0], node(1, 0, " the", 0.25, 0.25, 1, 0.25)]
    compared = parting(futures(), futures(b, "b"))
    assert compared.ratios == {0: 0.0, 1: pytest.approx(1.0), 2: None, 3: None}
    view = futures_view(futures(), 0, compared)
    assert f"url(#{BELOW_B})" in view and "below b's cutoff" in view and html.escape("log2(mass / b's) +1.00") in view
    other_tokenizer = [NODES[0], node(1, 0, " la", 0.25, 0.25, 1, 0.25)]
    assert parting(futures(), futures(other_tokenizer, "b")).unavailable
    assert parting(futures(), futures(b, "b", context_tokens=5)).unavailable
    assert "unavailable" in futures_view(futures(), 0, parting(futures(), futures(other_tokenizer, "b")))


def click(state: Drawn, node_id: int, serial: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(map=state.serial if serial is None else serial, node=node_id)


def test_a_click_zooms_and_one_on_a_map_since_redrawn_is_refused():
    state = drawn()
    update = zoom(state, click(state, 2))
    assert update["futures_state"].focus == 2 and 'data-focus="2"' in update["futures"]
    with pytest.raises(gr.Error, match="redrawn"):
        zoom(state, click(state, 2, serial=6))


def test_insert_puts_the_blocks_path_at_the_caret_as_a_branch_goes_in():
    text = "The ship sailed to Lisbon"
    history = History.start(text, "a")
    state = drawn(text, caret=len("The ship sailed to "), nodes=[*NODES[:2], NODES[2]._replace(text="the sea ")])
    update = insert_future(Draft(text, "19", "0"), state, history, click(state, 2))
    assert update["text_box"] == "The ship sailed to the sea Lisbon", "one space between, never two"
    assert update["caret_sync"] == str(len("The ship sailed to the sea "))
    assert history.nodes[-1].kind == "branch" and history.nodes[-1].token_ids == path_ids(NODES, 2) == [101, 102]
    recorded = history.nodes[-1].settings
    assert [recorded[k] for k in ("source", "choices", "prob", "backend")] == ["futures", 2, 0.3, "cpu"]
    with pytest.raises(gr.Error, match="changed"):
        insert_future(Draft("Another text", "", "~0"), drawn(), History.start("Another text", "a"), click(state, 1))
    with pytest.raises(gr.Error, match="your text itself"):
        insert_future(Draft(text, "19", "0"), state, History.start(text, "a"), click(state, 0))


def test_the_controls_cannot_ask_for_a_map_larger_than_the_api_lists():
    assert inference.MAX_MAP_DEPTH / MIN_CUTOFF <= inference.MAX_MAP_NODES
    assert math.isclose(MIN_CUTOFF * inference.MAX_MAP_NODES, inference.MAX_MAP_DEPTH)


def settings() -> Settings:
    return Settings(BranchShape(5, 3), Sampling(), Context("plain text", None, None, inference.default_model_name()),
                    Constraints(None, None), None)


def test_the_map_is_the_engines_at_the_caret_and_is_not_drawn_again_for_the_same_ask(embedded):
    text, request = "The keeper lit the lamp and the ship", SimpleNamespace(session_hash="futures-test")
    view = FuturesView(2, 0.05, True, None)
    update = map_futures(Draft(text, "27", "0"), settings(), view, None, request)
    expected = inference.multiverse.typed(text, 2, 0.05, caret=27, session="futures-expectation")
    drawn = update["futures_state"]
    assert [n.token for n in drawn.result.nodes] == [n.token for n in expected.nodes]
    assert drawn.asked.place == Place(text, 27) and html.escape(NO_SECOND) in update["futures"]
    assert map_futures(Draft(text, "27", "0"), settings(), view, drawn, request) == gr.skip()
    assert map_futures(Draft("", "", "0"), settings(), view, drawn, request)["futures_state"] is None


def test_a_map_the_api_refuses_says_why_in_the_apis_words(embedded):
    refused = handled(map_futures)
    with pytest.raises(gr.Error, match="raise the cutoff"):
        refused(Draft("The keeper", "", "0"), settings(), FuturesView(8, 0.001, False, None), None, None)
