"""The growable KV cache: same contents as DynamicCache, without re-copying on append."""

import torch
from transformers import DynamicCache

from lookahead.kv_cache import CHUNK_TOKENS, GrowableCache, allocated_bytes, capacity_for


def kv(values):
    t = torch.tensor(values, dtype=torch.float32).view(1, 1, -1, 1)
    return t, t.clone()


def test_appends_write_into_spare_room_and_crops_shorten_the_view():
    cache = GrowableCache()
    cache.update(*kv([0, 1, 2]), 0)
    buffer = cache.layers[0].buffer_keys
    cache.update(*kv([3]), 0)
    assert cache.layers[0].buffer_keys is buffer, "no reallocation while there is room"
    cache.crop(-2)
    cache.update(*kv([7, 8]), 0)
    assert cache.layers[0].keys.flatten().tolist() == [0, 1, 7, 8]
    assert cache.get_seq_length() == 4


def test_growing_past_the_capacity_keeps_the_contents():
    cache = GrowableCache()
    values = list(range(600))
    for start in range(0, 600, 50):
        cache.update(*kv(values[start : start + 50]), 0)
    assert cache.layers[0].keys.flatten().tolist() == values


def test_buffers_grow_by_an_eighth_in_whole_chunks():
    assert capacity_for(1) == CHUNK_TOKENS
    assert capacity_for(8192) == 9216  # 8192 * 1.125, already whole chunks
    cache = GrowableCache()
    cache.update(*kv(list(range(8192))), 0)
    assert allocated_bytes(cache) == 2 * 9216 * 4, "keys and values, fp32, an eighth spare"


def test_keep_cuts_to_a_prefix_plus_chosen_entries():
    cache = GrowableCache()
    cache.update(*kv([0, 1, 2, 3, 4, 5]), 0)
    cache.keep(2, [4, 5])
    assert cache.layers[0].keys.flatten().tolist() == [0, 1, 4, 5]
    cache.keep(3, [])
    assert cache.get_seq_length() == 3


def test_model_outputs_match_a_dynamic_cache(embedded):
    model, tokenizer = embedded
    ids = torch.tensor([tokenizer("A growable cache must not change a single logit.")["input_ids"]])
    outputs = []
    for cache in (DynamicCache(), GrowableCache()):
        with torch.no_grad():
            model(ids[:, :5], past_key_values=cache)
            cache.crop(-1)
            outputs.append(model(ids[:, 4:], past_key_values=cache).logits)
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)
