"""Where two models part on one text: at every position, each model's log-probability and rank of the token that
came, and the Jensen–Shannon divergence between their whole next-token distributions.

Both models read the same token ids (one tokenizer) over the session's own caches, each new token once: their
logits come SCORE_CHUNK positions at a time, and each chunk gives both each model's rows (what its token listing is
built from, kept with its cache as lookahead/scoring.py keeps them) and the divergence, so only a chunk's (positions x
vocabulary) log-probabilities exist at once, for each model.
The distributions are each model's softmax over its own logits, compared on the tokenizer's ids (a model may pad its
output layer past them; what it gives those rows is left out of both).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from lookahead.chat import as_dicts, context_ids
from lookahead.context import ScoredText
from lookahead.kv_cache import GrowableCache
from lookahead.outputs import Branch, ComparedToken, ComparedWord, ModelComparison, NextCompared, NextToken, ScoredToken
from lookahead.prefix_cache import Taken, common_prefix_length
from lookahead.requests import CompareRequest, DistributionRequest, LookaheadRequest, ScoresRequest
from lookahead.results import text_token_places
from lookahead.scoring import Scores, chunks, new_hidden, rows_through, score_logprobs, unscored


@dataclass
class Comparison:
    """Token i of the text under both models: each one's row (its log-probability, rank, first choices) and the
    divergence between them before it; token 0, with nothing before it, has a NaN divergence. Kept per session
    (without the caches, which go back to the session's own), so that the next comparison of an edited text reads
    only what changed."""

    ids: list[int]  # the token ids compared
    rows: tuple[Scores, Scores]  # each model's rows for them, as its token listing reads them (lookahead/scoring.py)
    js: torch.Tensor  # (N,) divergence in bits between the two distributions before token i
    next_logprobs: torch.Tensor  # (2, vocab) after the last token: what each model expects next
    next_js: float  # their divergence there
    caches: list[DynamicCache] | None  # each model's, holding every token of `ids`; None once handed back

    @property
    def logprob(self) -> torch.Tensor:
        """(2, N) log p(token i | tokens before it), model a then b."""
        return torch.stack([rows.logprob for rows in self.rows])

    @property
    def rank(self) -> torch.Tensor:
        """(2, N) 1 where the token was that model's first choice (0 for token 0)."""
        return torch.stack([rows.rank for rows in self.rows])

    @property
    def top(self) -> torch.Tensor:
        """(2, N) each model's first choice before token i (-1 for token 0)."""
        return torch.stack([rows.top_ids[:, 0] for rows in self.rows])


def js_bits(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """The Jensen–Shannon divergence, in bits, between matching rows of two log-distributions (..., vocab): half the
    KL divergence of each from their mean; 0 for equal rows, 1 for rows with no token in common. In float32, as
    the logits are (within 2e-7 bits of float64 over a 49k vocabulary, at a third of its time: a 3k-token
    comparison computes 3k such rows)."""
    p, q = logp.float().exp(), logq.float().exp()
    log_mean = torch.log(0.5 * (p + q))
    terms = torch.where(p > 0, p * (logp - log_mean), 0.0) + torch.where(q > 0, q * (logq - log_mean), 0.0)
    return (0.5 * terms.sum(-1) / math.log(2)).clamp(min=0.0)


@torch.inference_mode()
def compare_models(models: tuple[PreTrainedModel, PreTrainedModel], ids: torch.Tensor, vocab: int,
                   kept: Comparison | None = None, taken: Sequence[Taken] | None = None) -> Comparison:
    """Both models over the token ids `ids` (1, N) in one joint pass: each model's new tokens run once, and each chunk
    of their logits gives both the model's rows (its listing) and the divergence. `vocab`: the tokenizer's size.
    `taken`: each model's cache of a prefix of `ids` and its rows (the session's, from the prefix-cache store; None:
    fresh); `kept`: the session's last comparison, whose divergences for the tokens both share are reused. Both
    models run from the same token: the first whose divergence is unknown, or whose rows either lacks."""
    token_ids = ids[0].tolist()
    taken = list(taken or [Taken(GrowableCache(), 0, unscored(ids[0, :1])) for _ in models])
    known = 1  # tokens whose divergence is known: token 0 has none
    if kept is not None:
        known = max(common_prefix_length(kept.ids, token_ids), 1)
        known += known == len(kept.ids) < len(token_ids)  # appended to: the next token's is kept.next_js
    start = min(known - 1, *(t.reused for t in taken))
    js = torch.full((len(token_ids),), math.nan)
    if kept is not None:
        shared = min(start + 1, len(kept.ids))
        js[1:shared] = kept.js[1:shared]
        if start == len(kept.ids):
            js[start] = kept.next_js
    caches = [t.cache if start else GrowableCache() for t in taken]
    for cache in caches:
        if cache.get_seq_length() > start:
            cache.crop(start - cache.get_seq_length())  # a negative count: the tokens to drop
    rows = [rows_through(t.scores, ids[0], start) for t in taken]
    hidden = [new_hidden(model, ids.to(model.device), cache) for model, cache in zip(models, caches)]
    heads = [model.get_output_embeddings() for model in models]
    for first, end in chunks(len(hidden[0])):  # position p's logits score token p + 1
        logprobs = [torch.log_softmax(head(h[first:end]).float(), -1) for head, h in zip(heads, hidden)]
        targets = ids[0, start + first + 1 : start + end + 1]
        rows = [r.then(score_logprobs(lp, targets)) for r, lp in zip(rows, logprobs)]
        a, b = (lp[:, :vocab] for lp in logprobs)
        js[start + first + 1 : start + end + 1] = js_bits(a, b.to(a.device)).cpu()
    lasts = [head(h[-1:])[0].float().cpu() for head, h in zip(heads, hidden)]  # as the model computes it alone
    for r, last in zip(rows, lasts):
        r.frontier = last
    next_logprobs = torch.stack([torch.log_softmax(last, -1)[:vocab] for last in lasts])
    return Comparison(token_ids, (rows[0], rows[1]), js, next_logprobs, float(js_bits(*next_logprobs)), caches)


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
    return a is b or same_tokenizer(a, b) or same_vocabulary(a, b) and context_ids(
        a, request.whole, messages) == context_ids(b, request.whole, messages)


@functools.cache
def same_vocabulary(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Whether two loaded tokenizers have one vocabulary (asked once per pair: a 49k-entry vocabulary is ~30 ms to
    read out, each time the heatmap of two models updates)."""
    return a.get_vocab() == b.get_vocab()


@functools.cache
def same_tokenizer(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Whether two loaded tokenizers are one tokenizer (the same pipeline, special tokens and chat template), so read
    every text alike without reading it twice (two sizes of one model family: ~5 ms a 3k-token text, each update)."""
    def pipeline(t: PreTrainedTokenizerBase) -> tuple:
        return (type(t), t.backend_tokenizer.to_str(), t.chat_template, t.all_special_ids,
                getattr(t, "add_bos_token", None), getattr(t, "add_eos_token", None))

    return all(hasattr(t, "backend_tokenizer") for t in (a, b)) and pipeline(a) == pipeline(b)


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
