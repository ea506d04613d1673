"""The model's preparation at start, in the background, so that the page answers at once.

A first start converts the embedded model and measures this CPU (about a minute); every start loads the model.
Until that is done the page says what it waits for, and asks again by itself (app.suggest); the terminal says it
too. The steps are the backend's (`warm_up`: a generator that names each step before it takes it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

log = logging.getLogger("app")


class Preparation:
    """What the model's preparation is doing now (`step`: None before it starts and once it is done), and why it
    failed, if it did."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.failure: str | None = None

    def start(self, steps: Iterator[str]) -> threading.Thread:
        """Take `steps` in a background thread, publishing each one's name before it runs."""
        self.step = "Starting…"

        def run() -> None:
            try:
                for step in steps:
                    self.step = step
                    print(step, flush=True)
            except Exception as error:  # noqa: BLE001 - told to every visitor, and logged with its traceback
                log.exception("the model's preparation failed")
                self.failure = f"{type(error).__name__}: {error}"
            else:
                print("The model is ready.", flush=True)
            finally:
                self.step = None

        thread = threading.Thread(target=run, name="model preparation", daemon=True)
        thread.start()
        return thread
