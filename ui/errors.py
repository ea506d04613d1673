"""What a visitor is told when a handler cannot do what was asked: a message, never a traceback.

Three kinds, kept apart so the server's log holds only what a maintainer must look at:
- a refusal (`refuse`): bad input, a server that cannot answer, a click that raced an edit. The
  visitor reads why in a red toast; nothing is logged (it is not a bug).
- a notice (`gr.Info`, from the handler itself): an expected state, such as nothing to undo.
- anything else is a bug: `handled` logs it with its traceback and tells the visitor, in words,
  that it failed on the app's side and that their text is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import gradio as gr

from lookahead.backends.base import BackendError
from lookahead.scheduler import Cancelled
from ui.handlers import answers_of, shaped_like

log = logging.getLogger("app")
# Raised by the engine for input it refuses (the message says why), a backend that cannot answer, or a long job
# its caller cancelled.
VISITOR_ERRORS = (ValueError, BackendError, Cancelled)


def refuse(message: str) -> gr.Error:
    """A red toast with `message`, and no traceback in the log: the visitor's input, not the app, is at fault."""
    return gr.Error(message, print_exception=False)


def handled(fn: Callable, keep_when_cancelled: bool = False) -> Callable:
    """`fn` (a function or generator) as a handler whose failures reach the visitor as messages.

    `keep_when_cancelled`: a page event whose model work its session cancelled (a newer question, Stop, a closed
    tab) changes nothing and says nothing: the writer did nothing wrong, and the newer event brings its own answer.
    The signature and kind stay `fn`'s (ui/handlers.py), so gradio passes the same inputs and documents the same API.
    """

    def failed(error: Exception) -> gr.Error:
        if isinstance(error, gr.Error):
            return error
        if isinstance(error, VISITOR_ERRORS):
            return refuse(str(error))
        log.exception("%s failed", fn.__name__)
        return refuse(
            f"Something went wrong on our side ({type(error).__name__}); nothing you wrote is lost. "
            "Try again, and if it happens again, reload the page."
        )

    def answers(*args, **kwargs) -> Iterator:
        try:
            yield from answers_of(fn, *args, **kwargs)
        except Cancelled as error:
            if not keep_when_cancelled:
                raise failed(error) from None
            yield gr.skip()
        except Exception as error:  # noqa: BLE001 - each kind is told apart in `failed`
            raise failed(error) from None

    return shaped_like(fn, answers)
