"""A real vLLM server (the CPU build, in its own venv) for the tests and the load benchmark, and a proxy
in front of it that can go down, come back, or stall, as a server being restarted or overloaded does.

The server's venv: `scripts/test.sh` makes it (requirements-vllm.txt) and sets VLLM_PYTHON.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from server_process import ServerProcess, free_port

START_TIMEOUT_SECONDS = 900  # the CPU build compiles its model on start: 2-4 minutes on 2 cores


class VLLMServer(ServerProcess):
    """`python -m vllm.entrypoints.openai.api_server` serving `model_dir` as `name`, on loopback."""

    kind = "vLLM"
    start_timeout = START_TIMEOUT_SECONDS

    def __init__(self, python: str, model_dir: str | Path, name: str, *extra: str, kv_cache_gb: int = 2) -> None:
        super().__init__([
            python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--served-model-name", name,
            "--dtype", "float32", "--max-model-len", "4096", "--host", "127.0.0.1", "--port", "{port}",
            # The CPU build's default 128-token blocks would make each branch's prompt recompute up to
            # 127 tokens past the cached prefix (a lookahead: 3.3 s instead of 0.63 s at 619 tokens).
            "--enable-prompt-tokens-details", "--block-size", "32", *extra,
        ], {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})


class Proxy:
    """Forwards a loopback port to `upstream_port`; `down()` refuses connections, `stall()` accepts and
    never answers."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.stalled = False
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []  # every accepted or forwarded connection, closed by down()
        self.up()

    def up(self) -> None:
        self.stalled = False
        if self._listener is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            self._listener = listener
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept(), which close() alone would not
            listener.close()
        for connection in self._open:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()
        self._open.clear()

    def stall(self) -> None:
        self.up()
        self.stalled = True

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            self._open.append(client)
            if self.stalled:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._open.append(upstream)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, target):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
