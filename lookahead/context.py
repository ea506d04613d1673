"""What the model reads for a request, the same for every backend: the text's tokens in their chat
template, the window that fits the model's context, token healing's first-token mask, and a
constraint's state after the text. A backend supplies its tokenizer, context length and device.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import PreTrainedTokenizerBase

from lookahead.chat import as_dicts, encode
from lookahead.constraints import Guide, MatcherStore
from lookahead.healing import allowed_first_tokens, split_for_healing
from lookahead.requests import DistributionRequest, LookaheadRequest, Request
from lookahead.results import stop_tokens, window_start


class Prompt(NamedTuple):
    """The tokens a lookahead or distribution reads, and what constrains the first token after them."""

    ids: list[int]  # the window: the context's last tokens that leave room for what comes next
    dropped: int  # leading tokens left out of the window
    healed: str  # trailing whitespace backed up by token healing
    allowed: torch.Tensor | None  # healing's mask over the first token
    guide: Guide | None  # the constraint's state after the text


def read_prompt(
    request: LookaheadRequest | DistributionRequest, tokenizer: PreTrainedTokenizerBase, matchers: MatcherStore,
    context_limit: int, room: int, vocab_size: int, device: torch.device,
) -> Prompt:
    """Tokenize the request's text (healing trailing whitespace, in chat mode after the conversation) and
    keep the window that leaves `room` tokens of the model's `context_limit`."""
    prefix, healed = split_for_healing(request.text, tokenizer)
    ids, guide = matchers.context_and_guide(request.key, request.constraint, tokenizer, request.text, prefix,
                                            as_dicts(request.messages), stop_tokens(request.model), vocab_size, device)
    dropped = window_start(len(ids), context_limit - room, context_limit)
    allowed = allowed_first_tokens(tokenizer, healed, vocab_size, device) if healed else None
    return Prompt(ids[dropped:], dropped, healed, allowed, guide)


class ScoredText(NamedTuple):
    """A text tokenized for scoring each of its tokens: the encoding with offsets, and the window scored."""

    encoding: dict  # input_ids, offset_mapping, special_tokens_mask of the whole (templated) text
    text_start: int  # where the text begins in the templated string
    dropped: int  # leading tokens left out of the window

    @property
    def ids(self) -> list[int]:
        return self.encoding["input_ids"][self.dropped:]


def read_scored_text(request: Request, tokenizer: PreTrainedTokenizerBase, context_limit: int) -> ScoredText:
    encoding, text_start = encode(tokenizer, request.text, as_dicts(request.messages), return_offsets_mapping=True,
                                  return_special_tokens_mask=True)
    dropped = window_start(len(encoding["input_ids"]), context_limit - 1, context_limit)
    return ScoredText(encoding, text_start, dropped)
