"""p_base, p_final and per-token scores from a server's top-N log-probabilities, and when they are exact.

A completions server returns, per position, the log-probabilities of its N likeliest tokens ("raw": the
model's softmax, before any penalty or temperature), not the whole vocabulary. p_base is exact for those
tokens. p_final applies transformers' processors as in-process (`Sampling.final_scores`), to the N tokens
and, where it matters, to "the rest": every other token, counted as one token holding their total mass.

The rest plays no part where the filters cut each of its tokens, and which of the N they keep does not
depend on it: then p_final is exact (`exact_final` says when, and why). Elsewhere the rest counts as one
token: an approximation, which the answer's notice says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from lookahead.comparison import js_bits
from lookahead.sampling import PresenceFrequencyPenalty, Sampling
from lookahead.scoring import MAX_ALTERNATIVES, Scores, unscored

EMPTY_REST = 1e-45  # the rest's mass when the N tokens hold it all: a finite log, so the processors see a token
ROUNDING = 1e-6  # more than the error float32 log-probabilities leave in the top N's total mass (a few 1e-7): the
# rest's mass is known to within this, and a temperature above 1 makes even that much count


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


def log_total(*parts: torch.Tensor | float) -> float:
    """log of the summed exp of `parts` (tensors of log-masses, or one log-mass each); -inf for none."""
    return float(torch.cat([torch.as_tensor(part, dtype=torch.float).reshape(-1) for part in parts]).logsumexp(0))


def exact_final(sampling: Sampling, approximated: bool, logprobs: torch.Tensor,
                context: list[int], ceiling: float | None = None) -> torch.Tensor | None:
    """log p_final over the vocabulary where the top N (`logprobs`: -inf for a token that did not come back) give
    it exactly, whatever the tokens that did not come back; None elsewhere. `ceiling`: the log-probability no token
    that did not come back exceeds, where it is not the least likely returned token's (a server that could not name
    some of its top N).

    None after healing or under a constraint (`approximated`: renormalised over the allowed tokens that came back),
    and with a repetition penalty (it needs the logits' signs, not log-probabilities).

    Each token that did not come back is at most as likely as the least likely returned token, and as all of them
    together (the rest's mass: 1 minus the top N's, to within ROUNDING). So after its own presence and frequency
    penalties (known for every token: they count the context) and the temperature, it scores at most the
    `ceiling`. The returned tokens scoring at least that ("above"; a tie is the server's choice among equals)
    outrank every token that did not come back. The others ("below": returned tokens under the ceiling, and
    every token that did not come back) may come in any order. With no penalty every returned token is above.

    - top_k <= len(above): top_k keeps tokens above only; top_p, min_p and the normalisation see known tokens
      only. Exact.
    - Else top_k keeps every token above and some below, of a mass (after the penalties and the temperature)
      unknown but between a least and a most. Exact where the filters, with either end counted as one token
      beside the tokens above, cut the most and keep the same tokens above. min_p then cuts every token below
      (each holds less than the most; the threshold is relative to the likeliest token, which is above). top_p
      cuts every token below, and each token above that it cuts with the most: the tokens ranked before them
      hold top_p of a total at least the true one. And top_p keeps more tokens above the more mass is kept
      below them: each that it keeps with the least is kept in truth.
    - The ends. With top_p off only min_p counts, token by token: the most is one token at the ceiling, the
      least none. With top_p, the most is the returned tokens below and the rest's mass under the smallest
      penalty among the tokens that did not come back; below temperature 1 that mass is raised to
      1/temperature, at most the rest's mass times the likeliest such token's to the power 1/temperature - 1.
      The least is the top_k - len(above) likeliest returned tokens below (top_k keeps those, or likelier
      ones); with top_k off every returned token below, and at temperature 1 the rest's mass under the largest
      penalty. Above temperature 1 with top_p: approximate. No most is known: raised to 1/temperature the
      rest's mass grows as it spreads over more tokens, and counting top_k - len(above) tokens at the ceiling
      fails where tokens tie with the k-th (transformers' top_k keeps them all).
    """
    returned = torch.isfinite(logprobs)
    if approximated or sampling.repetition_penalty != 1.0 or not returned.any():
        return None
    ids = torch.tensor([context], dtype=torch.long)
    shaped = sampling.shaping()(ids, logprobs[None])[0]
    lift = PresenceFrequencyPenalty(sampling.presence_penalty, sampling.frequency_penalty)(
        ids, torch.zeros(1, len(logprobs)))[0]  # minus each token's penalty
    rest_mass = 1.0 - float(logprobs[returned].double().exp().sum())  # to within ROUNDING
    temperature = sampling.temperature
    if returned.all():  # nothing past the top N
        above, ceiling, rest_most, rest_least = returned, float("-inf"), float("-inf"), float("-inf")
    else:
        most_mass, least_mass = max(rest_mass, 0.0) + ROUNDING, rest_mass - ROUNDING
        least = float(logprobs[returned].min()) if ceiling is None else ceiling
        bound = min(least, math.log(most_mass))  # each such token's log-probability
        least_penalty, most_penalty = float(lift[~returned].max()), float(lift[~returned].min())
        above = returned & (logprobs + lift >= bound + least_penalty)  # before the temperature: ties stay ties
        ceiling = (bound + least_penalty) / temperature
        rest_most = math.log(most_mass) + least_penalty / temperature + (1 / temperature - 1) * bound
        rest_least = math.log(least_mass) + most_penalty if least_mass > 0 else float("-inf")
    filters, top_k, n_above = sampling.filters(), sampling.top_k, int(above.sum())
    known = shaped[above]  # the filters see finite scores only: the tokens above, and an end
    if 1 <= top_k <= n_above:
        keep = torch.isfinite(filters(ids, known[None])[0])
    else:
        below = shaped[returned & ~above]
        if sampling.top_p == 1.0:
            most, least = ceiling, float("-inf")
        elif temperature > 1.0:
            return None
        else:
            most = log_total(below, rest_most)
            if top_k:
                least = log_total(below.topk(min(top_k - n_above, len(below))).values)
            else:
                least = log_total(below, rest_least if temperature == 1.0 else float("-inf"))
        at_most, at_least = (torch.isfinite(filters(ids, torch.cat([known, torch.tensor([end])])[None])[0])
                             for end in (most, least))
        if at_most[-1] or not torch.equal(at_most[:-1], at_least[:-1]):
            return None
        keep = at_most[:-1]
    kept = torch.zeros_like(above)
    kept[above] = keep
    return torch.log_softmax(shaped.masked_fill(~kept, float("-inf")), -1)


def next_token_logprobs(
    top: Mapping[int, float], vocab_size: int, context: list[int], sampling: Sampling,
    allowed: torch.Tensor | None, valid: torch.Tensor | None = None, ceiling: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(log p_base, log p_final, exact) over the vocabulary, from the server's top-N log-probabilities `top` (and the
    `ceiling` of those it did not return, where it is not the least of `top`).

    Tokens that did not come back have -inf. Where p_final is not exact (`exact_final`): under a constraint
    (`valid`) it is renormalised over the valid tokens that came back; with top_k keeping at most N tokens, over
    the returned tokens alone; else the rest counts as one token: the repetition penalty is applied to
    log-probabilities, not logits; a temperature scales the rest as one token; top_p and the normalisation see
    the rest as one token.
    """
    returned = {i: lp for i, lp in top.items() if i < vocab_size}
    logprobs = base_logprobs(returned, vocab_size, allowed)
    approximated = allowed is not None or valid is not None
    if not sampling.processors() and valid is None:
        return logprobs, logprobs, not approximated
    exact = exact_final(sampling, approximated, logprobs, context, ceiling)
    if exact is not None:
        return logprobs, exact, True
    if valid is not None or 1 <= sampling.top_k <= len(returned):
        return logprobs, final_logprobs(logprobs, context, sampling, valid), False
    rest_mass = max(0.0, 1.0 - float(logprobs.exp().sum()))
    rest = torch.tensor([math.log(rest_mass or EMPTY_REST)])
    final = final_logprobs(torch.cat([logprobs, rest]), context, sampling)
    return logprobs, final[:vocab_size], False


def entropy_bits(logprobs: list[float]) -> float:
    """A lower bound of a position's entropy in bits, from its top tokens: their terms, and the rest of the mass
    as one outcome."""
    p = torch.tensor(logprobs).exp()
    rest = max(0.0, 1.0 - float(p.sum()))
    return float(-(p * p.log()).sum() - (rest * math.log(rest) if rest > 0 else 0.0)) / math.log(2)


def score_rows(ids: list[int], positions: list[Position | None], width: int) -> Scores:
    """`Scores` rows from a server's prompt log-probabilities (`positions`, one per token of `ids`; the first has
    nothing before it): each position's own token (with its rank), its top MAX_ALTERNATIVES (as every `Scores`
    row, whatever `width`) and the entropy's lower bound from its top `width`. A token the server did not return at
    its position (outside the top N of a server that returns only those) has no probability there (NaN) and the
    least rank it can have (N + 1; 0 where the server named none): never a wrong number."""
    rows = unscored(torch.tensor(ids[:1]))
    logprob, rank, entropy = [], [], []
    top_ids = torch.full((len(ids) - 1, MAX_ALTERNATIVES), -1, dtype=torch.long)
    top_logprobs = torch.full((len(ids) - 1, MAX_ALTERNATIVES), float("nan"))
    for row, (token, position) in enumerate(zip(ids[1:], positions[1:])):
        top = sorted((returned.rank, i, returned.logprob) for i, returned in position.items() if returned.rank <= width)
        own = position.get(token, Returned(math.nan, len(top) + 1 if top else 0))
        logprob.append(own.logprob)
        rank.append(own.rank)
        for column, (_, i, lp) in enumerate(top[:MAX_ALTERNATIVES]):
            top_ids[row, column], top_logprobs[row, column] = i, lp
        entropy.append(entropy_bits([lp for _, _, lp in top]))
    later = Scores(torch.tensor(ids[1:], dtype=torch.long), torch.tensor(logprob, dtype=torch.float),
                   torch.tensor(rank, dtype=torch.long), torch.tensor(entropy, dtype=torch.float), top_ids,
                   top_logprobs)
    return rows.then(later)


def likeliest(top: Mapping[int, float], n: int) -> dict[int, float]:
    """The `n` likeliest of a position's returned log-probabilities (a server may add the token it chose)."""
    return dict(sorted(top.items(), key=lambda item: -item[1])[:n])


def ranked_top(position: Position, n: int) -> dict[int, float]:
    """A prompt position's top `n` log-probabilities (it holds its own token's too, whatever its rank)."""
    return {token: returned.logprob for token, returned in position.items() if returned.rank <= n}


def first_choice(position: Position) -> int:
    """The likeliest token at a prompt position."""
    return min(position, key=lambda token: position[token].rank)


def top_n_js_bits(pairs: Sequence[tuple[Mapping[int, float], Mapping[int, float]]]) -> torch.Tensor:
    """The Jensen–Shannon divergence in bits at each position, from two models' top-N log-probabilities there: both
    distributions coarse-grained onto the same cells, one per token in both top N and one for every other token (each
    model's remaining mass). A lower bound of the whole distributions' divergence (the data-processing inequality)."""
    common = [sorted(a.keys() & b.keys()) for a, b in pairs]
    cells = torch.full((2, len(pairs), max(map(len, common), default=0) + 1), float("-inf"), dtype=torch.float64)
    for row, ((a, b), tokens) in enumerate(zip(pairs, common)):
        cells[:, row, : len(tokens)] = torch.tensor([[a[t] for t in tokens], [b[t] for t in tokens]],
                                                    dtype=torch.float64)
    rest = 1.0 - cells[..., :-1].exp().sum(-1)
    cells[..., -1] = rest.clamp(min=0.0).log()  # -inf where the top tokens hold it all
    return js_bits(cells[0], cells[1])
