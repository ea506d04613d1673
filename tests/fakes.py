"""Stand-ins for the engine's pieces in tests of the machinery around them: a cache entry, a request."""

from typing import NamedTuple

import torch
from transformers import DynamicCache

from lookahead.prefix_cache import PrefixCacheStore


class Guess(NamedTuple):
    """A hashable request, as the precomputation keys them."""

    n: int


def fake_entry(store: PrefixCacheStore, key: str, n: int) -> None:
    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, n, 4), torch.zeros(1, 1, n, 4), 0)
    store.put(key, list(range(n)), cache, [((n,), [(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))])])
