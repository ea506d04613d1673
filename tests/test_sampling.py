"""Sampling settings: p_final equals transformers' own processors; branches follow branch_mode and the seed."""

import pytest
import torch

import custom_llm_inference as inference
from lookahead.sampling import PRESETS

TRANSFORMERS_SETTINGS = ("temperature", "top_k", "top_p", "repetition_penalty", "min_p")  # presence/frequency: OpenAI's
TEXT = "The old sailor looked at the sea and the sea looked back at the old sailor. The sea"
SETTINGS = [
    {"temperature": 0.7},
    {"top_k": 5},
    {"top_p": 0.8},
    {"repetition_penalty": 1.5},
    {"temperature": 1.3, "top_k": 20, "top_p": 0.9, "repetition_penalty": 1.2},
    {"min_p": 0.05},
    {"temperature": 0.8, "top_p": 0.9, "min_p": 0.1},
    *[{k: v for k, v in preset.as_dict().items() if k in TRANSFORMERS_SETTINGS} for preset, _ in PRESETS.values()],
]


def transformers_scores(model, tokenizer, text: str, **settings) -> torch.Tensor:
    """The processed scores transformers' own sampling loop would draw the next token from."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    out = model.generate(
        ids, do_sample=True, max_new_tokens=1, output_scores=True, return_dict_in_generate=True,
        **{"temperature": 1.0, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0, "min_p": None, **settings},
    )
    return out.scores[0][0]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_p_base_and_p_final_equal_transformers_processors(model_name, settings):
    model, tokenizer = inference.load_model(model_name)
    scores = transformers_scores(model, tokenizer, TEXT, **settings)
    p_final = torch.softmax(scores.float(), -1)
    with torch.no_grad():
        logits = model(torch.tensor([tokenizer(TEXT)["input_ids"]])).logits[0, -1]
    logprobs = torch.log_softmax(logits.float(), -1)
    entries = inference.next_token_distribution(TEXT, 30, **settings, model_name=model_name)
    for e in entries:
        assert e["p_final"] == pytest.approx(float(p_final[e["token_id"]]), abs=1e-6 if "min_p" in settings else 1e-5)
        assert e["kept"] == bool(torch.isfinite(scores[e["token_id"]]))
        assert e["logprob"] == pytest.approx(float(logprobs[e["token_id"]]), abs=1e-4)
    kept = [e for e in entries if e["kept"]]
    assert entries[: len(kept)] == kept, "kept tokens first"
    assert [e["p_final"] for e in kept] == sorted((e["p_final"] for e in kept), reverse=True)
    cut = entries[len(kept) :]
    assert [e["prob"] for e in cut] == sorted((e["prob"] for e in cut), reverse=True), "cut tokens by p_base"
    assert all(e["p_final"] == 0 for e in cut)


def test_default_settings_leave_p_final_equal_to_p_base(embedded):
    for e in inference.next_token_distribution(TEXT, 20):
        assert e["kept"] and e["p_final"] == pytest.approx(e["prob"], abs=1e-6)


def test_top_k_filter_keeps_exactly_that_many_and_still_lists_the_rest(embedded):
    entries = inference.next_token_distribution(TEXT, 10, top_k=3)
    assert [e["kept"] for e in entries] == [True] * 3 + [False] * 7
    assert sum(e["p_final"] for e in entries) == pytest.approx(1.0, abs=1e-5)


def test_greedy_branches_with_a_repetition_penalty_equal_transformers_greedy(model_name):
    model, tokenizer = inference.load_model(model_name)
    ids = torch.tensor([tokenizer(TEXT)["input_ids"]])
    expected = model.generate(ids, do_sample=False, max_new_tokens=4, repetition_penalty=1.8)[0, ids.shape[1] :]
    result = inference.lookahead(TEXT, 3, 4, repetition_penalty=1.8, model_name=model_name)
    assert result["branches"][0]["token_ids"] == expected.tolist()
    assert result["sampling"]["repetition_penalty"] == 1.8 and result["branch_mode"] == "greedy"


def test_sampled_branches_are_reproducible_with_the_seed_and_stay_inside_the_filters(embedded):
    model, tokenizer = embedded
    settings = {"temperature": 1.5, "top_k": 4}
    runs = [
        inference.lookahead(TEXT, 5, 6, **settings, branch_mode="sample", seed=s, session=f"s{s}") for s in (1, 1, 2)
    ]
    token_ids = [[b["token_ids"] for b in run["branches"]] for run in runs]
    assert token_ids[0] == token_ids[1]
    assert token_ids[0] != token_ids[2], "another seed samples other continuations"
    prompt = tokenizer(TEXT)["input_ids"]
    for branch in runs[0]["branches"]:
        for d in range(1, 6):  # each sampled token was among the top 4 after the branch so far
            prefix = prompt + branch["token_ids"][:d]
            with torch.no_grad():
                logits = model(torch.tensor([prefix])).logits[0, -1]
            assert branch["token_ids"][d] in logits.topk(4).indices.tolist()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0}, "temperature"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": inference.MAX_TOP_K + 1}, "top_k"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"repetition_penalty": 99}, "repetition_penalty"),
        ({"branch_mode": "beam"}, "branch_mode"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_bad_sampling_arguments_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        inference.lookahead("Hello", **kwargs)


def test_one_sampling_value_answers_as_the_flat_keywords_and_not_beside_them(embedded):
    from lookahead.sampling import Sampling

    settings = {"temperature": 0.8, "top_p": 0.9, "min_p": 0.1, "presence_penalty": 0.5}
    flat = inference.lookahead(TEXT, 3, 2, **settings, session="flat")
    whole = inference.lookahead(TEXT, 3, 2, sampling=Sampling(**settings), session="whole")
    assert whole["branches"] == flat["branches"] and whole["distribution"] == flat["distribution"]
    assert whole["sampling"] == Sampling(**settings).as_dict()
    with pytest.raises(ValueError, match="not both.*temperature"):
        inference.lookahead(TEXT, sampling=Sampling(**settings), temperature=0.5)
    with pytest.raises(ValueError, match="sampling must be a Sampling"):
        inference.next_token_distribution(TEXT, sampling={"min_p": 0.1})
