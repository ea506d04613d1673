"""The ledger's numbers against a direct computation: a hand-made history, and the embedded model's scores of its
text recomputed with one plain forward pass (tests/reference.py)."""

import json
import math
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

import custom_llm_inference as inference
from history import History
from history.authorship import accepted, authorship
from lookahead.outputs import Alternative, ScoredToken, TokenScores
from reference import reference_scores
from ui.controls import Context
from ui.heatmap import ACCEPTED_CLASS, Listing, Shown, heatmap_message, heatmap_view
from ui.ledger import Choice, accepted_tokens, choices_made, ledger, ledger_view, token_authors
from ui.logprobs_export import FILE_NAME, logprobs_json
from ui.panels.heatmap import rewind
from ui.panels.ledger import EMPTY, export_for_analysis, show_ledger

BY_MODEL = " the stairs"
BY_WRITER = " slowly, counting"


def written() -> History:
    """The writer's start, a branch among five, the writer's words, a plot token among ten."""
    h = History.start("The keeper climbed", "m")
    h.add("The keeper climbed" + BY_MODEL, "branch", [1], accepted("branch", 5, 0.4))
    h.add(h.text + BY_WRITER, "type")
    h.add(h.text + " each", "token", [2], accepted("token", 10, 0.05))
    return h


def scored(text: str, pieces: list[str], logprobs: list[float | None]) -> list[ScoredToken]:
    tokens, start = [], 0
    for piece, logprob in zip(pieces, logprobs):
        tokens.append(ScoredToken(0, piece, start, start + len(piece), None, logprob, None, None, None))
        start += len(piece)
    assert start == len(text)
    return tokens


def test_a_token_belongs_to_whoever_wrote_most_of_it():
    h = written()
    text = h.text
    # "The keeper climbed" | " the stairs" | " slowly, counting" | " each", tokenized across the borders
    pieces = ["The keeper", " climbed th", "e stairs", " slowly, counting", " each"]
    tokens = scored(text, pieces, [None, -1.0, -2.0, -3.0, -0.5])
    assert token_authors(authorship(h), tokens) == [None, None, 1, None, 3]


def test_the_ledger_counts_characters_choices_and_each_sides_surprise():
    h = written()
    pieces = ["The keeper", " climbed", " the stairs", " slowly, counting", " each"]
    book = ledger(h, scored(h.text, pieces, [None, -1.0, -2.0, -3.0, -0.5]))
    assert book.model_chars == len(BY_MODEL) + len(" each")
    assert book.writer_chars == len(h.text) - book.model_chars
    assert book.choices == [Choice(1, "branch", 5), Choice(3, "token", 10)]
    assert math.isclose(book.selection_bits, math.log2(5) + math.log2(10))
    assert (book.writer_tokens, book.model_tokens) == (3, 2), "the first token, unscored, counts as a token"
    assert math.isclose(book.writer_bits, (1.0 + 3.0) / 2 / math.log(2)), "over the scored ones"
    assert math.isclose(book.model_bits, (2.0 + 0.5) / 2 / math.log(2))
    view = ledger_view(book)
    assert f'<b id="ledger-model-chars">{book.model_chars}</b>' in view and "token (1 of 10): 3.32" in view


def test_the_ledger_of_the_engines_scores_matches_a_plain_forward_pass(embedded):
    model, tokenizer = embedded
    h = written()
    tokens = inference.token_probabilities.typed(h.text, 5, session="ledger-test", partial=False).tokens
    book = ledger(h, tokens)
    ids = tokenizer(h.text)["input_ids"]
    rows = reference_scores(model, tokenizer, h.text, 5)
    offsets = tokenizer(h.text, return_offsets_mapping=True)["offset_mapping"]
    model_chars = range(len("The keeper climbed"), len("The keeper climbed" + BY_MODEL))
    tail = range(len(h.text) - len(" each"), len(h.text))
    bits = {"writer": [], "model": []}
    for (start, end), row in zip(offsets, rows):
        by_model = sum(1 for c in range(start, end) if c in model_chars or c in tail)
        side = "model" if by_model * 2 > end - start else "writer"
        if row is not None:
            bits[side].append(-row["logprob"] / math.log(2))
    assert len(ids) == book.writer_tokens + book.model_tokens
    assert book.writer_bits == pytest.approx(sum(bits["writer"]) / len(bits["writer"]), abs=1e-3)
    assert book.model_bits == pytest.approx(sum(bits["model"]) / len(bits["model"]), abs=1e-3)


