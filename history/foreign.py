"""What the other tools' trees share: each node holds only the text it adds to its parent's.

Reading, a file becomes `Piece`s (one per node, parents before children) and `build` joins the
pieces along each path into this app's nodes, which hold their whole text. Writing, `placements`
cuts this app's tree into such pieces. A node of ours may change text before its parent's end (an
edit, a clear, a branch at a caret inside the text): no piece added to its parent gives its text,
so it hangs from the nearest node above whose text its own extends (an empty root added above
ours where none does), and a small record in the file (`Marker`) lets this app put it back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from history import KINDS, History, Node

MODEL_KINDS = ("branch", "word", "token", "continue", "rewind")  # text the model wrote, accepted
MARKER_KEY = "interactive_lookahead"  # where a file written here keeps what its format cannot


@dataclass(frozen=True)
class Marker:
    """What this app adds to a node it writes: its kind, its number here (so siblings and ids come back in
    order), and its real parent where it hangs from another.

    `virtual`: the empty root added above ours; `model`: the tree's model (kept on the root).
    """

    kind: str | None = None
    id: int | None = None
    parent: str | None = None
    virtual: bool | None = None
    model: str | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None}

    @classmethod
    def read(cls, raw: object, where: str) -> Marker | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or not set(raw) <= set(cls.__dataclass_fields__):
            raise ValueError(f"{where}: its {MARKER_KEY!r} field is not one this app writes")
        marker = cls(**raw)
        if marker.kind is not None and marker.kind not in KINDS:
            raise ValueError(f"{where}: kind {marker.kind!r} is not one of {KINDS}")
        if marker.id is not None and not (isinstance(marker.id, int) and marker.id >= 0):
            raise ValueError(f"{where}: its number {marker.id!r} is not a count")
        return marker


@dataclass
class Piece:
    """A node as a loom-style file holds it: the text it adds to its parent's, and what is known of it."""

    key: str
    parent: str | None
    text: str
    kind: str  # "type" for the writer's text, a model kind for the model's
    settings: dict = field(default_factory=dict)
    time: float = 0.0
    marker: Marker | None = None


@dataclass(frozen=True)
class Imported:
    """A file read: the tree, the format it was in, and what the writer should know (empty if nothing)."""

    history: History
    format: str
    notice: str = ""


def build(pieces: list[Piece], current: str | None, model: str = "") -> History:
    """The tree the pieces make, each node's text the pieces along its path; `current` (a key) its current node.

    Markers put moved nodes back under their real parents and drop an added root. `model`: the tree's
    model where no marker names it, else the model the model-written pieces name most.
    """
    if not pieces:
        raise ValueError("the tree has no nodes")
    by_key = _texts(pieces)
    root = pieces[0]
    if root.marker and root.marker.virtual:
        root = next((p for p in pieces if p.parent == root.key and not (p.marker and p.marker.parent)), None)
        if root is None:
            raise ValueError("the added empty root has no node below it")
    parents = {p.key: (p.marker.parent if p.marker and p.marker.parent else p.parent) for p in pieces}
    for key, parent in parents.items():
        if parent is not None and parent not in by_key:
            raise ValueError(f"node {key!r}: its parent {parent!r} is not in the tree")
    order = _numbered(_depth_first(root.key, parents, [p.key for p in pieces]), parents, by_key)
    ids = {key: i for i, key in enumerate(order)}
    nodes = []
    for i, key in enumerate(order):
        piece, text = by_key[key]
        kind = piece.marker.kind if piece.marker and piece.marker.kind else ("start" if i == 0 else piece.kind)
        parent = None if i == 0 else ids[parents[key]]
        nodes.append(Node(i, parent, text, kind, settings=piece.settings, time=piece.time))
    named = next((p.marker.model for p in pieces if p.marker and p.marker.model), None)
    history = History(nodes, 0, named if named is not None else model or _most_named(pieces))
    history.select(ids.get(current, 0))
    return history


def _texts(pieces: list[Piece]) -> dict[str, tuple[Piece, str]]:
    """Each piece by key with its whole text; a parent must come before its children."""
    by_key: dict[str, tuple[Piece, str]] = {}
    for piece in pieces:
        if piece.key in by_key:
            raise ValueError(f"node {piece.key!r} appears twice")
        if piece.parent is None:
            base = ""
        elif piece.parent in by_key:
            base = by_key[piece.parent][1]
        else:
            raise ValueError(f"node {piece.key!r}: its parent {piece.parent!r} is not in the tree")
        by_key[piece.key] = (piece, base + piece.text)
    return by_key


