"""Lossless lookahead decoding: exactly greedy's tokens, in fewer forward passes.

Every pass feeds the last accepted token x and a tree of guesses for the tokens after it. The
guesses come from two sources that cost no extra model:
  ngram     what followed earlier occurrences of the text's last few tokens, in the prompt and the
            output (prompt lookup; PIA's n-gram trie)
  recycled  the model's own recent predictions: each token's top successors, refreshed from every
            pass's logits at every fed position (Token Recycling)
A third, LADE's Jacobi window (the model's outputs for last pass's guesses as this pass's), was
measured and dropped: on bench_decoding's prompts it gave 1 accepted token in 768, and decoding took
fewer passes without it.
All of a pass's drafts go into one trie, so a prefix several drafts share is fed and verified once
(PIA's branch sharing). A tree mask lets each node see only the cache, x and its own ancestors, so
one pass verifies every draft: the path accepted is followed from x while a child holds the greedy
choice after its parent. That path, plus the model's next token after it, is appended, and the
cache keeps only those tokens.

How many guesses a pass feeds follows what a pass of n tokens costs, T(n), and the acceptance seen
so far: the count that maximises expected tokens per second, (1 + E[accepted]) / T(1 + guesses), and
none (a plain step, as greedy) when guessing does not pay. Other drafts ride along while T stays
flat. T is this machine's measured curve (lookahead/cpu_linear.py), a quiet machine's, corrected as
the decoding runs: every pass is timed, and T(n) is the curve's times how much slower than it passes
(plain steps, or passes with guesses) ran lately. Beside other processes a pass with guesses can
cost several plain steps (with one busy loop per core, planning by the curve alone ran at 0.15x
greedy's speed), so guessing stops while it would not pay; once plain steps have taken many times
what the passes found dear cost beyond their plan (RETRY_SHARE), guessing is planned by the curve
again, tried, timed, and kept where it pays. Every source's draft is checked against what the model
then produced, fed or not, so the estimates keep learning during plain steps too.

Under a constraint (a `Guide`, lookahead/constraints.py) greedy's token is the best valid one, and
the accepted path is followed with the guide advancing along it: each node's choice is masked by
the state after its ancestors, so the tokens stay exactly constrained greedy's. Only the nodes on
the path need a mask, one per token produced.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from lookahead.cache_passes import additive_mask
from lookahead.constraints import Guide
from lookahead.kv_cache import GrowableCache
from lookahead.prefix_cache import common_prefix_length

# Named constants, as in llama.cpp's lookahead example.
D_MAX = 8  # longest draft from any source
G_MAX = 3  # most n-gram drafts offered per pass
KEY_MAX = 3  # longest suffix of the output looked up in the n-gram pool
RECYCLE_K = 3  # successors kept per token (the recycled drafts' first tokens)
MAX_GUESSES = 31  # a pass feeds at most x and this many guesses (the widest pass measured is 32)
RIDE_ALONG = 0.05  # more drafts join a pass while it costs at most this much more than the chosen width
EMA = 0.7  # weight of the past in the acceptance estimates
PRIOR = 0.5  # each estimate's start: a guess is as likely right as wrong
# The curve's costs are a quiet machine's: at run time they are scaled by how much slower passes ran lately.
TIME_EMA = 0.5  # weight of the past in a slowdown: one pass shows a change of load, and a lone pass slowed by
# another process's turn on a core moves it by half only
# Passes with guesses that ran dearer than planned are tried again once plain steps have taken 1/RETRY_SHARE times the
# seconds they cost beyond their plan: while guessing stays too dear, trying it again costs about this share of the
# time at most, and where the load has gone, guessing comes back after that many seconds of plain steps.
RETRY_SHARE = 0.05

STEP, NGRAM, RECYCLED = "step", "ngram", "recycled"
SOURCES = (NGRAM, RECYCLED)


class NGramPool:
    """Where each token sequence was seen: the prompt and the output.

    Lookups match the longest suffix (up to KEY_MAX tokens) of the current text and
    return what followed it, most recent first, as in prompt lookup and PIA's trie.
    """

    def __init__(self, tokens: list[int]):
        self.tokens: list[int] = []
        self.positions: dict[int, list[int]] = defaultdict(list)  # token -> indices in self.tokens
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.positions[token].append(len(self.tokens))
            self.tokens.append(token)

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
            found.append((match, self._copy(pos + 1 + slot, length)))
            if len(found) >= 64:
                break
        return sorted(found, key=lambda m: -m[0])  # stable: most recent first among equal matches

    def _copy(self, start: int, length: int) -> tuple[int, ...]:
        """The `length` tokens from `start` on, copied as LZ77 copies: past the text's end the copy
        continues with its own tokens, so a pattern repeating every few tokens drafts its full length."""
        text, copied = self.tokens, []
        for i in range(start, start + length):
            copied.append(text[i] if i < len(text) else copied[i - len(text)])
        return tuple(copied)

    def drafts(self, n: int, length: int) -> list[tuple[int, ...]]:
        """Up to n distinct continuations of the current text, best first: exact matches, then slot
        matches of at least 2 tokens."""
        candidates = [d for _, d in self._text_matches(length, slot=False)]
        candidates += [d for m, d in self._text_matches(length, slot=True) if m >= 2]
        return list(dict.fromkeys(d for d in candidates if d))[:n]


@dataclass
class DraftTrie:
    """x (node 0) and the drafted tokens after it; a token several drafts share at one place is one node."""

    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    sources: list[str] = field(default_factory=lambda: [STEP])
    children: list[dict[int, int]] = field(default_factory=lambda: [{}])

    def add(self, draft: list[int], source: str, room: int) -> list[int]:
        """Add `draft` (continuing x), creating at most `room` nodes; its nodes, as far as it got."""
        node, path = 0, []
        for token in draft:
            child = self.children[node].get(token)
            if child is None:
                if room == 0:
                    break
                child, room = len(self.tokens), room - 1
                self.tokens.append(token)
                self.parents.append(node)
                self.depths.append(self.depths[node] + 1)
                self.sources.append(source)
                self.children.append({})
                self.children[node][token] = child
            node = child
            path.append(node)
        return path

    def __len__(self) -> int:
        return len(self.tokens)


def tree_mask(past: int, parents: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, q, past+q) additive mask for the nodes of a trie (node 0 first, parents before children):
    each node sees the cache, its ancestors and itself."""
    q = len(parents)
    own = torch.zeros(q, q, dtype=torch.bool)
    for node, parent in enumerate(parents):
        if parent >= 0:
            own[node] = own[parent]
        own[node, node] = True
    return additive_mask(past, own, dtype, device)


