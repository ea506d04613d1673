"""A page handler's wrappers, each written once for functions and generators alike.

gradio reads a handler's inputs from its signature, and streams an event whose handler is a generator function
(an async one too) where it answers a function's event once. So a wrapper writes its concern once, over the stream
of the wrapped function's answers (`answers_of`), and `shaped_like` gives the result the function's signature and
kind: a function's stream is its one answer.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator


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

