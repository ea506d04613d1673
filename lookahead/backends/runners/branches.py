"""A lookahead's branches and the distribution of the next token: the text read (its trailing whitespace healed,
a constraint's forced tokens), the session's cache reused, the branch tree computed (lookahead/branches.py) and its
cache put back."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lookahead.backends.in_process_stores import Stores, Unkept
from lookahead.branches import Lead, Lookahead, get_lookahead_sequences
from lookahead.constraints import MatcherStore
from lookahead.context import Prompt, follow_ids, read_prompt
from lookahead.models import context_limit, eos_ids, load_model
from lookahead.outputs import NextToken, PartialSuggestions, Suggestions
from lookahead.prefix_cache import PrefixCacheStore
from lookahead.requests import DistributionRequest, LookaheadRequest, MultiverseRequest
from lookahead.results import (
    DISTRIBUTION_ROWS,
    LEAD_PROB,
    MAX_LEAD_TOKENS,
    REFUSED_ROWS,
    branch_entries,
    context_info,
    distribution_entries,
    forced_entry,
    lead_entry,
    more_candidates,
)
from lookahead.sampling import Sampling
from lookahead.speculation import ScratchStore

# Where a lookahead's caches are taken from and put back: the session's, a precomputation's copy, or none.
CacheStore = PrefixCacheStore | ScratchStore | Unkept


def run_lookahead(stores: Stores, request: LookaheadRequest, store: CacheStore | None = None,
                  window: int | None = None, shown: int | None = None) -> Suggestions:
    """The branches, each a real choice: they fork after the tokens the model all but certainly writes next (the
    tree reads those first: Lookahead.lead); where branches write the same text, more candidates are continued
    until `shown` (default: the branches asked for) differ. Their caches are taken from and put back in `store`
    (default: the session's, in `stores`)."""
    shown = shown or request.n_branches
    run = _run(request, stores.prefix_caches if store is None else store, stores.matchers, window)
    sampling = request.sampling
    stops = eos_ids(load_model(request.model_name)[0].generation_config)
    listed = _distribution(run, sampling, max(DISTRIBUTION_ROWS, shown))
    sequences = run.result.sequences.tolist()
    firsts = _distribution(run, sampling, len(sequences), [seq[0] for seq in sequences])
    fits = None if run.result.fit is None else run.result.fit.tolist()
    led = run.forced + run.result.lead
    branches = branch_entries([led + seq for seq in sequences], stops, firsts, run.healed, run.tokenizer,
                              request.stop, fits)
    wider = more_candidates(request.n_branches, len(sequences), len(branches), shown)
    if wider is not None:
        return run_lookahead(stores, replace(request, n_branches=wider), store, window, shown)
    return Suggestions(
        **run.info,
        sampling=sampling,
        branch_mode=request.branch_mode,
        seed=request.seed,
        distribution=listed + _refused(run, sampling, listed),
        forced=forced_entry(run.forced, run.healed, run.tokenizer),
        lead=lead_entry(led, tuple(run.result.lead), tuple(run.result.lead_probs), run.healed, run.tokenizer),
        branches=branches[:shown],
    )


def run_distribution(stores: Stores, request: DistributionRequest) -> list[NextToken]:
    """The distribution: the branches' pass with one branch of one token (the sampling shapes p_final only); or, where
    the session's rows reach the text's end (a scored pass just read it: the comparison of two models), from the
    logits they keep after its last token, with no model work (neither healing nor a constraint then shapes them)."""
    if stores.prefix_caches.scoring(request.key):
        model, tokenizer = load_model(request.model_name)
        prompt = prompt_of(request, model, tokenizer, stores.matchers, force=False)
        known = stores.prefix_caches.scores(request.key, prompt.ids)
        if known is not None and known.frontier is not None and prompt.allowed is None and prompt.guide is None:
            return next_tokens(known.frontier, torch.tensor([prompt.ids]), None, None, request.sampling, request.k,
                               tokenizer)
    one_token = LookaheadRequest(text=request.text, session=request.session, model_name=request.model_name,
                                 messages=request.messages, constraint=request.constraint, n_branches=1, depth=1,
                                 after=request.after, fit_tokens=0)
    run = _run(one_token, stores.prefix_caches, stores.matchers, force=False)
    return _distribution(run, request.sampling, request.k)


class _Run(NamedTuple):
    result: Lookahead
    info: dict  # what the caller is told about the context
    allowed: torch.Tensor | None  # healing's mask over the first token
    healed: str  # the whitespace backed up by healing
    tokenizer: PreTrainedTokenizerBase
    context: torch.Tensor  # (1, T) the token ids scored, then the lead's (Lookahead.lead)
    forced: list[int]  # the last of them: the only tokens a constraint allowed after the text


def _run(request: LookaheadRequest, store: CacheStore, matchers: MatcherStore, window: int | None = None,
         force: bool = True) -> _Run:
    """Tokenize (healing trailing whitespace), reuse the session's cache from `store`, and compute the branches
    (from the text's last `window` tokens only, if given: a partial answer; after the tokens a constraint
    forces and those the model all but certainly writes, with `force`)."""
    model, tokenizer = load_model(request.model_name)
    prompt = prompt_of(request, model, tokenizer, matchers, force)
    partial = None
    if window is not None and len(prompt.ids) > window:
        partial = PartialSuggestions(window, len(prompt.ids))
        prompt = prompt._replace(ids=prompt.ids[-window:])
    if request.after is None:
        (cache, reused, known_scores), kept = store.take(request.key, prompt.ids), None
    else:  # at a caret: the text after it may stay in the cache, masked out
        (cache, reused, known_scores), kept = store.take_before(request.key, prompt.ids)
    context = torch.tensor([prompt.ids], device=model.device)
    generator = torch.Generator(device=model.device).manual_seed(request.seed)
    follow = follow_ids(request, tokenizer, context_limit(model) - len(prompt.ids) - request.depth)
    try:
        result = get_lookahead_sequences(
            model, context, request.n_branches, request.depth, cache, prompt.allowed, request.sampling,
            request.branch_mode, generator, known_scores, prompt.guide,
            hidden=0 if kept is None else len(kept.ids) - reused, follow=follow,
            unforced=len(prompt.ids) - len(prompt.forced), lead=_lead(model) if force else None,
        )
    except BaseException:  # cancelled (a yielding call): the whole text's cache goes back as it was
        if kept is not None:
            cache.keep(len(kept.ids), [])  # each layer cut on its own: one cancelled mid-pass holds fewer entries
            store.put(request.key, *kept)
        raise
    if kept is None:
        continuations = [(result.lead + seq[:-1], kv) for seq, kv in zip(result.sequences.tolist(), result.branch_kv)]
        store.put(request.key, prompt.ids, result.cache, continuations, result.scores)
    else:
        store.put(request.key, *kept)
    info = {**context_info(request.model, str(model.device), len(prompt.ids), reused, prompt.dropped, prompt.healed),
            "partial": partial}
    context = torch.cat([context, context.new_tensor([result.lead])], dim=1)
    return _Run(result, info, prompt.allowed if not result.lead else None, prompt.healed, tokenizer, context,
                prompt.forced)


def _lead(model: PreTrainedModel) -> Lead:
    """What leads a lookahead's branches: the tokens the model all but certainly writes, but its end tokens."""
    return Lead(LEAD_PROB, MAX_LEAD_TOKENS, frozenset(eos_ids(model.generation_config)))


def prompt_of(request: LookaheadRequest | DistributionRequest | MultiverseRequest, model: PreTrainedModel,
              tokenizer: PreTrainedTokenizerBase, matchers: MatcherStore, force: bool) -> Prompt:
    """What the model reads for a lookahead (room for a lead and its branches; after the tokens a constraint
    forces, with `force`), a map of futures (room for its depth) or a distribution (room for one token)."""
    room = 1
    if isinstance(request, (LookaheadRequest, MultiverseRequest)):
        room = request.depth + (MAX_LEAD_TOKENS if isinstance(request, LookaheadRequest) else 0)
    vocab_size = model.config.get_text_config().vocab_size
    return read_prompt(request, tokenizer, matchers, context_limit(model), room, vocab_size, model.device, force)


def _distribution(run: _Run, sampling: Sampling, k: int, ids: list[int] | None = None) -> list[NextToken]:
    """Entries for the k next tokens after the run's context (or for the given `ids`)."""
    return next_tokens(run.result.next_token_logits, run.context, run.allowed, run.result.valid, sampling, k,
                       run.tokenizer, ids)


def next_tokens(logits: torch.Tensor, context: torch.Tensor, allowed: torch.Tensor | None, valid: torch.Tensor | None,
                sampling: Sampling, k: int, tokenizer: PreTrainedTokenizerBase,
                ids: list[int] | None = None) -> list[NextToken]:
    """Entries for the k next tokens ranked by p_final, then p_base (or for the given `ids`), from the logits (vocab,)
    after `context` (1, T). With healing (`allowed`), probabilities are over the allowed tokens only; `valid`: what a
    constraint allows."""
    logits = logits.float()
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    final = sampling.final_scores(context, logits[None], None if valid is None else valid[None])[0]
    return distribution_entries(torch.log_softmax(logits, -1), torch.log_softmax(final, -1), k, tokenizer, ids, valid)


def _refused(run: _Run, sampling: Sampling, listed: list[NextToken], n: int = REFUSED_ROWS) -> list[NextToken]:
    """Under a constraint, the n likeliest tokens (by p_base) it refuses that are not `listed` yet:
    what the model wanted instead."""
    if run.result.valid is None:
        return []
    logits = run.result.next_token_logits.float().masked_fill(run.result.valid, float("-inf"))
    logits[[d.token_id for d in listed]] = float("-inf")
    if run.allowed is not None:
        logits = logits.masked_fill(~run.allowed, float("-inf"))
    ids = logits.topk(min(n, int(torch.isfinite(logits).sum()))).indices.tolist()
    return _distribution(run, sampling, len(ids), ids)
