"""socketteer/loom's tree JSON (the Python loom; Tapestry Loom's migration assistant calls it "pyloom").

A file is {"root": node, "chapters", "selected_node_id", "model_responses", ...settings}; a node is
{"id", "text" (what it adds to its parent's text), "children": [nodes], "parent_id", "meta":
{"source": "AI" | "prompt" | "mixed", "creation_timestamp": "%Y-%m-%d-%H.%M.%S" local time}, and for
generated text "generation": {"id", "index"}, the request and its tokens being
`model_responses[id]["completions"][index]`}. loom also opens a bare node ({"text", "children"}).
loom keeps fields it does not know when it saves, so this app's marker survives a visit there.
"""

from __future__ import annotations

import json
import time
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

FORMAT = "loom"
TIMESTAMP = "%Y-%m-%d-%H.%M.%S"  # loom's creation_timestamp, in local time
MODEL_SOURCE, WRITER_SOURCE = "AI", "prompt"
READABLE_DEPTH = 490  # Python's json module reads a node and its children list 2 levels each, up to about 1000


def is_loom(raw: dict) -> bool:
    return isinstance(raw.get("root"), dict) or {"text", "children"} <= set(raw)


def read(raw: dict) -> Imported:
    root = raw.get("root", raw)
    responses = raw.get("model_responses")
    responses = responses if isinstance(responses, dict) else {}
    pieces: list[Piece] = []
    pictures = 0
    stack: list[tuple[object, str | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        piece = _piece(node, parent, len(pieces), responses)
        pieces.append(piece)
        pictures += bool(node.get("multimedia"))
        stack += [(child, piece.key) for child in reversed(node.get("children", []))]
    selected = raw.get("selected_node_id")
    if selected is not None and selected not in {p.key for p in pieces}:
        raise ValueError(f"loom file: the selected node {selected!r} is not in the tree")
    history = build(pieces, selected)
    written = sum(1 for n in history.nodes if n.kind in MODEL_KINDS)
    notice = f"Read a loom tree of {len(history.nodes)} nodes, {written} of them written by a model."
    if pictures:
        notice += f" Images attached to {pictures} nodes were left out."
    return Imported(history, FORMAT, notice)


def _piece(node: object, parent: str | None, position: int, responses: dict) -> Piece:
    where = f"loom file: node {position}"
    if not isinstance(node, dict):
        raise ValueError(f"{where} is not an object")
    key, text, children = node.get("id", f"#{position}"), node.get("text", ""), node.get("children", [])
    if not isinstance(key, str) or not isinstance(text, str) or not isinstance(children, list):
        raise ValueError(f"{where}: its id and text must be strings and its children a list")
    meta = node.get("meta") if isinstance(node.get("meta"), dict) else {}
    by_model = meta.get("source") == MODEL_SOURCE
    settings = _generation(node, meta, responses) if by_model else {}
    tokens = settings.get("tokens", [])
    kind = ("token" if len(tokens) == 1 else "continue") if by_model else "type"
    return Piece(key, parent, text, kind, settings, _time(meta.get("creation_timestamp")),
                 Marker.read(node.get(MARKER_KEY), where))


def _generation(node: dict, meta: dict, responses: dict) -> dict:
    """What loom kept of a generated node's request: its model and tokens, where the file has them."""
    settings: dict = {"imported_from": FORMAT}
    generation = node.get("generation") if isinstance(node.get("generation"), dict) else {}
    response = responses.get(generation.get("id"))
    old_style = meta.get("generation") if isinstance(meta.get("generation"), dict) else {}
    model = response.get("model") if isinstance(response, dict) else old_style.get("model")
    if isinstance(model, str):
        settings["model"] = model
    tokens = _tokens(response, generation.get("index"))
    if tokens:
        settings["tokens"] = tokens
    return settings


def _tokens(response: object, index: object) -> list[dict]:
    """A completion's tokens as [{"text", "logprob"}] (loom's {"generatedToken": {"token", "logprob"}})."""
    try:
        raw = response["completions"][index]["tokens"]
        return [{"text": t["generatedToken"]["token"], "logprob": t["generatedToken"]["logprob"]} for t in raw]
    except (KeyError, IndexError, TypeError):
        return []


def _time(stamp: object) -> float:
    try:
        return time.mktime(time.strptime(stamp, TIMESTAMP))
    except (TypeError, ValueError):
        return 0.0


def write(history: History) -> str:
    """The tree as a loom file: the nodes nested, each with the text it adds, the current node selected."""
    placed = placements(history)
    ids = new_ids(history, lambda: str(uuid.uuid4()))
    children: dict[int | None, list[int]] = {}
    for place in placed:
        children.setdefault(place.parent, []).append(place.key)
    fields = {place.key: _fields(place, history, ids) for place in placed}
    rest = json.dumps({"chapters": {}, "selected_node_id": ids[history.current]})
    return f'{{"root":{_nested(placed[0].key, fields, children)},{rest[1:]}'


def _fields(place: Placement, history: History, ids: dict[int, str]) -> dict:
    """A node's own fields in the file, all but its children."""
    node = place.node
    out: dict = {"id": ids[place.key], "text": place.text, "mutable": node is not None}
    if place.parent is not None:
        out["parent_id"] = ids[place.parent]
    if node is not None:
        source = MODEL_SOURCE if node.kind in MODEL_KINDS else WRITER_SOURCE
        out["meta"] = {"creation_timestamp": time.strftime(TIMESTAMP, time.localtime(node.time)),
                       "source": source, "modified": False}
    out[MARKER_KEY] = place.marker(history, ids).as_dict()
    return out


def _nested(root: int, fields: dict[int, dict], children: dict[int | None, list[int]]) -> str:
    """The nodes nested as loom keeps them, written without recursion (a writer's tree can be thousands deep)."""
    parts: list[str] = []
    stack: list[int | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        parts.append(json.dumps(fields[item], ensure_ascii=False)[:-1] + ',"children":[')
        stack.append("]}")
        below = children.get(item, [])
        for i in reversed(range(len(below))):
            stack += [below[i], ","] if i else [below[i]]
    return "".join(parts)


def notice(history: History) -> str:
    """What loom's file leaves out, and where the tree nests deeper than Python's JSON reader (loom's) goes."""
    placed = placements(history)
    said = dropped(history, "loom", sum(p.moved for p in placed))
    depth = _depth(placed)
    if depth > READABLE_DEPTH:
        said += (f" This tree is {depth} nodes deep: loom, and this app, read nested files only about "
                 f"{READABLE_DEPTH} deep — OpenLoom's flat file has no such limit.")
    return said


def _depth(placed: list[Placement]) -> int:
    """How many nodes deep the file nests (placements come parents first)."""
    depths: dict[int | None, int] = {None: 0}
    for place in placed:
        depths[place.key] = depths[place.parent] + 1
    return max(depths.values())
