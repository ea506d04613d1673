"""The "Compare with…" choice: a second model's suggestions panel beside the first (stacked on a phone), both
following the writer's text and caret; the heatmap can then colour the text by where the two models part.

The second panel is built once, hidden until a model is chosen (its refresh asks nothing while none is).
"""

from __future__ import annotations

from typing import Protocol

import gradio as gr

import custom_llm_inference as inference
from ui.errors import refuse
from ui.render import plot_heading
from ui.wiring import Update, Wiring

NOBODY = ("nothing", "")  # the choice's first entry: one model only


def compare_with(model_name: str | None, other: str | None) -> Update:
    """The second panel shown for `other` (hidden for none), and each plot headed by its model's name while two
    are shown."""
    if not other:
        return {"beside": [gr.update(visible=False)] * 2, "headings": [plot_heading(None), plot_heading(None)]}
    if other == (model_name or inference.default_model_name()):
        raise refuse(f"{other} is the model the suggestions already come from: choose another to compare with.")
    return {"beside": [gr.update(visible=True)] * 2,
            "headings": [plot_heading(model_name or inference.default_model_name()), plot_heading(other)]}


class Beside(Protocol):
    """What the choice shows, hides and refreshes of the second model's suggestions panel."""

    column: gr.Column
    plot_column: gr.Column
    heading: gr.Markdown
    refresh: dict


class ComparePanel:
    def __init__(self, chosen: str | None = None) -> None:
        # Made before the page's layout (the heatmap, built earlier, reads it), placed by `build`.
        others = [name for name in inference.available_models() if name != inference.default_model_name()]
        self.other = gr.Dropdown([NOBODY, *others], value=chosen or "", label="Compare with…",
                                 elem_id="compare-model", render=False,
                                 info="a second model's suggestions beside the first's, for the same text")

    def build(self) -> None:
        self.other.render()

    def wire(self, wiring: Wiring, model: gr.Dropdown, second: Beside) -> None:
        """Show or hide the second panel as a model is chosen, then refresh it."""
        wiring = wiring.adding(beside=[second.column, second.plot_column], headings=[wiring.slots["heading"],
                                                                                     second.heading])
        # Also what follows a reload's restoring of the choice (app.py).
        self.shown = wiring.handler(compare_with, dict(model_name=model, other=self.other), ["beside", "headings"])
        self.other.input(**self.shown).then(**second.refresh)
        model.input(**self.shown)
