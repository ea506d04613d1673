"""Running test workers in threads: each with its own seeded random source, the first failure re-raised."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable

SECONDS = 3.0  # each thread's share of a stress test
JOIN_SECONDS = 60.0  # past this a thread is deadlocked


def run_threads(workers: list[Callable[[random.Random], None]], seed: int = 0) -> None:
    """Run each worker in its own thread (each with its own seeded random source); re-raise the first failure."""
    failures: list[BaseException] = []

    def guarded(worker: Callable[[random.Random], None], rng: random.Random) -> None:
        try:
            worker(rng)
        except BaseException as error:  # noqa: BLE001 - reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=guarded, args=(w, random.Random(seed + i)), daemon=True)
               for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive(), "a thread is still running: deadlocked"
    if failures:
        raise failures[0]


def until(seconds: float) -> Callable[[], bool]:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() < deadline


def exit_code(child: int, stuck: str) -> int:
    """The exit code of the forked process `child`; past JOIN_SECONDS it is killed and the test fails with `stuck`."""
    deadline = time.monotonic() + JOIN_SECONDS
    while (ended := os.waitpid(child, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(child, 9)
            raise AssertionError(stuck)
        time.sleep(0.01)
    return os.waitstatus_to_exitcode(ended[1])
