"""Public inference API: next-token distribution and cached lookahead branches for a text.

Everything here takes and returns plain, JSON-safe data, so the same functions serve Python callers, the
endpoints for `gradio_client` and MCP; each public function's `.typed` answers with the typed answers of
lookahead/outputs.py instead, which the page reads. Each public function checks its arguments once, in the calling
process (lookahead/checks.py), and builds one typed, frozen request (lookahead/requests.py) that every layer below
receives unchanged. The backend
(lookahead/backends/base.py: one method per request type) runs it: in this process by default
(`InProcess`, lookahead/backends/in_process.py, which keeps each session's caches), or on a vLLM server
(`use_backend("vllm", url)`, or LOOKAHEAD_BACKEND=vllm and LOOKAHEAD_SERVER_URL;
lookahead/backends/server/vllm.py). In-process, the model runs inside `on_gpu` (lookahead/backends/zerogpu.py),
the one `@spaces.GPU` function: on ZeroGPU an exception raised inside a GPU worker reaches the visitor as its class
name alone, and a refused request should cost no GPU time, hence the checks first.
The engine's tensor-level pieces live in the `lookahead` package:
  lookahead/models.py        which model, loaded how (embedded offline default)
  lookahead/context.py       what the model reads: chat template, window, healing, constraint state
  lookahead/branches.py      top-k branches over one shared KV cache (tree attention)
  lookahead/prefix_cache.py  per-session KV caches, so edits only recompute what changed
  lookahead/kv_cache.py      a KV cache that grows without copying itself every forward
  lookahead/healing.py       text ending in whitespace
  lookahead/sampling.py      p_base -> p_final with transformers' logits processors; presets
  lookahead/decoding.py      greedy and lossless lookahead decoding for `generate`
  lookahead/constraints.py   choices, regexes, JSON schemas and grammars the next tokens must follow
  lookahead/outputs.py       the typed answers every backend returns (lookahead/results.py builds them)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace

# On ZeroGPU `spaces` must be imported before torch (it patches CUDA initialisation as it is imported): zerogpu
# imports it first, and comes here before every other part of the engine, each of which imports torch.
from lookahead.backends.zerogpu import gpu_seconds  # isort: split

from lookahead.attribution import METHODS as ATTRIBUTION_METHODS
from lookahead.backends import make_backend
from lookahead.backends.base import Backend, BackendError
from lookahead.branches import get_lookahead_sequences
from lookahead.checks import (
    MAX_BRANCHES,
    MAX_DEPTH,
    MAX_FIT_TOKENS,
    MAX_MAP_DEPTH,
    MAX_MAP_NODES,
    MAX_NEW_TOKENS,
    MAX_SEED,
    MAX_STEPS,
    MAX_STOP_CHARS,
    MAX_STOPS,
    MAX_TEXT_CHARS,
    MAX_WINDOW,
    at_caret,
    check_at_token,
    check_choice,
    check_constraint,
    check_cutoff,
    check_int,
    check_messages,
    check_models,
    check_stop,
    common_fields,
    offered_model_name,
)
from lookahead.constraints import ConstraintMismatch
from lookahead.models import (
    available_models,
    default_model_name,
    load_model,
    load_tokenizer,
    on_zero_gpu,
)
from lookahead.outputs import (
    Attribution,
    AttributionProgress,
    Continuation,
    ModelComparison,
    Multiverse,
    NextToken,
    Suggestions,
    TokenScores,
    answers_json,
    last,
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
from lookahead.sampling import BRANCH_MODES, MAX_TOP_K, PRESETS, Sampling
from lookahead.scheduler import LONG_JOBS, Cancelled, scheduler
from lookahead.scoring import MAX_ALTERNATIVES

__all__ = [
    "ATTRIBUTION_METHODS",
    "MAX_BRANCHES",
    "MAX_DEPTH",
    "MAX_FIT_TOKENS",
    "MAX_MAP_DEPTH",
    "MAX_MAP_NODES",
    "MAX_NEW_TOKENS",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_STOPS",
    "MAX_STOP_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_TOP_K",
    "MAX_WINDOW",
    "PRESETS",
    "Sampling",
    "BackendError",
    "Cancelled",
    "ConstraintMismatch",
    "LONG_JOBS",
    "attribution",
    "attribution_stream",
    "available_models",
    "backend",
    "cancel",
    "compare",
    "default_model_name",
    "end_session",
    "generate",
    "generate_stream",
    "get_lookahead_sequences",
    "gpu_seconds",
    "load_model",
    "lookahead",
    "multiverse",
    "next_token_distribution",
    "on_zero_gpu",
    "offered_model_name",
    "token_probabilities",
    "use_backend",
]

PARTIAL_POLL_SECONDS = 0.5  # how often token_probabilities(partial=False) asks again while a long text is read
GENERATION_METHODS = ("greedy", "lookahead")


def use_backend(name: str = "in-process", server_url: str | None = None) -> Backend:
    """Answer every public function with the backend registered as `name` (lookahead/backends: in-process, the
    default, or a server's at `server_url`, …/v1: `vllm`, `llama-cpp` or any OpenAI-compatible `openai`)."""
    global _backend
    _backend = make_backend(name, server_url)
    return _backend


def backend() -> Backend:
    """The backend answering the public functions."""
    return _backend


_backend: Backend = make_backend("in-process")
if os.environ.get("LOOKAHEAD_BACKEND"):
    use_backend(os.environ["LOOKAHEAD_BACKEND"], os.environ.get("LOOKAHEAD_SERVER_URL"))


def end_session(session: str) -> None:
    """Stop `session`'s long jobs and forget what the backend keeps for it: for a caller that makes no further
    call in it (a closed tab, an MCP call)."""
    _backend.forget(str(session))


def cancel(session: str, kind: str | None = None) -> int:
    """Stop `session`'s running long jobs of `kind` (one of LONG_JOBS; None: all) within one slice of model work
    (lookahead/scheduler.py): each raises `Cancelled` to its caller. How many there were."""
    if kind is not None:
        check_choice("kind", kind, LONG_JOBS)
    return scheduler.cancel(str(session), kind)


@answers_json
def next_token_distribution(
    text: str,
    k: int = 10,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    *,
    session: str = "default",
    model_name: str | None = None,
    messages: list[dict] | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    constraint: dict | None = None,
    caret: int | None = None,
    min_p: float = 0.0,
    sampling: Sampling | None = None,
) -> list[NextToken]:
    """The k next tokens after `text`, ranked by p_final, then p_base.

    Each entry: {"token_id", "token", "prob" (p_base: the plain softmax), "logprob",
    "p_final" (after the sampling settings, lookahead/sampling.py; 0 where a filter or the
    constraint cut the token), "kept", "valid" (whether the constraint allows it)}. `k` is how
    many entries come back; `top_k` is the filter (0 = off). `presence_penalty` and
    `frequency_penalty` are OpenAI's (logit -= presence·[count > 0] + frequency·count, counted
    over the whole context); `min_p`, after top-p, drops the tokens less likely than min_p times the likeliest
    (transformers' MinPLogitsWarper). `sampling`: a `Sampling` (lookahead/sampling.py) holding all of these at
    once, in place of the flat keywords (giving both is refused); the same holds for `lookahead`.
    `constraint`: {"type": "choice" | "regex" | "json_schema" | "grammar",
    "value", "start"}: the part of `text` from character `start` on (None: nothing written yet)
    must follow it, and so must what comes next (lookahead/constraints.py). Text ending in
    whitespace is token-healed (lookahead/healing.py): the whitespace is backed up and only
    tokens starting with it are allowed, renormalised.
    With `messages` (earlier turns of a conversation) `text` is the assistant's reply being
    written, in the model's chat template (lookahead/chat.py); the same holds for every function here.
    `caret` (a character offset into `text`; None: its end): the next tokens at the caret, exactly those after
    `text[:caret]` (a constraint's `start` must not lie after it); the session's cache of the whole text serves
    any caret without reading the text before it again.
    """
    common, after = at_caret(text, caret, session, model_name, messages, constraint)
    return _backend.distribution(DistributionRequest(
        **common,
        k=check_int("k", k, 1, MAX_TOP_K),
        sampling=Sampling.from_keywords(sampling, locals()),
        constraint=check_constraint(constraint, common["text"], common["model_name"]),
        after=after,
    ))


@answers_json
def token_probabilities(
    text: str, k: int = 5, *, session: str = "default", model_name: str | None = None,
    messages: list[dict] | None = None, partial: bool = True,
) -> TokenScores:
    """Each token of `text` as the model saw it: how likely it was given everything before it.

    Returns {"model", "context_tokens", "reused_tokens", "truncated_tokens", "tokens": [{"token_id",
    "token", "start", "end", "prob", "logprob", "rank", "entropy", "alternatives": [{"token_id",
    "token", "prob"}] (that position's top k)}]}. The tokens are the tokenizer's for `text` (special
    tokens it adds are not listed); `text[start:end]` is each one's share, so the spans rebuild the
    text exactly (a character split over several tokens belongs to the first of them; the others
    have empty spans). `prob` is the plain softmax, `rank` 1 for the model's first choice, `entropy`
    in bits. A token with nothing before it, or left out of the model's window on a text longer
    than its context, has None for all of these. Through a server that returns only its top N at each
    position, a token outside them has None for `prob`, `logprob` and `rank`, and `rank_above`: N (its rank
    is beyond, its probability below theirs; `entropy` is then a lower bound). The session keeps each token's
    scores, so after an edit or a click only the new tokens are scored (`reused_tokens` were not run again). In chat
    mode (`messages`) the tokens listed are the reply's, scored after the whole conversation.

    A long text the session has not scored yet is read in the background (as `lookahead` reads one; in-process,
    off ZeroGPU). With `partial` the call answers at once with what is scored so far: `tokens` lists only the
    first tokens, those scored (the rest are left out), and the answer has "partial": {"read_tokens",
    "context_tokens"} (how many of the context's tokens are scored, of how many) and a "notice" saying so. Asked
    again, more of them; once the text is read, the whole answer, which has no "partial". `partial=False` answers
    once the text is read (for a caller that will not ask again).
    """
    common = common_fields(text, session, model_name, messages)
    request = ScoresRequest(**common, k=check_int("k", k, 1, MAX_ALTERNATIVES))
    result = _backend.scores(request)
    while not partial and result.partial is not None:  # the read goes on in the background: asked until it is done
        time.sleep(PARTIAL_POLL_SECONDS)
        result = _backend.scores(request)
    return result


@answers_json
def attribution(
    text: str, target_token_id: int | None = None, method: str = "input_x_gradient", steps: int = 16,
    window: int = 512, *, session: str = "default", model_name: str | None = None, messages: list[dict] | None = None,
    at_token: int | None = None,
) -> Attribution:
    """Why the model expects a token after `text`: each token's share of log p(target | text).

    `target_token_id`: the next token to explain (None: the model's first choice by p_base). Methods
    (lookahead/attribution.py): "saliency" ‖∂f/∂e_i‖, "input_x_gradient" ‖e_i ⊙ ∂f/∂e_i‖,
    "integrated_gradients" (zero baseline, `steps` points, 1–64), "attention" (the last position's
    weights, averaged over layers and heads). Over the last `window` tokens (1–2048); scores sum to 1
    over the window. Returns {"target": {"token_id", "token", "prob"}, "method", "steps",
    "window_tokens", "truncated_tokens", "tokens": [{"token_id", "token", "start", "end", "score"}]}:
    the tokens and spans are token_probabilities', tokens before the window have score None. In chat
    mode the reply's tokens are listed, attributed after the conversation. `at_token` (an index into
    token_probabilities' tokens of `text`): explain the prediction at that token's place instead, from
    the tokens before it exactly as the text has them (a prefix re-tokenised could split otherwise).
    Runs in-process only.
    """
    return last(attribution_stream.typed(text, target_token_id, method, steps, window, session=session,
                                   model_name=model_name, messages=messages, at_token=at_token))


@answers_json
def attribution_stream(
    text: str, target_token_id: int | None = None, method: str = "input_x_gradient", steps: int = 16,
    window: int = 512, *, session: str = "default", model_name: str | None = None, messages: list[dict] | None = None,
    at_token: int | None = None,
) -> Iterator[AttributionProgress | Attribution]:
    """`attribution`, with progress: {"done": k, "of": n} after each of its n passes over the window
    (integrated gradients takes several), then the result."""
    common = common_fields(text, session, model_name, messages)
    if target_token_id is not None:
        check_int("target_token_id", target_token_id, 0, len(load_tokenizer(common["model_name"])) - 1)
    request = AttributionRequest(
        **common,
        target_token_id=None if target_token_id is None else int(target_token_id),
        method=check_choice("method", method, ATTRIBUTION_METHODS),
        steps=check_int("steps", steps, 1, MAX_STEPS),
        window=check_int("window", window, 1, MAX_WINDOW),
        at_token=check_at_token(at_token, common["text"], common["messages"], common["model_name"]),
    )
    yield from _backend.attribution(request)


@answers_json
def lookahead(
    text: str,
    n_branches: int = 5,
    depth: int = 3,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    branch_mode: str = "greedy",
    seed: int = 0,
    *,
    session: str = "default",
    model_name: str | None = None,
    messages: list[dict] | None = None,
    precompute: bool = False,
    partial: bool = True,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    constraint: dict | None = None,
    stop: list[str] | None = None,
    fit_tokens: int = 32,
    yielding: bool = False,
    caret: int | None = None,
    min_p: float = 0.0,
    sampling: Sampling | None = None,
) -> Suggestions:
    """The `n_branches` best next tokens after `text` (by p_final), each continued to `depth` tokens.

    Branches continue greedily (`branch_mode="greedy"`: the best token by p_final) or by
    sampling from p_final (`"sample"`, reproducible with `seed`); or, `"mass"`, the branches are the
    `n_branches` likeliest continuations of `depth` tokens by mass (the product of each token's p_final), likeliest
    first, read off a map of futures (`multiverse`): the most probable futures, which may share a first token.
    Returns {"model", "device", "context_tokens", "reused_tokens", "truncated_tokens", "partial", "healed_whitespace",
    "notice", "sampling", "branch_mode", "seed", "forced", "lead", "distribution": [...] (as from
    next_token_distribution; under a constraint followed by the REFUSED_ROWS likeliest tokens it
    refuses, "valid": False), "branches": [{"token_ids", "text", "prob", "p_final", "ends", "stop"}]}.
    A branch's "text" is exactly what to append to `text` (with healing, the backed-up
    whitespace is already part of `text`). A branch stops after the end-of-sequence token if
    it reaches one and keeps it in its token_ids (`ends`: True; "text" leaves the token's own
    text out): taking it ends the text, or in chat mode the reply. `session` keys the KV cache that later calls
    of the same writer reuse. `precompute=True` then computes, in the background, the result
    for `text` + each branch (lookahead/speculation.py), so taking one is answered at once;
    off ZeroGPU only, where a GPU call cannot outlive its request. With `partial` (in-process, off ZeroGPU), a long
    text the session's cache does not hold answers at once from its last tokens, "partial" saying so, while it
    is read in the background; the same call again answers with the progress, then exactly (lookahead/reading.py).
    `partial=False` reads it whole within the call. The penalties and `constraint`
    are as for next_token_distribution: under a constraint branches start from valid tokens and
    continue under it, and one that completes it ends there (`ends`). Where the constraint allows one token
    at a time right after the text, "forced" lists those tokens ({"token_ids", "text"}, else None): they lead
    every branch, and the branches and the distribution are those of the first real choice after them. So do the
    next tokens (up to 3) where the model all but certainly writes them (p and p_final >= 0.95: the whitespace of a
    paragraph break completed, the rest of a word begun): "lead" names them ({"token_ids", "text", "prob"}, else
    None). Every branch
    writes a different text: candidates that write the same text are one branch (the likeliest's tokens, "prob"
    and "p_final" summed) and the next candidates are continued instead; a branch ends on a whole character. A
    branch also ends where it completes one of the `stop` strings: its text is cut before the string, and "stop"
    names it.
    `caret` (a character offset into `text`; None: its end): suggestions at the caret, exactly those for
    `text[:caret]`, a branch's "text" being what to insert there. With text after the caret, each branch has
    "fit": (log p(S | P + b) - log p(S | P)) / len(S), P the context's token ids before the caret (as the branches
    read them), b the branch's token ids after them, S the first `fit_tokens` token ids of `text[caret:]`
    tokenized on its own: how much likelier (> 0) or less likely what follows becomes, per token, with the branch
    inserted. None for a branch that ends, and for every branch with nothing after the caret (or fit_tokens 0).
    `yielding=True` (in-process, off ZeroGPU): the call runs as a long job of kind "lookahead" that waits while any
    other call runs (and for what is being precomputed, whose ready answers it leaves in place) and stops at once,
    raising `Cancelled`, on `cancel(session, "lookahead")` (the page asks for a caret's fit so, after its branches,
    on a CPU that takes a while over it).
    """
    common, after = at_caret(text, caret, session, model_name, messages, constraint)
    request = LookaheadRequest(
        **common,
        n_branches=check_int("n_branches", n_branches, 1, MAX_BRANCHES),
        depth=check_int("depth", depth, 1, MAX_DEPTH),
        sampling=Sampling.from_keywords(sampling, locals()),
        branch_mode=check_choice("branch_mode", branch_mode, BRANCH_MODES),
        seed=check_int("seed", seed, 0, MAX_SEED),
        constraint=check_constraint(constraint, common["text"], common["model_name"]),
        stop=check_stop(stop),
        after=after,
        fit_tokens=check_int("fit_tokens", fit_tokens, 0, MAX_FIT_TOKENS),
    )
    return _backend.lookahead(request, precompute, partial, yielding)


@answers_json
def multiverse(
    text: str,
    depth: int = 3,
    cutoff: float = 0.05,
    *,
    caret: int | None = None,
    session: str = "default",
    model_name: str | None = None,
    messages: list[dict] | None = None,
    constraint: dict | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    min_p: float = 0.0,
    sampling: Sampling | None = None,
    yielding: bool = False,
) -> Multiverse:
    """The map of futures: every continuation of `text` of at most `depth` tokens (1–8) whose mass is at least
    `cutoff` (0 < cutoff < 1), the block multiverse of loom-style tools, grown a level per tree-masked pass over the
    session's cache (lookahead/multiverse.py).

    Returns {"model", "device", "context_tokens", "reused_tokens", "truncated_tokens", "healed_whitespace", "notice",
    "sampling", "depth", "cutoff", "top_n", "passes", "nodes": [...]}. The nodes come root first (the text itself:
    "token_id" None, "mass" 1), then depth first, each node's children by mass; each has "id" (its place in the
    list), "parent", "token_id", "token", "text" (what inserting its path at the caret writes), "prob" (p_final given
    its parent's path, after the sampling settings and the constraint), "p_base" (the plain softmax), "mass" (the
    product of "prob" along its path), "depth", "entropy" (bits, of p_final after it; None where nothing follows),
    "rest" (the mass of its children not listed), "on_text", "ends" (an end token: nothing follows it). A node's
    children are exactly the tokens that keep its mass at least `cutoff`, so the map lists at most depth/cutoff nodes
    (MAX_MAP_NODES at most: a smaller cutoff is refused). `caret` (a character offset into `text`): the map at the
    caret, for `text[:caret]`, and the writer's own next `depth` tokens after it (the text after the caret tokenized
    on its own) are listed whatever their mass, with "on_text" true (as the root, the text itself, always is).
    Healing, `constraint`, `messages` and the sampling settings (flat keywords or one `sampling`) are as for
    `lookahead`. "passes": the model passes the tree took (a warm text: about `depth`). "top_n" is None where every
    mass is exact; through a server that lists each node's top N tokens only it is N, and a child outside a node's
    top N is missing from the map though its mass may reach the cutoff (its mass is in "rest"; "entropy" is then
    None).
    `yielding=True` (in-process, off ZeroGPU): the call runs as a long job of kind "map" that waits while any other
    call runs (and for what is being precomputed) and stops, raising `Cancelled`, once the session asks `lookahead`
    for another text, or on `cancel(session, "map")` (the page asks a map after every answer; the writer's next click
    makes it stale).
    """
    depth = check_int("depth", depth, 1, MAX_MAP_DEPTH)
    common, after = at_caret(text, caret, session, model_name, messages, constraint)
    return _backend.multiverse(MultiverseRequest(
        **common,
        depth=depth,
        cutoff=check_cutoff(cutoff, depth),
        sampling=Sampling.from_keywords(sampling, locals()),
        constraint=check_constraint(constraint, common["text"], common["model_name"]),
        after=after,
    ), yielding)


@answers_json
def compare(
    text: str,
    models: list[str],
    k: int = 10,
    n_branches: int = 5,
    depth: int = 3,
    *,
    session: str = "default",
    messages: list[dict] | None = None,
    caret: int | None = None,
    constraint: dict | None = None,
    stop: list[str] | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    min_p: float = 0.0,
    sampling: Sampling | None = None,
) -> ModelComparison:
    """Two models on one text: where they agree and where they part, token by token, and what each would write next.

    `models`: the two models' names, a then b. Returns {"models", "per" ("token", or "word" where the two
    tokenizers cut the text differently), "tokens": one entry per token of `text` as token_probabilities lists
    them, with "logprob" and "rank" as [a, b] and "js": the Jensen–Shannon divergence in bits between the two
    models' whole next-token distributions before the token (None for the first; "tokens" is None per word), and
    "top": what each model would have written there instead (its first choice), "words" (per word only: {"start",
    "end", "text", "logprob": [a, b]}, a word ending where whitespace follows and both models' tokens end, its
    log-probability the sum of its tokens', which no tokenizer changes), "next": {"distributions": [a's, b's] (the
    k next tokens at the caret, as from next_token_distribution), "js" (their divergence, over the models' plain
    distributions; None per word)}, "branches": [a's, b's] (as from `lookahead`, at the caret; none with
    `n_branches=0`, for a comparison of the text alone)}. `caret`, `constraint`, `stop`, `messages` and the
    sampling settings (as flat keywords or one `sampling`) are as for `lookahead`; the tokens compared are always
    the whole text's.
    "js_over" is None in-process (the whole vocabulary); on the vLLM backend, each model asked of its own server
    (comma-separated URLs), it is N: each "js" is over both models' top N log-probabilities only, a lower bound.
    """
    names = check_models(models)
    common, after = at_caret(text, caret, session, names[0], messages, constraint)
    for name in names[1:]:
        check_messages(messages, name)
    checked = [check_constraint(constraint, common["text"], name) for name in names][0]
    return _backend.compare(CompareRequest(
        **{**common, "model_name": None},
        models=names,
        k=check_int("k", k, 1, MAX_TOP_K),
        n_branches=check_int("n_branches", n_branches, 0, MAX_BRANCHES),
        depth=check_int("depth", depth, 1, MAX_DEPTH),
        sampling=Sampling.from_keywords(sampling, locals()),
        constraint=checked,
        stop=check_stop(stop),
        after=after,
    ))


@answers_json
def generate_stream(
    text: str, max_new_tokens: int = 64, method: str = "lookahead", *, session: str = "default",
    model_name: str | None = None, messages: list[dict] | None = None, constraint: dict | None = None,
    stop: list[str] | None = None, caret: int | None = None,
) -> Iterator[Continuation]:
    """`generate`'s result after every forward pass, growing, for streaming into the UI."""
    common, _ = at_caret(text, caret, session, model_name, messages, constraint)
    request = GenerateRequest(
        **common,
        max_new_tokens=check_int("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS),
        method=check_choice("method", method, GENERATION_METHODS),
        constraint=check_constraint(constraint, common["text"], common["model_name"]),
        stop=check_stop(stop),
    )
    if on_zero_gpu():
        # A task that outlives its requested duration may be aborted, losing everything: stop a little before it
        # instead, and say so.
        request = replace(request, time_limit=0.9 * gpu_seconds(request))
    yield from _backend.generate(request)


@answers_json
def generate(
    text: str, max_new_tokens: int = 64, method: str = "lookahead", *, session: str = "default",
    model_name: str | None = None, messages: list[dict] | None = None, constraint: dict | None = None,
    stop: list[str] | None = None, caret: int | None = None,
) -> Continuation:
    """Continue `text` greedily by up to `max_new_tokens` tokens (stopping after EOS).

    method "greedy" is the plain cached loop; "lookahead" returns exactly the same tokens
    in fewer forward passes (lookahead/decoding.py). Returns {"text", "token_ids",
    "token_texts" (each token's piece of "text"), "forward_passes" (the prompt's pass
    included, which gives the first token), "tokens_per_pass", "seconds", "accepted_per_pass",
    "draft_source_per_token" ("step", "ngram" or "recycled"), "method", "model",
    "truncated_tokens", "stopped_for_time" (on ZeroGPU: stopped early to stay inside the
    GPU time it asked for), "stop" (the stop string that ended it, or None)}. `session` is the
    caller's, as for `lookahead` (a vLLM server keeps its cache by it). Under a `constraint` (as for
    lookahead) each token is the best the constraint allows, and lookahead decoding stays exact.
    `stop`: the continuation ends where it completes one of these strings, cut before it ("text"
    and "token_texts"; "token_ids" run through the token that completed it).
    `caret` (a character offset into `text`; None: its end): continue `text[:caret]`, "text" being what to insert
    at the caret (the text after it is not read).
    """
    return last(generate_stream.typed(text, max_new_tokens, method, session=session, model_name=model_name,
                                messages=messages, constraint=constraint, stop=stop, caret=caret))
