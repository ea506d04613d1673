"""The writer's history as a tree, as in loom-style tree writers: nothing chosen is ever lost.

Every appended branch, forced token, appended text, continuation and typing pause is a
node holding the whole text at that point. In chat mode the text is the reply being written,
and a "turn" node records the conversation when a turn is sent (its settings' "messages").
Undo moves to the parent, redo to the child last visited; choosing something else after an
undo adds a sibling. The tree is plain data, kept in the visitor's session, and exports to
JSON and back losslessly.

The JSON (version 3) stores each node as an edit of its parent's text: how many of the
parent's first characters it keeps, what it adds after them, and how many of the parent's
last characters follow (`tail`, absent when none). A click, at the end of the text or at a
caret inside it, then costs the browser's storage the branch's few characters, not another
copy of the text. Version 2 files (no `tail`) and version 1 files, which stored every node's
whole text, still read.

The browser keeps a copy of the tree (so a reload picks up where it left off), and each update
sends it only what changed (`changes`): the whole tree once, then the nodes added or altered.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

FORMAT = "interactive-lookahead-history"
VERSION = 3
READS = (1, 2, 3)
SYNC_VERSION = 1  # of the messages `changes` writes; the page's script asks for the whole tree on another
KINDS = ("start", "type", "branch", "word", "token", "append", "continue", "clear", "rewind", "turn")
PAUSE_SECONDS = 2.0  # typing within this long of the last keystroke edits the same node


@dataclass
class Node:
    id: int
    parent: int | None
    text: str  # the whole text at this node
    kind: str  # how it was reached, one of KINDS
    token_ids: list[int] = field(default_factory=list)  # the tokens appended, for branches, tokens, continuations
    settings: dict = field(default_factory=dict)  # the sampling and branch settings in use
    time: float = 0.0  # unix seconds of the last change
    last_child: int | None = None  # where redo goes


@dataclass
class History:
    nodes: list[Node]
    current: int
    model: str
    # Which browser copy this tree is mirrored to, and the nodes changed since it was last updated
    # (None: that copy is unknown, so the next update sends the whole tree).
    sync: str = field(default="", compare=False, repr=False)
    changed: set[int] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def start(cls, text: str, model: str) -> History:
        return cls([Node(0, None, text, "start", time=time.time())], 0, model)

    def changes(self, whole: bool = False) -> dict:
        """For the browser's copy: the whole tree the first time (or if `whole`), then the nodes changed since.

        The history sync message of docs/architecture.md, "Page state messages": {"v", "sync", "whole"} or
        {"v", "sync", "current", "nodes"}. A copy with another "sync" is another tree's: it needs the whole one.
        """
        if self.changed is None or whole:
            self.sync = uuid.uuid4().hex[:12]  # a new copy (gradio gives each session a copy of one default tree)
            message = {"v": SYNC_VERSION, "sync": self.sync, "whole": self.as_dict()}
        else:
            nodes = [self._as_edit(self.nodes[i]) for i in sorted(self.changed)]
            message = {"v": SYNC_VERSION, "sync": self.sync, "current": self.current, "nodes": nodes}
        self.changed = set()
        return message

    def _touch(self, *node_ids: int) -> None:
        if self.changed is not None:
            self.changed.update(node_ids)

    @property
    def text(self) -> str:
        return self.nodes[self.current].text

    def children(self, node_id: int | None) -> list[int]:
        return self.child_map().get(node_id, [])

    def child_map(self) -> dict[int | None, list[int]]:
        """Each node's children in creation order (the root is the child of None)."""
        kids: dict[int | None, list[int]] = {}
        for n in self.nodes:
            kids.setdefault(n.parent, []).append(n.id)
        return kids

    def add(self, text: str, kind: str, token_ids: list[int] = (), settings: dict | None = None) -> None:
        """Record reaching `text` by `kind` from the current node (typing without a pause amends it)."""
        if kind not in KINDS[1:]:
            raise ValueError(f"kind must be one of {KINDS[1:]}, got {kind!r}")
        now, here = time.time(), self.nodes[self.current]
        if text == here.text and kind == "type":
            return
        if kind == here.kind == "type" and not self.children(here.id) and now - here.time < PAUSE_SECONDS:
            here.text, here.time = text, now
            self._touch(here.id)
            return
        node = Node(len(self.nodes), here.id, text, kind, list(token_ids), dict(settings or {}), now)
        self.nodes.append(node)
        here.last_child = self.current = node.id
        self._touch(here.id, node.id)

    def fork(self, text: str, kind: str, token_ids: list[int] = (), settings: dict | None = None) -> None:
        """Record `text` as reached from the deepest node on the current path whose text it extends (else the root).

        Rewinding to an earlier token so branches off where that token was chosen: the path it
        leaves stays in the tree, a sibling of the new one.
        """
        self.current = next((i for i in reversed(self.path()) if text.startswith(self.nodes[i].text)), 0)
        self.add(text, kind, token_ids, settings)

    def undo(self) -> bool:
        parent = self.nodes[self.current].parent
        if parent is None:
            return False
        self.nodes[parent].last_child, self.current = self.current, parent
        self._touch(parent)
        return True

    def redo(self) -> bool:
        child = self.nodes[self.current].last_child
        if child is None:
            return False
        self.current = child
        return True

    def select(self, node_id: int) -> None:
        if not 0 <= node_id < len(self.nodes):
            raise ValueError(f"no node {node_id} in this history")
        self.current = node_id
        path = self.path()
        for parent, child in zip(path, path[1:]):  # redo from any ancestor leads back here
            if self.nodes[parent].last_child != child:
                self.nodes[parent].last_child = child
                self._touch(parent)

    def conversation(self) -> list[dict]:
        """Chat mode's turns at the current node: those recorded by the nearest "turn" node on its path."""
        turns = [self.nodes[i] for i in self.path() if self.nodes[i].kind == "turn"]
        return list(turns[-1].settings.get("messages", [])) if turns else []

    def path(self) -> list[int]:
        """Node ids from the root to the current node."""
        ids, node = [], self.current
        while node is not None:
            ids.append(node)
            node = self.nodes[node].parent
        return ids[::-1]

    def rows(self) -> list[tuple[Node, int]]:
        """(node, indent) in depth-first order; indent grows only where the tree forks, to stay compact."""
        kids = self.child_map()
        out: list[tuple[Node, int]] = []
        stack = [(0, 0)]
        while stack:
            node_id, indent = stack.pop()
            out.append((self.nodes[node_id], indent))
            children = kids.get(node_id, [])
            step = 1 if len(children) > 1 else 0
            stack += [(c, indent + step) for c in reversed(children)]
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), ensure_ascii=False, separators=(",", ":"))

    def as_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "model": self.model, "current": self.current,
                "nodes": [self._as_edit(n) for n in self.nodes]}

    def _as_edit(self, node: Node) -> dict:
        """The node as stored: its text as an edit of its parent's (`Edit`)."""
        keep, add, tail = edit_of("" if node.parent is None else self.nodes[node.parent].text, node.text)
        fields = {k: v for k, v in asdict(node).items() if k != "text"}
        return {**fields, "keep": keep, "add": add, **({"tail": tail} if tail else {})}

    @classmethod
    def from_json(cls, data: str) -> History:
        """The history in `data` (as written by to_json); ValueError saying what is wrong otherwise.

        A tree read back is new to every browser copy (another tab may have read the same one).
        """
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, TypeError) as error:
            raise ValueError(f"not a JSON history file: {error}") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise ValueError(f"not an {FORMAT} file (its \"format\" field is missing or different)")
        version = raw.get("version")
        if version not in READS:
            raise ValueError(f"history version {version!r} is not supported (this app reads {list(READS)})")
        nodes_raw = raw.get("nodes")
        if not isinstance(nodes_raw, list) or not nodes_raw:
            raise ValueError("the history has no nodes")
        nodes: list[Node] = []
        for i, n in enumerate(nodes_raw):
            nodes.append(_node(i, n if version == 1 else _with_text(i, n, nodes)))
        for node in nodes:
            lc = node.last_child
            if lc is not None and (lc >= len(nodes) or nodes[lc].parent != node.id):
                raise ValueError(f"node {node.id}: last_child {lc} is not one of its children")
        current, model = raw.get("current"), raw.get("model")
        if not isinstance(current, int) or not 0 <= current < len(nodes):
            raise ValueError(f"current node {current!r} is not in the history")
        if not isinstance(model, str):
            raise ValueError("the history does not say which model made it")
        return cls(nodes, current, model)


