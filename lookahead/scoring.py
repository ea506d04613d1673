"""Every token of a text as the model saw it: its probability given what precedes it, its rank,
the entropy there, and the model's own top choices at that position.

A row of `Scores` summarises one position's next-token distribution for the token that came
next, so only K alternatives per token are kept, never the (positions x vocabulary) logits:
logits exist for SCORE_CHUNK positions at a time, and a cold 8k-token text stays within a
plain prefill's memory. The logits after the last token (`frontier`) are kept whole, since
they score whatever token the writer adds next without running the model again.

Logits are the output embedding applied to the last hidden state, as in the Llama, Qwen2 and
GPT-2 families (a model that post-processes its logits, e.g. soft-capping, would need that here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

MAX_ALTERNATIVES = 20  # kept per position; token_probabilities returns the first k
SCORE_CHUNK = 256  # positions whose full logits exist at once


@dataclass
class Scores:
    """Row i describes token i of a sequence; a token with nothing before it has a NaN row."""

    token_ids: torch.Tensor  # (N,)
    logprob: torch.Tensor  # (N,) log p(token | everything before it)
    rank: torch.Tensor  # (N,) 1 where the token was the model's first choice; with a NaN logprob, the least it can
    # be (a server returned only the tokens above it) or 0 (nothing before it)
    entropy: torch.Tensor  # (N,) of that position's distribution, in bits
    top_ids: torch.Tensor  # (N, MAX_ALTERNATIVES)
    top_logprobs: torch.Tensor  # (N, MAX_ALTERNATIVES)
    frontier: torch.Tensor | None = None  # (vocab,) logits after the last token, when known

    def __len__(self) -> int:
        return len(self.token_ids)

    def head(self, n: int) -> Scores:
        """The first n rows (the frontier only if all rows are kept)."""
        rows = [t[:n] for t in self._rows()]
        return Scores(*rows, frontier=self.frontier if n >= len(self) else None)

    def then(self, later: Scores) -> Scores:
        """These rows followed by `later`'s (whose frontier becomes the whole's)."""
        return Scores(*(torch.cat([a, b]) for a, b in zip(self._rows(), later._rows())), frontier=later.frontier)

    def nbytes(self) -> int:
        tensors = [*self._rows(), *([self.frontier] if self.frontier is not None else [])]
        return sum(t.numel() * t.element_size() for t in tensors)

    def _rows(self) -> tuple[torch.Tensor, ...]:
        return self.token_ids, self.logprob, self.rank, self.entropy, self.top_ids, self.top_logprobs


@dataclass
class ChunkBuffers:
    """Float32 (rows x vocabulary) buffers a pass scores every chunk of its positions in, made once per pass: a fresh
    temporary of that size at each step is new memory the system zeroes page by page, which took three of every four
    parts of a chunk's scoring (AMD EPYC, 2 cores: 115 ms a 256-row chunk, 33 ms in these). What they keep of the last
    chunk scored, a comparison of two models reuses."""

    logprobs: torch.Tensor
    probs: torch.Tensor
    terms: torch.Tensor

    @classmethod
    def for_logits(cls, logits: torch.Tensor) -> ChunkBuffers:
        """Buffers for chunks of logits (rows, vocab) no longer than `logits`, a pass's first chunk."""
        return cls(*torch.empty(3, *logits.shape, device=logits.device).unbind(0))


