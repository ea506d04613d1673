"""Any OpenAI-compatible completions server as the engine: the OpenAI API's answers, for the completions backend.

The OpenAI completions API names tokens by their text. `logprobs: N` gives each generated position's N likeliest
tokens as {text: log-probability} (`top_logprobs`, with the chosen token's own added), and `echo` gives the prompt's
positions too. This module reads those texts back as token ids through the model's vocabulary (`Named`): a text
that several tokens share (a piece of a multi-byte character) names none of them, so a position keeps its tokens
down to the first such text only (any token below it might be outranked by the tokens it hides), and a token not
kept is unknown there: never shown with a wrong number. A generation's tokens are its text tokenized here (the
same text; the same tokens unless the model wrote a word in pieces its tokenizer joins).

What a server does is asked once, at start (`probe`): whether it takes prompts as token ids (the OpenAI API does;
else the text is sent, and the server tokenizes it again), and whether `echo` scores the prompt, and where: the
OpenAI API puts a token's distribution at the token, llama-cpp-python's server at the token before it.

No field of the API keeps visitors apart: whatever prefix cache the server has serves every request, so one visitor
could learn from its timing whether another wrote a text (`Capabilities.visitors_apart` is False). Nor has it a
field for constraints; streaming is the API's own.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from transformers import AutoConfig, PreTrainedTokenizerBase

from lookahead.backends.base import BackendError, Capabilities
from lookahead.backends.server.client import TIMEOUT_SECONDS, Refused
from lookahead.backends.server.completions import CompletionsBackend
from lookahead.backends.server.connections import PROBE_TEXT, Served
from lookahead.backends.server.server import Post, Server
from lookahead.backends.server.top_n import Position, Returned
from lookahead.backends.server.wire import COMPLETIONS
from lookahead.healing import token_texts
from lookahead.models import load_tokenizer, model_source, stop_tokens

LOGPROBS = int(os.environ.get("LOOKAHEAD_SERVER_LOGPROBS") or 20)  # asked per position; the server may cap it
STOPPED = "stop"  # a choice's finish_reason where the model ended it (no stop strings are sent)
PIECE = "\ufffd"  # a piece of a character, as a decoded token writes it
MATCH_LOGPROB = 0.05  # two readings of one position by the same server agree within this (batch sizes differ)
WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")  # a /models entry's


@dataclass(frozen=True)
class Named:
    """Which token each text names; texts several tokens share name none.

    Servers write a token that is a piece of a character as its whole characters only (llama.cpp drops the rest
    of its bytes, others write U+FFFD for them): a text is read as its whole characters (`key`). llama.cpp writes
    a control token (the end token, a chat template's) as "", which names none."""

    texts: tuple[str, ...]  # each token id's text, read so
    ids: Mapping[str, int]  # the texts that name one token
    controls: frozenset[int] = frozenset()  # the control tokens
    # the texts several tokens share that one of them writes whole (a lone space; the others add a piece of a
    # character): that one, whose own log-probability a server's answer by text does not tell
    whole: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, texts: tuple[str, ...], controls: frozenset[int] = frozenset()) -> Named:
        """From each token id's text on its own (a piece of a character written as U+FFFD)."""
        keys = tuple(map(cls.key, texts))
        counts = Counter(keys)
        shared = [(key, i) for i, (key, text) in enumerate(zip(keys, texts)) if counts[key] > 1 and key == text]
        writers = Counter(key for key, _ in shared)
        return cls(keys, {key: i for i, key in enumerate(keys) if counts[key] == 1}, controls,
                   {key: i for key, i in shared if writers[key] == 1})

    @staticmethod
    def key(text: str) -> str:
        """A server's text for a token, read as `texts` hold it."""
        return text.replace(PIECE, "")

    def writes(self, text: str, token: int) -> bool:
        """Whether `text` is how a server writes `token`."""
        return self.key(text) == self.texts[token] or (text == "" and token in self.controls)

    def ranked(self, top: Mapping[str, float] | None, n: int) -> Position:
        """A position's returned tokens with their ranks, down to the first text that names no one token (the ranks
        below it are not known) and at most `n` (a token the server added past its top `n`, its own choice or the
        prompt's, is not ranked)."""
        position: dict[int, Returned] = {}
        for rank, (text, logprob) in enumerate(likeliest_first(top, n), 1):
            if self.key(text) not in self.ids:
                break
            position[self.ids[self.key(text)]] = Returned(logprob, rank)
        return position

    def top(self, listed: Sequence[tuple[str, float]]) -> tuple[dict[int, float], float | None]:
        """The tokens of a position's top (`listed`: each text at its likeliest token's rank) that a text names, and
        the log-probability the others are at most where some of them are hidden under a text several tokens share
        (that of the text listed just above the first such text, which its tokens rank below); None where none is."""
        keyed = [(self.key(text), logprob) for text, logprob in listed]
        hidden = next((at for at, (text, _) in enumerate(keyed) if text not in self.ids), None)
        ceiling = None if hidden is None else keyed[hidden - 1][1] if hidden else 0.0
        return {self.ids[text]: logprob for text, logprob in keyed if text in self.ids}, ceiling

    def wholes(self, listed: Sequence[tuple[str, float]]) -> list[int]:
        """The tokens that write whole a `listed` text several tokens share: what the text names but for its
        log-probability, which may be any of theirs."""
        return [self.whole[key] for key in (self.key(text) for text, _ in listed) if key in self.whole]


