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
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from lookahead.chat import as_dicts, context_ids
from lookahead.context import ScoredText
from lookahead.healing import token_texts
from lookahead.kv_cache import GrowableCache
from lookahead.outputs import Branch, ComparedToken, ComparedWord, ModelComparison, NextCompared, NextToken, ScoredToken
from lookahead.prefix_cache import Taken, common_prefix_length
from lookahead.requests import CompareRequest, DistributionRequest, LookaheadRequest, ScoresRequest
from lookahead.results import text_tokens
from lookahead.scoring import ChunkBuffers, Scores, chunks, new_hidden, rows_through, score_logits, unscored

# Rows of a chunk's divergences computed at once on a CPU: buffers of a few rows are reused while warm; from 2 to 16
# rows the time is the same (AMD EPYC, 2 cores: 27-31 ms a 256-row chunk), so nothing here depends on the machine.
JS_BLOCK_ROWS = 8


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


def js_bits(logp: torch.Tensor, logq: torch.Tensor, probs: tuple[torch.Tensor, torch.Tensor] | None = None
            ) -> torch.Tensor:
    """The Jensen–Shannon divergence, in bits, between matching rows of two log-distributions (..., vocab): half the
    KL divergence of each from their mean; 0 for equal rows, 1 for rows with no token in common. In float32, as
    the logits are (within 2e-7 bits of float64 over a 49k vocabulary, at a third of its time: a 3k-token
    comparison computes 3k such rows). `probs`: the distributions themselves, where they are at hand.

    On a CPU, JS_BLOCK_ROWS rows at a time in buffers made once: each fresh (rows x vocabulary) temporary of a
    whole chunk is new memory the system zeroes page by page, which took 6 of every 7 parts of the time."""
    shape, vocab = logp.shape[:-1], logp.shape[-1]
    logp, logq = logp.float().reshape(-1, vocab), logq.float().reshape(-1, vocab)
    rows = JS_BLOCK_ROWS if logp.device.type == "cpu" else max(len(logp), 1)
    halves = torch.empty(len(logp), device=logp.device)  # each row's sum of p log(p/m) + q log(q/m)
    p, q, log_mean, terms = torch.empty(4, min(rows, len(logp)), vocab, device=logp.device).unbind(0)
    for first in range(0, len(logp), rows):
        lp, lq = logp[first : first + rows], logq[first : first + rows]
        n = len(lp)
        if probs is None:
            pn, qn = torch.exp(lp, out=p[:n]), torch.exp(lq, out=q[:n])
        else:
            pn, qn = (given[first : first + n] for given in probs)
        torch.add(pn, qn, out=log_mean[:n]).mul_(0.5).log_()
        torch.sub(lp, log_mean[:n], out=terms[:n]).mul_(pn).nan_to_num_(0.0)  # NaN where p is 0: counts 0
        torch.sub(lq, log_mean[:n], out=log_mean[:n]).mul_(qn).nan_to_num_(0.0)
        halves[first : first + n] = terms[:n].add_(log_mean[:n]).sum(-1)
    return (0.5 * halves / math.log(2)).clamp(min=0.0).reshape(shape)


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
    heads, buffers = [model.get_output_embeddings() for model in models], [None, None]
    for first, end in chunks(len(hidden[0])):  # position p's logits score token p + 1
        logits = [head(h[first:end]) for head, h in zip(heads, hidden)]
        buffers = [kept or ChunkBuffers.for_logits(chunk) for kept, chunk in zip(buffers, logits)]
        targets = ids[0, start + first + 1 : start + end + 1]
        rows = [r.then(score_logits(chunk, targets, kept)) for r, chunk, kept in zip(rows, logits, buffers)]
        (a, p), (b, q) = ((kept.logprobs[: end - first, :vocab], kept.probs[: end - first, :vocab]) for kept in buffers)
        js[start + first + 1 : start + end + 1] = js_bits(a, b.to(a.device), (p, q.to(a.device))).cpu()
    lasts = [head(h[-1:])[0].float().cpu() for head, h in zip(heads, hidden)]  # as the model computes it alone
    for r, last in zip(rows, lasts):
        r.frontier = last
    next_logprobs = torch.stack([torch.log_softmax(last, -1)[:vocab] for last in lasts])
    return Comparison(token_ids, (rows[0], rows[1]), js, next_logprobs, float(js_bits(*next_logprobs)), caches)


def compared_tokens(window: ScoredText, js: torch.Tensor, top: torch.Tensor,
                    own: Sequence[tuple[ScoredText, Scores]], tokenizer: PreTrainedTokenizerBase,
                    text_length: int) -> list[ComparedToken]:
    """One entry per token of the text (as token_probabilities lists them; one tokenizer: the same tokens): each
    model's log-probability and rank from `own`, its rows over the window its own context holds (as its listing:
    each model's stay its own), and over `window`, the one both hold, the divergence before the token (`js` (N,))
    and what each model would have written there instead (`top` (2, N), spelled). None where a window leaves the
    token out, where nothing came before it, and where `js` is NaN. From plain lists: a 3k-token text is compared
    on every click while the heatmap shows two models."""
    encoding = window.encoding  # every window's: one text, one tokenizer
    listed, spans = text_tokens(encoding["offset_mapping"], encoding["special_tokens_mask"], window.text_start,
                                text_length)
    columns = [(read.dropped, rows.logprob.tolist(), rows.rank.tolist()) for read, rows in own]
    divergences, tops = js.tolist(), top.tolist()
    vocabulary, ids = token_texts(tokenizer), encoding["input_ids"]
    entries = []
    for position, (start, end) in zip((i for i, ok in enumerate(listed) if ok), spans):
        token_id, place = ids[position], position - window.dropped
        logprob = [None if position < dropped or math.isnan(lp[position - dropped]) else lp[position - dropped]
                   for dropped, lp, _ in columns]
        rank = [None if lp is None else ranks[position - dropped] for lp, (dropped, _, ranks) in zip(logprob, columns)]
        known = place >= 0 and not math.isnan(divergences[place])
        entries.append(ComparedToken(token_id, vocabulary[token_id] if token_id < len(vocabulary) else "", start, end,
                                     logprob, rank, divergences[place] if known else None,
                                     [spelled(tokenizer, t[place]) for t in tops] if known else None))
    return entries


@functools.cache
def spelled(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    """A token as the writer reads it, decoded alone (kept: the same first choices come back on every click)."""
    return tokenizer.decode([token_id])


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


def per_token(request: CompareRequest, tokens: list[ComparedToken], next_js: float,
              distributions: list[list[NextToken]], branches: list[list[Branch]], js_over: int | None
              ) -> ModelComparison:
    """compare's answer where both models read the text as the same token ids. `js_over`: how many top
    log-probabilities per model and position the divergences come from (None: the whole vocabulary)."""
    return ModelComparison(list(request.models), "token", js_over, tokens, None, NextCompared(distributions, next_js),
                           branches)


def per_word(request: CompareRequest, listings: tuple[list[ScoredToken], list[ScoredToken]],
             distributions: list[list[NextToken]], branches: list[list[Branch]], js_over: int | None
             ) -> ModelComparison:
    """compare's answer where the models cut the text into other tokens: word by word, from each one's listing."""
    return ModelComparison(list(request.models), "word", js_over, None, word_units(request.whole, listings),
                           NextCompared(distributions, None), branches)
