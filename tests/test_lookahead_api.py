"""The text-level API: results equal an independent computation, warm or cold, for every kind of edit."""

import json
import pickle

import pytest
import torch

import custom_llm_inference as inference
from lookahead import branches
from lookahead.context import WINDOW_STEP, window_start
from lookahead.outputs import NextToken
from lookahead.prefix_cache import common_prefix_length
from lookahead.results import LEAD_PROB, MAX_LEAD_TOKENS, branch_entries
from reference import assert_matches_reference, reference_lookahead

EDITS = [
    "The quick brown fox",
    "The quick brown fox jumps over the lazy",  # append
    "The quick red fox jumps over the lazy",  # edit the middle
    "The quick red",  # delete
    "Completely different words now.",  # replace everything
    "Completely different words now. And",  # append again
    "The cat ",  # trailing whitespace: token healing
    "Emoji 😀🦜 and a bell\x07 and\ttab",  # partial UTF-8 tokens, control characters
]


def test_warm_and_cold_results_equal_the_reference_through_edits(model_name):
    model, tokenizer = inference.load_model(model_name)
    k, depth = 4, 3
    previous_ids: list[int] = []
    for text in EDITS:
        ref = reference_lookahead(model, tokenizer, text, k, depth)
        warm = inference.lookahead(text, k, depth, session="writer", model_name=model_name)
        cold = inference.lookahead(text, k, depth, session=f"cold {text}", model_name=model_name)
        assert_matches_reference(warm, ref, k)
        assert_matches_reference(cold, ref, k)
        expected_reuse = min(common_prefix_length(previous_ids, ref["ids"]), len(ref["ids"]) - 1)
        assert warm["reused_tokens"] == expected_reuse
        assert cold["reused_tokens"] == 0
        assert warm["context_tokens"] == len(ref["ids"])
        previous_ids = ref["ids"]


def test_appending_a_branch_reuses_the_text_and_the_branch_tokens_already_computed(embedded):
    text = "Once upon a time, in a village by the sea, there lived"
    first = inference.lookahead(text, 5, 3, session="s")
    branch = first["branches"][2]
    after = inference.lookahead(text + branch["text"], 5, 3, session="s")
    assert after["context_tokens"] == first["context_tokens"] + len(branch["token_ids"])
    assert after["reused_tokens"] == after["context_tokens"] - 1, "only the branch's last token is new"


