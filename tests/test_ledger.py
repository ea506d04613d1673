"""The ledger's numbers against a direct computation: a hand-made history, and the embedded model's scores of its
text recomputed with one plain forward pass (tests/reference.py)."""

import math

import pytest

import custom_llm_inference as inference
from history import History
from history.authorship import accepted, authorship
from lookahead.outputs import ScoredToken
from reference import reference_scores
from ui.ledger import Choice, ledger, ledger_view, token_authors

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
