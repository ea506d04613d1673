"""What the engine answers: one frozen type per answer, as lookahead/requests.py has one per question.

Every backend builds these (lookahead/results.py holds the builders), the page reads them by attribute, and
`as_json` turns them into the plain JSON that the public functions, the endpoints and MCP return, at the edge.
The entries a long text has thousands of (`ScoredToken`, `Alternative`, `NextToken`) are named tuples: as cheap to
build as the dicts they replace; the rest are frozen dataclasses.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from typing import NamedTuple, ParamSpec, TypeVar

from lookahead.sampling import Sampling

Answer = TypeVar("Answer")
P = ParamSpec("P")


class NextToken(NamedTuple):
    """A candidate next token: p_base (`prob`, the plain softmax), p_final (after the sampling settings; 0 where a
    filter or the constraint cut it), whether a filter kept it and whether the constraint allows it."""

    token_id: int
    token: str
    prob: float
    logprob: float
    p_final: float
    kept: bool = True
    valid: bool = True


class Alternative(NamedTuple):
    """One of the likeliest tokens at a text token's place."""

    token_id: int
    token: str
    prob: float


class ScoredToken(NamedTuple):
    """A token of the text as the model read it: `text[start:end]` is its share; the scores are None where nothing
    came before it, or where a server's top N left it out (`rank_above`: N then)."""

    token_id: int
    token: str
    start: int
    end: int
    prob: float | None
    logprob: float | None
    rank: int | None
    entropy: float | None
    alternatives: tuple[Alternative, ...] | None
    rank_above: int | None = None


@dataclass(frozen=True)
class Branch:
    """A lookahead branch: its tokens, the text to insert, its first token's p_base and p_final (summed over the
    candidates that wrote the same text), whether it ends the text, the stop string that cut it, and its fit with
    the text after the caret."""

    token_ids: list[int]
    text: str
    prob: float
    p_final: float
    ends: bool
    stop: str | None
    fit: float | None


@dataclass(frozen=True)
class ForcedTokens:
    """What a constraint writes by itself before the branches' first choice."""

    token_ids: list[int]
    text: str


@dataclass(frozen=True)
class LeadTokens:
    """What the model all but certainly writes before the branches' first choice, and how likely all of it is."""

    token_ids: list[int]
    text: str
    prob: float


@dataclass(frozen=True)
class PartialSuggestions:
    """A long text's suggestions from its last `window_tokens` tokens, while all are read."""

    window_tokens: int
    context_tokens: int
    seconds: float | None = None
    read_tokens: int | None = None


@dataclass(frozen=True)
class ContextRead:
    """What the model read for an answer: which model where, how many tokens (from the session's cache, left out of
    a text longer than its context), the whitespace healing backed up, and a warning for the caller."""

    model: str
    device: str
    context_tokens: int
    reused_tokens: int
    truncated_tokens: int
    healed_whitespace: str
    notice: str


@dataclass(frozen=True)
class Suggestions(ContextRead):
    """`lookahead`'s answer: the context the model read, the next-token distribution and the branches."""

    partial: PartialSuggestions | None
    sampling: Sampling
    branch_mode: str
    seed: int
    distribution: list[NextToken]
    forced: ForcedTokens | None
    lead: LeadTokens | None
    branches: list[Branch]


@dataclass(frozen=True)
class PartialScores:
    """How many of a long text's tokens are scored so far, of how many."""

    read_tokens: int
    context_tokens: int


@dataclass(frozen=True)
class TokenScores:
    """`token_probabilities`' answer: each token of the text, scored (only the first ones while `partial`)."""

    model: str
    context_tokens: int
    reused_tokens: int
    truncated_tokens: int
    tokens: list[ScoredToken]
    partial: PartialScores | None = None
    notice: str | None = None


@dataclass(frozen=True)
class AttributedToken:
    """A token of the text and its share of the attribution (None: before the window)."""

    token_id: int
    token: str
    start: int
    end: int
    score: float | None


@dataclass(frozen=True)
class Target:
    """The next token an attribution explains."""

    token_id: int
    token: str
    prob: float


@dataclass(frozen=True)
class Attribution:
    """`attribution`'s answer."""

    target: Target
    method: str
    steps: int
    window_tokens: int
    truncated_tokens: int
    tokens: list[AttributedToken]


@dataclass(frozen=True)
class AttributionProgress:
    """An attribution's passes done so far, of how many."""

    done: int
    of: int


class ComparedToken(NamedTuple):
    """A token of the text under two models: each one's log-probability and rank, their divergence before it (bits),
    and what each would have written there instead. A tuple, as ScoredToken: a compared text has thousands."""

    token_id: int
    token: str
    start: int
    end: int
    logprob: list[float | None]
    rank: list[int | None]
    js: float | None
    top: list[str] | None


