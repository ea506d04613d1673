"""The writer's text: the box, where its caret is, and what the page tells the server about it (ui/static/
keyboard.js presses the hidden buttons on an edit, a caret move and Alt+W); Append inserts text as it is."""

from __future__ import annotations

import gradio as gr

from history import History
from ui.chat import TEXT_LABELS
from ui.controls import Controls, Draft
from ui.errors import refuse
from ui.history_updates import DEFAULT_TEXT, EDITED, edited
from ui.insertion import Place, caret_in, inserted
from ui.on_screen import OnScreen, node_settings
from ui.scripts import PLACE_CARET_JS, SHOW_CARET_JS
from ui.wiring import Update, Wiring


def append_text(draft: Draft, extra: str, shown: OnScreen | None, history: History) -> Update:
    """Insert the text typed beside Append at the caret (at the end, without one), as it is."""
    if not extra:
        raise refuse("Type the text to append first.")
    text = draft.newest(history)
    at = caret_in(text, draft.caret) if text == draft.text else None
    new_text, at = inserted(Place(text, at), extra)
    history.add(new_text, "append", [], node_settings(shown if shown and shown.text == text else None))
    return {**edited(history, at), "extra_box": ""}


class WriterPanel:
    def build(self) -> None:
        self.text_box = gr.Textbox(label=TEXT_LABELS["plain text"], lines=8, max_lines=30, elem_id="text",
                                   value=DEFAULT_TEXT)
        # Where in the text the suggestions are for (keyboard.js keeps it; "" at the end), and where they go.
        self.caret_sync = gr.Textbox(visible="hidden", elem_id="caret-sync")
        # The history node whose text the session last put in the box ("~N" once the writer edits: keyboard.js),
        # so that an event sent before the answer to the one ahead of it acts on the newest text (Draft.newest).
        self.text_base = gr.Textbox("0", visible="hidden", elem_id="text-base")
        self.draft = Controls(Draft, text=self.text_box, caret=self.caret_sync, base=self.text_base)

    def build_keys(self) -> None:
        """The hidden buttons keyboard.js presses."""
        self.text_edited = gr.Button(elem_id="text-edited")  # on every edit
        self.caret_moved = gr.Button(elem_id="caret-moved")  # as the caret moves
        self.take_word = gr.Button(elem_id="take-word")  # on Alt+W

    def build_append(self) -> None:
        with gr.Row(equal_height=True):
            self.extra_box = gr.Textbox(show_label=False, placeholder="Text to insert at the caret as is…",
                                        elem_id="extra", scale=4)
            self.append = gr.Button("Append", elem_id="append", size="sm", scale=1, min_width=90)

    def slots(self) -> dict:
        return {"text_box": self.text_box, "caret_sync": self.caret_sync, "text_base": self.text_base,
                "extra_box": self.extra_box}

    def wire(self, wiring: Wiring, refresh: dict) -> None:
        self.caret_sync.change(None, self.caret_sync, None, js=PLACE_CARET_JS)  # an insertion moved the caret
        # The page put a text in the box where the caret did not move (undo, Continue's next tokens): its line in view.
        self.text_box.change(None, None, None, js=SHOW_CARET_JS)
        gr.on([self.append.click, self.extra_box.submit], **wiring.handler(
            append_text, dict(draft=self.draft, extra=self.extra_box, shown="shown_state", history="history_state"),
            [*EDITED, "extra_box"])).success(**refresh)
