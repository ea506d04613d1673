"""Which backends there are, by the name `use_backend`, LOOKAHEAD_BACKEND and `app.py --backend` know them by.

Adding a backend is one entry in BACKENDS. An entry names its factory as "module:attribute" and imports it only
when chosen, so this module loads nothing: the command line lists the names before torch or a server's client
loads, and custom_llm_inference imports `spaces` (lookahead/backends/zerogpu.py) before anything imports torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lookahead.backends.base import Backend


@dataclass(frozen=True)
class BackendEntry:
    """How to make one backend, and what the command line says of it."""

    factory: str  # "module:attribute": called with the server's URL where the backend needs one, else with nothing
    summary: str  # where the model runs, for the command line's help
    example_url: str | None = None  # a server's URL, for the message when it is missing; None: no server

    @property
    def needs_server(self) -> bool:
        return self.example_url is not None

    def make(self, server_url: str | None) -> Backend:
        module, attribute = self.factory.split(":")
        factory = getattr(importlib.import_module(module), attribute)
        return factory(server_url) if self.needs_server else factory()


BACKENDS: dict[str, BackendEntry] = {
    "in-process": BackendEntry("lookahead.backends.zerogpu:in_process_backend",
                               "the model in this process (on ZeroGPU, in its GPU workers)"),
    "vllm": BackendEntry("lookahead.backends.server.vllm:VLLMBackend", "a vLLM server",
                         example_url="http://localhost:8000/v1"),
    "llama-cpp": BackendEntry("lookahead.backends.server.llama_cpp:LlamaCppBackend",
                              "llama.cpp's llama-server, or llama-cpp-python's server",
                              example_url="http://localhost:8080/v1"),
    "openai": BackendEntry("lookahead.backends.server.openai:OpenAIBackend",
                           "any OpenAI-compatible completions server that returns log-probabilities",
                           example_url="http://localhost:8000/v1"),
}


def make_backend(name: str, server_url: str | None = None) -> Backend:
    """The backend called `name`, talking to `server_url` where it needs a server; ValueError saying what is
    missing or unknown (before anything is imported or contacted)."""
    entry = BACKENDS.get(name)
    if entry is None:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {name!r}")
    if entry.needs_server and not server_url:
        raise ValueError(f"the {name} backend needs the server's URL, e.g. {entry.example_url} "
                         "(LOOKAHEAD_SERVER_URL)")
    return entry.make(server_url)
