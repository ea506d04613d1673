"""mikupad's exported session (its Sessions panel's Export: each of the session's values as a JSON string).

The text is the session's "prompt": a list of chunks, {"type": "user", "content"} for the writer's
text and {"content", "prob", "completion_probabilities": [{"content", "probs": [{"tok_str", "prob"}]}]}
for each token the model wrote. A session has no tree: it becomes one path, a node per run of the
writer's chunks or of the model's. A session also holds its endpoint and API key: they are not read.
"""

from __future__ import annotations

import json
from itertools import groupby

from history.foreign import Imported, Piece, build

FORMAT = "mikupad"
SECRETS = ("endpointAPIKey",)  # never copied into the tree
WRITER = "user"  # a chunk's "type" where the writer typed it


def is_mikupad(raw: dict) -> bool:
    return isinstance(_value(raw, "prompt"), list)


def _value(raw: dict, name: str) -> object:
    """A session value: mikupad's export writes each as JSON text, its database keeps it as is."""
    value = raw.get(name)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def read(raw: dict) -> Imported:
    chunks = _value(raw, "prompt")
    for i, chunk in enumerate(chunks):
        if not (isinstance(chunk, dict) and isinstance(chunk.get("content"), str)):
            raise ValueError(f"mikupad session: prompt chunk {i} must be an object with a text \"content\"")
    model = _value(raw, "endpointModel")
    model = model if isinstance(model, str) else ""
    runs = [(by_model, list(run)) for by_model, run in groupby(chunks, lambda c: c.get("type") != WRITER)]
    if not runs or runs[0][0]:
        runs.insert(0, (False, []))  # the text starts with the model's: an empty start above it
    pieces = [_piece(i, by_model, run, model) for i, (by_model, run) in enumerate(runs)]
    history = build(pieces, pieces[-1].key, model)
    notice = f"Read a mikupad session as one path of {len(pieces)} nodes."
    kept_out = [name for name in SECRETS if _value(raw, name)]
    if kept_out:
        notice += f" Its API key ({', '.join(kept_out)}) was dropped: it is not in this history."
    return Imported(history, FORMAT, notice)


def _piece(position: int, by_model: bool, run: list[dict], model: str) -> Piece:
    text = "".join(chunk["content"] for chunk in run)
    parent = None if position == 0 else str(position - 1)
    if not by_model:
        return Piece(str(position), parent, text, "type")
    tokens = [{"text": c["content"], **({"prob": c["prob"]} if _probability(c.get("prob")) else {})} for c in run]
    settings = {"imported_from": FORMAT, **({"model": model} if model else {}), "tokens": tokens}
    return Piece(str(position), parent, text, "token" if len(run) == 1 else "continue", settings)


def _probability(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
