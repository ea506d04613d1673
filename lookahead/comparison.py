"""Where two models part on one text: at every position, each model's log-probability and rank of the token that
came, and the Jensen–Shannon divergence between their whole next-token distributions.

Both models read the same token ids (one tokenizer), SCORE_CHUNK positions at a time, each with its own cache, so
only a chunk's (positions x vocabulary) log-probabilities exist at once, for each model, as in lookahead/scoring.py.
The distributions are each model's softmax over its own logits, compared on the tokenizer's ids (a model may pad its
output layer past them; what it gives those rows is left out of both).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from lookahead.chat import as_dicts, context_ids
from lookahead.context import ScoredText
from lookahead.outputs import Branch, ComparedToken, ComparedWord, ModelComparison, NextCompared, NextToken, ScoredToken
from lookahead.prefix_cache import common_prefix_length
from lookahead.requests import CompareRequest, DistributionRequest, LookaheadRequest, ScoresRequest
from lookahead.results import text_token_places
from lookahead.scoring import SCORE_CHUNK


@dataclass
class Comparison:
    """Row i describes token i of the text under both models; token 0, with nothing before it, has NaN rows. The
    caches and ids are kept with it (per session), so that the next comparison of an edited text reads only
    what changed."""

    ids: list[int]  # the token ids compared
    logprob: torch.Tensor  # (2, N) log p(token i | tokens before it), model a then b
    rank: torch.Tensor  # (2, N) 1 where the token was that model's first choice (0 for token 0)
    top: torch.Tensor  # (2, N) each model's first choice before token i (0 for token 0)
    js: torch.Tensor  # (N,) divergence in bits between the two distributions before token i
    next_logprobs: torch.Tensor  # (2, vocab) after the last token: what each model expects next
    next_js: float  # their divergence there
    caches: list[DynamicCache]  # each model's, holding every token but those past `ids` (none)


def js_bits(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """The Jensen–Shannon divergence, in bits, between matching rows of two log-distributions (..., vocab): half the
    KL divergence of each from their mean; 0 for equal rows, 1 for rows with no token in common. In float32, as
    the logits are (within 2e-7 bits of float64 over a 49k vocabulary, at a third of its time: a 3k-token
    comparison computes 3k such rows)."""
    p, q = logp.float().exp(), logq.float().exp()
    log_mean = torch.log(0.5 * (p + q))
    terms = torch.where(p > 0, p * (logp - log_mean), 0.0) + torch.where(q > 0, q * (logq - log_mean), 0.0)
    return (0.5 * terms.sum(-1) / math.log(2)).clamp(min=0.0)


def token_rows(logprobs: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's log-probability of its token, and the token's rank there (1 + how many tokens are likelier)."""
    chosen = logprobs.gather(-1, token_ids[:, None])
    return chosen[:, 0], (logprobs > chosen).sum(-1) + 1


@torch.inference_mode()
def compare_models(models: tuple[PreTrainedModel, PreTrainedModel], ids: torch.Tensor, vocab: int,
                   kept: Comparison | None = None) -> Comparison:
    """Both models over the token ids `ids` (1, N), a chunk at a time; `vocab`: the tokenizer's size. `kept`: an
    earlier comparison (taken: its caches are extended), whose rows for the ids both share are reused."""
    n, token_ids = ids.shape[1], ids[0].tolist()
    logprob, rank, top = torch.full((2, n), math.nan), torch.zeros((2, n), dtype=torch.long), torch.zeros(
        (2, n), dtype=torch.long)
    js = torch.full((n,), math.nan)
    start, previous, caches = _resumed(kept, token_ids)
    if kept is not None and start:
        shared = start + (previous is None)  # the rows kept: up to the first token run, or the token after it
        for mine, theirs in ((logprob, kept.logprob), (rank, kept.rank), (top, kept.top)):
            mine[:, :shared] = theirs[:, :shared]
        js[:shared] = kept.js[:shared]
    for chunk_start in range(start, n, SCORE_CHUNK):
        chunk = ids[:, chunk_start: chunk_start + SCORE_CHUNK]
        rows = torch.stack([torch.log_softmax(model(chunk.to(model.device), past_key_values=cache,
                                                    use_cache=True).logits[0].float(), -1)[:, :vocab].cpu()
                            for model, cache in zip(models, caches)])  # (2, chunk, vocab)
        # Row j of the chunk predicts token chunk_start + j + 1; the row before the chunk predicts its first token.
        predicting = rows[:, :-1] if previous is None else torch.cat([previous[:, None], rows[:, :-1]], 1)
        first = chunk_start + (previous is None)
        targets = ids[0, first: chunk_start + chunk.shape[1]].cpu()
        for m in range(2):
            logprob[m, first: first + len(targets)], rank[m, first: first + len(targets)] = token_rows(
                predicting[m], targets)
            top[m, first: first + len(targets)] = predicting[m].argmax(-1)
        js[first: first + len(targets)] = js_bits(predicting[0], predicting[1])
        previous = rows[:, -1]
    return Comparison(token_ids, logprob, rank, top, js, previous, float(js_bits(previous[0], previous[1])), caches)