@dataclass
class _RunningCosts:
    """Seconds for a pass of n tokens: the measured curve's, times how much slower than it such passes ran lately.

    Plain steps and passes with guesses are followed apart: beside other processes the two slow down unlike (a plain
    step may run on one thread where a wider pass needs every core). Passes with guesses not timed yet, or timed
    too dear long enough ago (RETRY_SHARE), are taken as slowed as plain steps: as the curve's shape says.
    """

    curve: Callable[[int], float]
    plain: float = 1.0  # a plain step's seconds / the curve's, lately
    guessing: float | None = None  # a pass with guesses' seconds / the curve's, lately; None: as `plain`
    retry_after: float = 0.0  # seconds of plain steps before passes with guesses timed too dear are tried again

    def __call__(self, n: int) -> float:
        return self.curve(n) * self._slowdown(n)

    def _slowdown(self, n: int) -> float:
        return self.plain if n == 1 or self.guessing is None else self.guessing

    def observe(self, n: int, seconds: float) -> None:
        """A pass of n tokens took `seconds`."""
        planned = self(n)
        slowdown = TIME_EMA * self._slowdown(n) + (1 - TIME_EMA) * seconds / self.curve(n)
        if n > 1:  # dearer than planned puts guessing off for longer; as planned or cheaper, not at all
            self.guessing = slowdown
            self.retry_after = self.retry_after + (seconds - planned) / RETRY_SHARE if seconds > planned else 0.0
            return
        self.plain = slowdown
        if self.retry_after > 0:
            self.retry_after = max(0.0, self.retry_after - seconds)
            if not self.retry_after:
                self.guessing = None


