"""Lookahead decoding is lossless: exactly transformers' greedy tokens, on every test model."""

import inspect
import textwrap

import pytest
import torch

import custom_llm_inference as cli
from lookahead.cpu_linear import SkinnyLinear, use_skinny_linears
from lookahead.decoding import (
    JACOBI,
    NARROW,
    NGRAM,
    STEP,
    WIDE,
    NGramPool,
    _Planner,
    chain_mask,
)

PROMPTS = {
    "code": textwrap.dedent(inspect.getsource(textwrap.indent)),
    "prose": "The history of the lighthouse begins in ancient times, when fires were lit on hilltops to",
    "repetition": "one two three four, one two three four, one two three four, one two",
    "list": "Shopping list:\n1. apples\n2. bread\n3. milk\n4.",
    "qa": "Question: What is the capital of France?\nAnswer:",
}


def transformers_greedy(model, tokenizer, text, n, **kwargs) -> list[int]:
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    return model.generate(ids, do_sample=False, max_new_tokens=n, **kwargs)[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("method", ["lookahead", "greedy"])
def test_tokens_equal_transformers_greedy_generate(model_name, prompt, method):
    model, tokenizer = cli.load_model(model_name)
    n = 12 if model_name.startswith("/") else 40  # tiny models have a 64-token context
    text = PROMPTS[prompt][-150:] if model_name.startswith("/") else PROMPTS[prompt]
    expected = transformers_greedy(model, tokenizer, text, n)
    result = cli.generate(text, n, method, model_name=model_name)
    assert result["token_ids"] == expected
    assert sum(result["accepted_per_pass"]) == len(result["token_ids"]) == len(result["draft_source_per_token"])
    assert result["forward_passes"] == len(result["accepted_per_pass"])
    assert set(result["draft_source_per_token"]) <= {STEP, JACOBI, NGRAM}
    assert result["text"] == tokenizer.decode(expected, skip_special_tokens=True) == "".join(result["token_texts"])


def test_repetitive_text_takes_fewer_passes_than_tokens(embedded):
    result = cli.generate(PROMPTS["repetition"], 30, "lookahead")
    assert result["forward_passes"] < len(result["token_ids"])
    assert max(result["accepted_per_pass"]) > 1
    assert NGRAM in result["draft_source_per_token"] or JACOBI in result["draft_source_per_token"]
    greedy = cli.generate(PROMPTS["repetition"], 30, "greedy")
    assert greedy["forward_passes"] == len(greedy["token_ids"]) and set(greedy["draft_source_per_token"]) == {STEP}


@pytest.mark.parametrize("method", ["lookahead", "greedy"])
def test_generation_stops_after_eos_like_transformers(embedded, method):
    model, tokenizer = embedded
    text = PROMPTS["repetition"]
    plain = transformers_greedy(model, tokenizer, text, 20)
    eos = plain[6]  # pretend the 7th greedy token is EOS
    original = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = eos
    try:
        expected = transformers_greedy(model, tokenizer, text, 20)
        result = cli.generate(text, 20, method)
    finally:
        model.generation_config.eos_token_id = original
    assert result["token_ids"] == expected and result["token_ids"][-1] == eos
    assert len(result["token_ids"]) == plain.index(eos) + 1


def test_streaming_grows_pass_by_pass_to_the_final_result(embedded):
    steps = list(cli.generate_stream(PROMPTS["list"], 12, "lookahead"))
    assert [len(s["accepted_per_pass"]) for s in steps] == list(range(1, len(steps) + 1))
    assert all(a["token_ids"] == b["token_ids"][: len(a["token_ids"])] for a, b in zip(steps, steps[1:]))
    assert steps[-1] == {**cli.generate(PROMPTS["list"], 12, "lookahead"), "seconds": steps[-1]["seconds"]}


@pytest.mark.parametrize("n", [1, 2, 7])
def test_max_new_tokens_is_exact(embedded, n):
    result = cli.generate(PROMPTS["repetition"], n, "lookahead")
    assert len(result["token_ids"]) == n


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "empty"),
        ({"text": "x", "max_new_tokens": 0}, "max_new_tokens"),
        ({"text": "x", "max_new_tokens": cli.MAX_NEW_TOKENS + 1}, "max_new_tokens"),
        ({"text": "x", "method": "beam"}, "method"),
    ],
)
def test_bad_generate_arguments_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cli.generate(**kwargs)


