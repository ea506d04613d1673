"""One typed, checked request per task: what every layer below the public API receives.

`custom_llm_inference` checks a caller's arguments once and builds one of these; the request then
travels unchanged through the backend (`lookahead/backends/base.py`: one method per request type), the one
`@spaces.GPU` entry point (which dispatches on the request's type and asks for GPU time by it) and
the precomputation (`lookahead/speculation.py`, which keys ready answers by the request itself).
Frozen and hashable: two requests are the same question exactly when every field is equal, so a
precomputed answer is only ever found for the request it was computed for.
"""

from __future__ import annotations

from dataclasses import dataclass

from lookahead.constraints import Constraint
from lookahead.models import default_model_name
from lookahead.sampling import PLAIN, Sampling

Messages = tuple[tuple[str, str], ...]  # chat mode's earlier turns, (role, content)


@dataclass(frozen=True, kw_only=True)
class Request:
    """What every task shares: the text, whose it is, which model reads it, after which conversation."""

    text: str
    session: str = "default"
    model_name: str | None = None  # None: the default model
    messages: Messages | None = None  # chat mode: `text` is the assistant's reply after these turns

    @property
    def model(self) -> str:
        return self.model_name or default_model_name()

    @property
    def key(self) -> tuple[str, str]:
        """Whose caches this request reads and writes: one per model and session."""
        return self.model, self.session


@dataclass(frozen=True, kw_only=True)
class LookaheadRequest(Request):
    """The next-token distribution and the top branches, each continued `depth` tokens."""

    n_branches: int = 5
    depth: int = 3
    sampling: Sampling = PLAIN
    branch_mode: str = "greedy"
    seed: int = 0
    constraint: Constraint | None = None
    stop: tuple[str, ...] = ()
    after: str | None = None  # the text after the caret (`text` ends at it); None: the caret is at the end
    fit_tokens: int = 32  # how many tokens of `after` each branch's fit is measured on
    # Tokens the model all but certainly writes next (results.lead_token), read after the text (and what a
    # constraint forces) so that the branches fork at the first real choice: the server backends ask again with
    # them (in-process the tree reads them itself, lookahead/branches.py's Lead).
    lead: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DistributionRequest(Request):
    """The k likeliest next tokens, before and after the sampling settings."""

    k: int = 10
    sampling: Sampling = PLAIN
    constraint: Constraint | None = None
    after: str | None = None  # the text after the caret, as for a lookahead


@dataclass(frozen=True, kw_only=True)
class ScoresRequest(Request):
    """Each token of the text scored given everything before it, with its top k alternatives."""

    k: int = 5


@dataclass(frozen=True, kw_only=True)
class GenerateRequest(Request):
    """A greedy continuation, streamed; `time_limit` seconds at most (on ZeroGPU, inside the GPU time asked)."""

    max_new_tokens: int = 64
    method: str = "lookahead"
    constraint: Constraint | None = None
    stop: tuple[str, ...] = ()
    time_limit: float | None = None


@dataclass(frozen=True, kw_only=True)
class AttributionRequest(Request):
    """Why the model expects `target_token_id` next (None: its first choice), or at token `at_token` of the text."""

    target_token_id: int | None = None
    method: str = "input_x_gradient"
    steps: int = 16
    window: int = 512
    at_token: int | None = None


@dataclass(frozen=True, kw_only=True)
class CompareRequest(Request):
    """Two models on one text: every token under both, where their next-token distributions part, and at the
    caret both distributions and both models' branches. `model_name` is unused: `models` names both."""

    models: tuple[str, ...] = ()  # two names, a then b (checked by compare)
    k: int = 10
    n_branches: int = 5
    depth: int = 3
    sampling: Sampling = PLAIN
    constraint: Constraint | None = None
    stop: tuple[str, ...] = ()
    after: str | None = None  # the text after the caret (`text` ends at it); None: the caret is at the end

    @property
    def whole(self) -> str:
        """The whole text, caret or not: the one whose tokens are compared."""
        return self.text + (self.after or "")


@dataclass(frozen=True, kw_only=True)
class MultiverseRequest(Request):
    """The map of futures: every continuation of at most `depth` tokens at least `cutoff` likely (by mass)."""

    depth: int = 3
    cutoff: float = 0.05
    sampling: Sampling = PLAIN
    constraint: Constraint | None = None
    after: str | None = None  # the text after the caret: its first `depth` tokens are the writer's own path


REQUEST_TYPES = (LookaheadRequest, DistributionRequest, ScoresRequest, GenerateRequest, AttributionRequest,
                 CompareRequest, MultiverseRequest)
