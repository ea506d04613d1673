"""Per-session KV caches of the last prompt, so an edit only recomputes what changed.

Each session keeps the token ids it last scored and their KV cache. The next request
reuses the longest common token prefix (cropping the rest) and runs only the new tail.
An entry is taken out of the store while it is in use, so two concurrent requests of
one session never share a cache (the second simply starts cold). Memory is bounded by
an LRU over sessions within a byte budget (buffers' spare room included), sized from
the device's memory unless `LOOKAHEAD_CACHE_GB` says otherwise: a count of sessions
would evict a crowd of short texts as readily as a few long ones. The store is an
optimisation only: a cold start gives identical results. A request at a caret inside the text
(`take_before`) leaves the text after the caret in the cache, masked out, so every caret
position is served by the one cache of the whole text.

An entry may also hold continuations whose KV is already known (the lookahead branches'
tokens, computed in the branch tree): when the new tokens start with one of them, its
KV is appended instead of recomputed.

Once a session has asked for its tokens' scores (lookahead/scoring.py), its entry keeps them
too, and every later request of that session scores the tokens it runs: a token is then
scored once, as it is added, and the heatmap of a long text costs only its new tokens. Such a
request runs each new token itself (known continuations are not appended: their KV has no
scores) and, after an edit, one token more: the last unchanged one, whose logits score the first
changed token.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import torch
from transformers import DynamicCache

from lookahead.kv_cache import GrowableCache, allocated_bytes
from lookahead.scoring import Scores, unscored
from lookahead.sessions import SessionStore

# A continuation: its token ids and, per layer, the (keys, values) of those tokens.
Continuation = tuple[Sequence[int], list[tuple[torch.Tensor, torch.Tensor]]]


class Taken(NamedTuple):
    cache: DynamicCache  # holding the first `reused` tokens
    reused: int
    scores: Scores | None  # rows for at least the first `reused` tokens, and what scores the next; None: not scoring


class Entry(NamedTuple):
    ids: tuple[int, ...]
    cache: DynamicCache
    continuations: list[Continuation]
    scores: Scores | None  # rows for a prefix of `ids` (all of them, with the frontier, after a scored request)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def kept_whole(held: Sequence[int], token_ids: Sequence[int]) -> int | None:
    """For a caret inside a text whose cache holds `held`: how many of `token_ids` that cache serves while the
    text after their shared prefix stays in it, masked out; None where that keeps more than it saves (the
    text changed more before the caret than stays after it) and a crop serves better."""
    reused = min(common_prefix_length(held, token_ids), len(token_ids) - 1)
    return reused if reused and len(held) - reused > len(token_ids) - reused else None


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
    """Session key -> Entry (token ids, their KV cache, known continuations, scores), LRU within `max_bytes`.

    `max_bytes=None` sizes the budget on first use from the device the caches live on. On ZeroGPU the parent
    reads the store (scores already held) while GPU workers fork from it: the store's lock is renewed in them.
    """

    def __init__(self, max_bytes: int | None = None):
        self.max_bytes = max_bytes
        self.hits = self.misses = 0  # takes that reused a prefix / started cold
        self._entries: SessionStore[Hashable, Entry] = SessionStore(full=lambda: self.bytes() > (self.max_bytes or 0))

    def take(self, key: Hashable, token_ids: Sequence[int], scored: bool = False) -> Taken:
        """A cache holding the longest reusable prefix of `token_ids` (always leaving one token to run).

        Scoring (asked for now, or earlier by this session) may reuse less: see the module's docstring.
        """
        entry = self._entries.pop(key)
        if entry is None:
            taken = Taken(GrowableCache(), 0, _no_rows(token_ids) if scored else None)
        else:
            taken = _reuse(entry, token_ids, scored)
        with self._entries.lock:
            self.hits += taken.reused > 0
            self.misses += taken.reused == 0
        return taken

    def take_before(self, key: Hashable, token_ids: Sequence[int]) -> tuple[Taken, Entry | None]:
        """For a caret inside the session's text: the session's whole cache, its tokens after the shared prefix of
        `token_ids` to be masked out (lookahead/branches.py), and the entry to put back as it was. That keeps
        more than it must run; else (the text changed more before the caret than stays after it) `take`'s crop,
        and None."""
        with self._entries.lock:
            entry = self._entries.get(key)
            reused = None if entry is None else kept_whole(entry.ids, token_ids)
            if reused is not None:
                self._entries.pop(key)
                self.hits += 1
                return Taken(entry.cache, reused, None), entry
        return self.take(key, token_ids), None

    def put(
        self, key: Hashable, token_ids: Sequence[int], cache: DynamicCache, continuations: Sequence[Continuation] = (),
        scores: Scores | None = None,
    ) -> None:
        with self._entries.lock:
            if self.max_bytes is None and cache.layers:
                self.max_bytes = default_budget_bytes(cache.layers[0].keys.device)
            self._entries.put(key, Entry(tuple(token_ids), cache, list(continuations), scores))

    def scoring(self, key: Hashable) -> bool:
        """Whether the session scores its tokens (its entry keeps their rows: the heatmap is shown)."""
        entry = self._entries.get(key)
        return entry is not None and entry.scores is not None

    def shared(self, key: Hashable, token_ids: Sequence[int], scored: bool = False) -> int:
        """How many leading tokens of `token_ids` the session's cache holds (with their scores, if `scored`)."""
        entry = self._entries.get(key)
        if entry is None or (scored and entry.scores is None):
            return 0
        shared = common_prefix_length(entry.ids, token_ids)
        return shared if entry.scores is None else min(shared, len(entry.scores))

    def scores(self, key: Hashable, token_ids: Sequence[int]) -> Scores | None:
        """The session's rows for exactly `token_ids`, if it has them all (then nothing need run)."""
        entry = self._entries.get(key)
        if entry is None or entry.scores is None or entry.ids[: len(token_ids)] != tuple(token_ids):
            return None
        return entry.scores.head(len(token_ids)) if len(entry.scores) >= len(token_ids) else None

    def copy(self, key: Hashable) -> Entry | None:
        """A private copy of a session's entry (its cache cloned), leaving the entry in place."""
        with self._entries.lock:  # as one step: `install` extends a stored cache in place
            entry = self._entries.get(key)
            if entry is None:
                return None
            copy = GrowableCache()
            for i, layer in enumerate(entry.cache.layers):
                copy.update(layer.keys.clone(), layer.values.clone(), i)
        return entry._replace(cache=copy, continuations=list(entry.continuations))

    def lend(self, key: Hashable, token_ids: Sequence[int], before_caret: bool = False) -> tuple[Taken, int]:
        """`take` (`take_before` for a caret inside the text) over a private copy of the session's cache, its entry
        left in place: for work a click makes stale (the map of futures), which must not hold the cache a click's
        ready answer extends. Also how many of the copy's last entries are the text after the caret, masked out."""
        copy = self.copy(key)
        if copy is None:
            return Taken(GrowableCache(), 0, None), 0
        reused = kept_whole(copy.ids, token_ids) if before_caret else None
        if reused is not None:
            return Taken(copy.cache, reused, None), len(copy.ids) - reused
        return _reuse(copy, token_ids, scored=False), 0

    def keep_beside(self, key: Hashable, token_ids: Sequence[int], cache: DynamicCache,
                    continuations: Sequence[Continuation]) -> None:
        """After work over a lent copy for `token_ids`: its continuations kept beside the session's entry if that still
        holds exactly those tokens, the copy itself stored if the session holds nothing, else nothing (it moved on)."""
        with self._entries.lock:
            entry = self._entries.get(key)
            if entry is None:
                self.put(key, token_ids, cache, continuations)
            elif entry.ids == tuple(token_ids):
                self._entries.put(key, entry._replace(continuations=[*continuations, *entry.continuations]))

    def install(
        self,
        key: Hashable,
        base_ids: Sequence[int],
        token_ids: Sequence[int],
        new_kv: list[tuple[torch.Tensor, torch.Tensor]],
        continuations: Sequence[Continuation],
        scores: Scores | None,
    ) -> bool:
        """Extend a session still holding `base_ids` to `token_ids` with the new tokens' KV; False if it moved on."""
        with self._entries.lock:
            entry = self._entries.get(key)
            if entry is None or entry.ids != tuple(base_ids) or entry.cache.get_seq_length() != len(base_ids):
                return False
            if tuple(token_ids) == entry.ids:  # an answer at a caret: the whole text's cache stays as it is
                self.hits += 1
                return True
            for layer, (keys, values) in zip(entry.cache.layers, new_kv):
                layer.update(keys, values)
            self._entries.put(key, Entry(tuple(token_ids), entry.cache, list(continuations), scores))
            self.hits += 1
        return True

    def bytes(self) -> int:
        """Memory the stored caches hold (their spare room included)."""
        return sum(allocated_bytes(e.cache) + (e.scores.nbytes() if e.scores else 0) for e in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def forget(self, session: str) -> None:
        """Drop a session's entries, whatever the model: a one-call session's cache would only crowd out others'."""
        self._entries.forget(session)

    def __len__(self) -> int:
        return len(self._entries)


def _reuse(entry: Entry, token_ids: Sequence[int], scored: bool) -> Taken:
    """What of `entry` serves `token_ids`: its cache cut to the reusable prefix, and its still-valid rows."""
    shared = common_prefix_length(entry.ids, token_ids)
    reused = min(shared, len(token_ids) - 1)
    scores = None
    if scored or entry.scores is not None:
        kept = 0 if entry.scores is None else min(shared, len(entry.scores))
        scores = (_no_rows(token_ids) if entry.scores is None else entry.scores).head(kept)
        # run from the first token without a row, or from the one before it if nothing scores it
        reused = min(reused, len(scores) if scores.frontier is not None else max(len(scores) - 1, 0))
    if reused < len(entry.ids):
        entry.cache.crop(reused - len(entry.ids))
    elif scores is None and entry.continuations:
        reused += append_known_continuation(entry.cache, entry.continuations, token_ids[reused : len(token_ids) - 1])
    if reused == 0:
        return Taken(GrowableCache(), 0, _no_rows(token_ids) if scores is not None else None)
    return Taken(entry.cache, reused, scores)


def _no_rows(token_ids: Sequence[int]) -> Scores:
    """Scores for nothing yet, except the first token, which nothing precedes."""
    return unscored(torch.tensor(list(token_ids[:1]), dtype=torch.long))


def append_known_continuation(cache: DynamicCache, continuations: list[Continuation], new_ids: Sequence[int]) -> int:
    """Append the KV of the longest known continuation prefix of `new_ids`; return how many tokens."""
    n, kv = max(((common_prefix_length(ids, new_ids), kv) for ids, kv in continuations), key=lambda c: c[0])
    if n == 0:
        return 0
    for layer, (keys, values) in zip(cache.layers, kv):
        layer.update(keys[..., :n, :], values[..., :n, :])
    return n
