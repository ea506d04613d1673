"""OpenLoom's tree JSON (`*.openloom.json`, OpenLoom v0.1/1.0 as its specification pages define it).

A file is a LoomTree {"id", "title", "description", "lastModified", "systemMessage", "rootNodeId",
"currentNodeId", "nodes": {id: Node}, "bookmarkedNodes": {id: Node}}; a Node is {"id", "text",
"author": "user" | "assistant" | "system", "modelId" ("User" or a user name for the writer's),
"createdTime", "parentId" (null or absent at the root), "childrenIds", "rememberedChildId" (the
child visited last), "isBookmarked", "bookmarkTitle"}. The reference app is written in Swift: its
dates are seconds since 2001-01-01 (Foundation's default), its ids upper-case UUIDs. OpenLoom's nodes are
chat messages; here, as in loom, each one's text is what it adds to the text above it.
"""

from __future__ import annotations

import json
import uuid

from history import History
from history.foreign import (
    MARKER_KEY,
    MODEL_KINDS,
    Imported,
    Marker,
    Piece,
    Placement,
    build,
    dropped,
    new_ids,
    placements,
)

FORMAT = "openloom"
APPLE_EPOCH = 978307200.0  # 2001-01-01 in unix seconds: Swift's Date is encoded as seconds since then
MODEL_AUTHOR, WRITER_AUTHOR, WRITER_MODEL_ID = "assistant", "user", "User"
TITLE = "Interactive lookahead history"


def is_openloom(raw: dict) -> bool:
    return "rootNodeId" in raw and "nodes" in raw


def read(raw: dict) -> Imported:
    nodes, root = raw.get("nodes"), raw.get("rootNodeId")
    if not isinstance(nodes, dict) or root not in nodes:
        raise ValueError("OpenLoom file: \"nodes\" must be an object holding the node \"rootNodeId\" names")
    children = _children(nodes)
    pieces: list[Piece] = []
    stack: list[tuple[str, str | None]] = [(root, None)]
    seen = set()
    while stack:
        key, parent = stack.pop()
        if key in seen:
            raise ValueError(f"OpenLoom file: node {key!r} is reached twice (a loop, or two parents)")
        seen.add(key)
        pieces.append(_piece(key, nodes.get(key), parent))
        stack += [(child, key) for child in reversed(children.get(key, []))]
    current = raw.get("currentNodeId")
    if current is not None and current not in seen:
        raise ValueError(f"OpenLoom file: the current node {current!r} is not in the tree")
    system = raw.get("systemMessage")
    if isinstance(system, str) and system:
        pieces[0].settings["system_message"] = system
    history = build(pieces, current)
    written = sum(1 for n in history.nodes if n.kind in MODEL_KINDS)
    notice = (f"Read an OpenLoom tree of {len(history.nodes)} messages, {written} of them a model's; each message's "
              f"text follows the one above it.")
    if len(seen) < len(nodes):
        notice += f" {len(nodes) - len(seen)} nodes not connected to the root were left out."
    return Imported(history, FORMAT, notice)


def _children(nodes: dict) -> dict[str, list[str]]:
    """Each node's children: its childrenIds, then any other node naming it as parent, in file order."""
    children: dict[str, list[str]] = {}
    for key, node in nodes.items():
        listed = node.get("childrenIds") if isinstance(node, dict) else None
        if listed is not None and not (isinstance(listed, list) and all(c in nodes for c in listed)):
            raise ValueError(f"OpenLoom file: node {key!r}: childrenIds must list nodes of the tree")
        children.setdefault(key, []).extend(listed or [])
    for key, node in nodes.items():
        parent = node.get("parentId") if isinstance(node, dict) else None
        if parent in nodes and key not in children[parent]:
            children[parent].append(key)
    return children


def _piece(key: str, node: object, parent: str | None) -> Piece:
    where = f"OpenLoom file: node {key!r}"
    if not isinstance(node, dict) or not isinstance(node.get("text"), str):
        raise ValueError(f"{where} must be an object with a text")
    by_model = node.get("author") == MODEL_AUTHOR
    model = node.get("modelId")
    settings = {"imported_from": FORMAT, **({"model": model} if isinstance(model, str) else {})} if by_model else {}
    created = node.get("createdTime")
    stamp = created + APPLE_EPOCH if isinstance(created, (int, float)) and not isinstance(created, bool) else 0.0
    return Piece(key, parent, node["text"], "continue" if by_model else "type", settings, stamp,
                 Marker.read(node.get(MARKER_KEY), where))


def write(history: History) -> str:
    """The tree as an OpenLoom file: every node in "nodes", each with the text it adds, the current node current."""
    placed = placements(history)
    ids = new_ids(history, lambda: str(uuid.uuid4()).upper())
    hangs_from = {p.key: p.parent for p in placed}
    nodes = {}
    for place in placed:
        nodes[ids[place.key]] = _node(place, history, ids, hangs_from)
        if place.parent is not None:
            nodes[ids[place.parent]]["childrenIds"].append(ids[place.key])
    return json.dumps({
        "id": str(uuid.uuid4()).upper(), "title": TITLE, "description": f"Written with {history.model}.",
        "lastModified": max(n.time for n in history.nodes) - APPLE_EPOCH, "systemMessage": "",
        "rootNodeId": ids[placed[0].key], "currentNodeId": ids[history.current], "nodes": nodes, "bookmarkedNodes": {},
    }, ensure_ascii=False)


def _node(place: Placement, history: History, ids: dict[int, str], hangs_from: dict[int, int | None]) -> dict:
    node = place.node
    by_model = node is not None and node.kind in MODEL_KINDS
    remembered = None if node is None else node.last_child
    if remembered is not None and hangs_from[remembered] != node.id:
        remembered = None  # a child that hangs elsewhere in the file
    return {
        "id": ids[place.key], "text": place.text, "author": MODEL_AUTHOR if by_model else WRITER_AUTHOR,
        "modelId": history.model if by_model else WRITER_MODEL_ID,
        "createdTime": (history.nodes[0].time if node is None else node.time) - APPLE_EPOCH,
        "parentId": None if place.parent is None else ids[place.parent], "childrenIds": [],
        "rememberedChildId": None if remembered is None else ids[remembered],
        "isBookmarked": False, "bookmarkTitle": None, MARKER_KEY: place.marker(history, ids).as_dict(),
    }


def notice(history: History) -> str:
    return dropped(history, "OpenLoom", sum(p.moved for p in placements(history)))
