"""Sampling settings: transformers' own logits processors, in the order `generate` applies them.

p_base is the plain softmax of the model's logits; p_final is the softmax after the
processors, in this order: the penalties (repetition; presence and frequency), temperature,
a constraint's mask (lookahead/constraints.py), then the filters (top-k, top-p, min-p); 0 for tokens
a filter or the constraint cut.
Branches start from the tokens ranked by p_final (then p_base, so cut tokens still
show) and continue either greedily or by sampling from p_final with a seeded generator.
Each setting is described once, by its field's `Knob`: the page's sliders, the API's checks and the
endpoints' parameter descriptions are made from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

BRANCH_MODES = ("greedy", "sample", "mass")
MAX_TOP_K = 200


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
class Knob:
    """One sampling setting as every layer shows it: its range, the page's slider and label, and the one line that
    describes it to API and MCP callers. Written once, here, beside the field it describes."""

    low: float
    high: float
    label: str  # the page's
    description: str  # one line: the endpoints' parameter description (MCP's too)
    slider: tuple[float, float, float]  # the page's (minimum, maximum, step): the useful part of the range

    @property
    def whole(self) -> bool:
        return self.slider[2] == 1


def knob(off: float, low: float, high: float, label: str, description: str, slider: tuple[float, float, float]):
    """A `Sampling` field whose default, `off`, changes nothing."""
    return field(default=off, metadata={"knob": Knob(low, high, label, description, slider)})


def knobs() -> dict[str, Knob]:
    """Every sampling setting's knob, by field name, in the fields' order."""
    return {f.name: f.metadata["knob"] for f in fields(Sampling)}


@dataclass(frozen=True)
class Sampling:
    """What turns p_base into p_final. The defaults change nothing (p_final == p_base).

    Temperature and repetition penalty divide the logits: far below 0.01 a logit overflows float32 to inf, and
    p_final becomes NaN (1e-45 did, before the lower bound).
    """

    temperature: float = knob(1.0, 0.01, 5.0, "Temperature", "Sampling temperature applied to p_final (0.01-5; 1 "
                              "changes nothing).", (0.05, 2.0, 0.05))
    top_k: int = knob(0, 0, MAX_TOP_K, "Top-k (0 = off)", "Keep only the top_k likeliest tokens in p_final (0-200; 0 "
                      "is off).", (0, MAX_TOP_K, 1))
    top_p: float = knob(1.0, 0.01, 1.0, "Top-p (1 = off)", "Keep the fewest likeliest tokens whose probabilities sum "
                        "to top_p (0.01-1; 1 is off).", (0.05, 1.0, 0.01))
    repetition_penalty: float = knob(1.0, 0.01, 5.0, "Repetition penalty (1 = off)", "transformers' repetition "
                                     "penalty over the context (0.01-5; 1 is off).", (1.0, 2.0, 0.05))
    presence_penalty: float = knob(0.0, -2.0, 2.0, "Presence penalty (0 = off)", "OpenAI's presence penalty over "
                                   "the context (-2 to 2; 0 is off).", (-2.0, 2.0, 0.1))
    frequency_penalty: float = knob(0.0, -2.0, 2.0, "Frequency penalty (0 = off)", "OpenAI's frequency penalty over "
                                    "the context (-2 to 2; 0 is off).", (-2.0, 2.0, 0.1))
    min_p: float = knob(0.0, 0.0, 1.0, "Min-p (0 = off)", "After top_p, drop the tokens less likely than min_p "
                        "times the likeliest (0-1; 0 is off).", (0.0, 0.5, 0.01))

    def __post_init__(self) -> None:
        for name, setting in knobs().items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a number from {setting.low:g} to {setting.high:g}, got {value!r}")
            if setting.whole and int(value) != value:
                raise ValueError(f"{name} must be a whole number from {setting.low:g} to {setting.high:g}, "
                                 f"got {value!r}")
            if not setting.low <= value <= setting.high:
                raise ValueError(f"{name} must be between {setting.low:g} and {setting.high:g}, got {value!r}")
            object.__setattr__(self, name, int(value) if setting.whole else float(value))

    @classmethod
    def from_keywords(cls, given: Sampling | None, keywords: Mapping[str, object]) -> Sampling:
        """The sampling a caller asked for: `given` whole, or the flat keywords named as its fields (the others in
        `keywords` are ignored), not both."""
        flat = {name: keywords[name] for name in knobs() if name in keywords}
        if given is None:
            return cls(**flat)
        if not isinstance(given, Sampling):
            raise ValueError(f"sampling must be a Sampling, got {type(given).__name__}")
        changed = sorted(name for name, value in flat.items() if value != getattr(PLAIN, name))
        if changed:
            raise ValueError(f"give the sampling either as `sampling` or as keywords, not both (also given: "
                             f"{', '.join(changed)})")
        return given

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
        """The processors that cut tokens (top-k, top-p, min-p): after a constraint's mask, so they keep valid
        tokens."""
        chain = LogitsProcessorList()
        if self.top_k:
            chain.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            chain.append(TopPLogitsWarper(self.top_p))
        if self.min_p > 0.0:
            chain.append(MinPLogitsWarper(self.min_p))
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
LIMITS = {name: (setting.low, setting.high) for name, setting in knobs().items()}

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
