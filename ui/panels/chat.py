"""The chat panel: write an assistant's reply in a conversation (the model's chat template), turn by turn.

What a conversation is, and how the text box's text fits into it, is ui/chat.py's; this is the panel.
"""

from __future__ import annotations

import gradio as gr

from history import History
from ui.chat import MODES, TEXT_LABELS, prose_before_chat, started_by, with_user_message
from ui.history_updates import AT_NODE
from ui.turns import send_reply, took_turn
from ui.wiring import Update, Wiring


def send_user_message(text: str, message: str, conversation: list[dict], history: History) -> Update:
    """The user's turn: a reply begun in the box goes first; the box then holds the next reply, empty."""
    return {**took_turn(with_user_message(text, message, conversation), history), "user_message": ""}


def switch_mode(mode: str, text: str, conversation: list[dict] | None, history: History) -> Update:
    """Show or hide the chat panel. A chat begun from plain text starts with that text as the user's first
    message (a conversation opens with the user), the box then holding the reply; undo brings the text back."""
    conversation = conversation or []
    opened = started_by(mode, text, conversation)
    box = gr.update(label=TEXT_LABELS[mode])  # the text as it is (the writer may have typed on meanwhile) ...
    prose = None if mode == "chat" or text else prose_before_chat(history)
    if opened != conversation:
        history.add(text, "type")  # the text as the writer left it, which the way back to plain text brings back
        history.add("", "turn", [], {"messages": opened})
        gr.Info("Chat: your text is now the user's first message, and the box holds the assistant's reply. "
                "Undo brings your text back.")
        box["value"] = ""  # ... unless it moved into the conversation
    elif prose:  # ... or back to plain text with no reply begun: the text the chat was begun from
        opened = []
        history.add(prose, "turn", [], {"messages": opened})
        gr.Info("Plain text: your text is back in the box; the conversation stays in the history.")
        box["value"] = prose
    return {"text_base": str(history.current), "chat_panel": gr.update(visible=mode == "chat"), "text_box": box,
            "caret_sync": "", "conversation_state": opened,
            "conversation_view": opened, "history_state": history}


class ChatPanel:
    """The switch between plain text and chat (`build_switch`, above the text) and the conversation (`build`)."""

    def build_switch(self) -> None:
        self.mode = gr.Radio(list(MODES), value="plain text", label="Write", elem_id="chat-mode")

    def build(self) -> None:
        self.state = gr.State([])  # the turns so far, as {"role", "content"}
        with gr.Group(visible=False) as self.group:
            self.system_prompt = gr.Textbox(label="System prompt", lines=1, elem_id="system-prompt")
            self.view = gr.Chatbot(label="The conversation so far", elem_id="conversation", height=220)
            with gr.Row(equal_height=True):
                self.user_message = gr.Textbox(label="The user's message", elem_id="user-message", scale=4)
                self.send_user = gr.Button("Send as the user", elem_id="send-user", size="sm", scale=1, min_width=120)
                self.send_reply = gr.Button("Send the reply", elem_id="send-reply", size="sm", scale=1, min_width=120)

    def slots(self) -> dict:
        return {"chat_mode": self.mode, "chat_panel": self.group, "conversation_state": self.state,
                "conversation_view": self.view, "user_message": self.user_message}

    def wire(self, wiring: Wiring, refresh: dict) -> None:
        inputs = dict(text="text_box", conversation=self.state, history="history_state")
        self.mode.input(**wiring.handler(switch_mode, dict(mode=self.mode, **inputs),
                                         ["chat_panel", *AT_NODE])).then(**refresh)
        gr.on([self.send_user.click, self.user_message.submit],
              **wiring.handler(send_user_message, dict(message=self.user_message, **inputs),
                               ["user_message", *AT_NODE])).success(**refresh)
        self.send_reply.click(**wiring.handler(send_reply, inputs, AT_NODE)).success(**refresh)
        self.system_prompt.blur(**refresh)
