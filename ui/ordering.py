"""One visitor's events run one at a time, in the order they started; visitors run side by side.

A single queue slot for every UI event kept a visitor's history from racing itself (an
import overwritten by an update still running on the old tree), but it also made a crowd
wait for one another. Here the serialising is per session: handlers become coroutines
that take their session's `asyncio.Lock` (first come, first served) before running the
plain function in a worker thread, so gradio's concurrency limit can let many visitors in.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable

import anyio
from gradio.context import LocalContext

_DONE = object()


class SessionOrder:
    """Per-session FIFO locks, dropped when no event of that session is running or waiting.

    A long event (a Continue) holds its session's turn for as long as it runs. A short event of that session
    must not wait for it: it would wait inside its concurrency slot, and every other visitor's events of its
    group with it. So while a long event holds the session's turn or waits for it, a short one answers at once
    (`while_long`) instead.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # session -> (lock, events holding or waiting)
        self._long: dict[str, int] = {}  # session -> its long events holding or waiting for the turn

    @contextlib.asynccontextmanager
    async def turn(self, session: str, long: bool = False) -> AsyncIterator[None]:
        lock, users = self._locks.get(session, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[session] = (lock, users + 1)
        if long:
            self._long[session] = self._long.get(session, 0) + 1
        try:
            async with lock:
                yield
        finally:
            if long:
                self._long[session] -= 1
                if not self._long[session]:
                    del self._long[session]
            lock, users = self._locks[session]
            if users == 1:
                del self._locks[session]
            else:
                self._locks[session] = (lock, users - 1)

    def busy_with_long(self, session: str) -> bool:
        return session in self._long

    def others_waiting(self, session: str) -> bool:
        """Whether another event of `session` than the one holding its turn waits for it."""
        return self._locks.get(session, (None, 0))[1] > 1

    def __len__(self) -> int:
        return len(self._locks)

    def wrap(self, fn: Callable, long: bool = False, while_long: Callable[[], object] | None = None,
             arriving: Callable[[str], object] | None = None) -> Callable:
        """`fn` (a plain function or generator) as a gradio handler that waits for its session's turn.

        `long`: `fn` is a long event. A short one calls `while_long()` instead of waiting while its session has a
        long event (it returns the handler's answer, or raises the visitor's message). `arriving(session)` is
        called as the event arrives, before it waits (to cancel work of the session it makes stale). The signature
        stays `fn`'s (functools.wraps), so gradio passes the same inputs, gr.Request and gr.EventData included.
        """
        def busy(session: str) -> bool:
            return not long and while_long is not None and self.busy_with_long(session)

        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            async def stream(*args, **kwargs):
                session = _session()
                if arriving is not None:
                    arriving(session)
                if busy(session):
                    yield while_long()
                    return
                async with self.turn(session, long):
                    iterator = fn(*args, **kwargs)
                    while (item := await anyio.to_thread.run_sync(next, iterator, _DONE)) is not _DONE:
                        yield item

            return stream

        @functools.wraps(fn)
        async def call(*args, **kwargs):
            session = _session()
            if arriving is not None:
                arriving(session)
            if busy(session):
                return while_long()
            async with self.turn(session, long):
                return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

        return call


def _session() -> str:
    """The running event's session (gradio sets the request for the handler's task)."""
    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None) or "anonymous"