def score_logits(logits: torch.Tensor, next_ids: torch.Tensor, buffers: ChunkBuffers | None = None) -> Scores:
    """Rows for tokens `next_ids` (n,), each predicted by the matching row of `logits` (n, vocab); the log-probabilities
    and probabilities are left in `buffers`.

    Rows are kept in the machine's memory (small: they are what a session keeps between requests).
    """
    buffers = buffers or ChunkBuffers.for_logits(logits)
    logprobs, probs, terms = (buffer[: len(logits)] for buffer in (buffers.logprobs, buffers.probs, buffers.terms))
    torch.log_softmax(logits.float(), dim=-1, out=logprobs)
    next_ids = next_ids.to(logprobs.device)
    chosen = logprobs.gather(1, next_ids[:, None])
    rank = torch.gt(logprobs, chosen, out=terms).sum(dim=1).long() + 1  # a float count: exact below 2**24 tokens
    torch.exp(logprobs, out=probs)
    entropy = -torch.mul(probs, logprobs, out=terms).nan_to_num_().sum(dim=1) / math.log(2)
    top = torch.topk(logprobs, min(MAX_ALTERNATIVES, logprobs.shape[1]), dim=1)
    return Scores(*(t.cpu() for t in (next_ids, chosen[:, 0], rank, entropy, top.indices, top.values)))


def unscored(token_ids: torch.Tensor) -> Scores:
    """Rows for tokens with nothing before them (the first of a text, or those left out of the window)."""
    n, k = len(token_ids), MAX_ALTERNATIVES
    nan = torch.full((n,), float("nan"))
    return Scores(token_ids.cpu(), nan, torch.zeros(n, dtype=torch.long), nan.clone(),
                  torch.full((n, k), -1, dtype=torch.long), torch.full((n, k), float("nan")))


@torch.inference_mode()
def extend_and_score(
    model: PreTrainedModel, input_ids: torch.Tensor, cache: DynamicCache, known: Scores
) -> tuple[torch.Tensor, Scores]:
    """Run the tokens of `input_ids` (1, T) that `cache` lacks, scoring each as it goes.

    `known` holds rows for the tokens the cache holds, plus either the row of the first new token
    or the frontier that scores it. Returns the last logits (vocab,) and rows for all T tokens.
    """
    ids, past = input_ids[0], cache.get_seq_length()
    hidden = new_hidden(model, input_ids, cache)
    head = model.get_output_embeddings()
    rows, buffers = rows_through(known, ids, past), None
    for start, end in chunks(len(hidden)):  # position p's logits score token p + 1
        logits = head(hidden[start:end])
        buffers = buffers or ChunkBuffers.for_logits(logits)
        rows = rows.then(score_logits(logits, ids[past + start + 1 : past + end + 1], buffers))
    last = head(hidden[-1:])[0]  # alone, as the model computes it with logits_to_keep=1: the same bits
    rows.frontier = last.float().cpu()
    return last, rows


def new_hidden(model: PreTrainedModel, input_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
    """The last hidden states (T - past, hidden) of the tokens of `input_ids` (1, T) that `cache` lacks, which it
    then holds: the logits come a chunk at a time from them."""
    past = cache.get_seq_length()
    return model.base_model(input_ids[:, past:], past_key_values=cache, use_cache=True).last_hidden_state[0]


def rows_through(known: Scores, ids: torch.Tensor, past: int) -> Scores:
    """Rows for tokens 0..past (the first one a cache of `past` tokens lacks): `known`'s, the last scored by its
    frontier where it has no row for it."""
    return known.head(past + 1) if len(known) > past else known.then(score_logits(known.frontier[None],
                                                                                  ids[past : past + 1]))


def chunks(n_hidden: int) -> list[tuple[int, int]]:
    """The [start, end) chunks of new positions whose logits score a token of the text (all but the last)."""
    return [(start, min(start + SCORE_CHUNK, n_hidden - 1)) for start in range(0, n_hidden - 1, SCORE_CHUNK)]


def token_spans(offsets: list[tuple[int, int]], n_chars: int) -> list[tuple[int, int]]:
    """Each token's share of the text, from a fast tokenizer's offsets: contiguous spans that rebuild it.

    Offsets may leave out a token's leading space, or give every piece of a character split over
    several tokens the same span; here each token starts where the one before it ended, and a
    character belongs to the first token that reaches it (the later pieces get empty spans).
    """
    spans, end = [], 0
    for _, token_end in offsets:
        start, end = end, max(end, min(token_end, n_chars))
        spans.append((start, end))
    if spans:
        spans[-1] = (spans[-1][0], n_chars)
    return spans
