"""logitloom's saved tree (`logit-loom-tree-v1`, its save-load.ts).

A file is {"isLogitLoomTreeVersion": "logit-loom-tree-v1", "modelName", "modelSettings": {"kind":
"base" | "chat", "prompt", "prefill", "systemPrompt" (chat)}, "roots": [Token]}; a Token is {"id",
"text", "logprob", "prob", "branchFinished", "children": [Token]}, one token of the model's, its text
following its parent's. A base model reads the prompt, then the prefill; a chat model's reply starts
with the prefill, after the (system) prompt.
"""

from __future__ import annotations

from history.foreign import Imported, Piece, build

FORMAT = "logitloom"
VERSION = "logit-loom-tree-v1"
ROOT = "(prompt)"  # the key of the node holding the prompt, above logitloom's roots


def is_logitloom(raw: dict) -> bool:
    return "isLogitLoomTreeVersion" in raw


def read(raw: dict) -> Imported:
    if raw["isLogitLoomTreeVersion"] != VERSION:
        raise ValueError(f"logitloom tree version {raw['isLogitLoomTreeVersion']!r} is not supported "
                         f"(this app reads {VERSION})")
    settings, roots = raw.get("modelSettings", {}), raw.get("roots")
    if not isinstance(settings, dict) or not isinstance(roots, list):
        raise ValueError("logitloom file: \"modelSettings\" must be an object and \"roots\" a list of tokens")
    model = raw.get("modelName") if isinstance(raw.get("modelName"), str) else ""
    chat = settings.get("kind") == "chat"
    prompt, prefill = _text(settings, "prompt"), _text(settings, "prefill")
    start = {"imported_from": FORMAT, **({"prompt": prompt, "system_prompt": _text(settings, "systemPrompt")}
                                         if chat else {})}
    pieces = [Piece(ROOT, None, prefill if chat else prompt + prefill, "start", start)]
    stack = [(token, ROOT) for token in reversed(roots)]
    while stack:
        token, parent = stack.pop()
        piece = _piece(token, parent, len(pieces), model)
        pieces.append(piece)
        stack += [(child, piece.key) for child in reversed(token["children"])]
    history = build(pieces, ROOT, model)
    notice = f"Read a logitloom tree of {len(pieces) - 1} tokens from {model or 'an unnamed model'}."
    if chat:
        notice += " It is a chat model's: the text is its reply; the prompt is kept in the first node's settings."
    return Imported(history, FORMAT, notice)


def _text(settings: dict, name: str) -> str:
    value = settings.get(name)
    return value if isinstance(value, str) else ""


def _piece(token: object, parent: str, position: int, model: str) -> Piece:
    if not (isinstance(token, dict) and isinstance(token.get("text"), str) and isinstance(token.get("children"), list)):
        raise ValueError(f"logitloom file: token {position} must be an object with a text and a list of children")
    known = {name: token[name] for name in ("logprob", "prob") if isinstance(token.get(name), (int, float))}
    settings = {"imported_from": FORMAT, **({"model": model} if model else {}),
                "tokens": [{"text": token["text"], **known}]}
    key = token.get("id") if isinstance(token.get("id"), str) else f"#{position}"
    return Piece(key, parent, token["text"], "token", settings)