@dataclass(frozen=True)
class ComparedWord:
    """A word both tokenizers cut whole, and its log-probability under each model."""

    start: int
    end: int
    text: str
    logprob: list[float | None]


@dataclass(frozen=True)
class NextCompared:
    """Each model's next tokens at the caret, and their divergence (None per word)."""

    distributions: list[list[NextToken]]
    js: float | None


@dataclass(frozen=True)
class ModelComparison:
    """`compare`'s answer: two models on one text, token by token (or word by word), and at the caret."""

    models: list[str]
    per: str
    js_over: int | None
    tokens: list[ComparedToken] | None
    words: list[ComparedWord] | None
    next: NextCompared
    branches: list[list[Branch]]


@dataclass(frozen=True)
class Continuation:
    """`generate`'s answer (after each pass, growing): the text written, its tokens, and how decoding went."""

    text: str
    token_ids: list[int]
    token_texts: list[str]
    forward_passes: int
    tokens_per_pass: float
    seconds: float
    accepted_per_pass: list[int]
    draft_source_per_token: list[str]
    method: str
    model: str
    truncated_tokens: int
    stopped_for_time: bool
    stop: str | None


class FutureNode(NamedTuple):
    """A block of the map of futures: a continuation of the text (the root, `parent` None, is the text itself).

    `prob` is p_final given the parent's path, `mass` the product of `prob` along the path, `entropy` (bits) that of
    p_final after it (None where nothing follows or a server cannot tell), `rest` the mass of its children not
    listed; `text` is what inserting the path at the caret writes."""

    id: int
    parent: int | None
    token_id: int | None
    token: str
    text: str
    prob: float
    p_base: float
    mass: float
    depth: int
    entropy: float | None
    rest: float
    on_text: bool
    ends: bool


@dataclass(frozen=True)
class Multiverse(ContextRead):
    """`multiverse`'s answer: every continuation of at most `depth` tokens whose mass is at least `cutoff`, root
    first, then depth first with each node's children by mass (the writer's own next tokens, at a caret, too).
    `top_n`: None where every mass is exact; N through a server that lists each node's top N only (a child outside
    them is not known)."""

    sampling: Sampling
    depth: int
    cutoff: float
    top_n: int | None
    passes: int
    nodes: list[FutureNode]


def as_json(value: object) -> object:
    """`value` as plain JSON data: answers become dicts with their fields in order, tuples lists; a partial answer's
    fields that are None where the answer is whole are left out (`TokenScores`' "partial" and "notice",
    `ScoredToken`'s "rank_above")."""
    if value is None or isinstance(value, (str, int, float)):  # most of a long answer: its numbers, first
        return value
    if isinstance(value, ScoredToken):
        entry = value._asdict()
        entry["alternatives"] = None if value.alternatives is None else [a._asdict() for a in value.alternatives]
        if value.rank_above is None:
            del entry["rank_above"]
        return entry
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return value._asdict()
    if isinstance(value, Sampling):
        return value.as_dict()
    if is_dataclass(value):
        omitted = {"partial", "notice"} if isinstance(value, TokenScores) else set()
        return {name: as_json(getattr(value, name)) for name in _field_names(type(value))
                if not (name in omitted and getattr(value, name) is None)}
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    return value


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    """A dataclass's field names, read once (an answer may hold thousands of one kind: a compared text's tokens)."""
    return tuple(f.name for f in fields(kind))


def answers_json(typed: Callable[P, Answer]) -> Callable[P, object]:
    """A public function: `typed`'s answer (or stream of answers) as plain JSON, the shape docs/api.md documents.
    `typed` stays reachable as the function's `.typed`, for a caller that reads the answers by attribute
    (lookahead/outputs.py), as the page does."""
    stream = inspect.isgeneratorfunction(typed)

    @functools.wraps(typed)
    def public(*args: P.args, **kwargs: P.kwargs) -> object:
        answer = typed(*args, **kwargs)
        return map(as_json, answer) if stream else as_json(answer)

    signature = inspect.signature(typed)
    public.__signature__ = signature.replace(return_annotation=json_annotation(signature.return_annotation))
    public.typed = typed
    return public


def json_annotation(typed: str) -> str:
    """What a typed answer's annotation reads as JSON: a list of dicts for a list, a stream of dicts for a stream,
    else a dict."""
    outer = next((kind for kind in ("Iterator", "list") if typed.startswith(f"{kind}[")), None)
    return "dict" if outer is None else f"{outer}[dict]"


def last(answers: Iterable[Answer]) -> Answer:
    """The last of a stream of growing answers (a whole answer from a streaming call)."""
    answer = None
    for answer in answers:
        pass
    return answer
