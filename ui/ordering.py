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
    """Per-session FIFO locks, dropped when no event of that session is running or waiting."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # session -> (lock, events holding or waiting)

    @contextlib.asynccontextmanager
    async def turn(self, session: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(session, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[session] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session]
            if users == 1:
                del self._locks[session]
            else:
                self._locks[session] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)

    def wrap(self, fn: Callable) -> Callable:
        """`fn` (a plain function or generator) as a gradio handler that waits for its session's turn.

        The signature stays `fn`'s (functools.wraps), so gradio passes the same inputs,
        gr.Request and gr.EventData included.
        """
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            async def stream(*args, **kwargs):
                async with self.turn(_session()):
                    iterator = fn(*args, **kwargs)
                    while (item := await anyio.to_thread.run_sync(next, iterator, _DONE)) is not _DONE:
                        yield item

            return stream

        @functools.wraps(fn)
        async def call(*args, **kwargs):
            async with self.turn(_session()):
                return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

        return call


def _session() -> str:
    """The running event's session (gradio sets the request for the handler's task)."""
    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None) or "anonymous"
