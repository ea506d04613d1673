"""Lossless lookahead decoding: exactly greedy's tokens, in fewer forward passes.

Every pass feeds one sequence after the KV cache: the last accepted token x, then a
Jacobi window (W guesses for the next tokens, refined each pass by the model's own
outputs, as in Jacobi decoding and LADE), then up to G drafts of up to D tokens from an
n-gram pool (earlier occurrences of the last few tokens in the prompt and the output,
as in prompt lookup and PIA's trie, plus the n-grams the Jacobi window produced). A
tree mask lets each chain see only the cache, x and its own earlier tokens, so one
pass verifies every chain: a chain's tokens are accepted while each equals the greedy
choice after the one before it. The longest accepted chain, plus the model's next
token after it, is appended, and the cache keeps only those tokens.

On this CPU a pass over 2 to 17 tokens costs ~1.7 passes over one, so guessing is only
worth it when guesses are accepted. W, D and G therefore follow the acceptance seen so
far: sources that are not accepted shrink to nothing and the loop falls back to plain
one-token steps, re-probing the window now and then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from lookahead.kv_cache import GrowableCache

# Named constants, as in llama.cpp's lookahead example.
W_MAX = 4  # Jacobi window: most guesses fed per pass
D_MAX = 8  # longest n-gram draft
G_MAX = 3  # most n-gram drafts per pass
BUDGET = 16  # most guessed tokens per pass: on this CPU 2 to 17 fed tokens cost the same, 33 cost 1.5× that
KEY_MAX = 3  # longest suffix of the output looked up in the n-gram pool
PROBE_EVERY = 8  # passes before re-probing a window that was switched off (doubling after each failure)
EMA = 0.7  # weight of the past in the acceptance averages

STEP, JACOBI, NGRAM = "step", "jacobi", "ngram"


class NGramPool:
    """Where each token sequence was seen: the prompt and output, plus Jacobi-window n-grams.

    Lookups match the longest suffix (up to KEY_MAX tokens) of the current text and
    return what followed it, most recent first, as in prompt lookup and PIA's trie.
    """

    def __init__(self, tokens: list[int]):
        self.tokens: list[int] = []
        self.positions: dict[int, list[int]] = defaultdict(list)  # token -> indices in self.tokens
        self.jacobi: dict[int, dict[tuple[int, ...], None]] = defaultdict(dict)  # first token -> n-grams
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.positions[token].append(len(self.tokens))
            self.tokens.append(token)

    def add_jacobi(self, ngram: tuple[int, ...]) -> None:
        grams = self.jacobi[ngram[0]]
        grams.pop(ngram, None)
        grams[ngram] = None
        if len(grams) > G_MAX:
            del grams[next(iter(grams))]

    def _text_matches(self, length: int, slot: bool) -> list[tuple[int, tuple[int, ...]]]:
        """(tokens matched, continuation) for earlier occurrences of the text's end, longest match first.

        With `slot`, the last token is a wildcard (a name or number that changed in a repeated
        template): the tokens before it must match, and the continuation skips the slot.
        """
        text, last = self.tokens, len(self.tokens) - 1
        anchor = last - 1 if slot else last
        found = []
        for pos in reversed(self.positions[text[anchor]] if anchor >= 0 else []):
            if pos >= anchor or (slot and text[pos + 1] == text[last]):
                continue
            match = 1
            while match < KEY_MAX and pos - match >= 0 and text[pos - match] == text[anchor - match]:
                match += 1
            start = pos + 1 + slot
            found.append((match, tuple(text[start : start + length])))
            if len(found) >= 64:
                break
        return sorted(found, key=lambda m: -m[0])  # stable: most recent first among equal matches

    def drafts(self, n: int, length: int, min_match: int = 1) -> list[tuple[tuple[int, ...], str]]:
        """Up to n distinct (draft, source) continuations of the current text, best first.

        Exact matches must cover at least `min_match` tokens, slot matches at least 2;
        Jacobi n-grams fill the rest.
        """
        candidates = [(d, NGRAM) for m, d in self._text_matches(length, slot=False) if m >= min_match]
        candidates += [(d, NGRAM) for m, d in self._text_matches(length, slot=True) if m >= max(2, min_match)]
        candidates += [(gram[1 : 1 + length], JACOBI) for gram in reversed(self.jacobi.get(self.tokens[-1], {}))]
        found: dict[tuple[int, ...], str] = {}
        for draft, source in candidates:
            if draft:
                found.setdefault(draft, source)
            if len(found) >= n:
                break
        return list(found.items())


def chain_mask(past: int, chains: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, q, past+q) additive mask for x followed by chains of the given lengths, each continuing x."""
    q = 1 + sum(chains)
    visible = torch.zeros(q, past + q, dtype=torch.bool, device=device)
    visible[:, : past + 1] = True
    start = 1
    for length in chains:
        rows = slice(start, start + length)
        visible[rows, past + start : past + start + length] = torch.ones(
            length, length, dtype=torch.bool, device=device
        ).tril()
        start += length
    mask = torch.zeros(visible.shape, dtype=dtype, device=device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


@dataclass
class Pass:
    """What one forward pass produced: the new tokens and where each came from."""

    tokens: list[int]
    sources: list[str]


@dataclass
class _Adaptive:
    """Running acceptance per source (tokens accepted per pass, EMA), which sizes the next pass.

    On this CPU a pass over 2 tokens already costs ~1.7 single-token passes (the matmuls
    leave the matrix-vector path), and so does a pass over 17: so a pass either guesses
    nothing, or guesses generously (up to BUDGET tokens), and only when about one
    accepted token is expected.
    """

    window_gain: float = 0.4
    ngram_gain: float = 0.6
    probe_interval: int = PROBE_EVERY
    passes_since_probe: int = 0
    window: list[int] = field(default_factory=list)

    def draft_shape(self) -> tuple[int, int, int]:
        """(how many n-gram drafts, how long, shortest text match to trust) for the next pass."""
        min_match = 1 if self.ngram_gain >= 0.5 else 2 if self.ngram_gain >= 0.25 else KEY_MAX
        return (G_MAX if self.ngram_gain >= 2 else 2), min(D_MAX, 3 + round(2 * self.ngram_gain)), min_match

    def window_size(self, drafting: bool) -> int:
        """The Jacobi window rides along when a pass is wide anyway; alone only when it pays for the pass."""
        if self.window_gain >= (0.3 if drafting else 1.0):
            self.probe_interval = PROBE_EVERY
            return min(W_MAX, 1 + round(2 * self.window_gain))
        self.passes_since_probe += 1
        if self.passes_since_probe < self.probe_interval:
            return 0
        self.passes_since_probe = 0
        self.probe_interval *= 2  # each failed probe waits twice as long for the next
        return W_MAX

    def update(self, window_accepted: int | None, ngram_accepted: int | None) -> None:
        if window_accepted is not None:
            self.window_gain = EMA * self.window_gain + (1 - EMA) * window_accepted
        if ngram_accepted is not None:
            self.ngram_gain = EMA * self.ngram_gain + (1 - EMA) * ngram_accepted


@torch.inference_mode()
def greedy_passes(model: PreTrainedModel, input_ids: list[int], max_new_tokens: int, eos: set[int]) -> Iterator[Pass]:
    """Plain cached greedy decoding: one token per pass (the baseline)."""
    cache = GrowableCache()
    feed = torch.tensor([input_ids], device=model.device)
    for _ in range(max_new_tokens):
        token = int(model(feed, past_key_values=cache, logits_to_keep=1).logits[0, -1].argmax())
        yield Pass([token], [STEP])
        if token in eos:
            return
        feed = torch.tensor([[token]], device=model.device)


@torch.inference_mode()
def lookahead_passes(
    model: PreTrainedModel, input_ids: list[int], max_new_tokens: int, eos: set[int]
) -> Iterator[Pass]:
    """Greedy decoding's exact tokens, several per pass where the guesses are right."""
    device = model.device
    cache = GrowableCache()
    # The prompt's pass gives the first token, exactly as in the greedy loop.
    logits = model(torch.tensor([input_ids], device=device), past_key_values=cache, logits_to_keep=1).logits
    first = int(logits[0, -1].argmax())
    yield Pass([first], [STEP])
    if first in eos:
        return
    pool = NGramPool(input_ids + [first])
    state = _Adaptive()
    x = first  # the last token, not yet in the cache
    produced = 1
    while produced < max_new_tokens:
        past = cache.get_seq_length()
        drafts, room = [], BUDGET
        for draft, source in pool.drafts(*state.draft_shape()):
            if room > 0:
                drafts.append((list(draft[:room]), source))
                room -= len(drafts[-1][0])
        window = (state.window + [x] * W_MAX)[: min(room, state.window_size(drafting=bool(drafts)))]
        chains = ([(window, JACOBI)] if window else []) + drafts
        feed = [x] + [t for chain, _ in chains for t in chain]
        lengths = [len(chain) for chain, _ in chains]
        out = model(
            torch.tensor([feed], device=device),
            past_key_values=cache,
            attention_mask=chain_mask(past, lengths, model.dtype, device),
            position_ids=torch.tensor([[past] + [past + 1 + j for n in lengths for j in range(n)]], device=device),
        )
        choice = out.logits[0].argmax(-1).tolist()  # greedy token after each fed token
        # Verify: a chain's token is accepted while it equals the greedy choice after the one before.
        accepted = []  # per chain
        start = 1  # index in `feed` of the chain's first token
        for (chain, _), n in zip(chains, lengths):
            a, prev = 0, 0  # prev: index in `feed` of the token the next guess must follow
            while a < n and chain[a] == choice[prev]:
                prev, a = start + a, a + 1
            accepted.append((a, start))
            start += n
        n_best, best_start, best_source = max(
            ((a, s, source) for (a, s), (_, source) in zip(accepted, chains)), key=lambda t: t[0], default=(0, 0, STEP)
        )
        kept = list(range(best_start, best_start + n_best))  # indices in `feed` of the accepted guesses
        tokens = [feed[i] for i in kept] + [choice[kept[-1] if kept else 0]]
        sources = [best_source] * n_best + [STEP]
        # The window's outputs are its next guesses (shifted past what was accepted), and
        # each of its inputs with the outputs after it is an n-gram for the pool.
        if window:
            outputs = choice[: 1 + len(window)]
            for j, guess in enumerate([x] + window):
                if len(outputs) - j >= 2:
                    pool.add_jacobi((guess, *outputs[j:]))
            state.window = outputs[n_best + 1 :]
        ngram_accepted = [a for (a, _), (_, source) in zip(accepted, chains) if source == NGRAM]
        state.update(accepted[0][0] if window else None, max(ngram_accepted) if ngram_accepted else None)
        cache.keep(past + 1, [past + i for i in kept])
        for i, token in enumerate(tokens):
            if token in eos or produced + i + 1 >= max_new_tokens:
                tokens, sources = tokens[: i + 1], sources[: i + 1]
                break
        produced += len(tokens)
        pool.extend(tokens)
        yield Pass(tokens, sources)
        if tokens[-1] in eos:
            return
        x = tokens[-1]