def listed(h: History) -> Listing:
    """The hand-made history's text as four scored tokens, each with one alternative."""
    pieces = ["The keeper climbed", BY_MODEL, BY_WRITER, " each"]
    tokens = [t._replace(token_id=i, prob=None if t.logprob is None else math.exp(t.logprob), rank=2, entropy=1.0,
                         alternatives=(Alternative(99, " x", 0.25),))
              for i, t in enumerate(scored(h.text, pieces, [None, -1.0, -2.0, -0.5]))]
    return Listing("m", tokens)


def test_the_heatmap_underlines_the_accepted_tokens_and_sends_a_change_of_author_alone():
    h = written()
    listing = listed(h)
    marked = replace(listing, accepted=accepted_tokens(h, h.text, listing.tokens))
    assert marked.accepted == {1, 3}
    assert accepted_tokens(h, h.text + "!", listing.tokens) == frozenset(), "another text: nothing to mark"
    spans = re.findall(r'<span class="tk ([^"]*)"[^>]*data-i="(\d)"', heatmap_view(h.text, marked, "probability", 10))
    assert [(ACCEPTED_CLASS in classes.split(), int(i)) for classes, i in spans] == [
        (False, 0), (True, 1), (False, 2), (True, 3)]
    _, shown = heatmap_message(h.text, listing, "probability", 10, None)
    message = json.loads(heatmap_message(h.text, marked, "probability", 10, shown)[0])
    assert message["keep"] == 1, "the same tokens, now underlined from the second: sent again from there"


def test_the_export_lists_each_token_as_openais_logprobs_do_with_its_author():
    h = written()
    listing = listed(h)
    scores = TokenScores("m", 4, 0, 0, listing.tokens)
    exported = json.loads(logprobs_json(h, scores))
    assert (exported["format"], exported["model"], exported["text"]) == ("interactive-lookahead-logprobs", "m", h.text)
    content = exported["logprobs"]["content"]
    assert [(c["token"], c["author"], c["node"]) for c in content] == [
        ("The keeper climbed", "writer", None), (BY_MODEL, "model", 1), (BY_WRITER, "writer", None),
        (" each", "model", 3)]
    assert content[1] == {"token": BY_MODEL, "logprob": -1.0, "bytes": list(BY_MODEL.encode()), "token_id": 1,
                          "top_logprobs": [{"token": " x", "logprob": math.log(0.25), "bytes": [32, 120]}],
                          "author": "model", "node": 1}
    assert content[0]["logprob"] is None, "nothing before the first token to score it by"


def test_the_panel_shows_the_ledger_and_exports_the_engines_scores(embedded):
    h = written()
    context = Context("plain text", None, None, inference.default_model_name())
    request = SimpleNamespace(session_hash="ledger-panel-test")
    assert "Show the heatmap" in show_ledger(h, context, False, request)["ledger"]  # no scoring for the ledger alone
    shown = show_ledger(h, context, True, request)["ledger"]
    expected = ledger(h, inference.token_probabilities.typed(h.text, 5, session="ledger-expected",
                                                             partial=False).tokens)
    assert f'<b id="ledger-model-chars">{expected.model_chars}</b>' in shown
    assert f'<b id="ledger-writer-bits">{expected.writer_bits:.2f}</b>' in shown
    exported = json.loads(export_for_analysis(h, context, request)["analysis_json"])
    assert exported["name"] == FILE_NAME
    content = json.loads(exported["text"])["logprobs"]["content"]
    assert "".join(c["token"] for c in content) == h.text
    assert {c["author"] for c in content} == {"writer", "model"}
    assert show_ledger(History.start("", "m"), context, True, request) == {"ledger": EMPTY}


def test_a_rewind_records_the_choice_and_the_text_before_it_keeps_its_authors():
    h = written()
    heatmap = Shown(h.text, listed(h), "probability", 0)
    rewind(heatmap, h, SimpleNamespace(index=3, token_id=99))
    node = h.nodes[h.current]
    assert (node.kind, node.parent, node.settings) == (
        "rewind", 2, {"model": "m", "from": 3, "source": "rewind", "choices": 1, "prob": 0.25})
    assert [(h.text[s.start : s.end], s.node) for s in authorship(h)] == [
        ("The keeper climbed", None), (BY_MODEL, 1), (BY_WRITER, None), (" ", 3), ("x", node.id)]
    assert choices_made(h) == [Choice(1, "branch", 5), Choice(3, "token", 10), Choice(node.id, "rewind", 1)]
