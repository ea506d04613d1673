"""Passes over a kept KV cache: the prompt's new tokens read after what it holds (beside a caret's hidden tail), and
the additive attention masks that let many continuations share one cache (the branches, lookahead/branches.py; the
map of futures, lookahead/multiverse.py; lookahead decoding's guesses, lookahead/decoding.py).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from lookahead.scoring import Scores, extend_and_score


def extend_cache(model: PreTrainedModel, input_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
    """Run the tokens of `input_ids` (1, T) that `cache` does not hold yet; return the last logits (vocab,).

    At least one token must be new, since the last position's logits are not cached.
    """
    past = cache.get_seq_length()
    if not 0 <= past < input_ids.shape[1]:
        raise ValueError(f"cache holds {past} tokens; need fewer than the {input_ids.shape[1]} given")
    out = model(input_ids[:, past:], past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1]


def tree_attention_mask(
    prompt: int | torch.Tensor, k: int, step: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """(1, 1, k, P + step*k) additive mask for feeding branch tokens of depth `step-1`.

    Columns: the prompt's P cache entries (`prompt`: their number, all visible, or a bool (P,) of the visible
    ones), then `step` blocks of k branch tokens, of which row b sees only column b of each block (its own branch).
    """
    return additive_mask(prompt, torch.eye(k, dtype=torch.bool, device=device).repeat(1, step), dtype, device)


def additive_mask(
    past: int | torch.Tensor, own: torch.Tensor, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """(1, 1, q, P + n) additive attention mask for q new tokens: each sees the P cached positions (`past`: how
    many, all visible, or a bool (P,) of the visible ones), and of the n new columns those where the boolean
    (q, n) `own` is True; the rest get dtype's lowest value."""
    seen = torch.ones(past, dtype=torch.bool, device=own.device) if isinstance(past, int) else past.to(own.device)
    return visibility_mask(torch.cat([seen.expand(own.shape[0], -1), own], dim=1), dtype, device)


def visibility_mask(visible: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, q, n) additive attention mask from a bool (q, n): dtype's lowest value where a row must not look."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=device)
    mask.masked_fill_(~visible.to(device), torch.finfo(dtype).min)
    return mask[None, None]


def extend_prompt(model: PreTrainedModel, input_ids: torch.Tensor, cache: DynamicCache, hidden: int = 0,
                  known_scores: Scores | None = None) -> tuple[torch.Tensor, Scores | None, torch.Tensor]:
    """Run what `cache` lacks of `input_ids` (1, T), beside its last `hidden` entries (a caret's text after it,
    which nothing sees), scoring the new tokens with `known_scores`. The last logits (vocab,), the scores, and each
    cache entry's logical position (-1: hidden), which every tree pass after it masks and places by."""
    stored = cache.get_seq_length()
    if hidden:
        logits, scores = _extend_beside(model, input_ids, cache, stored - hidden, hidden), None
    elif known_scores is None:
        logits, scores = extend_cache(model, input_ids, cache), None
    else:
        logits, scores = extend_and_score(model, input_ids, cache, known_scores)
    seen = stored - hidden
    places = torch.cat([torch.arange(seen), torch.full((hidden,), -1), torch.arange(seen, input_ids.shape[1])])
    return logits, scores, places.to(input_ids.device)


def _extend_beside(model: PreTrainedModel, input_ids: torch.Tensor, cache: DynamicCache, seen: int,
                   hidden: int) -> torch.Tensor:
    """Run `input_ids`' tokens after the cache's first `seen` (1, T) beside its `hidden` last entries, which none
    of them sees; the last logits (vocab,)."""
    new = input_ids[:, seen:]
    n = new.shape[1]
    past = torch.arange(seen + hidden) < seen
    mask = additive_mask(past, torch.ones(n, n, dtype=torch.bool).tril(), model.dtype, input_ids.device)
    positions = torch.arange(seen, seen + n, device=input_ids.device)[None]
    out = model(new, past_key_values=cache, attention_mask=mask, position_ids=positions, use_cache=True,
                logits_to_keep=1)
    return out.logits[0, -1]