def likeliest_first(top: Mapping[str, float] | None, n: int) -> list[tuple[str, float]]:
    return sorted((top or {}).items(), key=lambda item: -item[1])[:n]


@functools.cache
def named_tokens(tokenizer: PreTrainedTokenizerBase) -> Named:
    """The model's tokens by their texts, as `Named` reads them."""
    controls = frozenset(i for i, token in tokenizer.added_tokens_decoder.items() if token.special)
    return Named.of(token_texts(tokenizer), controls)


def context_window(model: dict, name: str) -> int:
    """The model's window: the server's /models entry where it says, else the model's own positions."""
    listed = next((model[key] for key in WINDOW_KEYS if model.get(key)), None)
    return int(listed or AutoConfig.from_pretrained(model_source(name)).max_position_embeddings)


class OpenAICompatible(Server):
    """A server that answers as the OpenAI completions API does: token texts, `echo`, no fields of its own.

    `takes_ids`: it takes prompts as token ids. `echo_offset`: where its echo puts the distribution that predicts
    a prompt's token: at that token (0), at the token before it (1), or nowhere (None: no prompt scores)."""

    name = "OpenAI-compatible"
    device = "openai"
    logprobs = LOGPROBS
    logprobs_option = "its log-probability limit"
    model_name_option = "the model's name"
    fields: Mapping[str, object] = {}
    batches = False  # the API takes several prompts, but not every server does: one request each

    def __init__(self, takes_ids: bool = True, echo_offset: int | None = 0) -> None:
        self.takes_ids, self.echo_offset = takes_ids, echo_offset

    def request(self, body: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        if self.takes_ids:
            return body
        prompts = body["prompt"]
        text = ([decoded(tokenizer, p) for p in prompts] if prompts and isinstance(prompts[0], list)
                else decoded(tokenizer, prompts))
        return {**body, "prompt": text}

    def answer(self, body: dict, answer: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        """Each choice with its generated token ids ("token_ids"), its first generated position's top tokens ("top")
        and, with `echo`, the prompt's positions ("positions"), all by token id."""
        named = named_tokens(tokenizer)
        choices = [self.read_choice(body, choice, tokenizer, named) for choice in answer.get("choices", [])]
        return {**answer, "choices": choices}

    def read_choice(self, body: dict, choice: dict, tokenizer: PreTrainedTokenizerBase, named: Named) -> dict:
        logprobs = choice.get("logprobs") or {}
        tops = logprobs.get("top_logprobs") or []
        if body.get("echo"):  # the prompt's entries first; the one generated token, if any, is not read
            prompt = body["prompt"]
            positions = self.positions(prompt, logprobs.get("tokens", []), tops, named, body["logprobs"],
                                       self.offset(prompt, tokenizer))
            return {**choice, "token_ids": [], "positions": positions}
        read = {**choice, "token_ids": generated_ids(choice.get("text") or "", choice, body["model"], tokenizer)}
        if tops:
            read.update(self.read_top(tops[0], body["logprobs"], named))
        return read

    def read_top(self, top: Mapping[str, float], n: int, named: Named) -> dict:
        """A generated position's top `n`: the tokens its texts name ("top") and what every other token is at most
        where not the least of them ("ceiling")."""
        found, ceiling = named.top(self.listed(top, n))
        return {"top": found, "ceiling": ceiling}

    def listed(self, top: Mapping[str, float], n: int) -> list[tuple[str, float]]:
        """A generated position's top `n` texts, each at its likeliest token's rank: by log-probability (the API
        leaves their order open; a text several tokens share is taken to carry the likeliest one's)."""
        return likeliest_first(top, n)

    def offset(self, prompt: list[int], tokenizer: PreTrainedTokenizerBase) -> int:
        """How many tokens after its own token an echo entry's top tokens predict."""
        if self.echo_offset is None:
            raise BackendError(f"The {self.name} server does not score a prompt's tokens (echo).")
        return self.echo_offset

    @staticmethod
    def positions(prompt: list[int], texts: list[str], tops: list[dict | None], named: Named, n: int,
                  offset: int) -> list[Position | None]:
        """One position per prompt token (the first: None), from the echo's entries: each entry belongs to the prompt
        token whose text it carries (a control token the server did not list is passed over), and its top tokens
        predict the token `offset` after it. A position no entry predicts is empty (unknown)."""
        positions: list[Position | None] = [None, *({} for _ in prompt[1:])]
        entry = 0
        for at, token in enumerate(prompt):
            if entry < len(texts) and named.writes(texts[entry], token):
                predicted = at + offset
                if 0 < predicted < len(prompt) and tops[entry] is not None:
                    positions[predicted] = named.ranked(tops[entry], n)
                entry += 1
            elif token not in named.controls:
                raise BackendError(
                    f"The server read the prompt as other tokens than this app's tokenizer ({texts[entry:][:3]} "
                    f"where the text has {named.texts[token]!r}): is it serving another model?")
        return positions

    def session_fields(self, model: str, session: str) -> dict:
        return {}

    def token_ids(self, choice: dict) -> list[int]:
        return choice["token_ids"]

    def top_logprobs(self, choice: dict) -> dict[int, float]:
        return choice.get("top", {})

    def ceiling(self, choice: dict) -> float | None:
        return choice.get("ceiling")

    def prompt_logprobs(self, n: int) -> dict:
        return {"echo": True, "logprobs": n}

    def prompt_positions(self, choice: dict) -> list[Position | None]:
        return choice["positions"]

    def allowed_tokens(self, ids: list[int]) -> dict:
        raise ValueError(f"the {self.name} server takes no list of allowed tokens")

    def stop_fields(self, stops: Collection[int]) -> dict:
        return {}

    def logprobs_cap(self, message: str) -> int | None:
        return None

    def context_window(self, model: dict) -> int:
        return context_window(model, model["id"])

    def tokenize(self, post: Post, model: str, text: str) -> list[int]:
        """The server's tokens for `text`, as far as their texts tell: its echo of `text` sent as text, each token's
        text read as this tokenizer's ids where they are the same texts in the same order."""
        tokenizer = load_tokenizer(model)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        echoed = post(COMPLETIONS, {"model": model, "prompt": text, "max_tokens": 1, "echo": True, "logprobs": 0,
                                    "temperature": 0.0}, False)["choices"][0]["logprobs"]["tokens"]
        named = named_tokens(tokenizer)
        same = len(echoed) - len(ids) in (0, 1) and all(map(named.writes, echoed, ids))
        return ids if same else [named.ids.get(named.key(text), -1) for text in echoed]


def decoded(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """The text of `ids`, special tokens written out (a server reading text reads them back as those tokens)."""
    return tokenizer.decode(ids, clean_up_tokenization_spaces=False)


def generated_ids(text: str, choice: dict, model: str, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """A choice's generated tokens: its text tokenized here, then the model's end token where the model stopped."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    return [*ids, *stop_tokens(model)[:1]] if choice.get("finish_reason") == STOPPED else ids


@dataclass(frozen=True)
class Probed:
    """What a probe found of a server."""

    takes_ids: bool
    echo_offset: int | None


def probe(post: Post, model: str, tokenizer: PreTrainedTokenizerBase) -> Probed:
    """Whether the server takes prompts as ids, and where its echo puts each prompt token's distribution: compared
    with its answer for the prompt without its last token, whose top tokens predict that token."""
    ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    greedy = {"model": model, "max_tokens": 1, "temperature": 0.0, "logprobs": 5}
    try:
        post(COMPLETIONS, {**greedy, "prompt": ids[:2]}, False)
        takes_ids = True
    except Refused:
        takes_ids = False
    reader = OpenAICompatible(takes_ids, 0)
    named = named_tokens(tokenizer)

    def ask(body: dict) -> dict:
        return reader.answer(body, post(COMPLETIONS, reader.request(body, tokenizer), False), tokenizer)["choices"][0]

    last = ask({**greedy, "prompt": ids[:-1]}).get("top")  # none where the server ended there
    try:
        echoed = post(COMPLETIONS, reader.request({**greedy, "prompt": ids, "echo": True}, tokenizer), False)
    except Refused:
        return Probed(takes_ids, None)
    logprobs = echoed["choices"][0].get("logprobs") or {}
    tops = logprobs.get("top_logprobs") or []
    for offset, entry in ((0, len(ids) - 1), (1, len(ids) - 2)):
        found = named.ranked(tops[entry] if entry < len(tops) else None, 5)
        if found and last and agree(found, last):
            return Probed(takes_ids, offset)
    return Probed(takes_ids, None)


def agree(position: Position, top: Mapping[int, float]) -> bool:
    """The same likeliest token, with log-probabilities within MATCH_LOGPROB."""
    first = min(position, key=lambda token: position[token].rank)
    return first == max(top, key=top.get) and abs(position[first].logprob - top[first]) < MATCH_LOGPROB


class ProbingBackend(CompletionsBackend):
    """A completions backend that asks its servers what they do (`_probe`): the first time its capabilities are read
    (quietly: a server not answering yet leaves `defaults`), and before it checks a model for the first time."""

    defaults: Capabilities

    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        super().__init__(url, timeout)
        self._found: Capabilities | None = None
        self._asked = False

    @property
    def capabilities(self) -> Capabilities:
        if self._found is None and not self._asked:
            self._asked = True
            try:
                self._probe(None)
            except BackendError:
                pass
        return self._found or self.defaults

    def _probe(self, model: str | None) -> None:
        """Ask the servers what they do (with `model`, or the first their first server lists); set `server` and
        `_found`."""
        raise NotImplementedError

    def _find(self, name: str) -> Served:
        if self._found is None:
            self._probe(name)
        return super()._find(name)


class OpenAIBackend(ProbingBackend):
    """Answers the public functions' checked requests through any OpenAI-compatible completions server at `url` (…/v1;
    several comma-separated: all are taken to answer as the first does)."""

    server = OpenAICompatible()
    # The API has no fields for constraints, nor for keeping visitors' prefixes apart; a fit scores a branch's
    # following text in a request per branch, too slow for a click.
    defaults = Capabilities(precomputation=False, partial_reads=False, cheap_fit=True, attribution=False,
                            prompt_scores=True, batching=True, constraints=False, fit=False, visitors_apart=False)

    def _probe(self, model: str | None) -> None:
        client = self.clients[0]
        with self._answering(client, None):
            model = model or next(iter(client.models()), None)
            if model is None:
                raise BackendError(f"{client.name} serves no model.")
            found = probe(partial(self._send, client), model, load_tokenizer(model))
        self.server = OpenAICompatible(found.takes_ids, found.echo_offset)
        self._found = replace(self.defaults, prompt_scores=found.echo_offset is not None)