@dataclass
class Pass:
    """What one forward pass produced: the new tokens and where each came from."""

    tokens: list[int]
    sources: list[str]


@dataclass
class _Planner:
    """Chooses each pass's guesses from the measured pass costs and the acceptance seen so far.

    `accept[j]` estimates the chance that the leading draft's token j+1 is right when tokens 1..j were;
    `gains[source]` how many tokens that source's draft got right lately. Both learn from every
    pass's outcome, whether or not the drafts were fed. A pass of w guesses shows at most position
    w+1, so a position not seen yet is taken to be as likely as the deepest one seen: otherwise the
    prior alone would hold the width where it is while every draft comes true.
    """

    cost: Callable[[int], float]  # seconds for a pass of n fed tokens
    accept: list[float | None] = field(default_factory=lambda: [None] * D_MAX)  # None: not seen yet
    gains: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, PRIOR))
    successors: dict[int, list[int]] = field(default_factory=dict)  # token -> its latest top successors

    def drafts(self, pool: NGramPool, x: int) -> list[tuple[list[int], str]]:
        """Every source's drafts continuing x, the source right most lately first (each source's best first)."""
        by_source = {NGRAM: [list(draft) for draft in pool.drafts(G_MAX, D_MAX)],
                     RECYCLED: [self._recycled_chain(first) for first in self.successors.get(x, [])]}
        order = sorted(SOURCES, key=lambda source: -self.gains[source])
        return [(draft, source) for source in order for draft in by_source[source] if draft]

    def _recycled_chain(self, first: int) -> list[int]:
        chain = [first]
        while len(chain) < D_MAX and chain[-1] in self.successors:
            chain.append(self.successors[chain[-1]][0])
        return chain

    def _accept(self, j: int) -> float:
        """The estimate at position j, or at the deepest position seen before it, or the prior."""
        while j >= 0 and self.accept[j] is None:
            j -= 1
        return PRIOR if j < 0 else self.accept[j]

    def width(self, longest: int) -> int:
        """Guesses for the leading draft (at most `longest`): the count with the most expected tokens per second."""
        best, best_rate, expected, reach = 0, 1 / self.cost(1), 1.0, 1.0
        for w in range(1, min(longest, D_MAX, MAX_GUESSES) + 1):
            reach *= self._accept(w - 1)
            expected += reach
            if expected / self.cost(1 + w) > best_rate:
                best, best_rate = w, expected / self.cost(1 + w)
        return best

    def plan(self, pool: NGramPool, x: int, longest: int) -> tuple[DraftTrie, list[tuple[list[int], str]]]:
        """The trie to feed after x, and every draft proposed (to check against the outcome).

        Drafts are cut to `longest` guesses: no more tokens are wanted, and the context may end past them."""
        proposed = [(draft[:longest], source) for draft, source in self.drafts(pool, x) if longest > 0]
        trie = DraftTrie([x])
        if not proposed:
            return trie, proposed
        chosen = self.width(len(proposed[0][0]))
        trie.add(proposed[0][0][:chosen], proposed[0][1], chosen)
        budget = self.cost(1 + chosen) * (1 + RIDE_ALONG)
        for draft, source in proposed[1:] if chosen else ():
            room = 0
            while len(trie) - 1 + room < MAX_GUESSES and self.cost(len(trie) + room + 1) <= budget:
                room += 1
            if room == 0:
                break
            trie.add(draft, source, room)
        return trie, proposed

    def learn(self, proposed: list[tuple[list[int], str]], produced: list[int], fed: list[int],
              logits: torch.Tensor) -> None:
        """Update the estimates from what the pass produced, and the successors from its logits at every fed token."""
        seen: set[str] = set()
        for rank, (draft, source) in enumerate(proposed):
            right = common_prefix_length(draft, produced)
            if source not in seen:  # each source's best draft speaks for it
                seen.add(source)
                self.gains[source] = EMA * self.gains[source] + (1 - EMA) * right
            if rank == 0:  # the leading draft: positions 1..right were right, the next one wrong (if seen)
                for j in range(min(right + 1, len(draft), len(produced))):
                    self.accept[j] = EMA * self._accept(j) + (1 - EMA) * (j < right)
        top = logits.topk(RECYCLE_K, dim=-1).indices.tolist()
        for token, successors in zip(fed, top):
            self.successors[token] = successors


