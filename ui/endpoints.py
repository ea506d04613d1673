"""The app's API: the public functions as web endpoints, for gradio_client (Python, JavaScript) and as MCP tools.

Each endpoint takes the flat arguments its callers send (positional callers keep working: new parameters come
last) and answers the public function's result; the sampling settings' descriptions come from their knobs
(lookahead/sampling.py), written once. An MCP call runs in a session of its own (`caller_session`) and is answered
as strict JSON text. docs/api.md documents them in full.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import math
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio
import gradio as gr

import custom_llm_inference as inference
from lookahead.sampling import Sampling, knobs
from ui.errors import handled
from ui.wiring import EXPLANATIONS_AT_ONCE, session_key

# Gradio's MCP server sends every tool call through one internal gradio_client, which marks its requests so.
MCP_CLIENT_HEADER = ("x-gradio-user", "mcp")


def from_mcp(request: gr.Request | None) -> bool:
    return request is not None and request.headers.get(MCP_CLIENT_HEADER[0]) == MCP_CLIENT_HEADER[1]


# The sessions the endpoint call running in this context works in (`cancellable` reads them; `caller_session` adds).
CALL_SESSIONS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("call_sessions", default=None)


@contextmanager
def caller_session(request: gr.Request | None) -> Iterator[str]:
    """The session an API call runs in.

    A browser or gradio_client caller has its own (gradio's session_hash), kept between its calls. Every MCP call
    arrives with the MCP server's one session_hash, which would give all agents one KV cache (and on the vLLM
    backend one cache salt): one could probe what another wrote. So an MCP call runs in a session of its own,
    shared with nothing, and forgotten when the call ends. Claiming the MCP header only buys that isolation.
    """
    sessions = CALL_SESSIONS.get()
    if not from_mcp(request):
        if sessions is not None:
            sessions.append(session_key(request))
        yield session_key(request)
        return
    session = f"mcp-{secrets.token_hex(16)}"
    if sessions is not None:
        sessions.append(session)
    try:
        yield session
    finally:
        inference.end_session(session)


def reply(result: dict | list, request: gr.Request | None) -> dict | list | str:
    """A result as its caller reads it: JSON text for an MCP client (gradio's MCP server sends str(value), a
    Python repr); the plain value for everyone else, whom gradio sends JSON anyway."""
    return json.dumps(strict_json(result), ensure_ascii=False, allow_nan=False) if from_mcp(request) else result


def strict_json(value: object) -> object:
    """`value` with infinities and NaN as None: JSON has no such numbers (a token the vLLM server did not rank
    has logprob -inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def api_lookahead(
    text: str, n_branches: int = 5, depth: int = 3, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    repetition_penalty: float = 1.0, branch_mode: str = "greedy", seed: int = 0, messages: list[dict] | None = None,
    model_name: str | None = None, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    constraint: dict | None = None, stop: list[str] | None = None, fit_tokens: int = 32, caret: int | None = None,
    min_p: float = 0.0, request: gr.Request = None,
) -> dict:
    """Where a language model could go next after a text: its likeliest next tokens, each continued a few tokens.

    Args:
        text: The text so far; the branches continue it. In chat mode, the assistant's reply so far (may be empty).
        n_branches: How many branches (1-20); branch i starts with the i-th likeliest next token by p_final.
        depth: Tokens in each branch (1-16).
        branch_mode: "greedy" (likeliest next tokens), "sample" (drawn from p_final) or "mass" (likeliest paths).
        seed: Random seed for branch_mode "sample" (an integer, 0 or more); the same seed gives the same branches.
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        stop: Up to 8 stop strings; a branch ends where it completes one, its text cut before it.
        fit_tokens: How many tokens after the caret each branch's fit is measured on (0-256; 0 is off).
        caret: Suggest at this character offset into text instead of its end (null: the end); branches insert there.

    Returns:
        An object: "branches" (each "text" to insert, "prob", "p_final", "token_ids", "ends", "stop", "fit": how
        much likelier per token the text after the caret becomes with the branch inserted, or null),
        "distribution" (the next tokens: "token", "prob", "p_final", "kept", "valid"), token counts and settings.
    """
    with caller_session(request) as session:
        return reply(inference.lookahead(
            text, n_branches, depth, branch_mode=branch_mode, seed=seed,
            sampling=Sampling.from_keywords(None, locals()), session=session,
            partial=not from_mcp(request),  # an MCP call's session ends with it: no read to follow
            messages=messages, model_name=inference.offered_model_name(model_name), constraint=constraint, stop=stop,
            fit_tokens=fit_tokens, caret=caret,
        ), request)


def api_token_probabilities(
    text: str, k: int = 5, messages: list[dict] | None = None, model_name: str | None = None,
    request: gr.Request = None,
) -> dict:
    """How likely a language model found each token of a text, given everything before it (GLTR-style).

    Args:
        text: The text to score. In chat mode, the assistant's reply, scored after the conversation.
        k: How many of the model's own top choices to list at each token (1-20).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.

    Returns:
        An object: "tokens", each with "token", "start"/"end" (its characters in text), "prob", "rank" (1 is the
        model's first choice), "entropy" in bits and "alternatives" (the top k there); and token counts. Through
        a server that returns only its top N, a token outside them has "rank_above": N instead of a probability.
        While a long text is read, only its tokens scored so far, with "partial" ("read_tokens" of "context_tokens")
        and a "notice": ask again for the rest (an MCP call answers once the whole text is scored).
    """
    with caller_session(request) as session:
        return reply(inference.token_probabilities(
            text, k, session=session, messages=messages, model_name=inference.offered_model_name(model_name),
            partial=not from_mcp(request),  # an MCP call's session ends with it: no read to follow
        ), request)


def api_generate(
    text: str, max_new_tokens: int = 64, method: str = "lookahead", messages: list[dict] | None = None,
    model_name: str | None = None, constraint: dict | None = None, stop: list[str] | None = None,
    caret: int | None = None, request: gr.Request = None,
) -> Iterator[dict]:
    """Continue a text greedily (the model's likeliest token each step), streaming the growing result.

    Args:
        text: The text to continue. In chat mode, the assistant's reply so far (may be empty).
        max_new_tokens: The most tokens to add (1-1024); it stops earlier at the end-of-sequence token or a stop string.
        method: "lookahead" (the same tokens as "greedy" in fewer forward passes) or "greedy" (one token per pass).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        stop: Up to 8 stop strings; the continuation ends where it completes one, cut before it.
        caret: Continue the text before this character offset instead of the whole text (null: the end).

    Returns:
        An object: "text" (the continuation alone), "token_ids", "forward_passes", "tokens_per_pass", "seconds",
        "stop" (the stop string that ended it, or null).
    """
    with caller_session(request) as session:
        for result in inference.generate_stream(text, max_new_tokens, method, session=session, messages=messages,
                                          model_name=inference.offered_model_name(model_name), constraint=constraint,
                                          stop=stop, caret=caret):
            yield reply(result, request)


def api_next_token_distribution(
    text: str, k: int = 10, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    repetition_penalty: float = 1.0, messages: list[dict] | None = None, model_name: str | None = None,
    presence_penalty: float = 0.0, frequency_penalty: float = 0.0, constraint: dict | None = None,
    caret: int | None = None, min_p: float = 0.0, request: gr.Request = None,
) -> list:
    """The next-token distribution after a text: the k likeliest tokens, before and after the sampling settings.

    Args:
        text: The text so far. In chat mode, the assistant's reply so far (may be empty).
        k: How many tokens to list (1-200).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        caret: The next tokens at this character offset into text instead of its end (null: the end).

    Returns:
        A list of tokens, likeliest first by p_final: "token", "token_id", "prob" (the plain softmax), "logprob",
        "p_final" (after the settings), "kept" (not cut by top_k/top_p), "valid" (allowed by the constraint).
    """
    with caller_session(request) as session:
        return reply(inference.next_token_distribution(
            text, k, sampling=Sampling.from_keywords(None, locals()), session=session, messages=messages,
            model_name=inference.offered_model_name(model_name), constraint=constraint, caret=caret,
        ), request)


def api_attribution(
    text: str, target_token_id: int | None = None, method: str = "input_x_gradient", steps: int = 16,
    window: int = 512, messages: list[dict] | None = None, model_name: str | None = None,
    at_token: int | None = None, request: gr.Request = None,
) -> dict:
    """Why a language model expects a next token after a text: each earlier token's share in that prediction.

    Args:
        text: The text the prediction follows. In chat mode, the assistant's reply so far.
        target_token_id: The token id to explain; empty for the model's first choice.
        method: "input_x_gradient", "saliency", "integrated_gradients" (slow: steps passes) or "attention".
        steps: Integrated gradients' points between a zero baseline and the input (1-64).
        window: How many of the last tokens to attribute over (1-2048).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        at_token: Explain the prediction at this token of the text (an index into token_probabilities' tokens).

    Returns:
        An object: "target" ("token", "token_id", "prob"), "method", "tokens" (each "token", "start"/"end" and
        "score": its share, the window's scores summing to 1; null before the window).
    """
    with caller_session(request) as session:
        return reply(inference.attribution(text, target_token_id, method, steps, window, session=session,
                                     messages=messages, model_name=inference.offered_model_name(model_name),
                                     at_token=at_token), request)


def api_compare(
    text: str, models: list[str], k: int = 10, n_branches: int = 5, depth: int = 3,
    messages: list[dict] | None = None, caret: int | None = None, constraint: dict | None = None,
    stop: list[str] | None = None, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    repetition_penalty: float = 1.0, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    min_p: float = 0.0, request: gr.Request = None,
) -> dict:
    """Where two language models agree and where they part on a text, token by token, and what each would write next.

    Args:
        text: The text to compare the models on. In chat mode, the assistant's reply so far.
        models: The two models to compare, [a, b]: each one the app offers (empty for the default).
        k: How many next tokens to list for each model at the caret (1-200).
        n_branches: How many branches for each model (1-20).
        depth: Tokens in each branch (1-16).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        caret: The suggestions at this character offset into text (null: the end); the whole text is compared.
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        stop: Up to 8 stop strings; a branch ends where it completes one, its text cut before it.

    Returns:
        An object: "models"; "per" ("token", or "word" where the tokenizers differ); "tokens" (each "token",
        "start"/"end", "logprob" and "rank" as [a, b], "js": the Jensen-Shannon divergence in bits between the two
        models' next-token distributions before it); "words" (per word); "next" ("distributions" [a, b], "js");
        "branches" [a, b].
    """
    with caller_session(request) as session:
        return reply(inference.compare(
            text, offered_models(models), k, n_branches, depth, session=session, messages=messages, caret=caret,
            constraint=constraint, stop=stop, sampling=Sampling.from_keywords(None, locals()),
        ), request)


def api_multiverse(
    text: str, depth: int = 3, cutoff: float = 0.05, messages: list[dict] | None = None,
    model_name: str | None = None, constraint: dict | None = None, caret: int | None = None,
    temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0,
    presence_penalty: float = 0.0, frequency_penalty: float = 0.0, min_p: float = 0.0, request: gr.Request = None,
) -> dict:
    """A map of every future a language model could write next: each continuation of a few tokens above a cutoff.

    Args:
        text: The text so far; the futures continue it. In chat mode, the assistant's reply so far (may be empty).
        depth: How many tokens ahead the map reaches (1-8).
        cutoff: The least mass a future listed has (its tokens' probabilities multiplied), 0-1; depth/cutoff <= 2000.
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        caret: Map the futures at this character offset into text (null: its end); the text's own next tokens too.

    Returns:
        An object: "nodes", the root first ("token_id" null, "mass" 1), then depth first, children by mass; each
        node has "id", "parent", "token", "token_id", "text" (what inserting its path writes), "prob" (given its
        parent), "p_base", "mass", "depth", "entropy" (bits), "rest" (its children's mass not listed), "on_text"
        (the writer's own next tokens), "ends"; and "depth", "cutoff", "passes", "top_n" (null: masses exact).
    """
    with caller_session(request) as session:
        return reply(inference.multiverse(
            text, depth, cutoff, caret=caret, session=session, messages=messages,
            model_name=inference.offered_model_name(model_name), constraint=constraint,
            sampling=Sampling.from_keywords(None, locals()),
        ), request)


def offered_models(models: object) -> object:
    """The models a visitor names for `compare`, if this app offers them ("" or None: the default), as
    `offered_model_name` does for one; anything but a list is left for compare's own check."""
    if not isinstance(models, (list, tuple)):
        return models
    offered = inference.available_models()
    unknown = [name for name in models if name not in (None, "", *offered)]
    if unknown:
        raise ValueError(f"models must each be one of {offered} (or empty for the default), got {unknown[0]!r}")
    return [name or inference.default_model_name() for name in models]


def described(fn: Callable) -> Callable:
    """`fn` with an "Args:" line for each sampling setting it takes, from the setting's knob, in the signature's
    order: gradio takes each MCP tool parameter's description from its one line there (a wrapped line would be
    lost) and the text before "Args:" as the tool's."""
    doc = inspect.cleandoc(fn.__doc__)
    intro, rest = doc.split("\nArgs:\n")
    args, returns = rest.split("\n\nReturns:\n")
    lines = {match[1]: match[0] for match in re.finditer(r"^ {4}(\w+): .*$", args, re.MULTILINE)}
    lines |= {name: f"    {name}: {setting.description}" for name, setting in knobs().items()}
    ordered = [lines[name] for name in inspect.signature(fn).parameters if name in lines]
    fn.__doc__ = f"{intro}\nArgs:\n" + "\n".join(ordered) + f"\n\nReturns:\n{returns}"
    return fn


def cancellable(fn: Callable, kinds: tuple[str, ...]) -> Callable:
    """`fn` (an endpoint: a function, or a generator function that streams) as a coroutine (an async generator) whose
    cancellation stops its model work: the long jobs of `kinds` it runs in its caller's session end within a slice
    (lookahead/scheduler.py). gradio cancels an event's task when its caller cancels (gradio_client's `cancel()`),
    but what it runs in a worker thread would work on to its end."""

    @contextmanager
    def stopping_when_cancelled(sessions: list[str]) -> Iterator[None]:
        token = CALL_SESSIONS.set(sessions)  # the worker threads run in copies of this context
        try:
            yield
        except anyio.get_cancelled_exc_class():
            for session in sessions:
                for kind in kinds:
                    inference.cancel(session, kind)
            raise
        finally:
            CALL_SESSIONS.reset(token)

    def in_thread(work: Callable) -> Awaitable:
        return anyio.to_thread.run_sync(work, abandon_on_cancel=True)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        async def stream(*args, **kwargs):
            sessions: list[str] = []
            with stopping_when_cancelled(sessions):
                answers = await in_thread(lambda: fn(*args, **kwargs))
                done = object()
                while (answer := await in_thread(lambda: next(answers, done))) is not done:
                    yield answer

        return stream

    @functools.wraps(fn)
    async def call(*args, **kwargs):
        with stopping_when_cancelled([]):
            return await in_thread(functools.partial(fn, *args, **kwargs))

    return call


# Each endpoint, the concurrency group it runs in ("generate" for continuations, "explain" for attributions) and the
# long jobs its work runs as, which a caller's cancel() stops.
ENDPOINTS = [(api_lookahead, "interact", ("lookahead", "read")), (api_generate, "generate", ("continuation",)),
             (api_next_token_distribution, "interact", ("read",)), (api_token_probabilities, "interact", ("read",)),
             (api_attribution, "explain", ("attribution",)), (api_compare, "interact", ("lookahead", "read")),
             (api_multiverse, "interact", ("map",))]


def serve_endpoints() -> None:
    """Register the endpoints (and so the MCP tools) on the Blocks being built, named as the public functions."""
    for api, group, kinds in ENDPOINTS:
        endpoint = cancellable(handled(described(api)), kinds)
        endpoint.__name__ = api.__name__.removeprefix("api_")  # the MCP tool's name: the endpoint's
        limit = {"concurrency_limit": EXPLANATIONS_AT_ONCE} if group == "explain" else {}
        gr.api(endpoint, api_name=endpoint.__name__, concurrency_id=group, **limit)