def test_a_session_whose_cache_the_memory_budget_dropped_answers_exactly_again(embedded, monkeypatch):
    """Past the budget, the least recently used session's cache is dropped; its next call reads its text afresh and
    gives what a fresh call gives."""
    model, tokenizer = embedded
    store = inference.backend().prefix_caches
    store.clear()
    text_a = "The lighthouse keeper wrote the weather in the log every evening, and"
    text_b = "In the market square the baker sold the last of the morning bread, while"
    first = inference.lookahead(text_a, 3, 3, session="budget A")
    monkeypatch.setattr(store, "max_bytes", store.bytes() * 3 // 2)  # room for one session's cache, not two
    inference.lookahead(text_b, 3, 3, session="budget B")
    assert len(store) == 1 and store.copy((inference.default_model_name(), "budget A")) is None, "A's cache dropped"
    again = inference.lookahead(text_a, 3, 3, session="budget A")
    assert again["reused_tokens"] == 0, "read afresh"
    assert_matches_reference(again, reference_lookahead(model, tokenizer, text_a, 3, 3), 3)
    assert again["branches"] == first["branches"]


def test_taking_branches_again_and_again_equals_the_reference(model_name):
    model, tokenizer = inference.load_model(model_name)
    text, k, depth = "In the morning the baker", 3, 4
    for pick in [0, 2, 1, 0]:
        result = inference.lookahead(text, k, depth, session="taker", model_name=model_name)
        assert_matches_reference(result, reference_lookahead(model, tokenizer, text, k, depth), k)
        text += result["branches"][pick]["text"]
    final = inference.lookahead(text, k, depth, session="taker", model_name=model_name)
    assert_matches_reference(final, reference_lookahead(model, tokenizer, text, k, depth), k)


def test_trailing_whitespace_is_healed_and_branches_continue_the_text_exactly(embedded):
    _, tokenizer = embedded
    result = inference.lookahead("The cat ", 5, 3)
    assert result["healed_whitespace"] == " "
    assert result["context_tokens"] == len(tokenizer("The cat")["input_ids"])
    for branch in result["branches"]:
        first = tokenizer.decode(branch["token_ids"][:1])
        assert first.startswith(" ") and first.strip(), "the lone-space token must not be suggested"
        assert " " + branch["text"] == tokenizer.decode(branch["token_ids"])
    assert sum(d["prob"] for d in inference.next_token_distribution("The cat ", 200)) <= 1 + 1e-6
    newline = inference.lookahead("First paragraph.\n", 3, 2)
    assert newline["healed_whitespace"] == "\n"


PARAGRAPHS = ["The lighthouse stood at the edge of the world, and every night the keeper climbed its stairs.\n\n",
              "Ships passed far out at sea. None of them knew his name.\n\n",
              "def add(a, b):\n    return a + b\n\n"]


@pytest.mark.parametrize("text", PARAGRAPHS)
def test_after_a_paragraph_break_every_branch_is_a_real_choice(embedded, text):
    """The paragraph break's whitespace completed is all but certain: the branches fork after it, at five different
    first words of the new paragraph, with the probabilities of a plain computation."""
    model, tokenizer = embedded
    result = inference.lookahead(text, 5, 3, session="paragraph")
    ref = reference_lookahead(model, tokenizer, text, 5, 3)
    assert_matches_reference(result, ref, 5)
    assert ref["lead"], "the break's whitespace is all but certain"
    assert result["lead"]["prob"] == pytest.approx(ref["lead_prob"], abs=1e-4) and ref["lead_prob"] >= LEAD_PROB
    firsts = [b["token_ids"][len(result["lead"]["token_ids"])] for b in result["branches"]]
    assert len(set(firsts)) == 5 and len({b["text"] for b in result["branches"]}) == 5
    for branch, first in zip(result["branches"], firsts):
        assert branch["prob"] == pytest.approx(float(ref["logprobs"][first].exp()), abs=1e-4)
        assert not branch["text"].isspace(), "no branch is whitespace alone"


REPEATED = "The keeper climbed the stairs of the old lighthouse every night. " * 4 + "The keeper climbed the"


def test_tokens_the_model_all_but_certainly_writes_lead_every_branch_anywhere(embedded):
    """Not only whitespace: in a sentence said four times over, its next words are all but certain; they lead
    every branch (up to MAX_LEAD_TOKENS of them), read one pass each, and the branches and the plot are those of
    a plain computation after them."""
    model, tokenizer = embedded
    result = inference.lookahead(REPEATED, 5, 3, session="repeated")
    ref = reference_lookahead(model, tokenizer, REPEATED, 5, 3)
    assert len(ref["lead"]) == MAX_LEAD_TOKENS, "the next words are all but certain"
    assert_matches_reference(result, ref, 5)
    assert result["lead"]["text"] == tokenizer.decode(ref["lead"]) and result["lead"]["text"].startswith(" stairs")
    assert result["lead"]["prob"] == pytest.approx(ref["lead_prob"], abs=1e-4)
    assert all(b["text"].startswith(result["lead"]["text"]) for b in result["branches"])
    taken = result["branches"][1]
    again = inference.lookahead(REPEATED + taken["text"], 5, 3, session="repeated")
    assert again["reused_tokens"] == len(tokenizer(REPEATED)["input_ids"]) + len(taken["token_ids"]) - 1, \
        "a branch taken is answered over the lead's and the branch's kept cache: only its last token is read"
    assert inference.next_token_distribution(REPEATED, 1)[0]["token_id"] == ref["lead"][0], (
        "the plot's own call leads not"
    )


def test_a_leads_next_tokens_are_guessed_from_the_texts_repetition_and_a_wrong_guess_changes_nothing(
        embedded, monkeypatch):
    assert branches._guessed([5, 6, 7, 8, 9, 5, 6], 3) == [7, 8, 9], "what followed the last two tokens before"
    assert branches._guessed([5, 6, 7, 5, 6, 1, 5, 6], 2) == [1, 5], "where they last occurred"
    assert branches._guessed([5, 6, 7], 2) == [] and branches._guessed([5, 6, 7, 5, 6], 0) == []
    model, tokenizer = embedded
    monkeypatch.setattr(branches, "_guessed", lambda ids, n: [13] * n)  # always wrong: cropped off the cache
    result = inference.lookahead(REPEATED, 5, 3, session="wrong guesses")
    ref = reference_lookahead(model, tokenizer, REPEATED, 5, 3)
    assert_matches_reference(result, ref, 5)
    taken = result["branches"][0]
    again = inference.lookahead(REPEATED + taken["text"], 5, 3, session="wrong guesses")
    assert again["reused_tokens"] == len(tokenizer(REPEATED)["input_ids"]) + len(taken["token_ids"]) - 1
    assert_matches_reference(again, reference_lookahead(model, tokenizer, REPEATED + taken["text"], 5, 3), 5)


def test_branches_that_write_one_text_are_one_and_none_ends_in_half_a_character(embedded):
    _, tokenizer = embedded
    cat = tokenizer("🐈", add_special_tokens=False)["input_ids"]  # several tokens, each a part of its bytes
    assert len(cat) > 1
    yes = tokenizer(" yes", add_special_tokens=False)["input_ids"]
    spaced_yes = tokenizer.convert_tokens_to_ids(["Ġ", "yes"])  # the same text in two tokens
    sequences = [yes + [2], spaced_yes + [2], tokenizer(" a", add_special_tokens=False)["input_ids"] + cat[:1]]
    firsts = [NextToken(0, "", prob, 0.0, p_final) for prob, p_final in [(0.5, 0.6), (0.2, 0.3), (0.1, 0.1)]]
    branches = branch_entries(sequences, {2}, firsts, "", tokenizer)
    assert [b.text for b in branches] == [" yes", " a"]
    assert branches[0].prob == pytest.approx(0.7) and branches[0].p_final == pytest.approx(0.9)
    assert branches[0].token_ids == yes + [2], "the likeliest tokenization stands for the text"
    assert branches[1].token_ids == sequences[2][:-1], "the half character is left out"


def test_text_without_trailing_whitespace_is_scored_as_tokenized(embedded):
    _, tokenizer = embedded
    result = inference.lookahead("The cat", 3, 2)
    assert result["healed_whitespace"] == ""
    assert result["context_tokens"] == len(tokenizer("The cat")["input_ids"])
    for branch in result["branches"]:
        assert branch["text"] == tokenizer.decode(branch["token_ids"])


def test_next_token_distribution_is_sorted_plain_softmax(embedded):
    model, tokenizer = embedded
    dist = inference.next_token_distribution("The capital of France is", k=10)
    assert len(dist) == 10
    assert [d["prob"] for d in dist] == sorted((d["prob"] for d in dist), reverse=True)
    ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    with torch.no_grad():
        probs = torch.softmax(model(ids).logits[0, -1], -1)
    for d in dist:
        assert d["prob"] == pytest.approx(float(probs[d["token_id"]]), abs=1e-5)
        assert d["token"] == tokenizer.decode([d["token_id"]])
    assert dist[0]["token"] == " Paris"


def test_text_longer_than_the_context_keeps_its_end_and_the_window_moves_in_steps(tiny_model_dirs):
    name = tiny_model_dirs["gpt2"]
    model, tokenizer = inference.load_model(name)
    context, depth = model.config.max_position_embeddings, 3
    step, room = int(WINDOW_STEP * context), context - depth
    words = 200
    while True:  # a text past the context whose window has room for a few more tokens
        text = " ".join(f"word{i}" for i in range(words))
        n_tokens = len(tokenizer(text)["input_ids"])
        if n_tokens - window_start(n_tokens, room, context) <= room - 5:
            break
        words += 1
    result = inference.lookahead(text, 3, depth, model_name=name, session="long")
    dropped = result["truncated_tokens"]
    assert dropped % step == 0 and context - depth - step < result["context_tokens"] <= context - depth
    assert dropped + result["context_tokens"] == n_tokens
    assert "context" in result["notice"]
    assert_matches_reference(result, reference_lookahead(model, tokenizer, text, 3, depth, dropped), 3)
    # Writing on within a step keeps the window's start, so the session's cache is reused...
    longer = text + f" word{words}"
    again = inference.lookahead(longer, 3, depth, model_name=name, session="long")
    assert again["truncated_tokens"] == dropped and again["reused_tokens"] == result["context_tokens"]
    assert_matches_reference(
        again, reference_lookahead(model, tokenizer, longer, 3, depth, again["truncated_tokens"]), 3)
    # ... and past it the start jumps by a whole step.
    far = text + " more" * step
    moved = inference.lookahead(far, 3, depth, model_name=name, session="long")
    assert moved["truncated_tokens"] > dropped and moved["truncated_tokens"] % step == 0


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_continuation_asked_for_more_tokens_than_the_context_holds_fills_it(tiny_model_dirs, arch):
    """The text's window keeps one token, and the continuation is greedy's (it used to drop the whole text)."""
    name = tiny_model_dirs[arch]
    context = inference.load_model(name)[0].config.get_text_config().max_position_embeddings
    text = " ".join(f"word{i}" for i in range(40))
    greedy = inference.generate(text, context + 36, "greedy", model_name=name)
    assert 0 < len(greedy["token_ids"]) <= context - 1
    assert inference.generate(text, context + 36, "lookahead", model_name=name)["token_ids"] == greedy["token_ids"]


def test_window_start_moves_in_steps():
    assert window_start(100, 200, 256) == 0
    assert [window_start(n, 200, 256) for n in (201, 264, 265, 328, 329)] == [64, 64, 128, 128, 192]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "empty"),
        ({"text": None}, "string"),
        ({"text": "x" * (inference.MAX_TEXT_CHARS + 1)}, "too long"),
        ({"text": "x", "n_branches": 0}, "n_branches"),
        ({"text": "x", "n_branches": inference.MAX_BRANCHES + 1}, "n_branches"),
        ({"text": "x", "n_branches": 2.5}, "integer"),
        ({"text": "x", "n_branches": True}, "integer"),
        ({"text": "x", "depth": 0}, "depth"),
        ({"text": "x", "depth": inference.MAX_DEPTH + 1}, "depth"),
        ({"text": "x", "depth": "3"}, "integer"),
    ],
)
def test_bad_lookahead_arguments_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        inference.lookahead(**kwargs)