def _resumed(kept: Comparison | None, ids: list[int]) -> tuple[int, torch.Tensor | None, list[DynamicCache]]:
    """Where a comparison of `ids` starts reading, given `kept`: the first token to run, the rows that predict it
    (None: it is token 0, or the token before it runs again), and the caches to extend. After an append the
    kept caches go on from their end; after an edit (or an undo) they are cropped to the tokens both share but
    one, whose run gives the rows that predict the first changed token."""
    if kept is None:
        return 0, None, [DynamicCache(), DynamicCache()]
    shared = common_prefix_length(kept.ids, ids)
    if shared == len(kept.ids):
        return shared, kept.next_logprobs, kept.caches
    if shared <= 1:
        return 0, None, [DynamicCache(), DynamicCache()]
    for cache in kept.caches:
        cache.crop(shared - 1 - len(kept.ids))  # a negative count: the tokens to drop
    return shared - 1, None, kept.caches


def compared_tokens(listings: tuple[list[ScoredToken], list[ScoredToken]], js: list[float | None],
                    tops: list[list[str] | None]) -> list[ComparedToken]:
    """One entry per token of the text, from both models' token_probabilities listings (one tokenizer: the same
    tokens), the divergence before each and what each model would have written there instead (its first choice)."""
    return [ComparedToken(a.token_id, a.token, a.start, a.end, [a.logprob, b.logprob], [a.rank, b.rank], divergence,
                          top)
            for a, b, divergence, top in zip(*listings, js, tops)]


def word_units(text: str, listings: tuple[list[ScoredToken], list[ScoredToken]]) -> list[ComparedWord]:
    """The text in words whose log-probability both tokenizers give: a word ends where whitespace follows and both
    models' tokens end too, so each unit is whole tokens under both, and its log-probability (the sum of its
    tokens', None if one has none) does not depend on how either model cut it up."""
    ends = [{token.end for token in listing} for listing in listings]
    boundaries = [i for i in range(1, len(text) + 1)
                  if (i == len(text) or text[i].isspace() and not text[i - 1].isspace()) and all(i in e for e in ends)]
    units, start = [], 0
    for end in boundaries:
        sums = [_summed([t.logprob for t in listing if start < t.end <= end]) for listing in listings]
        units.append(ComparedWord(start, end, text[start:end], sums))
        start = end
    return units


def _summed(logprobs: list[float | None]) -> float | None:
    return None if not logprobs or any(lp is None for lp in logprobs) else math.fsum(logprobs)


def model_requests(request: CompareRequest, name: str) -> tuple[ScoresRequest, DistributionRequest, LookaheadRequest]:
    """What a comparison asks of one model, on any backend: its listing of the whole text, and its next tokens and
    branches at the caret."""
    common = dict(model_name=name, session=request.session, messages=request.messages)
    asked = dict(sampling=request.sampling, constraint=request.constraint, after=request.after, **common)
    return (ScoresRequest(text=request.whole, k=1, **common),
            DistributionRequest(text=request.text, k=request.k, **asked),
            LookaheadRequest(text=request.text, n_branches=request.n_branches, depth=request.depth, stop=request.stop,
                             **asked))


def read_alike(tokenizers: tuple[PreTrainedTokenizerBase, PreTrainedTokenizerBase], request: CompareRequest) -> bool:
    """Whether both tokenizers read the request's whole text as the same token ids (one vocabulary, and in chat mode
    one template): then every position is both models', and their distributions there can be compared."""
    a, b = tokenizers
    messages = as_dicts(request.messages)
    return a.get_vocab() == b.get_vocab() and context_ids(a, request.whole, messages) == context_ids(
        b, request.whole, messages)


def at_tokens(scored: ScoredText, text_length: int, js: torch.Tensor, top: torch.Tensor,
              spell: Callable[[int], str]) -> tuple[list[float | None], list[list[str] | None]]:
    """The divergence before each of the text's tokens (as token_probabilities lists them) and each model's first
    choice there, spelled, from `js` (N,) and `top` (2, N) over the window `scored` holds; None before the window and
    where `js` is NaN."""
    places = [position - scored.dropped
              for position, _ in text_token_places(scored.encoding, scored.text_start, text_length)]
    known = [place >= 0 and not math.isnan(js[place]) for place in places]
    return ([float(js[place]) if ok else None for place, ok in zip(places, known)],
            [[spell(int(top[m, place])) for m in range(2)] if ok else None for place, ok in zip(places, known)])


def comparison_result(request: CompareRequest, listings: tuple[list[ScoredToken], list[ScoredToken]],
                      distributions: list[list[NextToken]], branches: list[list[Branch]], js_over: int | None,
                      compared: tuple[list[float | None], list[list[str] | None], float] | None) -> ModelComparison:
    """compare's answer. `js_over`: how many top log-probabilities per model and position the divergences come from
    (None: the whole vocabulary); `compared`: the divergence before each token and each model's first choice there
    (`at_tokens`), and the divergence at the caret, where both models read the same token ids (None: they do not, and
    the text is compared per word)."""
    if compared is None:
        per, tokens, words, next_js = "word", None, word_units(request.whole, listings), None
    else:
        js, tops, next_js = compared
        per, tokens, words = "token", compared_tokens(listings, js, tops), None
    return ModelComparison(list(request.models), per, js_over, tokens, words, NextCompared(distributions, next_js),
                           branches)
