"""Constraints on what may come next: a choice of strings, a regex, a JSON schema or a Lark grammar.

The grammar engine is llguidance: a session compiles a grammar once per (model, constraint) into a
pristine matcher, and every use works on a `deep_copy` of it (cheap), so branches each carry
their own state through the one tree pass. Compiled grammars are never shared between sessions:
a cache keyed by what visitors typed would let one time whether another had typed the same.
A `Guide` is a matcher at one point of the text: which tokens may come next (`valid`), and
`advance` by the token taken.

The constrained part of the text starts at a character offset, which may fall inside a token
("The answer is y|es"). As token healing does, the model's context is left as the tokenizer
splits it, and the matcher starts at the first token that reaches past `start`: the grammar
it checks is that token's characters before `start`, literally, followed by the constraint.
A session keeps its last matcher (`MatcherStore`), so a click advances it by the new tokens only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import llguidance
import llguidance.hf
import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from lookahead.chat import context_ids, encode
from lookahead.sessions import SessionStore

CONSTRAINT_TYPES = ("choice", "regex", "json_schema", "grammar")
MAX_CHOICES = 1000
MAX_VALUE_CHARS = 100_000
KEPT_SESSIONS = 256  # sessions whose matchers are kept
KEPT_PER_SESSION = 8  # matchers kept per session
COMPILED_PER_SESSION = 4  # pristine (compiled) matchers kept per session


@dataclass(frozen=True)
class Constraint:
    """A checked constraint: hashable, so requests that carry it can be compared and precomputed."""

    type: str
    value: str  # choice: a JSON list; json_schema: JSON text; regex and grammar: as given
    start: int | None  # where the constrained part of the text begins; None: at its end

    def body(self) -> str:
        """The llguidance grammar of the constrained part alone."""
        if self.type == "choice":
            return llguidance.LLMatcher.grammar_from_lark(
                "start: " + " | ".join(json.dumps(c) for c in json.loads(self.value)))
        if self.type == "regex":
            return llguidance.LLMatcher.grammar_from_regex(self.value)
        if self.type == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(self.value)
        return llguidance.LLMatcher.grammar_from_lark(self.value)

    def as_dict(self) -> dict:
        value = json.loads(self.value) if self.type in ("choice", "json_schema") else self.value
        return {"type": self.type, "value": value, "start": self.start}


def check_constraint(spec: object, text: str) -> Constraint | None:
    """`spec` ({"type", "value", "start"} or None) checked and compiled; ValueError saying what is wrong."""
    if spec is None:
        return None
    if not isinstance(spec, dict) or not {"type", "value"} <= set(spec) <= {"type", "value", "start"}:
        raise ValueError('constraint must be None or a dict {"type", "value", "start" (optional)}, got '
                         f"{spec if not isinstance(spec, dict) else sorted(spec)!r}")
    kind, value, start = spec["type"], spec["value"], spec.get("start")
    if kind not in CONSTRAINT_TYPES:
        raise ValueError(f"constraint type must be one of {list(CONSTRAINT_TYPES)}, got {kind!r}")
    if kind == "choice":
        if (not isinstance(value, list) or not 1 <= len(value) <= MAX_CHOICES
                or not all(isinstance(c, str) and c for c in value)):
            raise ValueError(f"a choice constraint's value must be a list of 1 to {MAX_CHOICES} non-empty strings, "
                             f"got {value!r}"[:300])
        value = json.dumps(value)
    elif kind == "json_schema":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise ValueError(f"a json_schema constraint's value is not valid JSON: {error}") from None
        if not isinstance(value, (dict, bool)):
            raise ValueError(f"a json_schema constraint's value must be an object (or JSON text of one), got "
                             f"{type(value).__name__}")
        value = json.dumps(value)  # keys in their order: the grammar writes properties in the schema's order
    elif not isinstance(value, str) or not value:
        raise ValueError(f"a {kind} constraint's value must be a non-empty string, got {value!r}")
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"the constraint's value is too long: {len(value):,} characters, "
                         f"the limit is {MAX_VALUE_CHARS:,}")
    if start is not None and (isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(text)):
        raise ValueError(f"constraint start must be None or a character offset from 0 to {len(text)} (the text's "
                         f"length), got {start!r}")
    constraint = Constraint(kind, value, start)
    error = llguidance.LLMatcher.validate_grammar(constraint.body())
    if error:
        raise ValueError(f"the {kind} constraint does not compile: {compile_error(error)}")
    return constraint


def compile_error(error: str, limit: int = 300) -> str:
    """llguidance's error as one line: its first line alone can be a bare heading ("regex parse error:") whose
    detail (the pattern, a caret under the fault, what is wrong) follows on the next lines."""
    lines = [" ".join(line.split()) for line in error.strip().splitlines()]
    text = " ".join(line for line in lines if line and set(line) != {"^"})
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.lru_cache(maxsize=8)
def _ll_tokenizer(tokenizer: PreTrainedTokenizerBase, eos: tuple[int, ...]) -> llguidance.LLTokenizer:
    """llguidance's view of the tokenizer (~1 s to build, so once per model); ending means one of `eos`."""
    return llguidance.hf.from_tokenizer(tokenizer, eos_token=list(eos) or None)