def _greedy(logits: torch.Tensor, guide: Guide | None) -> int:
    """Greedy's token after `logits`: the best one, or the best the guide allows (and the guide takes it)."""
    if guide is None:
        return int(logits.argmax())
    token = guide.pick(logits)
    guide.advance(token)
    return token


@torch.inference_mode()
def greedy_passes(
    model: PreTrainedModel, input_ids: list[int], max_new_tokens: int, eos: set[int], guide: Guide | None = None,
) -> Iterator[Pass]:
    """Plain cached greedy decoding: one token per pass (the baseline)."""
    cache = GrowableCache()
    feed = torch.tensor([input_ids], device=model.device)
    for _ in range(max_new_tokens):
        token = _greedy(model(feed, past_key_values=cache, logits_to_keep=1).logits[0, -1], guide)
        yield Pass([token], [STEP])
        if token in eos:
            return
        feed = torch.tensor([[token]], device=model.device)


@torch.inference_mode()
def lookahead_passes(
    model: PreTrainedModel, input_ids: list[int], max_new_tokens: int, eos: set[int], cost: Callable[[int], float],
    guide: Guide | None = None, clock: Callable[[], float] = time.perf_counter,
) -> Iterator[Pass]:
    """Greedy decoding's exact tokens, several per pass where the guesses are right.

    `cost(n)`: seconds for a pass of n tokens on this machine, quiet (`models.model_pass_costs`); `clock` times
    the passes as they run, correcting it.
    """
    device = model.device
    cache = GrowableCache()
    # The prompt's pass gives the first token, exactly as in the greedy loop.
    logits = model(torch.tensor([input_ids], device=device), past_key_values=cache, logits_to_keep=1).logits
    first = _greedy(logits[0, -1], guide)
    yield Pass([first], [STEP])
    if first in eos:
        return
    pool = NGramPool(input_ids + [first])
    costs = _RunningCosts(cost)
    planner = _Planner(costs)
    x = first  # the last token, not yet in the cache
    produced = 1
    while produced < max_new_tokens:
        started = clock()
        past = cache.get_seq_length()
        trie, proposed = planner.plan(pool, x, max_new_tokens - produced - 1)
        out = model(
            torch.tensor([trie.tokens], device=device),
            past_key_values=cache,
            attention_mask=tree_mask(past, trie.parents, model.dtype, device) if len(trie) > 1 else None,
            position_ids=torch.tensor([[past + d for d in trie.depths]], device=device),
        )
        # Verify: follow the trie from x while a child holds the greedy choice after its parent.
        path, node = [], 0
        while (child := trie.children[node].get(chosen := _greedy(out.logits[0, node], guide))) is not None:
            path.append(child)
            node = child
        tokens = [trie.tokens[i] for i in path] + [chosen]
        sources = [trie.sources[i] for i in path] + [STEP]
        planner.learn(proposed, tokens, trie.tokens, out.logits[0])
        cache.keep(past + 1, [past + i for i in path])
        costs.observe(len(trie), clock() - started)  # the whole pass: plan, model, logits read, cache kept
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
