"""Answers ready before the click: while the writer reads, compute what each shown branch gives if taken.

After a lookahead for text T, a background thread computes the lookahead for T + branch i,
branch by branch in the order shown, with exactly the request the page will send on that click
(with two models' suggestions shown for T, each one's request for each model's branches)
(at a caret: T the text before it, the branch inserted there, the text after it kept and still
masked out in the cache, which such an answer leaves as it was).
It works on a private copy of the session's KV cache (one per model), `ScratchStore`, so real requests never
wait for it or find their cache taken, and it goes through the same code path as a real request
(appending the branch's KV from the branch tree, then running the rest), so a precomputed answer
is the one a fresh call would give, bit for bit. A click whose answer is ready installs the few
new tokens' KV into the session's cache and returns it at once.

It never holds up real work: it starts only while no other request is running, and stops within
one module's forward call once any request arrives (`Speculator.arrived`). It keeps no more than one
session's worth of cache copies, and a session's ready answers are dropped as soon as it moves on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from transformers import DynamicCache

from lookahead.cpu_threads import release_workers
from lookahead.prefix_cache import Continuation, Entry, PrefixCacheStore, Taken, append_known_continuation, kept_whole
from lookahead.scheduler import before_every_module_call
from lookahead.scoring import Scores

Request = Hashable  # a typed request (lookahead/requests.py): frozen, equal exactly when every field is
# The reply that just finished still has to reach the page and be drawn (~200 ms of this 2-core
# CPU's time for server and browser): the job waits this long first, so it does not compete with it.
REPLY_GRACE_SECONDS = 0.25
log = logging.getLogger(__name__)


class Skip(Exception):
    """This branch cannot be precomputed from the copy (its text tokenizes across the old boundary)."""


class Preempted(Exception):
    """A real request arrived: the job stops where it is."""


class ScratchStore:
    """A PrefixCacheStore stand-in over a private copy of one session's cache.

    `take` serves the copy extended by the branch tokens' known KV, as the real store would (or, for
    a session that scores its tokens, the copy and its scores: the branch tokens are then run);
    `put` records the new tokens' KV (and scores) and cuts the copy back, ready for the next branch.
    """

    def __init__(self, entry: Entry):
        self.base = entry
        self.recorded: tuple[tuple[int, ...], list, list[Continuation], Scores | None] | None = None

    def take(self, key: Hashable, token_ids: Sequence[int]) -> Taken:
        ids, cache, continuations, scores = self.base
        n = len(ids)
        if len(token_ids) <= n or tuple(token_ids[:n]) != ids or not (continuations or scores):
            raise Skip
        if scores is not None:
            return Taken(cache, n, scores)
        return Taken(cache, n + append_known_continuation(cache, continuations, token_ids[n:-1]), None)

    def take_before(self, key: Hashable, token_ids: Sequence[int]) -> tuple[Taken, Entry | None]:
        """At a caret, as the real store does: the copy whole, the text after the caret masked out (it comes back
        as it went, and `put` records no new tokens), else `take`'s."""
        reused = kept_whole(self.base.ids, token_ids)
        if reused is None:
            return self.take(key, token_ids), None
        return Taken(self.base.cache, reused, None), self.base

    def put(self, key: Hashable, token_ids: Sequence[int], cache: DynamicCache, continuations=(), scores=None) -> None:
        n = len(self.base.ids)
        new_kv = [(layer.keys[..., n:, :].clone(), layer.values[..., n:, :].clone()) for layer in cache.layers]
        self.recorded = (tuple(token_ids), new_kv, list(continuations), scores)
        if cache.get_seq_length() > n:  # (crop(0) would empty it)
            cache.crop(n - cache.get_seq_length())


Keyed = tuple[Hashable, Request]  # a request and the key of the cache it reads: (model, session)


class _Job(NamedTuple):
    requests: Sequence[Keyed]  # one session's
    compute: Callable[[Request, ScratchStore], dict]
    ticket: int  # the count of real requests when it was made: once that moves, it stops

    @property
    def keys(self) -> set[Hashable]:
        return {key for key, _ in self.requests}

    @property
    def sessions(self) -> set[str]:
        return {session for _, session in self.keys}


