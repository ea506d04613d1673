"""The one store every per-session cache is kept in: entries by (model, session) key, least recently put first.

A crowd of sessions must not grow a cache without bound, and one that stopped calling should make room for those
still writing: `put` makes its entry the most recent, then drops the least recent ones while the store holds more
than `max_sessions` entries, or while `full()` says it is full (the newest entry always stays: a session whose
one entry is over the budget is still served). Reading an entry leaves its place as it is: every store here puts
its session's entry back after each use. `forget(session)` drops a session's entries whatever their model.

Every method takes the store's `lock`; a caller that reads and writes an entry as one step holds it around them
(it is reentrant). A process forked from this one (a ZeroGPU worker) gets a new lock: one held by another of this
process's threads at the fork would stay held in the child, where no thread will ever release it.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # (model name, session), as requests' `key` is
V = TypeVar("V")


class SessionStore(Generic[K, V]):
    """Entries by (model, session) key, bounded by a count of entries, a `full()` test, or both; thread-safe."""

    def __init__(self, max_sessions: int | None = None, full: Callable[[], bool] | None = None) -> None:
        self.max_sessions = max_sessions
        self.full = full
        self.lock = threading.RLock()
        self._entries: OrderedDict[K, V] = OrderedDict()
        _renew_lock_in_forks(self)

    def get(self, key: K) -> V | None:
        """The entry, leaving it in place and its place as it is (None: none)."""
        with self.lock:
            return self._entries.get(key)

    def pop(self, key: K) -> V | None:
        """The entry, taken out (None: none), so no other caller is handed it while it is in use."""
        with self.lock:
            return self._entries.pop(key, None)

    def put(self, key: K, value: V) -> None:
        """Store `value` as the most recent entry, then make room (see the module's docstring)."""
        with self.lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > 1 and self._over():
                self._entries.popitem(last=False)

    def forget(self, session: str) -> None:
        """Drop `session`'s entries, whatever their model."""
        with self.lock:
            for key in [key for key in self._entries if key[1] == session]:
                del self._entries[key]

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()

    def values(self) -> list[V]:
        """The entries as they are now, least recent first."""
        with self.lock:
            return list(self._entries.values())

    def __iter__(self) -> Iterator[K]:
        """The keys as they are now, least recent first (a copy: the store may change meanwhile)."""
        with self.lock:
            return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def _over(self) -> bool:
        over_count = self.max_sessions is not None and len(self._entries) > self.max_sessions
        return over_count or (self.full is not None and self.full())


def _renew_lock_in_forks(store: SessionStore) -> None:
    """Give `store` a new lock in every process forked from this one (see the module's docstring)."""
    ref = weakref.ref(store)

    def renew() -> None:
        if (alive := ref()) is not None:
            alive.lock = threading.RLock()

    os.register_at_fork(after_in_child=renew)
