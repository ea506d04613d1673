"""Two models on one text (lookahead/comparison.py): each one's listing, distribution and branches, and the
divergence between them, from one joint pass over each model's own session cache; the divergences kept per session."""

from __future__ import annotations

import functools
from dataclasses import replace

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lookahead.backends.in_process_stores import Stores
from lookahead.backends.runners.branches import run_distribution, run_lookahead
from lookahead.backends.runners.scores import run_scores
from lookahead.comparison import (
    Comparison,
    at_tokens,
    compare_models,
    comparison_result,
    js_bits,
    model_requests,
    read_alike,
)
from lookahead.context import read_scored_text
from lookahead.models import context_limit, load_model
from lookahead.outputs import ModelComparison
from lookahead.requests import CompareRequest, ScoresRequest


def run_comparison(stores: Stores, request: CompareRequest) -> ModelComparison:
    """Both models on the text: each one's listing of its tokens, the divergence before each token and at the
    caret where they read the same token ids (else per word), and each one's suggestions at the caret.

    The joint pass reads the whole text, so each token is read once per model: each listing comes from the rows kept
    with the caches, and each distribution from the logits they keep after the last token, with no model work (where
    both models read the text in the same window, at its end, with neither healing nor a constraint)."""
    asked = [model_requests(request, name) for name in request.models]
    keys = [scores.key for scores, _, _ in asked]
    (model_a, tokenizer), (model_b, tokenizer_b) = (load_model(name) for name in request.models)
    models, vocab = (model_a, model_b), len(tokenizer)
    alike = read_alike((tokenizer, tokenizer_b), request)  # else the models cut the text into other tokens: per word
    if alike:
        limit = min(context_limit(model_a), context_limit(model_b))
        scored = read_scored_text(asked[0][0], tokenizer, limit)
        kept = _compared(stores, request, keys, models, scored.ids, vocab)
    distributions = [run_distribution(stores, next_tokens) for _, next_tokens, _ in asked]
    listings = tuple(run_scores(stores, scores).tokens for scores, _, _ in asked)
    branches = [run_lookahead(stores, branches).branches if request.n_branches else [] for _, _, branches in asked]
    compared = None
    if alike:
        whole = _completed(stores, request, keys, models, kept, scored.ids, vocab)
        places = at_tokens(scored, len(request.whole), whole.js, whole.top, functools.partial(_spelled, tokenizer))
        at_caret = whole.next_js if request.after is None else _js_at_caret(request, whole, models, tokenizer, limit)
        compared = *places, at_caret
    return comparison_result(request, listings, distributions, branches, None, compared)


def _compared(stores: Stores, request: CompareRequest, keys: list[tuple[str, str]],
              models: tuple[PreTrainedModel, PreTrainedModel], ids: list[int], vocab: int) -> Comparison:
    """Both models over `ids` in one joint pass over the session's caches (each reads only what they lack, and the
    divergences the session's last comparison knows are kept), their caches and rows handed back to the store."""
    key = (request.models, request.session)
    taken = [stores.prefix_caches.take(model_key, ids, scored=True) for model_key in keys]
    compared = compare_models(models, torch.tensor([ids]), vocab, stores.comparisons.pop(key), taken)
    for model_key, cache, rows in zip(keys, compared.caches, compared.rows):
        stores.prefix_caches.put(model_key, ids, cache, (), rows)
    compared = replace(compared, caches=None)
    stores.comparisons.put(key, compared)
    return compared


def _completed(stores: Stores, request: CompareRequest, keys: list[tuple[str, str]],
               models: tuple[PreTrainedModel, PreTrainedModel], compared: Comparison, ids: list[int],
               vocab: int) -> Comparison:
    """The comparison of the whole text `ids`, kept for the session: `compared` (of all its tokens but the last)
    with the last token's divergence and the logits after it, which the models' own passes over the last token
    kept with their caches (else one more joint step)."""
    if len(compared.ids) == len(ids):
        return compared
    rows = [stores.prefix_caches.scores(key, ids) for key in keys]
    if not all(r is not None and r.frontier is not None for r in rows):
        return _compared(stores, request, keys, models, ids, vocab)
    next_logprobs = torch.stack([torch.log_softmax(r.frontier.float(), -1)[:vocab] for r in rows])
    whole = Comparison(ids, (rows[0], rows[1]), torch.cat([compared.js, torch.tensor([compared.next_js])]),
                       next_logprobs, float(js_bits(*next_logprobs)), None)
    stores.comparisons.put((request.models, request.session), whole)
    return whole


def _js_at_caret(request: CompareRequest, compared: Comparison, models: tuple[PreTrainedModel, PreTrainedModel],
                 tokenizer: PreTrainedTokenizerBase, limit: int) -> float:
    """The divergence before the caret's next token: the whole text's, where the text before the caret is a run of
    its tokens (the caret between two of them), else from a reading of that text alone."""
    before = read_scored_text(ScoresRequest(text=request.text, session=request.session, messages=request.messages),
                              tokenizer, limit).ids
    if compared.ids[: len(before)] == before and len(before) < len(compared.ids):
        return float(compared.js[len(before)])
    return compare_models(models, torch.tensor([before]), len(tokenizer)).next_js


@functools.cache
def _spelled(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    return tokenizer.decode([token_id])
