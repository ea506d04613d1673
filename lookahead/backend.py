"""Where the model runs, behind one small interface.

  InProcess    (lookahead/in_process.py)    the model in this process; each session's KV cache kept here
  VLLMBackend  (lookahead/vllm_backend.py)  a vLLM server, through its OpenAI-compatible API

`custom_llm_inference` checks every argument, then hands the checked request to the chosen backend;
both build their answers with `lookahead/results.py`, so callers get the same dicts from either.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

TASKS = ("lookahead", "distribution", "scores", "generate", "attribution")


class BackendError(RuntimeError):
    """The backend could not answer: its server is down, restarting, too slow, or serves another model.

    The message says which, and what to do; nothing the caller sent is lost, so the same call can be retried.
    """


class Backend(Protocol):
    batches: bool  # whether serving many calls at once helps (a server batching them), or only splits the cores

    def serve(self, task: str, request: dict, precompute: bool = False) -> Iterator[dict]:
        """Answer a checked request of one of TASKS (the "generate" task yields its growing result).

        `precompute`: a "lookahead" may also compute, in the background, what taking each branch gives.
        """
        ...

    def forget(self, session: str) -> None:
        """Drop whatever is kept for `session` (a session that makes no further call, such as an MCP call's)."""
        ...
