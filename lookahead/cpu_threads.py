"""A thread that stops using the CPU hands its OpenMP workers back, so the thread that uses it next runs at full speed.

torch's CPU kernels run on OpenMP (GNU libgomp in torch's wheels): each Python thread that runs a parallel kernel gets
a team of worker threads of its own, kept while the thread lives. While more workers exist in the process than it
has CPUs, libgomp throttles every team: between two kernels a worker waits ~100 spins instead of ~3 ms, then sleeps,
and a pass of hundreds of short kernels pays a wake-up for each. Here threads take turns on the cores (a long job
waits while a click runs; gradio runs each request on one of its worker threads), so one idle thread's workers slowed
every other thread: on a 2-core AMD EPYC a click at ~600 tokens took 331 ms beside a thread that had once multiplied
two matrices, 203 ms without it. Handing the idle thread's workers back (OpenMP 5's `omp_pause_resource_all`) gave
198 ms; a later kernel in that thread starts its workers again (~0.1 ms).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch

OMP_PAUSE_SOFT = 1  # OpenMP's omp_pause_soft: the runtime frees this thread's workers, and may start them again


def _loaded_libgomp() -> str | None:
    """The file of the libgomp this process runs torch's kernels on (torch's wheels bundle one, named one way or
    another), from the process's memory map; None off Linux or without one."""
    try:
        mapped = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    return next((line.split()[-1] for line in mapped if "libgomp" in line.rsplit("/", 1)[-1]), None)


@cache
def _pause_all() -> Callable[[int], int] | None:
    """libgomp's `omp_pause_resource_all` (None: torch runs on another OpenMP, or none). Called holding the GIL
    (PyDLL; at most ~0.1 ms), as any other call at a request's end: a call that let go of it there changed which thread
    runs next, and a long job waiting for a gap between back-to-back calls found none."""
    path = _loaded_libgomp() if torch.backends.openmp.is_available() else None
    try:
        return None if path is None else ctypes.PyDLL(path).omp_pause_resource_all
    except (OSError, AttributeError):
        return None


def release_workers() -> None:
    """Hand this thread's OpenMP workers back (it will not run torch's CPU kernels for a while)."""
    pause = _pause_all()
    if pause is not None:
        pause(OMP_PAUSE_SOFT)