@pytest.mark.parametrize("k", [0, -1, inference.MAX_TOP_K + 1, "ten"])
def test_bad_k_raises(k):
    with pytest.raises(ValueError, match="k must"):
        inference.next_token_distribution("hello", k)


def test_partial_utf8_tokens_show_a_replacement_mark(embedded):
    _, tokenizer = embedded
    ids = tokenizer("🦜")["input_ids"]
    assert len(ids) > 1, "the parrot emoji should split into byte-level pieces"
    dist = inference.next_token_distribution("A parrot: \U0001f99c", k=50)
    assert all(isinstance(d["token"], str) for d in dist)
    assert inference.lookahead("\x00\x01\x1b[31m control", 3, 2)["branches"]


def test_results_are_plain_json_and_pickle_safe(embedded):
    result = inference.lookahead("Plain data please", 3, 2)
    assert json.loads(json.dumps(result)) == result
    assert pickle.loads(pickle.dumps(result)) == result
    dist = inference.next_token_distribution("Plain data please", 5)
    assert json.loads(json.dumps(dist)) == dist


def test_sessions_do_not_share_text(embedded):
    a = inference.lookahead("Alice writes about cats and", session="alice")
    b = inference.lookahead("Bob writes about rockets and", session="bob")
    a2 = inference.lookahead("Alice writes about cats and", session="alice")
    assert a2["reused_tokens"] == a["context_tokens"] - 1
    ids = lambda r: [branch["token_ids"] for branch in r["branches"]]  # noqa: E731
    assert ids(a2) == ids(a) != ids(b)
