"""Cancels that cross from the app's process into ZeroGPU's GPU workers, which are forked from it.

A table in shared memory, made at import, so before any worker is forked, and shared with each: a call that may be
cancelled gets a number, and its slot (the number modulo `SLOTS`) holds the number of the last call cancelled there.
The app's process writes a number there; the worker running that call reads its slot before every module call of
its job: one read of shared memory, no lock, no system call. A slot is reused only `SLOTS` calls later.
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing

SLOTS = 4096  # far more than the calls that run at once

_cancelled = multiprocessing.RawArray(ctypes.c_int64, SLOTS)  # slot -> the last call cancelled there (0: none)
_numbers = itertools.count(1)


def new_call() -> int:
    """A number for a call that may be cancelled, taken in the app's process."""
    return next(_numbers)


def cancel(call: int) -> None:
    """Tell the process running `call`, this one or another, to stop it."""
    _cancelled[call % SLOTS] = call


def cancelled(call: int) -> bool:
    return _cancelled[call % SLOTS] == call
