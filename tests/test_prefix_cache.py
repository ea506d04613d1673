"""The session store: prefix reuse and its memory bounds."""

import os

import torch
from transformers import DynamicCache

from lookahead.kv_cache import allocated_bytes
from lookahead.prefix_cache import PrefixCacheStore, common_prefix_length, default_budget_bytes
from threads import exit_code


def fake_cache(n_tokens: int, width: int = 8) -> DynamicCache:
    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, n_tokens, width), torch.zeros(1, 1, n_tokens, width), 0)
    return cache


def test_common_prefix_length():
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0


def test_take_crops_to_the_common_prefix_and_leaves_one_token_to_run():
    store = PrefixCacheStore()
    store.put("s", [1, 2, 3, 4], fake_cache(4))
    cache, reused, _ = store.take("s", [1, 2, 9])
    assert reused == 2 and cache.get_seq_length() == 2
    store.put("s", [1, 2, 3], fake_cache(3))
    cache, reused, _ = store.take("s", [1, 2, 3])
    assert reused == 2 and cache.get_seq_length() == 2


def test_unknown_session_or_nothing_shared_starts_cold():
    store = PrefixCacheStore()
    assert store.take("nobody", [1, 2])[1] == 0
    store.put("s", [5, 6], fake_cache(2))
    cache, reused, _ = store.take("s", [7, 8])
    assert reused == 0 and cache.get_seq_length() == 0


def test_an_entry_in_use_is_not_handed_out_twice():
    store = PrefixCacheStore()
    store.put("s", [1, 2, 3], fake_cache(3))
    assert store.take("s", [1, 2, 3, 4])[1] == 3
    assert store.take("s", [1, 2, 3, 4])[1] == 0


def test_lru_keeps_the_sessions_that_fit_the_byte_budget():
    one = allocated_bytes(fake_cache(10))
    store = PrefixCacheStore(max_bytes=int(2.5 * one))
    for key in "abcd":
        store.put(key, list(range(10)), fake_cache(10))
    assert len(store) == 2
    assert store.take("d", list(range(11)))[1] == 10
    assert store.take("a", list(range(11)))[1] == 0, "the least recently used went first"
    assert (store.hits, store.misses) == (1, 1)


def test_the_default_budget_is_a_share_of_memory_or_the_configured_size(monkeypatch):
    monkeypatch.delenv("LOOKAHEAD_CACHE_GB", raising=False)
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_budget_bytes(torch.device("cpu")) == int(0.25 * machine)
    monkeypatch.setenv("LOOKAHEAD_CACHE_GB", "1.5")
    assert default_budget_bytes(torch.device("cpu")) == int(1.5 * 1024**3)
    store = PrefixCacheStore()
    store.put("a", [1, 2], fake_cache(2))
    assert store.max_bytes == int(1.5 * 1024**3)


def test_a_known_continuation_is_appended_instead_of_recomputed():
    store = PrefixCacheStore()
    branch_kv = [(torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8))]
    store.put("s", [1, 2], fake_cache(2), [([7, 8], branch_kv), ([5, 6], branch_kv)])
    cache, reused, _ = store.take("s", [1, 2, 5, 6, 9])
    assert reused == 4 and cache.get_seq_length() == 4
    assert cache.layers[0].keys[..., 2:, :].eq(1).all() and cache.layers[0].keys[..., :2, :].eq(0).all()
    store.put("s", [1, 2], fake_cache(2), [([5, 6], branch_kv)])
    assert store.take("s", [1, 2, 5, 6])[1] == 3, "the last token is always run"
    store.put("s", [1, 2], fake_cache(2), [([5, 6], branch_kv)])
    assert store.take("s", [1, 2, 4, 6])[1] == 2


def test_a_forked_process_can_use_a_store_whose_lock_a_parent_thread_held_at_the_fork():
    """On ZeroGPU the parent reads the store (scores it already holds) while GPU workers are forked from it."""
    store = PrefixCacheStore()
    store.put("s", [1, 2, 3], fake_cache(3))
    with store._entries.lock:  # as a parent thread reading the store at the moment of the fork
        child = os.fork()
        if child == 0:
            os._exit(0 if store.take("s", [1, 2, 3, 4]).reused == 3 else 1)
    assert exit_code(child, "the forked process waited for a lock no thread of its own holds") == 0
