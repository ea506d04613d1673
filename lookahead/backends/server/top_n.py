"""p_base, p_final and per-token scores from a server's top-N log-probabilities, and when they are exact.

A completions server returns, per position, the log-probabilities of its N likeliest tokens ("raw": the
model's softmax, before any penalty or temperature), not the whole vocabulary. p_base is exact for those
tokens. p_final applies transformers' processors as in-process (`Sampling.final_scores`), to the N tokens
and, where it matters, to "the rest": every other token, counted as one token holding their total mass.

The rest plays no part where the filters cut each of its tokens: top_k keeps at most N tokens, or, with no
penalty to reorder the tokens and top_p off, the filters cut the least likely of the N (every token of the
rest is less likely still, and a threshold relative to the likeliest token, as min_p's, is known exactly:
the likeliest token always came back). Elsewhere the rest counts as one token, which is exact where it is
cut whole at temperature 1 or with top_p off (a temperature scales its mass as one token's, and top_p sees
that mass).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import torch

from lookahead.sampling import Sampling
from lookahead.scoring import Scores, unscored

EMPTY_REST = 1e-45  # the rest's mass when the N tokens hold it all: a finite log, so the processors see a token


class Returned(NamedTuple):
    """A token's log-probability at one position, as the server returned it, and its rank there."""

    logprob: float
    rank: int  # 1: the likeliest


Position = Mapping[int, Returned]  # by token id: a position's own token and its top N


def base_logprobs(top: Mapping[int, float], vocab_size: int, allowed: torch.Tensor | None) -> torch.Tensor:
    """log p_base over the vocabulary: the returned tokens' own, -inf for the rest. With healing, renormalised over
    the allowed tokens among them (in-process: over all allowed tokens), so an upper bound."""
    logprobs = torch.full((vocab_size,), float("-inf"))
    logprobs[list(top)] = torch.tensor(list(top.values()))
    if allowed is None:
        return logprobs
    logprobs = logprobs.masked_fill(~allowed, float("-inf"))
    return logprobs - logprobs.logsumexp(0)


def final_logprobs(scores: torch.Tensor, context: list[int], sampling: Sampling,
                   valid: torch.Tensor | None = None) -> torch.Tensor:
    """log p_final over `scores` (log-probabilities of the tokens, and of the rest when it is their last), after
    `context`; `valid`: what a constraint allows."""
    processed = sampling.final_scores(torch.tensor([context]), scores[None], None if valid is None else valid[None])
    return torch.log_softmax(processed[0], -1)


def penalised(sampling: Sampling) -> bool:
    """Whether a penalty moves tokens past others: the order of p_base is then not p_final's."""
    return (sampling.repetition_penalty != 1.0 or sampling.presence_penalty != 0.0
            or sampling.frequency_penalty != 0.0)


def cuts_every_other_token(sampling: Sampling, logprobs: torch.Tensor, final: torch.Tensor) -> bool:
    """Whether the filters, having cut the least likely returned token in `final` (the returned tokens alone), cut
    every token that did not come back: each is less likely still, in p_final's order too when no penalty reorders
    them; top_p must be off, since its cut depends on the mass that did not come back."""
    returned = torch.isfinite(logprobs)
    if penalised(sampling) or sampling.top_p < 1.0 or not returned.any():
        return False
    least = logprobs.masked_fill(~returned, float("inf")).argmin()
    return not bool(torch.isfinite(final[least]))


def exact_final(sampling: Sampling, approximated: bool, within_top_k: bool, rest_cut: bool) -> bool:
    """Whether p_final from the top N equals the whole vocabulary's. Never after healing or under a constraint
    (`approximated`: renormalised over the allowed tokens that came back), nor with a repetition penalty (it needs
    the logits' signs, not log-probabilities). Exact when top_k keeps at most N tokens; else when the rest is cut
    whole (`rest_cut`) with no penalty to reorder its tokens, at temperature 1 or with top_p off."""
    if approximated or sampling.repetition_penalty != 1.0:
        return False
    return within_top_k or (rest_cut and not penalised(sampling)
                            and (sampling.temperature == 1.0 or sampling.top_p == 1.0))


def next_token_logprobs(
    top: Mapping[int, float], vocab_size: int, context: list[int], sampling: Sampling,
    allowed: torch.Tensor | None, valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(log p_base, log p_final, exact) over the vocabulary, from the server's top-N log-probabilities `top`.

    Tokens that did not come back have -inf. Under a constraint (`valid`), p_final is renormalised over the valid
    tokens that came back. Where the rest counts (see the module's docstring): the repetition penalty is applied to
    log-probabilities, not logits; a temperature scales the rest as one token; top_p and the normalisation see
    the rest as one token.
    """
    returned = {i: lp for i, lp in top.items() if i < vocab_size}
    logprobs = base_logprobs(returned, vocab_size, allowed)
    approximated = allowed is not None or valid is not None
    if not sampling.processors() and valid is None:
        return logprobs, logprobs, not approximated
    within_top_k = 1 <= sampling.top_k <= len(returned)
    alone = final_logprobs(logprobs, context, sampling, valid)
    if valid is not None or within_top_k or cuts_every_other_token(sampling, logprobs, alone):
        return logprobs, alone, exact_final(sampling, approximated, within_top_k, rest_cut=True)
    rest_mass = max(0.0, 1.0 - float(logprobs.exp().sum()))
    rest = torch.tensor([math.log(rest_mass or EMPTY_REST)])
    final = final_logprobs(torch.cat([logprobs, rest]), context, sampling)
    rest_cut = not torch.isfinite(final[vocab_size]) or rest_mass == 0.0
    return logprobs, final[:vocab_size], exact_final(sampling, approximated, within_top_k, rest_cut)


def entropy_bits(logprobs: list[float]) -> float:
    """A lower bound of a position's entropy in bits, from its top tokens: their terms, and the rest of the mass
    as one outcome."""
    p = torch.tensor(logprobs).exp()
    rest = max(0.0, 1.0 - float(p.sum()))
    return float(-(p * p.log()).sum() - (rest * math.log(rest) if rest > 0 else 0.0)) / math.log(2)


def score_rows(ids: list[int], positions: list[Position | None], width: int) -> Scores:
    """`Scores` rows from a server's prompt log-probabilities (`positions`, one per token of `ids`; the first has
    nothing before it): each position's own token (with its rank), the top `width` and the entropy's lower bound."""
    rows = unscored(torch.tensor(ids[:1]))
    logprob, rank, entropy = [], [], []
    top_ids = torch.full((len(ids) - 1, width), -1, dtype=torch.long)
    top_logprobs = torch.full((len(ids) - 1, width), float("nan"))
    for row, (token, position) in enumerate(zip(ids[1:], positions[1:])):
        logprob.append(position[token].logprob)
        rank.append(position[token].rank)
        top = sorted((returned.rank, i, returned.logprob) for i, returned in position.items() if returned.rank <= width)
        for column, (_, i, lp) in enumerate(top):
            top_ids[row, column], top_logprobs[row, column] = i, lp
        entropy.append(entropy_bits([lp for _, _, lp in top]))
    later = Scores(torch.tensor(ids[1:], dtype=torch.long), torch.tensor(logprob, dtype=torch.float),
                   torch.tensor(rank, dtype=torch.long), torch.tensor(entropy, dtype=torch.float), top_ids,
                   top_logprobs)
    return rows.then(later)
