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
from lookahead.models import stop_tokens
from lookahead.requests import DistributionRequest, LookaheadRequest, MultiverseRequest, Request

MAX_FORCED_TOKENS = 16  # a constraint that writes more than this by itself still branches after that many
WINDOW_STEP = 0.25  # past the context, the window's start moves by this share of it at a time


def window_start(n_tokens: int, room: int, context: int) -> int:
    """How many leading tokens a text of `n_tokens` leaves out so the rest fits in `room`.

    Past the context the start moves in steps of WINDOW_STEP (a share of `context`), not token
    by token: it then stays put while the writer adds up to a step's worth, so the session's
    KV cache keeps being reused instead of every edit recomputing the whole window.
    """
    over = n_tokens - room
    step = max(1, int(WINDOW_STEP * context))
    return 0 if over <= 0 else -(-over // step) * step


class Prompt(NamedTuple):
    """The tokens a lookahead or distribution reads, and what constrains the first token after them."""

    ids: list[int]  # the window: the context's last tokens that leave room for what comes next (and `forced`)
    dropped: int  # leading tokens left out of the window
    healed: str  # trailing whitespace backed up by token healing
    allowed: torch.Tensor | None  # healing's mask over the first token (None once a forced token took it)
    guide: Guide | None  # the constraint's state after the text (and `forced`)
    forced: list[int]  # the last tokens of `ids`: the only ones the constraint allowed after the text, then the lead


def read_prompt(
    request: LookaheadRequest | DistributionRequest, tokenizer: PreTrainedTokenizerBase, matchers: MatcherStore,
    context_limit: int, room: int, vocab_size: int, device: torch.device, force: bool = False,
) -> Prompt:
    """Tokenize the request's text (healing trailing whitespace, in chat mode after the conversation) and
    keep the window that leaves `room` tokens of the model's `context_limit`. With `force` (branches), the
    tokens the constraint leaves no choice about are read too, then the request's `lead` (tokens the model all
    but certainly writes): the branches fork where there is a choice."""
    prefix, healed = split_for_healing(request.text, tokenizer)
    eos = stop_tokens(request.model)
    ids, guide = matchers.context_and_guide(request.key, request.constraint, tokenizer, request.text, prefix,
                                            as_dicts(request.messages), eos, vocab_size, device)
    allowed = allowed_first_tokens(tokenizer, healed, vocab_size, device) if healed else None
    forced = forced_tokens(guide, allowed, eos) if force else []
    lead = list(request.lead) if force and isinstance(request, LookaheadRequest) else []
    for token in lead:
        if guide is not None:
            guide.advance(token)
    forced += lead
    ids = ids + forced
    dropped = window_start(len(ids), context_limit - room, context_limit)
    return Prompt(ids[dropped:], dropped, healed, None if forced else allowed, guide, forced)


def forced_tokens(guide: Guide | None, allowed: torch.Tensor | None, eos: tuple[int, ...]) -> list[int]:
    """The tokens the constraint (and healing's mask, over the first) allows one at a time after the text, taken
    by `guide`: where every branch would start the same, they lead them all, up to the first real choice (or the
    end token, which ends a branch)."""
    forced: list[int] = []
    while guide is not None and len(forced) < MAX_FORCED_TOKENS and not guide.done():
        valid = guide.valid() if allowed is None else guide.valid() & allowed
        if int(valid.sum()) != 1:
            break
        token = int(valid.nonzero()[0, 0])
        if token in eos:
            break
        guide.advance(token)
        forced.append(token)
        allowed = None
    return forced


def follow_ids(request: LookaheadRequest, tokenizer: PreTrainedTokenizerBase, room: int) -> list[int]:
    """The tokens each branch's fit is measured on: the first `fit_tokens` of the text after the caret, tokenized
    on its own (no more than `room`, what the model's context has left)."""
    if not request.after or request.fit_tokens <= 0:
        return []
    return tokenizer(request.after, add_special_tokens=False)["input_ids"][: min(request.fit_tokens, room)]


def writer_ids(request: MultiverseRequest, tokenizer: PreTrainedTokenizerBase, healed: str) -> list[int]:
    """The writer's own next tokens in a map of futures: the first `depth` of the text after the caret, tokenized on
    its own after the whitespace healing backed up (which the paths write first); none at the text's end."""
    if not request.after:
        return []
    return tokenizer(healed + request.after, add_special_tokens=False)["input_ids"][: request.depth]


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
