"""A page handler's wrappers, each written once for functions and generators alike.

gradio reads a handler's inputs from its signature, and streams an event whose handler is a generator function
(an async one too) where it answers a function's event once. So a wrapper writes its concern once, over the stream
of the wrapped function's answers (`answers_of`), and `shaped_like` (or `async_shaped_like`) gives the result the
function's signature and kind: a function's stream is its one answer.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator


def answers_of(fn: Callable, *args, **kwargs) -> Iterator:
    """`fn(*args, **kwargs)`'s answers as a stream: a generator's items, or a function's one answer; nothing runs
    until the stream is read, so a wrapper reading it sees `fn`'s failures where it reads."""
    if inspect.isgeneratorfunction(fn):
        yield from fn(*args, **kwargs)
    else:
        yield fn(*args, **kwargs)


def shaped_like(fn: Callable, answers: Callable[..., Iterator]) -> Callable:
    """A handler with `fn`'s signature and kind whose answers are what `answers(*args, **kwargs)` yields: each of
    them, for a generator function; the one, for a function."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args, **kwargs):
            yield from answers(*args, **kwargs)

        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        (answer,) = answers(*args, **kwargs)
        return answer

    return call


def async_shaped_like(fn: Callable, answers: Callable[..., AsyncIterator]) -> Callable:
    """As `shaped_like`, for an async generator `answers`: an async generator function for a generator function,
    a coroutine function for a function.

    `answers` is closed as soon as the handler is done with it, so what it holds is let go at once: when a stream
    is stopped, and as a function's one answer is returned (its stream is not read on to its end).
    """
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        async def stream(*args, **kwargs):
            async with contextlib.aclosing(answers(*args, **kwargs)) as items:
                async for item in items:
                    yield item

        return stream

    @functools.wraps(fn)
    async def call(*args, **kwargs):
        async with contextlib.aclosing(answers(*args, **kwargs)) as items:
            return await anext(items)

    return call
