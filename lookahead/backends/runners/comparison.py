"""Two models on one text (lookahead/comparison.py): each one's listing, distribution and branches, and the
divergence between them, from one joint pass over each model's own session cache; the divergences kept per session."""

from __future__ import annotations

from dataclasses import replace

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lookahead.backends.in_process_stores import Stores
from lookahead.backends.runners.branches import run_distribution, run_lookahead
from lookahead.backends.runners.scores import run_scores
from lookahead.comparison import (
    Comparison,
    compare_models,
    compared_tokens,
    js_bits,
    model_requests,
    per_token,
    per_word,
    read_alike,
)
from lookahead.context import ScoredText, read_scored_text
from lookahead.models import context_limit, load_model
from lookahead.outputs import ModelComparison
from lookahead.requests import CompareRequest, ScoresRequest
from lookahead.scoring import Scores


def run_comparison(stores: Stores, request: CompareRequest) -> ModelComparison:
    """Both models on the text: each one's listing of its tokens, the divergence before each token and at the
    caret where they read the same token ids (else per word), and each one's suggestions at the caret.

    The joint pass reads the whole text, so each token is read once per model: the tokens compared come from the
    rows it keeps with the caches, and each distribution from the logits they keep after the last token, with no
    model work (where both models read the text in the same window, at its end, with neither healing nor a
    constraint)."""
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
    branches = [run_lookahead(stores, branches).branches if request.n_branches else [] for _, _, branches in asked]
    if not alike:
        listings = tuple(run_scores(stores, scores).tokens for scores, _, _ in asked)
        return per_word(request, listings, distributions, branches, None)
    whole = _completed(stores, request, keys, models, kept, scored.ids, vocab)
    own = [_own_rows(stores, scores, model, loaded, scored, rows)
           for (scores, _, _), model, loaded, rows in zip(asked, models, (tokenizer, tokenizer_b), whole.rows)]
    tokens = compared_tokens(scored, whole.js, whole.top, own, tokenizer, len(request.whole))
    at_caret = whole.next_js if request.after is None else _js_at_caret(request, whole, models, tokenizer, limit)
    return per_token(request, tokens, at_caret, distributions, branches, None)


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


def _own_rows(stores: Stores, request: ScoresRequest, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
              window: ScoredText, rows: Scores) -> tuple[ScoredText, Scores]:
    """A model's rows over the window its own context holds, as its listing reads them: the joint pass's `rows`
    over `window` where that is its window (the text fits both models' contexts), else its own reading."""
    read = read_scored_text(request, tokenizer, context_limit(model))
    if read.dropped == window.dropped:
        return window, rows
    run_scores(stores, request)
    return read, stores.prefix_caches.scores(request.key, read.ids)


def _js_at_caret(request: CompareRequest, compared: Comparison, models: tuple[PreTrainedModel, PreTrainedModel],
                 tokenizer: PreTrainedTokenizerBase, limit: int) -> float:
    """The divergence before the caret's next token: the whole text's, where the text before the caret is a run of
    its tokens (the caret between two of them), else from a reading of that text alone."""
    before = read_scored_text(ScoresRequest(text=request.text, session=request.session, messages=request.messages),
                              tokenizer, limit).ids
    if compared.ids[: len(before)] == before and len(before) < len(compared.ids):
        return float(compared.js[len(before)])
    return compare_models(models, torch.tensor([before]), len(tokenizer)).next_js
