"""The ledger of who wrote what: how much of the text the writer wrote and how much they accepted from the model,
the bits they spent choosing what they accepted, and how surprising the model found each side's tokens.

Plain data in and out: the authorship spans (history/authorship.py), the choices recorded on the nodes that built
the text, and the engine's scores of the text's tokens (`token_probabilities`, which the heatmap also shows).
"""

from __future__ import annotations

import html
import math
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from history import History
from history.authorship import MODEL_KINDS, WRITER, Span, authorship, lineage
from lookahead.outputs import ScoredToken

LEDGER_ALTERNATIVES = 5  # per token, in the scores the ledger asks for (the heatmap's, so the session's cache serves)


class Choice(NamedTuple):
    """A choice the writer made to accept the model's text: at which node, from what, among how many."""

    node: int
    source: str
    choices: int

    @property
    def bits(self) -> float:
        """loom's selection bits: log2 of the number of choices offered."""
        return math.log2(self.choices)


@dataclass(frozen=True)
class Ledger:
    """The ledger's numbers: characters by author, the choices, and the model's surprise at each side's tokens
    (mean bits per scored token, None where that side has none)."""

    writer_chars: int
    model_chars: int
    choices: list[Choice]
    writer_tokens: int
    model_tokens: int
    writer_bits: float | None
    model_bits: float | None

    @property
    def model_share(self) -> float:
        total = self.writer_chars + self.model_chars
        return self.model_chars / total if total else 0.0

    @property
    def selection_bits(self) -> float:
        return sum(choice.bits for choice in self.choices)


def token_authors(spans: list[Span], tokens: list[ScoredToken]) -> list[int | None]:
    """Each token's author: whoever wrote most of its characters (a token with none, a later piece of a character
    split over several tokens, goes with the character: the author where it starts). One sweep: both are in order."""
    authors, first = [], 0
    for token in tokens:
        while first < len(spans) and spans[first].end <= token.start:
            first += 1
        counts: Counter = Counter()
        at = first
        while at < len(spans) and spans[at].start < token.end:
            counts[spans[at].node] += min(spans[at].end, token.end) - max(spans[at].start, token.start)
            at += 1
        here = spans[first].node if first < len(spans) else WRITER
        authors.append(max(counts, key=counts.get) if counts else here)
    return authors


def accepted_tokens(history: History, text: str, tokens: list[ScoredToken]) -> frozenset[int]:
    """The indices of the tokens of `text` the writer accepted from the model: none where the history's current
    text is another (the box is ahead of it, or behind)."""
    if history.text != text:
        return frozenset()
    return frozenset(i for i, author in enumerate(token_authors(authorship(history), tokens)) if author is not WRITER)


def choices_made(history: History, node_id: int | None = None) -> list[Choice]:
    """The choices of the model's text that built the text at `node_id` (the current node by default), in order:
    those whose node recorded how many were offered."""
    return [Choice(node.id, node.settings.get("source", node.kind), node.settings["choices"])
            for node in lineage(history, node_id)
            if node.kind in MODEL_KINDS and isinstance(node.settings.get("choices"), int)
            and node.settings["choices"] >= 1]


def mean_bits(tokens: list[ScoredToken]) -> float | None:
    """The mean of −log2 p over the tokens the model scored (None: none was)."""
    scored = [-token.logprob / math.log(2) for token in tokens if token.logprob is not None]
    return sum(scored) / len(scored) if scored else None


def ledger(history: History, tokens: list[ScoredToken], node_id: int | None = None) -> Ledger:
    """The ledger of the text at `node_id` (the current node by default), `tokens` being the engine's scores of it."""
    spans = authorship(history, node_id)
    model_chars = sum(span.end - span.start for span in spans if span.node is not WRITER)
    total = len(history.nodes[history.current if node_id is None else node_id].text)
    authors = token_authors(spans, tokens)
    writers = [t for t, author in zip(tokens, authors) if author is WRITER]
    models = [t for t, author in zip(tokens, authors) if author is not WRITER]
    return Ledger(total - model_chars, model_chars, choices_made(history, node_id), len(writers), len(models),
                  mean_bits(writers), mean_bits(models))


def ledger_view(book: Ledger) -> str:
    """The ledger as the page shows it: each number in an element of its own (the browser tests read them)."""

    def number(id_: str, value: str) -> str:
        return f'<b id="{id_}">{html.escape(value)}</b>'

    def bits(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f}"

    per_choice = ", ".join(f"{c.source} (1 of {c.choices}): {c.bits:.2f}" for c in book.choices) or "none yet"
    return (
        '<div id="ledger-numbers">'
        f"<div>You wrote {number('ledger-writer-chars', f'{book.writer_chars:,}')} characters; you accepted "
        f"{number('ledger-model-chars', f'{book.model_chars:,}')} from the model "
        f"({number('ledger-model-share', f'{100 * book.model_share:.1f}%')} of the text).</div>"
        f"<div>Choosing what you accepted took {number('ledger-selection-bits', f'{book.selection_bits:.2f}')} "
        f"bits over {len(book.choices)} choice{'' if len(book.choices) == 1 else 's'} "
        f"({html.escape(per_choice)}).</div>"
        + (f"<div>The model's surprise, in mean bits per token: your words "
           f"{number('ledger-writer-bits', bits(book.writer_bits))} over {book.writer_tokens:,} tokens; the accepted "
           f"ones {number('ledger-model-bits', bits(book.model_bits))} over {book.model_tokens:,}.</div>"
           if book.writer_tokens + book.model_tokens else
           "<div>Show the heatmap (“Your text through the model's eyes”) to see how surprising the model found "
           "your words and the accepted ones.</div>")
        + "</div>"
    )
