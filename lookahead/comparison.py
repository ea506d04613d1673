"""Where two models part on one text: at every position, each model's log-probability and rank of the token that
came, and the Jensen–Shannon divergence between their whole next-token distributions.

Both models read the same token ids (one tokenizer), SCORE_CHUNK positions at a time, each with its own cache, so
only a chunk's (positions x vocabulary) log-probabilities exist at once, for each model, as in lookahead/scoring.py.
The distributions are each model's softmax over its own logits, compared on the tokenizer's ids (a model may pad its
output layer past them; what it gives those rows is left out of both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from lookahead.scoring import SCORE_CHUNK


@dataclass
class Comparison:
    """Row i describes token i of the text under both models; token 0, with nothing before it, has NaN rows."""

    logprob: torch.Tensor  # (2, N) log p(token i | tokens before it), model a then b
    rank: torch.Tensor  # (2, N) 1 where the token was that model's first choice (0 for token 0)
    js: torch.Tensor  # (N,) divergence in bits between the two distributions before token i
    next_logprobs: torch.Tensor  # (2, vocab) after the last token: what each model expects next
    next_js: float  # their divergence there


def js_bits(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """The Jensen–Shannon divergence, in bits, between matching rows of two log-distributions (..., vocab): half the
    KL divergence of each from their mean; 0 for equal rows, 1 for rows with no token in common."""
    p, q = logp.double().exp(), logq.double().exp()
    log_mean = torch.logaddexp(logp.double(), logq.double()) - math.log(2)
    kl_p = torch.special.xlogy(p, p).sum(-1) - (p * log_mean).nan_to_num(0.0, 0.0, 0.0).sum(-1)
    kl_q = torch.special.xlogy(q, q).sum(-1) - (q * log_mean).nan_to_num(0.0, 0.0, 0.0).sum(-1)
    return (0.5 * (kl_p + kl_q) / math.log(2)).clamp(min=0.0).float()


def token_rows(logprobs: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's log-probability of its token, and the token's rank there (1 + how many tokens are likelier)."""
    chosen = logprobs.gather(-1, token_ids[:, None])
    return chosen[:, 0], (logprobs > chosen).sum(-1) + 1


@torch.inference_mode()
def compare_models(models: tuple[PreTrainedModel, PreTrainedModel], ids: torch.Tensor, vocab: int) -> Comparison:
    """Both models over the token ids `ids` (1, N), a chunk at a time; `vocab`: the tokenizer's size."""
    n = ids.shape[1]
    logprob = torch.full((2, n), math.nan)
    rank = torch.zeros((2, n), dtype=torch.long)
    js = torch.full((n,), math.nan)
    caches = [DynamicCache() for _ in models]
    previous = None  # each model's log-probabilities after the last token of the chunk before
    for start in range(0, n, SCORE_CHUNK):
        chunk = ids[:, start: start + SCORE_CHUNK]
        rows = torch.stack([torch.log_softmax(model(chunk.to(model.device), past_key_values=cache,
                                                    use_cache=True).logits[0].float(), -1)[:, :vocab].cpu()
                            for model, cache in zip(models, caches)])  # (2, chunk, vocab)
        # Row j of the chunk predicts token start + j + 1; the row before the chunk predicts its first token.
        predicting = rows[:, :-1] if previous is None else torch.cat([previous[:, None], rows[:, :-1]], 1)
        first = start + (previous is None)
        targets = ids[0, first: start + chunk.shape[1]].cpu()
        for m in range(2):
            logprob[m, first: first + len(targets)], rank[m, first: first + len(targets)] = token_rows(
                predicting[m], targets)
        js[first: first + len(targets)] = js_bits(predicting[0], predicting[1])
        previous = rows[:, -1]
    return Comparison(logprob, rank, js, previous, float(js_bits(previous[0], previous[1])))


def compared_tokens(listings: tuple[list[dict], list[dict]], js: list[float | None]) -> list[dict]:
    """One entry per token of the text, from both models' token_probabilities listings (one tokenizer: the same
    tokens) and the divergence before each."""
    return [{"token_id": a["token_id"], "token": a["token"], "start": a["start"], "end": a["end"],
             "logprob": [a["logprob"], b["logprob"]], "rank": [a["rank"], b["rank"]], "js": divergence}
            for a, b, divergence in zip(*listings, js)]


def word_units(text: str, listings: tuple[list[dict], list[dict]]) -> list[dict]:
    """The text in words whose log-probability both tokenizers give: a word ends where whitespace follows and both
    models' tokens end too, so each unit is whole tokens under both, and its log-probability (the sum of its
    tokens', None if one has none) does not depend on how either model cut it up."""
    ends = [{token["end"] for token in listing} for listing in listings]
    boundaries = [i for i in range(1, len(text) + 1)
                  if (i == len(text) or text[i].isspace() and not text[i - 1].isspace()) and all(i in e for e in ends)]
    units, start = [], 0
    for end in boundaries:
        sums = [_summed([t["logprob"] for t in listing if start < t["end"] <= end]) for listing in listings]
        units.append({"start": start, "end": end, "text": text[start:end], "logprob": sums})
        start = end
    return units


def _summed(logprobs: list[float | None]) -> float | None:
    return None if not logprobs or any(lp is None for lp in logprobs) else math.fsum(logprobs)
