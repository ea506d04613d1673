"""A KV cache that grows into spare room instead of being copied on every forward.

transformers' DynamicCache appends with torch.cat, which copies the whole cache of every
layer on every forward: at 4k tokens that is ~190 MB per forward for the embedded model,
more than the attention itself. Here each layer keeps a buffer with spare capacity; the
cache is a prefix view of it, so appending writes only the new entries and cropping just
shortens the view.

A full buffer grows by an eighth (at least a chunk of tokens), not by doubling: the
session store's memory budget counts buffers, spare room included, so doubling would let
an 8k-token session hold twice its data. An eighth keeps the spare room to ~12% while
still copying the cache only O(log n) times as it grows.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

CHUNK_TOKENS = 256  # buffers hold a whole number of chunks
GROWTH = 1.125  # a full buffer grows to this many times what it must hold


def capacity_for(tokens: int) -> int:
    """Buffer length for `tokens` entries: an eighth more, rounded up to whole chunks."""
    return -(-int(tokens * GROWTH) // CHUNK_TOKENS) * CHUNK_TOKENS


class GrowableLayer(DynamicLayer):
    buffer_keys: torch.Tensor | None = None
    buffer_values: torch.Tensor | None = None

    def _has_room(self, n: int, q: int, key_states: torch.Tensor) -> bool:
        buf = self.buffer_keys
        return (
            buf is not None
            and self.keys.data_ptr() == buf.data_ptr()  # keys is still a prefix view of the buffer
            and buf.shape[:-2] == key_states.shape[:-2]
            and n + q <= buf.shape[-2]
        )

    @torch.inference_mode()  # the buffer may be an inference tensor, written in place
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, q = self.get_seq_length(), key_states.shape[-2]
        if not self._has_room(n, q, key_states):
            capacity = capacity_for(n + q)
            keys = key_states.new_empty(*key_states.shape[:-2], capacity, key_states.shape[-1])
            values = value_states.new_empty(*value_states.shape[:-2], capacity, value_states.shape[-1])
            if n:
                keys[..., :n, :] = self.keys
                values[..., :n, :] = self.values
            self.buffer_keys, self.buffer_values = keys, values
        self.buffer_keys[..., n : n + q, :] = key_states
        self.buffer_values[..., n : n + q, :] = value_states
        self.keys = self.buffer_keys[..., : n + q, :]
        self.values = self.buffer_values[..., : n + q, :]
        return self.keys, self.values


def allocated_bytes(cache: DynamicCache) -> int:
    """Memory the cache holds, spare room included."""
    total = 0
    for layer in cache.layers:
        if layer.is_initialized:
            keys = layer.keys if getattr(layer, "buffer_keys", None) is None else layer.buffer_keys
            values = layer.values if getattr(layer, "buffer_values", None) is None else layer.buffer_values
            total += keys.nbytes + values.nbytes
    return total


class GrowableCache(DynamicCache):
    """DynamicCache made of GrowableLayers, plus the cut that lookahead decoding needs."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_class_to_replicate = GrowableLayer

    def keep(self, prefix: int, extra: list[int]) -> None:
        """Cut to the first `prefix` entries plus the entries at indices `extra` (all ≥ prefix), in order."""
        for layer in self.layers:
            moved = (layer.keys[..., extra, :], layer.values[..., extra, :]) if extra else None
            layer.keys, layer.values = layer.keys[..., :prefix, :], layer.values[..., :prefix, :]
            if moved:
                layer.update(*moved)