class Edit(NamedTuple):
    """How one text becomes another: the first `keep` characters stay, `add` follows them, then the last `tail`
    characters of the first text (what lay between is replaced)."""

    keep: int
    add: str
    tail: int


def edit_of(before: str, after: str) -> Edit:
    """The edit from `before` to `after` that keeps the most of both ends: a click or a keystroke's own."""
    keep = common_prefix(before, after)
    tail = common_prefix(before[keep:][::-1], after[keep:][::-1])
    return Edit(keep, after[keep : len(after) - tail], tail)


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, by halving with C-speed slice comparisons (texts are long)."""
    if b.startswith(a):
        return len(a)
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if a[:mid] == b[:mid] else (low, mid - 1)
    return low


def _with_text(i: int, raw: object, earlier: list[Node]) -> object:
    """A stored node (keep, add and, from version 3, tail) as a version 1 node (text), from its parent's text."""
    if not isinstance(raw, dict) or not {"keep", "add", "parent"} <= set(raw):
        return raw  # _node says which fields are missing
    parent, keep, add, tail = raw["parent"], raw["keep"], raw["add"], raw.get("tail", 0)
    base = earlier[parent].text if isinstance(parent, int) and 0 <= parent < i else ""
    if not (_count(keep) and _count(tail) and keep + tail <= len(base) and isinstance(add, str)):
        raise ValueError(f"node {i}: keep and tail must be counts of the parent's characters (together at most "
                         f"{len(base)}) and add a string")
    fields = {k: v for k, v in raw.items() if k not in ("keep", "add", "tail")}
    return {**fields, "text": base[:keep] + add + base[len(base) - tail :]}


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _node(i: int, raw: object) -> Node:
    where = f"node {i}"
    if not isinstance(raw, dict) or set(raw) != set(Node.__dataclass_fields__):
        raise ValueError(f"{where}: expected the fields {sorted(Node.__dataclass_fields__)}")
    node = Node(**raw)
    checks = [
        (node.id == i, "its id must equal its position"),
        ((node.parent is None) == (i == 0), "only the first node has no parent"),
        (node.parent is None or (isinstance(node.parent, int) and 0 <= node.parent < i),
         "its parent must come before it"),
        (isinstance(node.text, str), "text must be a string"),
        (node.kind in KINDS, f"kind must be one of {KINDS}"),
        (isinstance(node.token_ids, list) and all(isinstance(t, int) for t in node.token_ids),
         "token_ids must be integers"),
        (isinstance(node.settings, dict), "settings must be an object"),
        (isinstance(node.time, (int, float)), "time must be a number"),
        (node.last_child is None or (isinstance(node.last_child, int) and node.last_child > i),
         "last_child must be a later node"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"{where}: {message}")
    return node
