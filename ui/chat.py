"""Chat mode on the page: the conversation so far, and the assistant's reply being written in the text box.

Plain functions over the conversation (a list of {"role", "content"} turns, the system prompt
kept apart so it can be edited at any time); app.py wires them to the page.
"""

from __future__ import annotations

from history import History

MODES = ("plain text", "chat")
TEXT_LABELS = {"plain text": "Your text", "chat": "The assistant's reply (being written)"}


def messages_for(mode: str, system_prompt: str | None, conversation: list[dict] | None) -> list[dict] | None:
    """What the engine's `messages` gets: None in plain text mode, else the system prompt and the turns.

    A hidden or untouched field arrives as None: no system prompt, no turns yet.
    """
    if mode != "chat":
        return None
    system = [{"role": "system", "content": system_prompt}] if system_prompt and system_prompt.strip() else []
    return system + list(conversation or [])


def awaiting_user(mode: str, text: str | None, conversation: list[dict] | None) -> bool:
    """In chat mode with no reply begun, the next turn is the user's (there is nothing to reply to yet)."""
    return mode == "chat" and not text and (not conversation or conversation[-1]["role"] == "assistant")


def started_by(mode: str, text: str | None, conversation: list[dict]) -> list[dict]:
    """The conversation on switching to `mode`: a chat begun from plain text opens with that text as the
    user's first message (a reply to nobody would make no sense); otherwise the conversation is unchanged."""
    if mode == "chat" and text and not conversation:
        return [{"role": "user", "content": text}]
    return conversation


def prose_before_chat(history: History) -> str | None:
    """The plain text the chat under way at the history's current node was begun from, or None. A chat begins at its
    first "turn" node after the last one that ended a chat (a turn with no messages: going back to plain text records
    one); its text is that of the node before it."""
    path = [history.nodes[i] for i in history.path()]
    begun = None
    for i in range(len(path) - 1, 0, -1):
        if path[i].kind == "turn":
            if not path[i].settings.get("messages"):
                break
            begun = i
    return None if begun is None else path[begun - 1].text


def with_user_message(text: str | None, message: str | None, conversation: list[dict] | None) -> list[dict]:
    """The conversation after the user's `message` (a reply begun in the box is sent as a turn first)."""
    conversation = list(conversation or [])
    if not message or not message.strip():
        raise ValueError("Type the user's message first.")
    if text and (not conversation or conversation[-1]["role"] != "user"):
        raise ValueError("The box holds a reply, but no user message comes before it for it to answer: "
                         "send the reply's text as the user's message instead, or clear the box.")
    before = [*conversation, {"role": "assistant", "content": text}] if text else conversation
    return [*before, {"role": "user", "content": message}]


def with_reply(text: str | None, conversation: list[dict] | None) -> list[dict]:
    """The conversation after the assistant's reply `text`, sent as a turn."""
    if not text:
        raise ValueError("Write the reply first (click a branch, type, or press Continue).")
    if not conversation or conversation[-1]["role"] != "user":
        raise ValueError("Send a user message first: the reply answers it.")
    return [*conversation, {"role": "assistant", "content": text}]
