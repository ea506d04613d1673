"""What one in-process backend keeps for its sessions, made with it: two backends live side by side in one process,
each with its own entries.

Backends are registered by number: on ZeroGPU a request runs in a GPU worker forked from the app's process, and what
crosses into it is pickled, so the GPU entry point is handed a backend's number, and finds the stores the worker
forked with under it (`registered`).
"""

from __future__ import annotations

import atexit
import itertools
import weakref

from lookahead.comparison import Comparison
from lookahead.constraints import MatcherStore
from lookahead.kv_cache import GrowableCache
from lookahead.outputs import ScoredToken, Suggestions
from lookahead.prefix_cache import PrefixCacheStore, Taken, common_prefix_length
from lookahead.reading import Reader
from lookahead.requests import LookaheadRequest
from lookahead.sessions import SessionStore
from lookahead.speculation import Speculator

LISTINGS_KEPT = 64  # sessions whose last token listing is kept
LAST_SHOWN_KEPT = 64  # (model, session) pairs whose last suggestions are kept
# Two models' caches for the same text, per session comparing: a comparison holds both, so fewer are kept than
# single caches (the least recently used goes; a new comparison then reads its text afresh).
COMPARISONS_KEPT = 4

_numbers = itertools.count()
_registered: weakref.WeakValueDictionary[int, Stores] = weakref.WeakValueDictionary()  # the live backends' stores
# Every backend's background workers. A worker's thread holds it while it may still work, so one whose backend is
# gone is still here to be stopped at exit.
_background: weakref.WeakSet[Reader | Speculator] = weakref.WeakSet()


class Stores:
    """Each session's KV caches, precomputed answers, background reads, constraint matchers, token listings,
    comparisons and last suggestions, as one backend keeps them."""

    def __init__(self) -> None:
        self.prefix_caches = PrefixCacheStore()
        self.speculator = Speculator(self.prefix_caches)
        self.reader = Reader(self.prefix_caches)
        self.matchers = MatcherStore()
        self.listings = Listings(LISTINGS_KEPT)
        # The suggestions each model last gave each session, to precompute a click on either of two models' branches
        # shown side by side for the same text (`clicks_ahead`, lookahead/backends/in_process.py).
        self.last_shown: SessionStore[tuple[str, str], tuple[LookaheadRequest, Suggestions]] = SessionStore(
            LAST_SHOWN_KEPT)
        self.comparisons: SessionStore[tuple[tuple[str, str], str], Comparison] = SessionStore(COMPARISONS_KEPT)
        self.number = next(_numbers)
        _registered[self.number] = self
        _background.update((self.reader, self.speculator))

    def forget(self, session: str) -> None:
        """Drop everything kept for `session`: its background read first (a cancelled read stores what it read as it
        ends) and its precomputation, then its entries in every store."""
        self.reader.stop(session)
        self.speculator.forget(session)
        for store in (self.prefix_caches, self.listings, self.matchers, self.comparisons, self.last_shown):
            store.forget(session)


def registered(number: int) -> Stores:
    """The stores of the backend numbered `number` in this process (in a ZeroGPU worker, the copy it forked with)."""
    stores = _registered.get(number)
    if stores is None:
        raise LookupError(f"no in-process backend numbered {number} in this process: a GPU worker knows only the "
                          "backends made before it was forked")
    return stores


@atexit.register
def _stop_background_work() -> None:
    """Background reads and precomputation stop, and their threads end, before the interpreter shuts down: torch
    aborts the process ("terminate called without an active exception") if a thread is in a forward then."""
    for worker in list(_background):
        worker.close()


class Listings:
    """Each session's last token listing (the heatmap's), so that the next reuses the entries of the tokens
    the two share: a click adds a few tokens to a long text, and building every entry afresh (~20k entries at
    3k tokens with 5 alternatives) cost ~10 ms of each click with the heatmap shown."""

    def __init__(self, sessions: int) -> None:
        # key -> (the token ids listed, the tokens dropped before them, the alternatives per token, the entries)
        self._last: SessionStore[tuple[str, str], tuple[list[int], int, int, list[ScoredToken]]] = SessionStore(
            sessions)

    def earlier(self, key: tuple[str, str], ids: list[int], dropped: int, k: int) -> tuple[list[ScoredToken], int]:
        """The last listing's entries and the leading positions it shares with `ids` (none if windowed otherwise)."""
        last = self._last.get(key)
        if last is None or last[1:3] != (dropped, k):
            return [], 0
        old = last[0]
        shared = common_prefix_length(old, ids)
        return last[3], shared

    def clear(self) -> None:
        self._last.clear()

    def forget(self, session: str) -> None:
        self._last.forget(session)

    def keep(self, key: tuple[str, str], ids: list[int], dropped: int, k: int, entries: list[ScoredToken]) -> None:
        self._last.put(key, (ids, dropped, k, entries))


class Unkept:
    """A store that keeps nothing: a partial answer reads its window afresh and drops it (the session's cache
    is the read's to fill)."""

    def take(self, key: tuple[str, str], token_ids: list[int]) -> Taken:
        return Taken(GrowableCache(), 0, None)

    def take_before(self, key: tuple[str, str], token_ids: list[int]) -> tuple[Taken, None]:
        return self.take(key, token_ids), None

    def put(self, *args: object) -> None:
        pass
