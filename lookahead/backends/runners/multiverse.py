"""The map of futures at the text's end or its caret: the text read (its trailing whitespace healed, under its
constraint), a copy of the session's cache reused, the tree grown (lookahead/multiverse.py) and the likeliest paths'
KV kept beside the session's cache, so that a click inserting one reads nothing again."""

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
    # Over a copy of the session's cache: a click's ready answer extends the cache itself while the map is grown.
    (cache, reused, known_scores), hidden = store.lend(request.key, prompt.ids, before_caret=request.after is not None)
    stops = frozenset(eos_ids(model.generation_config))
    futures = map_futures(
        model, torch.tensor([prompt.ids], device=model.device), cache, request.depth, request.cutoff,
        request.sampling, stops, prompt.allowed, prompt.guide, writer_ids(request, tokenizer, prompt.healed),
        hidden=hidden, known_scores=known_scores,
    )
    if not hidden:
        store.keep_beside(request.key, prompt.ids, futures.cache, futures.paths)
    info = context_info(request.model, str(model.device), len(prompt.ids), reused, prompt.dropped, prompt.healed)
    return Multiverse(**info, sampling=request.sampling, depth=request.depth, cutoff=request.cutoff, top_n=None,
                      passes=futures.passes, nodes=future_nodes(futures.nodes, tokenizer, prompt.healed, stops))
