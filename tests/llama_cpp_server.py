"""A real llama-cpp-python server (in its own venv) serving the embedded model's GGUF file as it ships (Q4_1), for
the tests and the benchmark.

The server's venv: `scripts/test.sh` makes it (requirements-llama-cpp.txt) and sets LLAMA_CPP_PYTHON.
"""

from __future__ import annotations

from pathlib import Path

from server_process import ServerProcess

CONTEXT_TOKENS = 4096  # the server's window (its default is 2048)


class LlamaCppServer(ServerProcess):
    """`python -m llama_cpp.server` serving `gguf` as `name` on loopback, on every core, logging each request's
    prefix-cache hit ("Llama.generate: N prefix-match hit")."""

    kind = "llama-cpp-python"

    def __init__(self, python: str, gguf: str | Path, name: str, threads: int, *extra: str) -> None:
        super().__init__([
            python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", name, "--n_ctx",
            str(CONTEXT_TOKENS), "--n_threads", str(threads), "--n_threads_batch", str(threads),
            "--host", "127.0.0.1", "--port", "{port}", "--verbose", "true", *extra,
        ])