def _compile(tokenizer: llguidance.LLTokenizer, body: str, written: str) -> llguidance.LLMatcher:
    """A pristine matcher for `written` (literally) then `body`; only ever copied, never advanced."""
    sub = json.loads(body) if body.lstrip().startswith("{") else {"grammars": [{"lark_grammar": body}]}
    inner = {**sub["grammars"][0], "name": "constrained"}
    head = f"start: {json.dumps(written)} @constrained" if written else "start: @constrained"
    matcher = llguidance.LLMatcher(tokenizer, json.dumps({"grammars": [{"lark_grammar": head}, inner]}), log_level=0)
    if matcher.is_error():
        raise ValueError(f"the constraint does not compile: {compile_error(matcher.get_error())}")
    return matcher


class Guide:
    """A constraint's matcher at one point: which tokens may come next, and advancing by the one taken."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, device: torch.device, reused: int = 0) -> None:
        self.matcher, self.vocab_size, self.device = matcher, vocab_size, device
        self.reused = reused  # tokens a kept matcher had taken already (not taken again)

    def valid(self) -> torch.Tensor:
        """Bool (vocab,) of the tokens the constraint allows next (only the end token once it is complete)."""
        bits = np.unpackbits(np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        valid = np.zeros(self.vocab_size, dtype=bool)
        n = min(len(bits), self.vocab_size)
        valid[:n] = bits[:n]
        return torch.from_numpy(valid).to(self.device)

    def advance(self, token: int) -> bool:
        """Take `token`; False if the constraint refuses it (the guide is then spent)."""
        return self.matcher.consume_token(token)

    def fork(self) -> Guide:
        return Guide(self.matcher.deep_copy(), self.vocab_size, self.device)

    def done(self) -> bool:
        """Nothing more can be written (it is complete, or refused a token)."""
        return self.matcher.is_stopped()

    def pick(self, logits: torch.Tensor) -> int:
        """The best token by `logits` among the valid ones (greedy decoding under the constraint)."""
        valid = self.valid()
        if not valid.any():
            raise ValueError("no token can continue the text under the constraint")
        return int(logits.float().masked_fill(~valid, float("-inf")).argmax())


def free_and_constrained(offsets: Sequence[tuple[int, int]], start: int, text_end: int) -> tuple[int, int]:
    """(index of the first token reaching past `start`, where that token begins): the matcher starts there.

    `offsets` are the tokens' character spans in the text; tokens not of the text end at or before 0.
    """
    for i, (begin, end) in enumerate(offsets):
        if end > start and end > 0:
            return i, max(0, min(begin, start))
    return len(offsets), min(start, text_end)


class ConstraintMismatch(ValueError):
    """The text written after a constraint's start no longer fits it: the constraint is fine, the text has moved on
    (the page then suggests without it and says so; a malformed constraint is a plain ValueError)."""


def written_part_error(
    constraint: Constraint, text: str, tokenizer: PreTrainedTokenizerBase, eos: tuple[int, ...]
) -> str:
    """Why the constrained part written so far cannot begin a match ("" if it can)."""
    start = len(text) if constraint.start is None else constraint.start
    part = text[start:]
    if not part:
        return ""
    lt = _ll_tokenizer(tokenizer, eos)
    # Compiled anew on every call: there is no session here to keep it by, and a process-wide cache keyed by the
    # constraint would let one visitor time whether another had typed it. It costs 3-8 ms for the usual
    # constraints (about 30 ms for 1,000 choices) on a 2-core CPU, as much as `check_constraint`'s own check.
    pristine = _compile(lt, constraint.body(), "")
    matcher = pristine.deep_copy()
    tokens = lt.tokenize_str(part)
    taken = matcher.try_consume_tokens(tokens)
    if taken == len(tokens):
        return ""
    matched = len(lt.decode_str(tokens[:taken]))
    matcher = pristine.deep_copy()
    matcher.consume_tokens(lt.tokenize_str(part[:matched]))
    for i in range(matched, len(part)):
        if not matcher.consume_tokens(lt.tokenize_str(part[i])):
            matched = i
            break
    where = start + matched
    return (f"the text from character {start} does not fit the {constraint.type} constraint: it stops matching at "
            f"character {where} ({text[where : where + 20]!r}); move the start, or edit the text there")


class MatcherStore:
    """Each session's latest matchers and the tokens they took, so a call advances one by its new tokens only.

    A few are kept per session (precomputing the branches' results stores one each), and so are the
    session's pristine matchers, compiled by the session itself (see the module's docstring). Stored
    matchers are only ever copied, so none is advanced by two threads at once.
    """

    def __init__(
        self, max_sessions: int = KEPT_SESSIONS, per_session: int = KEPT_PER_SESSION,
        compiled_per_session: int = COMPILED_PER_SESSION,
    ) -> None:
        # key -> [(grammar, the tokens taken, the matcher after them)], the latest last
        self._sessions: SessionStore[Hashable, list[tuple[tuple, tuple[int, ...], llguidance.LLMatcher]]] = (
            SessionStore(max_sessions))
        # key -> [(grammar, its pristine matcher)], the latest used last
        self._compiled: SessionStore[Hashable, list[tuple[tuple, llguidance.LLMatcher]]] = SessionStore(max_sessions)
        self.per_session, self.compiled_per_session = per_session, compiled_per_session

    def guide(
        self, key: Hashable, constraint: Constraint, written: str, tokens: Sequence[int],
        tokenizer: PreTrainedTokenizerBase, eos: tuple[int, ...], vocab_size: int, device: torch.device,
    ) -> Guide:
        """A guide that has taken `tokens` under (`written` then the constraint); ValueError if it refuses one."""
        grammar, tokens = (constraint.type, constraint.value, written), tuple(tokens)
        kept = [(len(t), m) for g, t, m in self._sessions.get(key) or () if g == grammar and tokens[: len(t)] == t]
        if kept:
            taken, stored = max(kept, key=lambda pair: pair[0])
            matcher = stored.deep_copy()
        else:
            taken, matcher = 0, self._pristine(key, grammar, constraint, written, tokenizer, eos).deep_copy()
        if not matcher.consume_tokens(list(tokens[taken:])):
            raise ConstraintMismatch(f"the {constraint.type} constraint refuses the text written after its start")
        with self._sessions.lock:  # as one step: another call of the session may store its matcher meanwhile
            entries = [e for e in self._sessions.get(key) or () if (e[0], e[1]) != (grammar, tokens)]
            self._sessions.put(key, [*entries, (grammar, tokens, matcher.deep_copy())][-self.per_session :])
        return Guide(matcher, vocab_size, device, taken)

    def _pristine(
        self, key: Hashable, grammar: tuple, constraint: Constraint, written: str,
        tokenizer: PreTrainedTokenizerBase, eos: tuple[int, ...],
    ) -> llguidance.LLMatcher:
        """The session's pristine matcher for `grammar`, compiled on the session's own first use of it."""
        pristine = next((m for g, m in self._compiled.get(key) or () if g == grammar), None)
        if pristine is None:
            pristine = _compile(_ll_tokenizer(tokenizer, eos), constraint.body(), written)
        with self._compiled.lock:  # as one step, as in `guide`
            entries = [e for e in self._compiled.get(key) or () if e[0] != grammar]
            self._compiled.put(key, [*entries, (grammar, pristine)][-self.compiled_per_session :])
        return pristine

    def context_and_guide(
        self, key: Hashable, constraint: Constraint | None, tokenizer: PreTrainedTokenizerBase, text: str, prefix: str,
        messages: list[dict] | None, eos: tuple[int, ...], vocab_size: int, device: torch.device,
    ) -> tuple[list[int], Guide | None]:
        """The token ids of `prefix` (the text, healing's whitespace backed up) in context, and the
        constraint's state after them (None without a constraint).

        The state has taken the tokens from the first one reaching past the constraint's start; that
        token's characters before the start are the text it must write first (it may begin mid-word).
        """
        if constraint is None:
            return context_ids(tokenizer, prefix, messages), None
        encoding, text_start = encode(tokenizer, prefix, messages, return_offsets_mapping=True)
        ids = encoding["input_ids"]
        start = len(text) if constraint.start is None else constraint.start
        spans = [(a - text_start, b - text_start) for a, b in encoding["offset_mapping"]]
        first, begins = free_and_constrained(spans, start, len(prefix))
        return ids, self.guide(key, constraint, text[begins:start], ids[first:], tokenizer, eos, vocab_size, device)

    def clear(self) -> None:
        self._sessions.clear()
        self._compiled.clear()

    def forget(self, session: str) -> None:
        self._sessions.forget(session)
        self._compiled.forget(session)

    def __len__(self) -> int:
        return len(self._sessions)
