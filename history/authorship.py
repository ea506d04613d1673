"""Who wrote each character of a text in the history: the writer, or the model through a node that accepted it.

Derived, never stored: the path from the root is replayed, each node's text as an edit of the text it came from
(`edit_of`, as the JSON stores it). What a model kind adds is that node's; what the writer's kinds add is the
writer's, and a writer's edit that touches a word the model wrote makes the whole word the writer's (a model's word
the writer then edits becomes the writer's). A rewind came from the node it rewound (settings' "from"), not from its
parent: its edit is of that node's text, so the text before the token it replaced keeps its authors.
"""

from __future__ import annotations

from typing import NamedTuple

from history import History, Node, edit_of

# The kinds whose added text the model wrote and the writer accepted; the others' is the writer's own.
MODEL_KINDS = frozenset({"branch", "word", "token", "continue", "rewind"})
WRITER = None  # a span's `node` when the writer wrote it


def accepted(source: str, choices: int, prob: float | None = None) -> dict:
    """What a node that takes the model's text records of the choice, beside the settings it was made with: where
    it was taken from ("branch", "word", "token", "futures", "continue", "rewind"), how many choices were offered
    (log2 of it is the bits the writer spent choosing), and the probability the page showed for what was taken."""
    return {"source": source, "choices": choices, **({"prob": prob} if prob is not None else {})}


class Span(NamedTuple):
    """Characters start..end of the text, written by the writer (`node` None) or accepted at node `node`."""

    start: int
    end: int
    node: int | None


def authorship(history: History, node_id: int | None = None) -> list[Span]:
    """The text at `node_id` (the current node by default) as consecutive spans by author, covering it all."""
    spans: list[Span] = []
    before = ""
    for node in lineage(history, node_id):
        spans = _edited(spans, before, node)
        before = node.text
    return spans


def lineage(history: History, node_id: int | None = None) -> list[Node]:
    """The nodes whose edits build the text at `node_id` (the current node by default), root first: each one's
    base (`_base`) before it. The path from the root, but for a rewind, which goes on from the node it rewound."""
    chain = []
    at: int | None = history.current if node_id is None else node_id
    while at is not None:
        chain.append(history.nodes[at])
        at = _base(history.nodes[at])
    return chain[::-1]


def _base(node: Node) -> int | None:
    """The node whose text `node` edited: a rewind's "from" (an earlier node), else its parent."""
    origin = node.settings.get("from") if node.kind == "rewind" else None
    return origin if isinstance(origin, int) and 0 <= origin < node.id else node.parent


def _edited(spans: list[Span], before: str, node: Node) -> list[Span]:
    """`spans` of `before` after `node`'s edit of it, what it added credited to its author."""
    keep, add, tail = edit_of(before, node.text)
    cut = len(before) - tail
    shift = len(add) - (cut - keep)
    after = [Span(s.start + shift, s.end + shift, s.node) for s in _clipped(spans, cut, len(before))]
    author = node.id if node.kind in MODEL_KINDS else WRITER
    start, end = keep, keep + len(add)
    if author is WRITER:
        start, end = _word_edges(node.text, start, end, add or before[keep:cut])
    return _assigned([*_clipped(spans, 0, keep), *after], start, end, author)


def _word_edges(text: str, start: int, end: int, change: str) -> tuple[int, int]:
    """The writer's edit at start..end widened to the whole words it touches: on a side where the change's own
    character and the text's next to it are both part of a word (neither is whitespace)."""
    if change and not change[0].isspace():
        while start > 0 and not text[start - 1].isspace():
            start -= 1
    if change and not change[-1].isspace():
        while end < len(text) and not text[end].isspace():
            end += 1
    return start, end


def _clipped(spans: list[Span], start: int, end: int) -> list[Span]:
    """The parts of `spans` within start..end."""
    return [Span(max(s.start, start), min(s.end, end), s.node) for s in spans if s.start < end and s.end > start]


def _assigned(spans: list[Span], start: int, end: int, node: int | None) -> list[Span]:
    """`spans` with start..end credited to `node`, neighbours of one author joined."""
    last = max(end, spans[-1].end if spans else end)
    return _merged([*_clipped(spans, 0, start), Span(start, end, node), *_clipped(spans, end, last)])


def _merged(spans: list[Span]) -> list[Span]:
    """Neighbouring spans of one author joined, empty ones dropped."""
    out: list[Span] = []
    for span in spans:
        if span.start >= span.end:
            continue
        if out and out[-1].node == span.node and out[-1].end == span.start:
            out[-1] = Span(out[-1].start, span.end, span.node)
        else:
            out.append(span)
    return out
