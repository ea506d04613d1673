"""What a request becomes on the wire, and what comes back, as the completions backend reads it.

A request is sent as token ids tokenized here (`Context`), with the fields asking log-probabilities; an answer's
choices come back in their prompts' order, and are read as a scored text (`Scored`) or the top log-probabilities
after a text (`NextTokens`). A server that allows fewer log-probabilities than asked says how many (`TooManyLogprobs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import PreTrainedTokenizerBase

from lookahead.backends.server.top_n import Position
from lookahead.constraints import Guide
from lookahead.context import ScoredText
from lookahead.outputs import TokenScores
from lookahead.scoring import Scores

COMPLETIONS = "/completions"
AskLogprobs = Callable[[int], dict]  # the request fields asking that many log-probabilities per position


@dataclass(frozen=True)
class Context:
    """What the model sees for one request, tokenized here."""

    tokenizer: PreTrainedTokenizerBase
    ids: list[int]
    dropped: int  # leading tokens left out of the server's context window
    healed: str  # trailing whitespace backed up by token healing
    model: str
    session: str
    allowed: torch.Tensor | None = None  # healing's mask over the first token
    guide: Guide | None = None  # a constraint's state after the text
    forced: tuple[int, ...] = ()  # the last of `ids`: the only tokens the constraint allowed after the text


class Scored(NamedTuple):
    """A text scored by the server: token_probabilities' answer, and what it was built from."""

    result: TokenScores
    text: ScoredText  # the text as tokenized, and the window the server read
    positions: list[Position | None]  # the server's log-probabilities at each position of that window
    rows: Scores  # the rows the answer was built from, one per token of that window


class NextTokens(NamedTuple):
    """The server's top log-probabilities after a text, by token id."""

    top: dict[int, float]
    reused: int  # prompt tokens found in its prefix cache
    ceiling: float | None  # what every token not in `top` is at most, where not the least of `top` (`Server.ceiling`)


class TooManyLogprobs(Exception):
    """The server allows only `allowed` log-probabilities per position."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed


def ask_top_logprobs(n: int) -> dict:
    """OpenAI's field asking the top `n` log-probabilities of each generated position."""
    return {"logprobs": n}


def by_index(answer: dict) -> list[dict]:
    """An answer's choices in the order of its prompts."""
    return sorted(answer["choices"], key=lambda c: c["index"])
