"""Chat mode on the page: the conversation so far, and the assistant's reply being written in the text box.

Plain functions over the conversation (a list of {"role", "content"} turns, the system prompt
kept apart so it can be edited at any time); app.py wires them to the page.
"""

from __future__ import annotations

MODES = ("plain text", "chat")
TEXT_LABELS = {"plain text": "Your text", "chat": "The assistant's reply (being written)"}


def messages_for(mode: str, system_prompt: str, conversation: list[dict]) -> list[dict] | None:
    """What the engine's `messages` gets: None in plain text mode, else the system prompt and the turns."""
    if mode != "chat":
        return None
    return ([{"role": "system", "content": system_prompt}] if system_prompt.strip() else []) + conversation


def awaiting_user(mode: str, text: str, conversation: list[dict]) -> bool:
    """In chat mode with no reply begun, the next turn is the user's (there is nothing to reply to yet)."""
    return mode == "chat" and not text and (not conversation or conversation[-1]["role"] == "assistant")


def with_user_message(text: str, message: str, conversation: list[dict]) -> list[dict]:
    """The conversation after the user's `message` (a reply begun in the box is sent as a turn first)."""
    if not message.strip():
        raise ValueError("Type the user's message first.")
    before = [*conversation, {"role": "assistant", "content": text}] if text else conversation
    return [*before, {"role": "user", "content": message}]


def with_reply(text: str, conversation: list[dict]) -> list[dict]:
    """The conversation after the assistant's reply `text`, sent as a turn."""
    if not text:
        raise ValueError("Write the reply first (click a branch, type, or press Continue).")
    if not conversation or conversation[-1]["role"] != "user":
        raise ValueError("Send a user message first: the reply answers it.")
    return [*conversation, {"role": "assistant", "content": text}]
