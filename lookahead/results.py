"""The answers every backend returns (lookahead/outputs.py), built from what the model said.

Every backend (the model in this process, a server) ends in these functions, so a caller gets the same answer
from either; only the numbers' source differs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedTokenizerBase

from lookahead.healing import token_texts
from lookahead.outputs import (
    Alternative,
    AttributedToken,
    Branch,
    Continuation,
    ForcedTokens,
    FutureNode,
    LeadTokens,
    NextToken,
    ScoredToken,
    TokenScores,
)
from lookahead.sampling import ranked
from lookahead.scoring import Scores, token_spans, unscored

if TYPE_CHECKING:
    from lookahead.context import ScoredText
    from lookahead.multiverse import Node

DISTRIBUTION_ROWS = 10  # a lookahead's distribution lists at least this many tokens: the page plots them
REFUSED_ROWS = 3  # under a constraint it then lists the likeliest tokens the constraint refuses
# Where the model writes the next token this likely (before and after the sampling settings), that token is no
# choice: a paragraph break's whitespace completed ("\n\n" at ~99%), the rest of a word begun ("Eiffel Tow" →
# "er"). The branches fork after it, up to MAX_LEAD_TOKENS such tokens in a row: five first words of the new
# paragraph instead of one branch and four runs of spaces. Each token led costs one more branch tree, read over
# the kept cache of the first (its branch 0 began with that token).
LEAD_PROB = 0.95
MAX_LEAD_TOKENS = 3
# Where branches wrote the same text (one text, several tokenizations) and were made one, more candidates are
# continued, up to this many times the branches asked for, so that as many different ones are shown.
MAX_CANDIDATES_PER_BRANCH = 4


def lead_token(distribution: list[NextToken], stops: Collection[int], lead: tuple[int, ...]) -> NextToken | None:
    """The distribution's first entry if the model writes it all but certainly (LEAD_PROB), so that the branches
    should fork after it; None where the next token is a real choice (or ends the text), or MAX_LEAD_TOKENS lead
    already."""
    if len(lead) >= MAX_LEAD_TOKENS or not distribution:
        return None
    top = distribution[0]
    certain = top.prob >= LEAD_PROB and top.p_final >= LEAD_PROB and top.valid
    return top if certain and top.token_id not in stops else None


def lead_entry(forced: list[int], lead: tuple[int, ...], probs: tuple[float, ...], healed: str,
               tokenizer: PreTrainedTokenizerBase) -> LeadTokens | None:
    """What the model all but certainly writes before the branches' first choice (None: nothing): its tokens (the
    last of `forced`, after those a constraint forces), their text, and their probability together."""
    if not lead:
        return None
    before = tokenizer.decode(forced[: len(forced) - len(lead)], clean_up_tokenization_spaces=False)
    whole = tokenizer.decode(forced, clean_up_tokenization_spaces=False)
    return LeadTokens(list(lead), whole[max(len(before), len(healed)):], math.prod(probs))


def forced_entry(forced: list[int], healed: str, tokenizer: PreTrainedTokenizerBase) -> ForcedTokens | None:
    """What a constraint wrote by itself after the text before the branches' first choice (None: nothing):
    its tokens, and their text (healing's backed-up whitespace, part of the text already, left out)."""
    if not forced:
        return None
    return ForcedTokens(forced, tokenizer.decode(forced, clean_up_tokenization_spaces=False)[len(healed):])


def context_info(model: str, device: str, n_tokens: int, reused: int, dropped: int, healed: str) -> dict:
    """What a caller is told about the context the model saw."""
    return {
        "model": model,
        "device": device,
        "context_tokens": n_tokens,
        "reused_tokens": reused,
        "truncated_tokens": dropped,
        "healed_whitespace": healed,
        "notice": (
            f"The text is longer than the model's context: only its last {n_tokens} tokens were used "
            f"({dropped} earlier tokens were left out)."
            if dropped
            else ""
        ),
    }


def distribution_entries(
    logprobs: torch.Tensor, final_logprobs: torch.Tensor, k: int, tokenizer: PreTrainedTokenizerBase,
    ids: list[int] | None = None, valid: torch.Tensor | None = None,
) -> list[NextToken]:
    """Entries for the k next tokens ranked by p_final, then p_base (or for the given `ids`).

    `logprobs` (vocab,) is log p_base, `final_logprobs` (vocab,) log p_final (-inf where cut),
    `valid` (bool, vocab) what a constraint allows (None: everything).
    """
    ids = ranked(logprobs, final_logprobs, k).tolist() if ids is None else ids
    chosen, p_final = logprobs[ids], final_logprobs[ids].exp()
    allowed = [True] * len(ids) if valid is None else valid[ids].tolist()
    texts = tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
    return [NextToken(i, t, float(lp.exp()), float(lp), float(pf), bool(pf > 0), bool(ok))
            for i, t, lp, pf, ok in zip(ids, texts, chosen, p_final, allowed)]


def through_first(sequence: list[int], stops: Collection[int]) -> list[int]:
    """`sequence` up to and including its first stop token (a branch ends where the model would stop)."""
    return next((sequence[: i + 1] for i, token in enumerate(sequence) if token in stops), sequence)


def first_stop(text: str, stop: Iterable[str], searched_from: int = 0) -> tuple[int, str | None]:
    """(where `text` is cut, the stop string completed first): (len(text), None) if none is.

    The stop completed first is the one ending earliest (the earlier start on a tie), as a stream
    sees them; only completions ending past `searched_from` are looked for.
    """
    best = (len(text) + 1, 0, None)
    for s in stop:
        at = text.find(s, max(0, searched_from - len(s) + 1))
        if at >= 0 and (at + len(s), at) < best[:2]:
            best = (at + len(s), at, s)
    return (best[1], best[2]) if best[2] is not None else (len(text), None)


def more_candidates(asked: int, candidates: int, distinct: int, shown: int) -> int | None:
    """How many candidate branches to continue instead of `candidates`, where only `distinct` of them wrote different
    texts and `shown` are wanted (None: enough, or no more to be had)."""
    if distinct >= shown or candidates < asked or asked >= MAX_CANDIDATES_PER_BRANCH * shown:
        return None
    return min(asked + shown - distinct, MAX_CANDIDATES_PER_BRANCH * shown)


HALF_CHARACTER = "\ufffd"  # what a token sequence that ends inside a character's bytes decodes to at its end


def branch_entries(
    sequences: list[list[int]], stops: Collection[int], firsts: list[NextToken], healed: str,
    tokenizer: PreTrainedTokenizerBase, stop: tuple[str, ...] = (), fits: list[float] | None = None,
) -> list[Branch]:
    """Each branch: its tokens through the first stop, the text to append, its first token's p, and its
    fit with the text after the caret (`fits`, None without one; a branch that ends has none).

    A stop string ends a branch too: its text is cut before the string, its tokens run through the
    one that completed it, and "stop" says which string it was. A branch ends on a whole character (the tokens
    of a character begun at its end are left out, as long as one token remains). Branches that write the same
    text are one, the likeliest, with their probabilities summed: one text reached through other tokenizations
    is no other choice.
    """
    branches: list[Branch] = []
    fits = fits or [None] * len(sequences)
    for seq, first, fit in zip((through_first(seq, stops) for seq in sequences), firsts, fits):
        end = seq[-1] in stops
        text = tokenizer.decode(seq[:-1] if end else seq, clean_up_tokenization_spaces=False)[len(healed) :]
        while not end and text.endswith(HALF_CHARACTER) and len(seq) > 1:
            seq = seq[:-1]
            text = tokenizer.decode(seq, clean_up_tokenization_spaces=False)[len(healed) :]
        cut, stopped = first_stop(text, stop)
        if stopped is not None:
            reach = cut + len(stopped)  # the tokens that wrote the stop string, no more
            seq = next(seq[:n] for n in range(1, len(seq) + 1)
                       if len(tokenizer.decode(seq[:n], clean_up_tokenization_spaces=False)) - len(healed) >= reach)
            text, end = text[:cut], False
        same = next((n for n, branch in enumerate(branches) if branch.text == text), None)
        if same is not None:
            branches[same] = replace(branches[same], prob=branches[same].prob + first.prob,
                                     p_final=branches[same].p_final + first.p_final)
            continue
        branches.append(Branch(seq, text, first.prob, first.p_final, end, stopped, None if end or stopped else fit))
    return branches


def token_entries(
    rows: Scores, k: int, tokenizer: PreTrainedTokenizerBase, offsets: list[tuple[int, int]], special: list[int],
    text_start: int, text_length: int, earlier: tuple[list[ScoredToken], int] = ([], 0),
) -> list[ScoredToken]:
    """The entries of the tokens that are the text's (offsets into the tokenized string, whose text
    begins at `text_start`).

    `earlier`: a previous listing of this context with k alternatives, and how many leading positions the two
    contexts share (the same tokens, so the same rows): its entries there are copied where their spans are
    unchanged, their alternatives shared, instead of being built again.
    """
    previous, shared = earlier
    listed, spans = text_tokens(offsets, special, text_start, text_length)
    spans = iter(spans)
    vocabulary = token_texts(tokenizer)
    n = len(vocabulary)  # a model may have more rows than tokens: those have no text
    # Probabilities in one tensor operation each, and plain lists from then on: a 3k-token text makes
    # ~20k entries, on every click while the heatmap is shown.
    columns = zip(rows.token_ids.tolist(), rows.logprob.tolist(), rows.logprob.exp().tolist(), rows.rank.tolist(),
                  rows.entropy.tolist(), rows.top_ids[:, :k].tolist(), rows.top_logprobs[:, :k].exp().tolist(), listed)
    entries = []
    for position, (token_id, logprob, prob, rank, entropy, top_ids, top_probs, is_listed) in enumerate(columns):
        if not is_listed:
            continue
        start, end = next(spans)
        if position < shared and len(entries) < len(previous) and (
                previous[len(entries)].start, previous[len(entries)].end) == (start, end):
            entries.append(previous[len(entries)])
            continue
        scored = not math.isnan(logprob)
        outside = not scored and rank > 0  # a server returned the rank - 1 likeliest tokens here, not this one
        entries.append(ScoredToken(
            token_id, vocabulary[token_id] if token_id < n else "", start, end,
            prob if scored else None, logprob if scored else None, rank if scored else None,
            entropy if scored or outside else None,
            tuple(Alternative(i, vocabulary[i] if i < n else "", q)
                  for i, q in zip(top_ids, top_probs) if i >= 0) if scored or outside else None,
            rank - 1 if outside else None,
        ))
    return entries


def scores_result(
    model: str, scored: ScoredText, rows: Scores, reused: int, k: int, tokenizer: PreTrainedTokenizerBase,
    text_length: int, earlier: tuple[list[ScoredToken], int] = ([], 0),
) -> TokenScores:
    """token_probabilities' answer from the window's score rows (the tokens before the window: unscored)."""
    encoding = scored.encoding
    if scored.dropped:
        rows = unscored(torch.tensor(encoding["input_ids"][: scored.dropped])).then(rows)
    tokens = token_entries(rows, k, tokenizer, encoding["offset_mapping"], encoding["special_tokens_mask"],
                           scored.text_start, text_length, earlier)
    return TokenScores(model, len(scored.ids), reused, scored.dropped, tokens)


def text_tokens(
    offsets: list[tuple[int, int]], special: list[int], text_start: int, text_length: int
) -> tuple[list[bool], list[tuple[int, int]]]:
    """Which tokens of the tokenized string are the text's (not special, ending inside it), and their spans in it."""
    listed = [not s and end > text_start for (_, end), s in zip(offsets, special)]
    return listed, token_spans([(a - text_start, b - text_start) for (a, b), ok in zip(offsets, listed) if ok],
                               text_length)


def text_token_places(encoding: dict, text_start: int, text_length: int) -> list[tuple[int, int]]:
    """For each of the text's tokens (as token_probabilities lists them): its position in the encoded context,
    and the character of the text where its span starts."""
    listed, spans = text_tokens(encoding["offset_mapping"], encoding["special_tokens_mask"], text_start, text_length)
    return [(i, start) for i, (start, _) in zip((i for i, ok in enumerate(listed) if ok), spans)]


def attribution_entries(
    ids: list[int], scores: list[float | None], tokenizer: PreTrainedTokenizerBase, offsets: list[tuple[int, int]],
    special: list[int], text_start: int, text_length: int,
) -> list[AttributedToken]:
    """The text's tokens with their share of the attribution (None: before the window), spans as token_entries'."""
    listed, spans = text_tokens(offsets, special, text_start, text_length)
    vocabulary = token_texts(tokenizer)
    chosen = [(token, score) for token, score, ok in zip(ids, scores, listed) if ok]
    return [AttributedToken(token, vocabulary[token] if token < len(vocabulary) else "", start, end, score)
            for (token, score), (start, end) in zip(chosen, spans)]


class GrowingContinuation:
    """A growing greedy continuation, as `generate` reports it after every forward pass."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, method: str, model: str, dropped: int, stop: tuple[str, ...] = ()
    ) -> None:
        self.tokenizer, self.method, self.model, self.dropped, self.stop = tokenizer, method, model, dropped, stop
        self.stopped_by: str | None = None  # the stop string that ended it
        self.token_ids: list[int] = []
        self.pieces: list[str] = []  # each token's share of the decoded text (multi-byte characters stay whole)
        self.sources: list[str] = []
        self.accepted: list[int] = []
        self.text = ""

    def follow(self, passes: Iterable[tuple[list[int], list[str]]], time_limit: float | None
               ) -> Iterator[Continuation]:
        """The result after each pass of (tokens, their sources); stops once `time_limit` seconds have passed."""
        start = time.perf_counter()
        for tokens, sources in passes:
            self.add(tokens, sources)
            seconds = time.perf_counter() - start
            out_of_time = time_limit is not None and seconds > time_limit
            yield self.result(seconds, out_of_time)
            if out_of_time or self.stopped_by is not None:
                return

    def add(self, tokens: list[int], sources: list[str]) -> None:
        """One forward pass's accepted tokens, and where each came from ("step", "ngram", "recycled").

        A completed stop string ends the continuation: the text is cut before it, and the tokens
        after the one that completed it are dropped.
        """
        for n, token in enumerate(tokens, 1):
            self.token_ids.append(token)
            longer = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
            self.pieces.append(longer[len(self.text) :] if longer.startswith(self.text) else longer)
            before, self.text = len(self.text), longer
            cut, self.stopped_by = first_stop(self.text, self.stop, before)
            if self.stopped_by is not None:
                self.text = self.text[:cut]
                self.pieces = _trimmed(self.pieces, cut)
                tokens, sources = tokens[:n], sources[:n]
                break
        self.sources += sources
        self.accepted.append(len(tokens))

    def result(self, seconds: float, stopped_for_time: bool) -> Continuation:
        return Continuation(
            text=self.text,
            token_ids=list(self.token_ids),
            token_texts=list(self.pieces),
            forward_passes=len(self.accepted),
            tokens_per_pass=len(self.token_ids) / max(1, len(self.accepted)),
            seconds=seconds,
            accepted_per_pass=list(self.accepted),
            draft_source_per_token=list(self.sources),
            method=self.method,
            model=self.model,
            truncated_tokens=self.dropped,
            stopped_for_time=stopped_for_time,
            stop=self.stopped_by,
        )


def _trimmed(pieces: list[str], length: int) -> list[str]:
    """`pieces` cut so that they join to their first `length` characters."""
    out, total = [], 0
    for piece in pieces:
        out.append(piece[: max(0, length - total)])
        total += len(out[-1])
    return out


def future_nodes(nodes: list[Node], tokenizer: PreTrainedTokenizerBase, healed: str,
                 stops: Collection[int]) -> list[FutureNode]:
    """The map's nodes as listed: the root (nodes[0]) first, then depth first, each node's children by mass; ids
    are places in that list. A path's `text` leaves out the whitespace healing backed up (the text has it) and an
    end token's own text (taking the path ends the text)."""
    order, stack = [], [0]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(sorted(nodes[i].children, key=lambda c: nodes[c].mass))  # the likeliest popped first
    place = {i: n for n, i in enumerate(order)}
    listed = [nodes[i] for i in order]
    tokens = tokenizer.batch_decode([[node.token_id] for node in listed[1:]], clean_up_tokenization_spaces=False)
    paths = [list(node.path[:-1] if node.path[-1] in stops else node.path) for node in listed[1:]]
    texts = tokenizer.batch_decode(paths, clean_up_tokenization_spaces=False)
    texts = [text.removeprefix(healed) for text in texts]
    return [FutureNode(n, None if node.parent is None else place[node.parent], node.token_id, token, text,
                       node.prob, node.p_base, node.mass, node.depth, node.entropy,
                       max(0.0, node.mass - sum(nodes[c].mass for c in node.children)) if not node.ends else 0.0,
                       node.on_text, node.ends)
            for n, (node, token, text) in enumerate(zip(listed, ["", *tokens], ["", *texts]))]