class Speculator:
    """Ready answers per session, and the one background job that computes them."""

    def __init__(self, store: PrefixCacheStore):
        self.store = store
        self._lock = threading.Lock()
        self._ready: dict[Hashable, dict[Request, tuple]] = {}  # session key -> request -> answer
        self._arrivals = 0  # real requests so far: a job stops once this moves
        self._running = 0  # real requests being computed now
        self._idle = threading.Condition(self._lock)  # notified when a job is published or one ends
        self._pending: _Job | None = None  # the job the worker takes next
        self._current: _Job | None = None  # the job the worker is running
        self._worker: threading.Thread | None = None  # started with the first job
        self.served = 0  # clicks answered from a ready answer
        self._closed = False  # the process is exiting: the thread ends

    def arrived(self, key: Hashable, request: Request) -> tuple | None:
        """A real request arrives: pre-empt the job; return its ready answer if it is one (an equal request's)."""
        with self._lock:
            self._arrivals += 1
            self._running += 1
            return self._ready.pop(key, {}).get(request)

    def finished(self) -> None:
        with self._lock:
            self._running -= 1

    def claim(self, key: Hashable, answer: tuple) -> object | None:
        """Install a ready answer's KV into the session's cache; its result, or None if the session moved on."""
        base_ids, (ids, new_kv, continuations, scores), result = answer
        if not self.store.install(key, base_ids, ids, new_kv, continuations, scores):
            return None
        with self._lock:
            self.served += 1
        return result

    def start(self, requests: Sequence[Keyed], compute: Callable[[Request, ScratchStore], dict]) -> None:
        """Precompute the answers to `requests` (in order, each over a copy of its key's cache) in the background,
        unless another request is running.

        The one worker thread takes the newest job when it is free: a job is published, and the worker
        started, under the lock, so `wait` sees either no work or work under way, never a thread not yet
        started, and two jobs never run at once (an older job not yet begun is replaced; one under way
        stops by itself, since the request that made this job arrived after it began).
        """
        with self._lock:
            if self._running or self._closed:
                return  # other visitors are waiting: their requests come first (or the process is exiting)
            self._pending = _Job(requests, compute, self._arrivals)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="precompute", daemon=True)
                self._worker.start()
            self._idle.notify_all()

    def wait(self, timeout: float | None = None, key: Hashable | None = None) -> bool:
        """Until no job (of session `key`, if given) is waiting or under way (False if `timeout` seconds passed
        first)."""
        with self._lock:
            return self._idle.wait_for(
                lambda: all(job is None or key is not None and key not in job.keys
                            for job in (self._pending, self._current)),
                timeout)

    def _work(self) -> None:
        """The worker: run the newest job, one at a time, until the process exits."""
        while True:
            with self._lock:
                self._idle.wait_for(lambda: self._pending is not None or self._closed)
                if self._closed:
                    break
                job = self._current = self._pending
                self._pending = None
            try:
                self._run(*job)
            finally:
                release_workers()  # the click that stopped it, or the next one, runs unthrottled
                with self._lock:
                    self._current = None
                    self._idle.notify_all()

    def _run(self, requests: Sequence[Keyed], compute: Callable[[Request, ScratchStore], dict], ticket: int) -> None:
        def checkpoint() -> None:
            if self._arrivals != ticket:
                raise Preempted  # a real request came: it goes first, and the writer may have moved on

        time.sleep(REPLY_GRACE_SECONDS)
        if self._arrivals != ticket:
            return
        entries: dict[Hashable, Entry | None] = {}  # copied here, not in start(): work the request need not wait for
        ready: dict[Hashable, dict[Request, tuple]] = {}
        for key, request in requests:
            if key not in entries:
                entries[key] = self.store.copy(key)
            entry = entries[key]
            if entry is None:
                continue
            scratch = ScratchStore(entry)
            try:
                with before_every_module_call(checkpoint):
                    result = compute(request, scratch)
            except Skip:
                continue
            except Preempted:
                return
            except Exception:  # noqa: BLE001 - a failed guess must never reach the writer; say so in the log
                log.exception("precomputing a branch failed; the click will compute it instead")
                return
            ready.setdefault(key, {})[request] = (entry.ids, scratch.recorded, result)
            with self._lock:
                if self._arrivals != ticket:
                    return
                self._ready = {key: dict(answers) for key, answers in ready.items()}  # one session's at a time

    def stop(self) -> None:
        """Drop the job waiting and pre-empt the one under way; return once it has ended (at exit: no thread may be
        in a forward as the interpreter shuts down)."""
        with self._lock:
            self._pending = None
            self._arrivals += 1
            self._idle.notify_all()
        self.wait()

    def close(self) -> None:
        """Stop the job under way and end the worker thread (at exit: a daemon thread still running as the interpreter
        shuts down is killed wherever it is, and inside torch that aborts the process)."""
        self.stop()
        with self._lock:
            self._closed = True
            self._idle.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join()

    def forget(self, session: str) -> None:
        """Drop the session's ready answers and stop its job, waiting or under way (the one under way at its next
        module call, publishing nothing): a session that makes no further call would never claim them."""
        with self._lock:
            self._ready = {key: answers for key, answers in self._ready.items() if key[1] != session}
            if any(job is not None and session in job.sessions for job in (self._pending, self._current)):
                self._pending = None
                self._arrivals += 1
                self._idle.notify_all()

    def clear(self) -> None:
        self.wait()
        with self._lock:
            self._ready.clear()
