"""Per-session KV caches of the last prompt, so an edit only recomputes what changed.

Each session keeps the token ids it last scored and their KV cache. The next request
reuses the longest common token prefix (cropping the rest) and runs only the new tail.
An entry is taken out of the store while it is in use, so two concurrent requests of
one session never share a cache (the second simply starts cold). Memory is bounded by
an LRU over sessions within a byte budget (buffers' spare room included), sized from
the device's memory unless `LOOKAHEAD_CACHE_GB` says otherwise: a count of sessions
would evict a crowd of short texts as readily as a few long ones. The store is an
optimisation only: a cold start gives identical results.

An entry may also hold continuations whose KV is already known (the lookahead branches'
tokens, computed in the branch tree): when the new tokens start with one of them, its
KV is appended instead of recomputed.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import torch
from transformers import DynamicCache

from lookahead.kv_cache import GrowableCache, allocated_bytes

# A continuation: its token ids and, per layer, the (keys, values) of those tokens.
Continuation = tuple[Sequence[int], list[tuple[torch.Tensor, torch.Tensor]]]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


BUDGET_SHARE = 0.25  # of the device's memory, for session caches, unless LOOKAHEAD_CACHE_GB is set


def default_budget_bytes(device: torch.device) -> int:
    """`LOOKAHEAD_CACHE_GB`, else a quarter of the GPU's memory (CUDA) or of the machine's (CPU)."""
    if os.environ.get("LOOKAHEAD_CACHE_GB"):
        return int(float(os.environ["LOOKAHEAD_CACHE_GB"]) * 1024**3)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(BUDGET_SHARE * total)


class PrefixCacheStore:
    """Session key -> (token ids, their KV cache, known continuations), LRU within `max_bytes`.

    `max_bytes=None` sizes the budget on first use from the device the caches live on.
    """

    def __init__(self, max_bytes: int | None = None):
        self.max_bytes = max_bytes
        self.hits = self.misses = 0  # takes that reused a prefix / started cold
        self._entries: OrderedDict[Hashable, tuple[tuple[int, ...], DynamicCache, list[Continuation]]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: Hashable, token_ids: Sequence[int]) -> tuple[DynamicCache, int]:
        """A cache holding the longest reusable prefix of `token_ids` (always leaving one token to run), and its length."""
        with self._lock:
            entry = self._entries.pop(key, None)
            reused = 0 if entry is None else min(common_prefix_length(entry[0], token_ids), len(token_ids) - 1)
            self.hits += reused > 0
            self.misses += reused == 0
        if reused == 0:
            return GrowableCache(), 0
        cached_ids, cache, continuations = entry
        if reused < len(cached_ids):
            cache.crop(reused - len(cached_ids))
        elif continuations:
            reused += append_known_continuation(cache, continuations, token_ids[reused : len(token_ids) - 1])
        return cache, reused

    def put(
        self, key: Hashable, token_ids: Sequence[int], cache: DynamicCache, continuations: Sequence[Continuation] = ()
    ) -> None:
        with self._lock:
            if self.max_bytes is None and cache.layers:
                self.max_bytes = default_budget_bytes(cache.layers[0].keys.device)
            self._entries[key] = (tuple(token_ids), cache, list(continuations))
            self._entries.move_to_end(key)
            while len(self._entries) > 1 and self.bytes() > (self.max_bytes or 0):
                self._entries.popitem(last=False)

    def copy(self, key: Hashable) -> tuple[tuple[int, ...], GrowableCache, list[Continuation]] | None:
        """A private copy of a session's entry (its cache cloned), leaving the entry in place."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            ids, cache, continuations = entry
            copy = GrowableCache()
            for i, layer in enumerate(cache.layers):
                copy.update(layer.keys.clone(), layer.values.clone(), i)
        return ids, copy, list(continuations)

    def install(
        self,
        key: Hashable,
        base_ids: Sequence[int],
        token_ids: Sequence[int],
        new_kv: list[tuple[torch.Tensor, torch.Tensor]],
        continuations: Sequence[Continuation],
    ) -> bool:
        """Extend a session still holding `base_ids` to `token_ids` with the new tokens' KV; False if it moved on."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != tuple(base_ids) or entry[1].get_seq_length() != len(base_ids):
                return False
            cache = entry[1]
            for layer, (keys, values) in zip(cache.layers, new_kv):
                layer.update(keys, values)
            self._entries[key] = (tuple(token_ids), cache, list(continuations))
            self._entries.move_to_end(key)
            self.hits += 1
        return True

    def bytes(self) -> int:
        """Memory the stored caches hold (their spare room included)."""
        return sum(allocated_bytes(cache) for _, cache, _ in self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def append_known_continuation(cache: DynamicCache, continuations: list[Continuation], new_ids: Sequence[int]) -> int:
    """Append the KV of the longest known continuation prefix of `new_ids`; return how many tokens."""
    n, kv = max(((common_prefix_length(ids, new_ids), kv) for ids, kv in continuations), key=lambda c: c[0])
    if n == 0:
        return 0
    for layer, (keys, values) in zip(cache.layers, kv):
        layer.update(keys[..., :n, :], values[..., :n, :])
    return n
