"""Per-session KV caches of the last prompt, so an edit only recomputes what changed.

Each session keeps the token ids it last scored and their KV cache. The next request
reuses the longest common token prefix (cropping the rest) and runs only the new tail.
An entry is taken out of the store while it is in use, so two concurrent requests of
one session never share a cache (the second simply starts cold). Memory is bounded by
an LRU over sessions with a cap on the entries' count and total bytes. The store is an
optimisation only: a cold start gives identical results (as on ZeroGPU, where each call
runs in a fresh worker).

An entry may also hold continuations whose KV is already known (the lookahead branches'
tokens, computed in the branch tree): when the new tokens start with one of them, its
KV is appended instead of recomputed.
"""

from __future__ import annotations

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


class PrefixCacheStore:
    def __init__(self, max_sessions: int = 16, max_bytes: int = 2 * 1024**3):
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[tuple[int, ...], DynamicCache, list[Continuation]]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: Hashable, token_ids: Sequence[int]) -> tuple[DynamicCache, int]:
        """A cache holding the longest reusable prefix of `token_ids` (always leaving one token to run), and its length."""
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None:
            return GrowableCache(), 0
        cached_ids, cache, continuations = entry
        reused = min(common_prefix_length(cached_ids, token_ids), len(token_ids) - 1)
        if reused == 0:
            return GrowableCache(), 0
        if reused < len(cached_ids):
            cache.crop(reused - len(cached_ids))
        elif continuations:
            reused += _append_known_continuation(cache, continuations, token_ids[reused : len(token_ids) - 1])
        return cache, reused

    def put(
        self, key: Hashable, token_ids: Sequence[int], cache: DynamicCache, continuations: Sequence[Continuation] = ()
    ) -> None:
        with self._lock:
            self._entries[key] = (tuple(token_ids), cache, list(continuations))
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_sessions or (
                len(self._entries) > 1 and sum(allocated_bytes(c) for _, c, _ in self._entries.values()) > self.max_bytes
            ):
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _append_known_continuation(cache: DynamicCache, continuations: list[Continuation], new_ids: Sequence[int]) -> int:
    """Append the KV of the longest known continuation prefix of `new_ids`; return how many tokens."""
    n, kv = max(((common_prefix_length(ids, new_ids), kv) for ids, kv in continuations), key=lambda c: c[0])
    if n == 0:
        return 0
    for layer, (keys, values) in zip(cache.layers, kv):
        layer.update(keys[..., :n, :], values[..., :n, :])
    return n
