"""The constrain panel: make what comes next follow a choice, a regex, a JSON schema or a grammar, from the caret.

The constraint itself (presets, the API's value, what is in force where) is ui/constrain.py's; this is the panel.
"""

from __future__ import annotations

import json

import gradio as gr

from ui.constrain import PRESETS, TYPES, VALUE_LABELS, constraint_from, describe, kept_constraint, preset_fields
from ui.scripts import CARET_JS
from ui.wiring import Update, Wiring


def fill_constraint(name: str | None) -> Update:
    """The type and value a constraint preset fills in."""
    kind, value = preset_fields(name)
    return {"constraint_type": kind, "constraint_value": value}


def relabel_constraint_value(kind: str) -> Update:
    return {"constraint_value": gr.update(label=VALUE_LABELS[kind])}


def constrain(kind: str, value: str, chat_mode: str, caret: float | None, text: str) -> Update:
    """"Constrain from here": the constraint from the caret (in chat mode, from the reply's start)."""
    constraint = constraint_from(kind, value, chat_mode, caret, text)
    return {"constraint_state": constraint, "constraint_status": describe(constraint, text),
            "constraint_kept": json.dumps(constraint)}


def unconstrain() -> Update:
    return {"constraint_state": None, "constraint_status": describe(None, ""), "constraint_kept": ""}


def restore_constraint(kept: str | None, text: str) -> Update:
    """After a reload, the constraint that was in force (this browser kept it), where it still holds for the text;
    none otherwise (one kept by another version of the page, or one that no longer compiles)."""
    constraint = kept_constraint(kept, text)
    return {"constraint_state": constraint, "constraint_status": describe(constraint, text)}


class ConstrainPanel:
    def build(self) -> None:
        with gr.Accordion("Constrain", open=False, elem_id="constrain-panel"):
            self.preset = gr.Dropdown(list(PRESETS), value=None, label="Preset", elem_id="constraint-preset")
            self.type = gr.Radio(list(TYPES), value="choice", label="Type", elem_id="constraint-type")
            self.value = gr.Textbox(label=VALUE_LABELS["choice"], lines=3, max_lines=12, elem_id="constraint-value")
            with gr.Row():
                self.constrain = gr.Button("Constrain from here", elem_id="constrain", size="sm")
                self.unconstrain = gr.Button("Off", elem_id="unconstrain", size="sm")
            self.status = gr.Markdown(describe(None, ""), elem_id="constraint-status")
            self.caret = gr.Number(visible=False)  # the text box's caret, read by CARET_JS
            self.kept = gr.Textbox(visible="hidden", elem_id="constraint-kept")  # kept across a reload (app.py)
        self.state = gr.State(None)  # the constraint in force, as the API takes it (ui/constrain.py)

    def slots(self) -> dict:
        return {"constraint_state": self.state, "constraint_status": self.status, "constraint_type": self.type,
                "constraint_value": self.value, "constraint_kept": self.kept}

    def wire(self, wiring: Wiring, refresh: dict) -> None:
        self.preset.input(**wiring.handler(fill_constraint, dict(name=self.preset),
                                           ["constraint_type", "constraint_value"]))
        self.type.change(**wiring.handler(relabel_constraint_value, dict(kind=self.type), ["constraint_value"]))
        self.constrain.click(js=CARET_JS, **wiring.handler(
            constrain, dict(kind=self.type, value=self.value, chat_mode="chat_mode", caret=self.caret,
                            text="text_box"),
            ["constraint_state", "constraint_status", "constraint_kept"],
        )).success(**refresh)
        self.unconstrain.click(**wiring.handler(
            unconstrain, {}, ["constraint_state", "constraint_status", "constraint_kept"])).then(**refresh)
        # Also what follows a reload's restoring of the kept value (app.py).
        self.restored = wiring.handler(restore_constraint, dict(kept=self.kept, text="text_box"),
                                       ["constraint_state", "constraint_status"])
