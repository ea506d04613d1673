"""What an event answers for the text and its history: the box, its caret and the tree, after an edit recorded in
the history. Every panel that writes the text answers so."""

from __future__ import annotations

import json

from history import History
from ui.insertion import caret_out
from ui.render import tree_view
from ui.wiring import Update

DEFAULT_TEXT = "The old lighthouse keeper climbed the stairs and"
AT_NODE = ["text_box", "caret_sync", "text_base", "conversation_state", "conversation_view", "history_state"]
EDITED = ["text_box", "caret_sync", "text_base", "history_state"]


def edited(history: History, caret: int | None = None) -> Update:
    """The text box, its caret and the history, after an edit recorded in the history."""
    return {"text_box": history.text, "caret_sync": caret_out(caret), "text_base": str(history.current),
            "history_state": history}


def history_shown(history: History) -> Update:
    """The session's history, its tree on the page, and what the browser's copy of it lacks."""
    return {"history_state": history, "tree": tree_view(history), "history_sync": history_changes(history)}


def history_changes(history: History, whole: bool = False) -> str:
    """What the browser's copy of the tree lacks, as JSON (SAVE_HISTORY_JS applies it)."""
    return json.dumps(history.changes(whole), ensure_ascii=False, separators=(",", ":"))
