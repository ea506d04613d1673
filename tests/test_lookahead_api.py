"""The text-level API: results equal an independent computation, warm or cold, for every kind of edit."""

import json
import pickle

import pytest
import torch

import custom_llm_inference as cli
from lookahead.prefix_cache import common_prefix_length
from reference import reference_lookahead

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


def assert_matches_reference(result, ref, k):
    assert [b["token_ids"] for b in result["branches"]] == ref["branches"]
    for entry in result["distribution"]:
        assert entry["logprob"] == pytest.approx(float(ref["logprobs"][entry["token_id"]]), abs=1e-4)
        assert entry["prob"] == pytest.approx(float(ref["logprobs"][entry["token_id"]].exp()), abs=1e-4)
    assert [d["token_id"] for d in result["distribution"][:k]] == [b[0] for b in ref["branches"]]


def test_warm_and_cold_results_equal_the_reference_through_edits(model_name):
    model, tokenizer = cli.load_model(model_name)
    k, depth = 4, 3
    previous_ids: list[int] = []
    for text in EDITS:
        ref = reference_lookahead(model, tokenizer, text, k, depth)
        warm = cli.lookahead(text, k, depth, session="writer", model_name=model_name)
        cold = cli.lookahead(text, k, depth, session=f"cold {text}", model_name=model_name)
        assert_matches_reference(warm, ref, k)
        assert_matches_reference(cold, ref, k)
        expected_reuse = min(common_prefix_length(previous_ids, ref["ids"]), len(ref["ids"]) - 1)
        assert warm["reused_tokens"] == expected_reuse
        assert cold["reused_tokens"] == 0
        assert warm["context_tokens"] == len(ref["ids"])
        previous_ids = ref["ids"]


def test_appending_a_branch_reuses_the_text_and_the_branch_tokens_already_computed(embedded):
    text = "Once upon a time, in a village by the sea, there lived"
    first = cli.lookahead(text, 5, 3, session="s")
    branch = first["branches"][2]
    after = cli.lookahead(text + branch["text"], 5, 3, session="s")
    assert after["context_tokens"] == first["context_tokens"] + len(branch["token_ids"])
    assert after["reused_tokens"] == after["context_tokens"] - 1, "only the branch's last token is new"


def test_taking_branches_again_and_again_equals_the_reference(model_name):
    model, tokenizer = cli.load_model(model_name)
    text, k, depth = "In the morning the baker", 3, 4
    for pick in [0, 2, 1, 0]:
        result = cli.lookahead(text, k, depth, session="taker", model_name=model_name)
        assert_matches_reference(result, reference_lookahead(model, tokenizer, text, k, depth), k)
        text += result["branches"][pick]["text"]
    final = cli.lookahead(text, k, depth, session="taker", model_name=model_name)
    assert_matches_reference(final, reference_lookahead(model, tokenizer, text, k, depth), k)


def test_trailing_whitespace_is_healed_and_branches_continue_the_text_exactly(embedded):
    _, tokenizer = embedded
    result = cli.lookahead("The cat ", 5, 3)
    assert result["healed_whitespace"] == " "
    assert result["context_tokens"] == len(tokenizer("The cat")["input_ids"])
    for branch in result["branches"]:
        first = tokenizer.decode(branch["token_ids"][:1])
        assert first.startswith(" ") and first.strip(), "the lone-space token must not be suggested"
        assert " " + branch["text"] == tokenizer.decode(branch["token_ids"])
    assert sum(d["prob"] for d in cli.next_token_distribution("The cat ", 200)) <= 1 + 1e-6
    newline = cli.lookahead("First paragraph.\n", 3, 2)
    assert newline["healed_whitespace"] == "\n"


def test_text_without_trailing_whitespace_is_scored_as_tokenized(embedded):
    _, tokenizer = embedded
    result = cli.lookahead("The cat", 3, 2)
    assert result["healed_whitespace"] == ""
    assert result["context_tokens"] == len(tokenizer("The cat")["input_ids"])
    for branch in result["branches"]:
        assert branch["text"] == tokenizer.decode(branch["token_ids"])


