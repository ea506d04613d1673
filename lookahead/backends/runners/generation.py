"""A continuation, pass by pass (lookahead/decoding.py), as a long job: interactive work goes first, and a newer
continuation of the session cancels it."""

from __future__ import annotations

from collections.abc import Iterator

from lookahead.backends.in_process_stores import Stores
from lookahead.chat import as_dicts
from lookahead.decoding import greedy_passes, lookahead_passes
from lookahead.models import context_limit, eos_ids, load_model, model_pass_costs, stop_tokens
from lookahead.outputs import Continuation
from lookahead.requests import GenerateRequest
from lookahead.results import GrowingContinuation
from lookahead.scheduler import scheduler


def run_generation(stores: Stores, request: GenerateRequest) -> Iterator[Continuation]:
    """The growing continuation after every pass; stops at EOS, a stop string, `max_new_tokens` or `time_limit` seconds.

    In-process a continuation keeps no KV cache, so the session only keys the constraint's matchers."""
    model, tokenizer = load_model(request.model_name)
    vocab_size = model.config.get_text_config().vocab_size
    ids, guide = stores.matchers.context_and_guide(request.key, request.constraint, tokenizer, request.text,
                                                   request.text, as_dicts(request.messages), stop_tokens(request.model),
                                                   vocab_size, model.device)
    max_new_tokens = min(request.max_new_tokens, context_limit(model) - 1)  # keep a token of the text to continue
    dropped = max(0, len(ids) - (context_limit(model) - max_new_tokens))
    continuation = GrowingContinuation(tokenizer, request.method, request.model, dropped, request.stop)
    stops = eos_ids(model.generation_config)
    if request.method == "lookahead":
        costs = model_pass_costs(request.model_name)
        steps = lookahead_passes(model, ids[dropped:], max_new_tokens, stops, costs, guide)
    else:
        steps = greedy_passes(model, ids[dropped:], max_new_tokens, stops, guide)
    # interactive work first; a newer continuation of the session cancels this one
    steps = scheduler.steps(scheduler.start(request.session, "continuation", request), steps)
    yield from continuation.follow(((step.tokens, step.sources) for step in steps), request.time_limit)
