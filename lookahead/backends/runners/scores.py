"""Every token's probability and likeliest alternatives (the heatmap): the scores the session's cache holds are
reused, the rest scored and kept with it, and the session's last listing lends its entries to the next."""

from __future__ import annotations

import torch

from lookahead.backends.in_process_stores import Stores
from lookahead.context import read_scored_text
from lookahead.models import context_limit, load_model
from lookahead.outputs import TokenScores
from lookahead.requests import ScoresRequest
from lookahead.results import scores_result
from lookahead.scheduler import Cancelled
from lookahead.scoring import extend_and_score


def run_scores(stores: Stores, request: ScoresRequest, stored_only: bool = False) -> TokenScores | None:
    """Every token's listing: from the scores the session's cache holds, the rest scored and kept with it (None with
    `stored_only` where it does not hold them all: no model work then)."""
    model, tokenizer = load_model(request.model_name)
    scored = read_scored_text(request, tokenizer, context_limit(model))
    key, ids = request.key, scored.ids
    prefix_caches, listings = stores.prefix_caches, stores.listings
    rows, reused = prefix_caches.scores(key, ids), len(ids)
    if rows is None and stored_only:
        return None
    if rows is None:
        cache, reused, known = prefix_caches.take(key, ids, scored=True)
        try:
            _, rows = extend_and_score(model, torch.tensor([ids], device=model.device), cache, known)
        except Cancelled:  # the session's cache goes back as it was taken, nothing of the cut pass kept
            if reused:
                cache.keep(reused, [])  # each layer cut on its own: one cancelled mid-pass holds more entries
                prefix_caches.put(key, ids[:reused], cache, (), known.head(reused))
            raise
        prefix_caches.put(key, ids, cache, (), rows)
    all_ids = scored.encoding["input_ids"]
    result = scores_result(request.model, scored, rows, reused, request.k, tokenizer, len(request.text),
                           listings.earlier(key, all_ids, scored.dropped, request.k))
    listings.keep(key, all_ids, scored.dropped, request.k, result.tokens)
    return result