def test_next_token_distribution_is_sorted_plain_softmax(embedded):
    model, tokenizer = embedded
    dist = cli.next_token_distribution("The capital of France is", k=10)
    assert len(dist) == 10
    assert [d["prob"] for d in dist] == sorted((d["prob"] for d in dist), reverse=True)
    ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    with torch.no_grad():
        probs = torch.softmax(model(ids).logits[0, -1], -1)
    for d in dist:
        assert d["prob"] == pytest.approx(float(probs[d["token_id"]]), abs=1e-5)
        assert d["token"] == tokenizer.decode([d["token_id"]])
    assert dist[0]["token"] == " Paris"


def test_text_longer_than_the_context_keeps_the_most_recent_tokens(tiny_model_dirs):
    name = tiny_model_dirs["gpt2"]
    model, tokenizer = cli.load_model(name)
    text = " ".join(f"word{i}" for i in range(200))
    depth = 3
    result = cli.lookahead(text, 3, depth, model_name=name)
    assert result["context_tokens"] == model.config.max_position_embeddings - depth
    assert result["truncated_tokens"] == len(tokenizer(text)["input_ids"]) - result["context_tokens"]
    assert "context" in result["notice"]
    assert_matches_reference(result, reference_lookahead(model, tokenizer, text, 3, depth), 3)
    again = cli.lookahead(text + " more", 3, depth, model_name=name)
    assert again["truncated_tokens"] > result["truncated_tokens"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "empty"),
        ({"text": None}, "string"),
        ({"text": "x" * (cli.MAX_TEXT_CHARS + 1)}, "too long"),
        ({"text": "x", "n_branches": 0}, "n_branches"),
        ({"text": "x", "n_branches": cli.MAX_BRANCHES + 1}, "n_branches"),
        ({"text": "x", "n_branches": 2.5}, "integer"),
        ({"text": "x", "n_branches": True}, "integer"),
        ({"text": "x", "depth": 0}, "depth"),
        ({"text": "x", "depth": cli.MAX_DEPTH + 1}, "depth"),
        ({"text": "x", "depth": "3"}, "integer"),
    ],
)
def test_bad_lookahead_arguments_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cli.lookahead(**kwargs)


@pytest.mark.parametrize("k", [0, -1, cli.MAX_TOP_K + 1, "ten"])
def test_bad_k_raises(k):
    with pytest.raises(ValueError, match="k must"):
        cli.next_token_distribution("hello", k)


def test_partial_utf8_tokens_show_a_replacement_mark(embedded):
    _, tokenizer = embedded
    ids = tokenizer("🦜")["input_ids"]
    assert len(ids) > 1, "the parrot emoji should split into byte-level pieces"
    dist = cli.next_token_distribution("A parrot: \U0001f99c", k=50)
    assert all(isinstance(d["token"], str) for d in dist)
    assert cli.lookahead("\x00\x01\x1b[31m control", 3, 2)["branches"]


def test_results_are_plain_json_and_pickle_safe(embedded):
    result = cli.lookahead("Plain data please", 3, 2)
    assert json.loads(json.dumps(result)) == result
    assert pickle.loads(pickle.dumps(result)) == result
    dist = cli.next_token_distribution("Plain data please", 5)
    assert json.loads(json.dumps(dist)) == dist


def test_sessions_do_not_share_text(embedded):
    a = cli.lookahead("Alice writes about cats and", session="alice")
    b = cli.lookahead("Bob writes about rockets and", session="bob")
    a2 = cli.lookahead("Alice writes about cats and", session="alice")
    assert a2["reused_tokens"] == a["context_tokens"] - 1
    ids = lambda r: [branch["token_ids"] for branch in r["branches"]]  # noqa: E731
    assert ids(a2) == ids(a) != ids(b)
