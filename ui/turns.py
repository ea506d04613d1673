"""A turn of a conversation sent: recorded in the history, the box emptied for the next one. The chat panel sends
the user's; a branch that ends the assistant's reply sends it."""

from __future__ import annotations

from history import History
from ui.chat import with_reply
from ui.wiring import Update


def took_turn(conversation: list[dict], history: History) -> Update:
    """A turn sent: recorded in the history, the box emptied for the next one."""
    history.add("", "turn", [], {"messages": conversation})
    return {"text_box": "", "caret_sync": "", "text_base": str(history.current), "conversation_state": conversation,
            "conversation_view": conversation, "history_state": history}


def send_reply(text: str, conversation: list[dict], history: History) -> Update:
    """The reply in the box becomes the assistant's turn; the next turn is the user's."""
    return took_turn(with_reply(text, conversation), history)
