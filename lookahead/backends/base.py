"""Where the model runs, behind one small interface, and what each place can do.

  InProcess    (lookahead/backends/in_process.py)   the model in this process; each session's KV cache kept here
  VLLMBackend  (lookahead/backends/server/vllm.py)  a vLLM server, through its OpenAI-compatible API
  LlamaCppBackend  (lookahead/backends/server/llama_cpp.py)  llama.cpp's llama-server, or llama-cpp-python's
  OpenAIBackend  (lookahead/backends/server/openai.py)  any OpenAI-compatible completions server

Callers ask a backend's `capabilities`, never its class.

`custom_llm_inference` checks every argument once and builds a typed request (lookahead/requests.py); the
backend has one method per request type and answers with the typed answers of lookahead/outputs.py, each built
with `lookahead/results.py`, so callers get the same answers from any.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from lookahead.outputs import (
    Attribution,
    AttributionProgress,
    Continuation,
    ModelComparison,
    Multiverse,
    NextToken,
    Suggestions,
    TokenScores,
)
from lookahead.requests import (
    AttributionRequest,
    CompareRequest,
    DistributionRequest,
    GenerateRequest,
    LookaheadRequest,
    MultiverseRequest,
    ScoresRequest,
)


class BackendError(RuntimeError):
    """The backend could not answer: its server is down, restarting, too slow, or serves another model.

    The message says which, and what to do; nothing the caller sent is lost, so the same call can be retried.
    """


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond answering each request, so that callers ask this and not its class."""

    precomputation: bool  # computes, in the background, what taking each branch gives
    partial_reads: bool  # answers a long text at once from its last tokens while it is read
    cheap_fit: bool  # a caret's fit costs little beside the branches (else the page asks it after them)
    attribution: bool  # answers "why?" (gradients through the model)
    prompt_scores: bool  # scores every token of a text (the heatmap)
    batching: bool  # serving many calls at once helps (a server batching them), or only splits the cores
    constraints: bool = True  # answers under a constraint (a choice, a regex, a JSON schema, a grammar)
    fit: bool = True  # scores the text after a caret under each branch (a branch's fit)
    visitors_apart: bool = True  # nothing one visitor sends tells another what the first wrote (no shared cache)


class Backend(Protocol):
    capabilities: Capabilities

    def lookahead(self, request: LookaheadRequest, precompute: bool = False, partial: bool = True,
                  yielding: bool = False) -> Suggestions:
        """The branches and the distribution. `precompute`: also compute, in the background, what taking each
        branch gives (where the backend can). `partial`: a long text may answer first from its last tokens
        while it is read (where the backend can); False reads it whole within the call. `yielding`: run as a long
        job of kind "lookahead", which waits for every other call and can be cancelled (where the backend can)."""
        ...

    def distribution(self, request: DistributionRequest) -> list[NextToken]:
        ...

    def scores(self, request: ScoresRequest) -> TokenScores:
        ...

    def generate(self, request: GenerateRequest) -> Iterator[Continuation]:
        """The growing continuation, after every forward pass."""
        ...

    def attribution(self, request: AttributionRequest) -> Iterator[AttributionProgress | Attribution]:
        """The progress after each pass over the window, then the result."""
        ...

    def compare(self, request: CompareRequest) -> ModelComparison:
        """Two models on one text (lookahead/comparison.py)."""
        ...

    def multiverse(self, request: MultiverseRequest, yielding: bool = False) -> Multiverse:
        """The map of futures (lookahead/multiverse.py). `yielding`: run as a long job of kind "map", which waits for
        every other call and stops once the session asks suggestions for another text (where the backend can)."""
        ...

    def warm_up(self) -> Iterator[str]:
        """Prepare what the first answer needs (load, time), naming each step as it starts; nothing where the
        model is elsewhere."""
        ...

    def forget(self, session: str) -> None:
        """Drop whatever is kept for `session` (a session that makes no further call, such as an MCP call's)."""
        ...
