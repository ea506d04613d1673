"""A model server started as a child process for the tests and the benchmarks: on a free loopback port, its output
in a log file (removed once it has stopped), ready once its OpenAI-compatible /models answers, stopped with its whole
process group.

`vllm_server.py` and `llama_cpp_server.py` each say how to start theirs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

POLL_SECONDS = 2
STOP_SECONDS = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`command` run with "{port}" in any of its words replaced by a free port, which it should listen on."""

    kind = "model"  # as messages name it: "the {kind} server"
    start_timeout = 300.0

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"{self.kind}-server-", suffix=".log", delete=False)
        command = [word.replace("{port}", str(self.port)) for word in command]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, **(env or {})}, start_new_session=True)

    def wait(self, timeout: float | None = None) -> str:
        """The server's URL once it answers; RuntimeError with its log's end if it exits or takes too long."""
        timeout = timeout or self.start_timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the {self.kind} server exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=5).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(POLL_SECONDS)
        raise RuntimeError(f"the {self.kind} server did not start within {timeout} s:\n{self.log_tail()}")

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


@contextmanager
def in_process() -> Iterator[None]:
    """The in-process engine answering the public functions for a while, the server's backend back after: what a
    server's answers are compared to."""
    import custom_llm_inference as inference

    previous = inference.backend()
    inference.use_backend()
    try:
        yield
    finally:
        inference._backend = previous
