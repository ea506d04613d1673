"""The tensor-level engine against transformers itself, on every test model."""

import pytest
import torch
from transformers import DynamicCache, GenerationConfig

import custom_llm_inference as inference
from lookahead.branches import get_lookahead_sequences
from lookahead.cache_passes import tree_attention_mask
from reference import next_logits

GREEDY_NO_EOS = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0)


def prompt_ids(tokenizer, text="The old lighthouse keeper climbed the stairs and") -> torch.Tensor:
    return torch.tensor([tokenizer(text)["input_ids"]])


@pytest.mark.parametrize("cached_prefix", [0, 5, "all-but-one"])
def test_branches_equal_greedy_generate_and_uncached_logits(model_name, cached_prefix):
    model, tokenizer = inference.load_model(model_name)
    ids = prompt_ids(tokenizer)
    cache = DynamicCache()
    n_cached = ids.shape[1] - 1 if cached_prefix == "all-but-one" else cached_prefix
    if n_cached:
        model(ids[:, :n_cached], past_key_values=cache)
    k, depth = 4, 4
    result = get_lookahead_sequences(model, ids, k, depth, cache)

    full = next_logits(model, ids[0].tolist())
    assert torch.allclose(result.next_token_logits, full, atol=1e-4)
    assert result.sequences[:, 0].tolist() == full.topk(k).indices.tolist()
    for b in range(k):
        start = torch.cat([ids, result.sequences[b : b + 1, :1]], dim=1)
        generated = model.generate(start, generation_config=GREEDY_NO_EOS, max_new_tokens=depth - 1)
        assert generated[0, ids.shape[1] :].tolist() == result.sequences[b].tolist()
        for d in range(depth - 1):
            expected = next_logits(model, ids[0].tolist() + result.sequences[b, : d + 1].tolist())
            assert torch.allclose(result.step_logits[d][b], expected, atol=1e-4)


def test_prefix_cache_is_left_exactly_as_it_was(model_name):
    model, tokenizer = inference.load_model(model_name)
    ids = prompt_ids(tokenizer)
    cache = DynamicCache()
    model(ids[:, :-1], past_key_values=cache)
    model(ids[:, -1:], past_key_values=cache)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    cache.crop(-1)
    result = get_lookahead_sequences(model, ids, 5, 6, cache)
    assert result.cache is cache and cache.get_seq_length() == ids.shape[1]
    for (keys, values), layer in zip(before, cache.layers):
        assert torch.allclose(layer.keys, keys, atol=1e-5) and torch.allclose(layer.values, values, atol=1e-5)


def test_depth_one_runs_no_branch_steps(embedded):
    model, tokenizer = embedded
    result = get_lookahead_sequences(model, prompt_ids(tokenizer), 3, 1)
    assert result.sequences.shape == (3, 1) and result.step_logits == []


def test_allowed_first_tokens_restrict_the_branches(embedded):
    model, tokenizer = embedded
    allowed = torch.zeros(model.config.vocab_size, dtype=torch.bool)
    allowed[[11, 22, 33]] = True
    result = get_lookahead_sequences(model, prompt_ids(tokenizer), 5, 2, allowed_first_tokens=allowed)
    assert sorted(result.sequences[:, 0].tolist()) == [11, 22, 33]  # only 3 exist, so only 3 branches


def test_tree_mask_lets_each_branch_see_the_prompt_and_only_itself():
    mask = tree_attention_mask(prompt=3, k=2, step=2, dtype=torch.float32, device=torch.device("cpu"))
    visible = (mask[0, 0] == 0).int().tolist()
    assert visible == [[1, 1, 1, 1, 0, 1, 0], [1, 1, 1, 0, 1, 0, 1]]


def test_input_shape_is_checked(embedded):
    model, _ = embedded
    with pytest.raises(ValueError, match="shape"):
        get_lookahead_sequences(model, torch.tensor([1, 2, 3]))
