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

Pass width follows what pays on this CPU (with `cpu_linear.SkinnyLinear`): a pass over
x and 3 guesses costs about one single-token pass, one over 16 tokens ~1.6. So every pass
guesses NARROW tokens (the better-accepted source first), and a pass goes WIDE only
after the previous one accepted NARROW or more, i.e. while long drafts keep matching.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from lookahead.kv_cache import GrowableCache

# Named constants, as in llama.cpp's lookahead example.
NARROW = 3  # guesses per ordinary pass: on this CPU 4 fed tokens cost ~1.1 passes over one
WIDE = 15  # guesses per wide pass, after a pass accepted NARROW or more: 16 fed tokens cost ~1.6
W_MAX = 4  # Jacobi window: most guesses fed per pass
D_MAX = 8  # longest n-gram draft
G_MAX = 3  # most n-gram drafts per wide pass
KEY_MAX = 3  # longest suffix of the output looked up in the n-gram pool
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

    def drafts(self, n: int, length: int) -> list[tuple[tuple[int, ...], str]]:
        """Up to n distinct (draft, source) continuations of the current text, best first.

        Exact matches first, then slot matches of at least 2 tokens, then Jacobi n-grams.
        """
        candidates = [(d, NGRAM) for _, d in self._text_matches(length, slot=False)]
        candidates += [(d, NGRAM) for m, d in self._text_matches(length, slot=True) if m >= 2]
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
class _Planner:
    """Chooses each pass's guesses from the acceptance seen so far.

    On this CPU (with SkinnyLinear) a pass over x plus NARROW guesses costs about one
    single-token pass, so every pass guesses at least that much; a wide pass of WIDE
    guesses costs ~1.6 of them, so it is only taken after a pass accepted NARROW or more.
    The source (Jacobi window or n-gram drafts) accepted more lately goes first.
    """

    window_gain: float = 0.5  # tokens accepted per pass from each source (EMA)
    ngram_gain: float = 0.5
    last_accepted: int = 0
    window: list[int] = field(default_factory=list)  # the window's guesses for the next pass

    def plan(self, pool: NGramPool, x: int) -> tuple[list[tuple[list[int], str]], int | None]:
        """(guessed tokens, source) chains for the next pass, each continuing x, and which one is the window."""
        wide = self.last_accepted >= NARROW
        room = WIDE if wide else NARROW
        window = (self.window + [x] * W_MAX)[: min(W_MAX, room)]
        candidates = [(list(draft), source, False) for draft, source in pool.drafts(G_MAX if wide else 2, D_MAX)]
        window_first = self.window_gain > self.ngram_gain
        candidates.insert(0 if window_first else len(candidates), (window, JACOBI, True))
        chains: list[tuple[list[int], str]] = []
        window_index = None
        for guess, source, is_window in candidates:
            if room > 0:
                window_index = len(chains) if is_window else window_index
                chains.append((guess[:room], source))
                room -= len(chains[-1][0])
        return chains, window_index

    def update(self, window_accepted: int | None, ngram_accepted: int | None, accepted: int) -> None:
        if window_accepted is not None:
            self.window_gain = EMA * self.window_gain + (1 - EMA) * window_accepted
        if ngram_accepted is not None:
            self.ngram_gain = EMA * self.ngram_gain + (1 - EMA) * ngram_accepted
        self.last_accepted = accepted


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
    state = _Planner()
    x = first  # the last token, not yet in the cache
    produced = 1
    while produced < max_new_tokens:
        past = cache.get_seq_length()
        chains, w = state.plan(pool, x)
        feed = [x] + [t for chain, _ in chains for t in chain]
        lengths = [len(chain) for chain, _ in chains]
        starts = [1 + sum(lengths[:i]) for i in range(len(chains))]  # index in `feed` of each chain's first token
        out = model(
            torch.tensor([feed], device=device),
            past_key_values=cache,
            attention_mask=chain_mask(past, lengths, model.dtype, device),
            position_ids=torch.tensor([[past] + [past + 1 + j for n in lengths for j in range(n)]], device=device),
        )
        choice = out.logits[0].argmax(-1).tolist()  # greedy token after each fed token
        # Verify: a chain's token is accepted while it equals the greedy choice after the one before.
        accepted = []  # per chain
        for (chain, _), n, start in zip(chains, lengths, starts):
            a, prev = 0, 0  # prev: index in `feed` of the token the next guess must follow
            while a < n and chain[a] == choice[prev]:
                prev, a = start + a, a + 1
            accepted.append(a)
        n_best, best = max(((a, i) for i, a in enumerate(accepted)), default=(0, None))
        kept = list(range(starts[best], starts[best] + n_best)) if n_best else []  # indices in `feed`
        tokens = [feed[i] for i in kept] + [choice[kept[-1] if kept else 0]]
        sources = [chains[best][1]] * n_best + [STEP]
        # The window's outputs are its next guesses (shifted past what was accepted), and
        # each of its inputs with the outputs after it is an n-gram for the pool.
        if w is not None:
            window = chains[w][0]
            outputs = [choice[0]] + choice[starts[w] : starts[w] + len(window)]
            for j, guess in enumerate([x] + window):
                if len(outputs) - j >= 2:
                    pool.add_jacobi((guess, *outputs[j:]))
            state.window = outputs[n_best + 1 :]
        ngram_accepted = [a for a, (_, source) in zip(accepted, chains) if source == NGRAM]
        state.update(accepted[w] if w is not None else None, max(ngram_accepted, default=None), n_best)
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