def test_pool_drafts_what_followed_the_longest_recent_match():
    pool = NGramPool([5, 1, 2, 3, 9, 8, 2, 3, 4, 7, 1, 2, 3])
    drafts = pool.drafts(3, 3)
    assert drafts[0] == ((9, 8, 2), NGRAM), "1 2 3 matched three tokens: its continuation comes first"
    assert ((4, 7, 1), NGRAM) in drafts, "the 2 3 match follows"
    assert NGramPool([1, 2, 3]).drafts(2, 2) == [], "nothing repeats yet"


def test_pool_drafts_across_a_changed_slot_in_a_repeated_template():
    pool = NGramPool([5, 1, 2, 3, 9, 8, 2, 3, 4, 7, 1, 2, 3, 6])  # "1 2 3 <slot>" seen before with 9
    assert pool.drafts(2, 2) == [((8, 2), NGRAM), ((7, 1), NGRAM)], "what followed the slot, longest context first"


def test_pool_offers_jacobi_ngrams_after_text_matches():
    pool = NGramPool([4, 5, 6])
    pool.add_jacobi((6, 11, 12, 13))
    assert pool.drafts(2, 2) == [((11, 12), JACOBI)]
    for g in range(10):
        pool.add_jacobi((6, 20 + g))
    assert len(pool.jacobi[6]) <= 3, "the pool keeps only the newest few n-grams per token"


def test_chain_mask_lets_each_chain_see_the_cache_x_and_its_own_past():
    mask = chain_mask(past=2, chains=[2, 1], dtype=torch.float32, device=torch.device("cpu"))
    visible = (mask[0, 0] == 0).int().tolist()
    assert visible == [
        [1, 1, 1, 0, 0, 0],  # x
        [1, 1, 1, 1, 0, 0],  # chain 1, token 1
        [1, 1, 1, 1, 1, 0],  # chain 1, token 2
        [1, 1, 1, 0, 0, 1],  # chain 2, token 1
    ]


def test_planner_guesses_narrow_until_a_pass_accepts_that_many_then_wide():
    pool = NGramPool([7, 1, 2, 3, 4, 5, 6, 8, 9, 7])  # "7" was followed by 1 2 3 ...
    planner = _Planner()
    chains, _ = planner.plan(pool, x=7)
    assert sum(len(c) for c, _ in chains) == NARROW
    planner.update(window_accepted=0, ngram_accepted=NARROW, accepted=NARROW)
    chains, w = planner.plan(pool, x=7)
    assert chains[0] == ([1, 2, 3, 4, 5, 6, 8, 9], NGRAM), "the draft that matched goes first, at full length"
    assert NARROW < sum(len(c) for c, _ in chains) <= WIDE
    assert w is not None and chains[w][1] == JACOBI, "the window rides along in the room left"
    planner.update(window_accepted=0, ngram_accepted=0, accepted=0)
    assert sum(len(c) for c, _ in planner.plan(pool, x=7)[0]) == NARROW, "nothing accepted: narrow again"


def test_skinny_linear_matches_nn_linear_for_any_number_of_rows():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8, bias=False))
    inputs = [torch.randn(shape) for shape in [(1, 1, 64), (1, 5, 64), (2, 3, 64), (7, 64), (1, 100, 64)]]
    expected = [model(x) for x in inputs]
    use_skinny_linears(model)
    assert isinstance(model[0], SkinnyLinear) and isinstance(model[2], SkinnyLinear)
    for x, want in zip(inputs, expected):
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)
