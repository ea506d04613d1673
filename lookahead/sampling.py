"""Sampling settings: transformers' own logits processors, in the order `generate` applies them.

p_base is the plain softmax of the model's logits; p_final is the softmax after the
processors, in this order: the penalties (repetition; presence and frequency), temperature,
a constraint's mask (lookahead/constraints.py), then the filters (top-k, top-p); 0 for tokens
a filter or the constraint cut.
Branches start from the tokens ranked by p_final (then p_base, so cut tokens still
show) and continue either greedily or by sampling from p_final with a seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

BRANCH_MODES = ("greedy", "sample")
# Inclusive ranges. Temperature and repetition penalty divide the logits: far below 0.01 a
# logit overflows float32 to inf, and p_final becomes NaN (1e-45 did, before this bound).
LIMITS = {
    "temperature": (0.01, 5.0),
    "top_p": (0.01, 1.0),
    "repetition_penalty": (0.01, 5.0),
    "presence_penalty": (-2.0, 2.0),  # OpenAI's range
    "frequency_penalty": (-2.0, 2.0),
}


class PresenceFrequencyPenalty(LogitsProcessor):
    """OpenAI's penalties: logit -= presence * [count > 0] + frequency * count, counted over each row's context.

    transformers has no processor for these; the context counted is the one the repetition penalty
    sees (the model's whole window), not only what was generated, as OpenAI and vLLM count.
    """

    def __init__(self, presence: float, frequency: float) -> None:
        self.presence, self.frequency = presence, frequency

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        counts = torch.zeros_like(scores).scatter_add_(1, input_ids, torch.ones_like(input_ids, dtype=scores.dtype))
        return scores - self.presence * (counts > 0).to(scores.dtype) - self.frequency * counts


@dataclass(frozen=True)
class Sampling:
    """What turns p_base into p_final. The defaults change nothing (p_final == p_base)."""

    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    repetition_penalty: float = 1.0  # 1: off
    presence_penalty: float = 0.0  # 0: off
    frequency_penalty: float = 0.0  # 0: off

    def __post_init__(self) -> None:
        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")
            object.__setattr__(self, name, float(value))
        top_k = self.top_k
        if (
            isinstance(top_k, bool)
            or not isinstance(top_k, (int, float))
            or not math.isfinite(top_k)
            or int(top_k) != top_k
            or top_k < 0
        ):
            raise ValueError(f"top_k must be a whole number, 0 (off) or more, got {top_k!r}")
        object.__setattr__(self, "top_k", int(top_k))

    def shaping(self) -> LogitsProcessorList:
        """The processors that reshape the scores (penalties, temperature), in `generate`'s order."""
        chain = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            chain.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        if self.presence_penalty or self.frequency_penalty:
            chain.append(PresenceFrequencyPenalty(self.presence_penalty, self.frequency_penalty))
        if self.temperature != 1.0:
            chain.append(TemperatureLogitsWarper(self.temperature))
        return chain

    def filters(self) -> LogitsProcessorList:
        """The processors that cut tokens (top-k, top-p): after a constraint's mask, so they keep valid tokens."""
        chain = LogitsProcessorList()
        if self.top_k:
            chain.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            chain.append(TopPLogitsWarper(self.top_p))
        return chain

    def processors(self) -> LogitsProcessorList:
        """All of them, in order; empty when all are off."""
        return LogitsProcessorList([*self.shaping(), *self.filters()])

    def final_scores(
        self, context: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Processed scores (B, vocab) for rows of `logits` following the token rows of `context` (B, T).

        `valid` (bool, B x vocab): what a constraint allows; the rest is cut before the filters.
        """
        scores = self.shaping()(context, logits.float())
        if valid is not None:
            scores = scores.masked_fill(~valid, float("-inf"))
        return self.filters()(context, scores)

    def as_dict(self) -> dict:
        return asdict(self)


PLAIN = Sampling()

PRESETS: dict[str, tuple[Sampling, str]] = {
    "greedy": (Sampling(), "greedy"),
    "balanced": (Sampling(temperature=0.7, top_k=40, top_p=0.9, repetition_penalty=1.1), "sample"),
    "creative": (Sampling(temperature=1.1, top_k=0, top_p=0.97, repetition_penalty=1.05), "sample"),
}


def ranked(base_logits: torch.Tensor, final_scores: torch.Tensor, n: int) -> torch.Tensor:
    """The first n token ids by p_final, then (tokens the filters cut) by p_base; never -inf base logits."""
    finite = torch.isfinite(base_logits)
    kept = torch.isfinite(final_scores) & finite
    n_kept, n_finite = int(kept.sum()), int(finite.sum())
    first = final_scores.masked_fill(~kept, float("-inf")).topk(min(n, n_kept)).indices
    rest = base_logits.masked_fill(kept | ~finite, float("-inf")).topk(min(n - len(first), n_finite - n_kept))
    return torch.cat([first, rest.indices])


def choose(final_scores: torch.Tensor, mode: str, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row (B,): the best by p_final ("greedy") or a draw from p_final ("sample")."""
    if mode == "greedy":
        return final_scores.argmax(dim=-1)
    probs = torch.softmax(final_scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