def _depth_first(root: str, parents: dict[str, str | None], order: list[str]) -> list[str]:
    """The keys from `root` down, parents first and siblings in file order; all must be reached."""
    children: dict[str | None, list[str]] = {}
    for key in order:
        children.setdefault(parents[key], []).append(key)
    out, stack = [], [root]
    while stack:
        key = stack.pop()
        out.append(key)
        stack += reversed(children.get(key, []))
    expected = len(order) - (root != order[0])  # an added root is dropped
    if len(out) != expected:
        raise ValueError(f"{expected - len(out)} nodes cannot be reached from the root")
    return out


def _numbered(order: list[str], parents: dict[str, str | None], by_key: dict[str, tuple[Piece, str]]) -> list[str]:
    """`order` by the numbers this app's markers give, where every node has one, 0 to n-1, parents first."""
    numbers = {key: by_key[key][0].marker.id if by_key[key][0].marker else None for key in order}
    if sorted(n for n in numbers.values() if n is not None) != list(range(len(order))):
        return order
    renumbered = sorted(order, key=numbers.__getitem__)
    at = {key: i for i, key in enumerate(renumbered)}
    if renumbered[0] != order[0] or any(at[parents[key]] > at[key] for key in renumbered[1:]):
        return order
    return renumbered


def _most_named(pieces: Iterable[Piece]) -> str:
    names = Counter(p.settings["model"] for p in pieces if isinstance(p.settings.get("model"), str))
    return names.most_common(1)[0][0] if names else ""


@dataclass(frozen=True)
class Placement:
    """A node of ours as a piece: the node (None for an added empty root), the node it hangs from
    (None at the top), the text it adds, and whether that is another than its parent (`moved`)."""

    node: Node | None
    parent: int | None
    text: str
    moved: bool = False

    @property
    def key(self) -> int:
        return ADDED_ROOT if self.node is None else self.node.id

    def marker(self, history: History, ids: dict[int, str]) -> Marker:
        """What the file keeps for this app: the kind, the real parent of a moved node, the model at the root."""
        node = self.node
        if node is None:
            return Marker(virtual=True)
        return Marker(node.kind, node.id, ids[node.parent] if self.moved else None,
                      model=history.model if node.parent is None else None)


ADDED_ROOT = -1  # the added empty root's place among the node ids


def new_ids(history: History, new_id: Callable[[], str]) -> dict[int, str]:
    """A fresh id in the file for each node and for an added root (files from many exports may be merged)."""
    return {ADDED_ROOT: new_id(), **{n.id: new_id() for n in history.nodes}}


def placements(history: History) -> list[Placement]:
    """Our tree as pieces, parents before children; an empty root above ours first where a node needs it."""
    nodes = history.nodes
    placed = [Placement(nodes[0], None, nodes[0].text)]
    for node in nodes[1:]:
        above = _nearest_prefix(history, node)
        base = "" if above == ADDED_ROOT else nodes[above].text
        placed.append(Placement(node, above, node.text[len(base):], moved=above != node.parent))
    if any(p.parent == ADDED_ROOT for p in placed):
        placed[0] = Placement(nodes[0], ADDED_ROOT, nodes[0].text)
        placed.insert(0, Placement(None, None, ""))
    return placed


def _nearest_prefix(history: History, node: Node) -> int:
    """The nearest node above `node` whose text its own starts with (ADDED_ROOT where none does)."""
    above = node.parent
    while above is not None:
        if node.text.startswith(history.nodes[above].text):
            return above
        above = history.nodes[above].parent
    return ADDED_ROOT


def dropped(history: History, format_name: str, moved: int) -> str:
    """The export's notice: what `format_name` does not hold of this tree, by count of nodes."""
    with_ids = sum(1 for n in history.nodes if n.token_ids)
    with_settings = sum(1 for n in history.nodes if n.settings)
    parts = [f"{format_name} keeps the text, the tree and which text the model wrote"]
    left = [f"token ids ({_nodes(with_ids)})"] if with_ids else []
    left += [f"settings and chat turns ({_nodes(with_settings)})"] if with_settings else []
    if left:
        parts.append(f"left out: {', '.join(left)} — export this app's JSON to keep everything")
    if moved:
        parts.append(f"{_nodes(moved)} changing text before their parent's end hang from the nearest node whose "
                     f"text they extend (importing here puts them back)")
    return "; ".join(parts) + "."


def _nodes(count: int) -> str:
    return f"{count} node{'s' * (count != 1)}"
