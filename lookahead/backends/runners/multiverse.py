"""The map of futures at the text's end or its caret: the text read (its trailing whitespace healed, under its
constraint), the session's cache reused, the tree grown (lookahead/multiverse.py) and the cache put back with the
likeliest paths' KV beside it, so that a click inserting one reads nothing again."""

from __future__ import annotations

import torch

from lookahead.backends.in_process_stores import Stores
from lookahead.backends.runners.branches import prompt_of
from lookahead.context import writer_ids
from lookahead.models import eos_ids, load_model
from lookahead.multiverse import map_futures
from lookahead.outputs import Multiverse
from lookahead.requests import MultiverseRequest
from lookahead.results import context_info, future_nodes


def run_multiverse(stores: Stores, request: MultiverseRequest) -> Multiverse:
    """Every continuation at least `request.cutoff` likely, and at a caret the writer's own next tokens."""
    model, tokenizer = load_model(request.model_name)
    prompt = prompt_of(request, model, tokenizer, stores.matchers, force=False)
    store = stores.prefix_caches
    earlier = store.continuations(request.key, prompt.ids)
    if request.after is None:
        (cache, reused, known_scores), kept = store.take(request.key, prompt.ids), None
    else:  # at a caret: the text after it may stay in the cache, masked out
        (cache, reused, known_scores), kept = store.take_before(request.key, prompt.ids)
    stops = frozenset(eos_ids(model.generation_config))
    try:
        futures = map_futures(
            model, torch.tensor([prompt.ids], device=model.device), cache, request.depth, request.cutoff,
            request.sampling, stops, prompt.allowed, prompt.guide, writer_ids(request, tokenizer, prompt.healed),
            hidden=0 if kept is None else len(kept.ids) - reused, known_scores=known_scores,
        )
    except BaseException:  # cancelled: the whole text's cache goes back as it was
        if kept is not None:
            cache.keep(len(kept.ids), [])
            store.put(request.key, *kept)
        raise
    if kept is None:
        store.put(request.key, prompt.ids, futures.cache, futures.paths + earlier, futures.scores)
    else:
        store.put(request.key, *kept)
    info = context_info(request.model, str(model.device), len(prompt.ids), reused, prompt.dropped, prompt.healed)
    return Multiverse(**info, sampling=request.sampling, depth=request.depth, cutoff=request.cutoff, top_n=None,
                      passes=futures.passes, nodes=future_nodes(futures.nodes, tokenizer, prompt.healed, stops))
