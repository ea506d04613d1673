"""One visitor's events run one at a time, in the order they started; visitors run side by side.

A single queue slot for every UI event kept a visitor's history from racing itself (an
import overwritten by an update still running on the old tree), but it also made a crowd
wait for one another. Here the serialising is per session: handlers become coroutines
that take their session's `asyncio.Lock` (first come, first served) before running the
plain function in a worker thread, so gradio's concurrency limit can let many visitors in.

Gradio reads an event's gr.State inputs before the handler starts, so before it waits for its turn, and writes
its gr.State outputs after the handler returns, so after the turn has passed on. An event that waited would see
what the session held before the events ahead of it ran (a click would act on suggestions already replaced).
So a waiting event reads its session's states again once it has the turn, and an event writes the states it
answers before it gives the turn up: each event sees everything the ones before it wrote.

A click skips gradio's queue (its round trip is what the writer waits for): so the work of interactive events, queued
or not, takes one of a shared number of slots (`at_once`) once it has its session's turn, and no more of it runs at
once than the queue would let run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence

import anyio
from gradio.components import State
from gradio.context import LocalContext

from lookahead.scheduler import ASKED_AT
from ui.handlers import answers_of, async_shaped_like

_DONE = object()


class SessionOrder:
    """Per-session FIFO locks, dropped when no event of that session is running or waiting.

    A long event (a Continue) holds its session's turn for as long as it runs. A short event of that session
    must not wait for it: it would wait inside its concurrency slot, and every other visitor's events of its
    group with it. So while a long event holds the session's turn or waits for it, a short one answers at once
    (`while_long`) instead.

    `at_once`: how many interactive events' work runs at once, across sessions (None: as many as arrive). Asked at
    the first such event, since the backend it depends on is chosen after the page is built.
    """

    def __init__(self, at_once: Callable[[], int] | None = None) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # session -> (lock, events holding or waiting)
        self._long: dict[str, int] = {}  # session -> its long events holding or waiting for the turn
        self._at_once = at_once
        # The interactive slots of each event loop (an anyio limiter belongs to the loop it is made in).
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = \
            weakref.WeakKeyDictionary()

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

    def interactive_slots(self) -> anyio.CapacityLimiter | None:
        """The slots interactive events' work takes in the running event loop (first come, first served)."""
        if self._at_once is None:
            return None
        loop = asyncio.get_running_loop()
        if loop not in self._slots:
            self._slots[loop] = anyio.CapacityLimiter(self._at_once())
        return self._slots[loop]

    def wrap(self, fn: Callable, long: bool = False, while_long: Callable[[], object] | None = None,
             arriving: Callable[[str], object] | None = None, inputs: Sequence[object] = (),
             interactive: bool = False) -> Callable:
        """`fn` (a plain function or generator) as a gradio handler that waits for its session's turn.

        `long`: `fn` is a long event. A short one calls `while_long()` instead of waiting while its session has a
        long event (it returns the handler's answer, or raises the visitor's message). `arriving(session)` is
        called as the event arrives, before it waits (to cancel work of the session it makes stale). `inputs`: the
        components behind `fn`'s first positional arguments; its gr.State ones are read again once the event has
        its turn, and the gr.State values it answers are the session's before the turn passes on. The signature
        and kind stay `fn`'s (ui/handlers.py), so gradio passes the same inputs, gr.Request and gr.EventData included.
        `interactive`: each step of `fn` takes one of the interactive slots once the event has its turn.
        """
        states = {i: component for i, component in enumerate(inputs) if isinstance(component, State)}

        async def answers(*args, **kwargs) -> AsyncIterator:
            session = _session()
            if arriving is not None:
                arriving(session)  # the event makes the session's earlier work stale
            at = time.monotonic()  # when it arrived, for the jobs it starts
            if not long and while_long is not None and self.busy_with_long(session):
                yield while_long()
                return
            async with self.turn(session, long):
                items = answers_of(fn, *_fresh(args, states, session), **kwargs)
                slots = self.interactive_slots() if interactive else None
                while (item := await anyio.to_thread.run_sync(as_asked, at, next, items, _DONE,
                                                              limiter=slots)) is not _DONE:
                    yield _published(item, session)

        return async_shaped_like(fn, answers)


def as_asked(at: float, fn: Callable, *args, **kwargs) -> object:
    """`fn(*args, **kwargs)` for an event that arrived `at`: a long job it starts, of a kind its session cancelled
    since (a newer event arriving while this one waited or began), starts cancelled (lookahead/scheduler.py). Each
    call to a thread runs in a copy of the context: the setting ends with it."""
    ASKED_AT.set(at)
    return fn(*args, **kwargs)


def _session_state(session: str):
    """The session's gradio state (gr.State values by block id), if the event runs inside gradio's app."""
    blocks = LocalContext.blocks.get(None)
    holder = getattr(blocks, "state_holder", None)
    return holder[session] if holder is not None and session in holder else None


def _fresh(args: tuple, states: dict[int, State], session: str) -> tuple:
    """The handler's arguments with its gr.State inputs as the session holds them now."""
    held = _session_state(session) if states else None
    if held is None:
        return args
    return tuple(held[states[i]._id] if i in states else arg for i, arg in enumerate(args))


def _published(answer: object, session: str) -> object:
    """`answer` ({component: value}) unchanged, its gr.State values written to the session's state at once."""
    held = _session_state(session) if isinstance(answer, dict) else None
    if held is not None:
        for component, value in answer.items():
            if isinstance(component, State) and not (isinstance(value, dict) and "__type__" in value):
                held[component._id] = value
    return answer


def _session() -> str:
    """The running event's session (gradio sets the request for the handler's task)."""
    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None) or "anonymous"
