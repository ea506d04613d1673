"""The heatmap panel: the writer's text coloured by how likely the model found each token; click a token to see
its alternatives, put one in its place, or ask why the model expected its own first choice there.

How the colours are drawn and sent (only what changed) is ui/heatmap.py's; this is the panel.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import gradio as gr

from history import History
from history.authorship import accepted
from lookahead.outputs import Suggestions
from ui.controls import Context, Controls, HeatmapView
from ui.errors import refuse
from ui.heatmap import (
    COMPARING,
    HEATMAP_JS,
    HEATMAP_TEMPLATE,
    MODES,
    Shown,
)
from ui.heatmap_update import heatmap_tokens, show_heatmap
from ui.history_updates import EDITED, edited
from ui.wiring import Update, Wiring

# While a long text is read, a heatmap of its first tokens asks again this often for those scored since (the
# suggestions' partial answers are asked again as often).
READ_POLL_SECONDS = 1.0


def colour(text: str, view: HeatmapView, context: Context, request: gr.Request) -> Update:
    """The heatmap in the colouring chosen; one that compares two models while no second model is chosen says how
    to choose one and colours by probability meanwhile."""
    if view.colour_by in COMPARING and not view.compare_with:
        gr.Warning("Choose a model to compare with first (“Compare with…”, under Model).")
        return {**show_heatmap(text, view, context, request), "heatmap_mode": MODES[0]}
    return show_heatmap(text, view, context, request)


def recolour(text: str, view: HeatmapView, context: Context, request: gr.Request) -> Update:
    """Another second model chosen: a comparison's colours for it; none chosen: the first model's probabilities."""
    if view.colour_by not in COMPARING:
        return gr.skip()
    return {**show_heatmap(text, view, context, request),
            "heatmap_mode": view.colour_by if view.compare_with else MODES[0]}


class Suggested(Protocol):
    """What the heatmap reads of the suggestions on screen (ui/panels/suggestions.py's OnScreen, which shows it)."""

    text: str
    result: Suggestions


def reading(shown: Shown | None, text: str) -> bool:
    """Whether the heatmap shows the first tokens of `text` alone, while the rest is read."""
    return shown is not None and shown.text == text and shown.result.partial is not None


def read_timer(shown: Shown | None) -> gr.Timer:
    """The heatmap's timer: on while the heatmap shows part of a long text being read."""
    return gr.Timer(READ_POLL_SECONDS, active=shown is not None and shown.result.partial is not None)


def fill_in(text: str, view: HeatmapView, context: Context, request: gr.Request) -> Update:
    """While the heatmap shows the first tokens of a long text being read: those scored since (all, once read)."""
    if not view.on or not reading(view.shown, text):
        return gr.skip()
    return show_heatmap(text, view, context, request, rescore=True)


def follow_suggestions(
    text: str, suggestions: Suggested | None, view: HeatmapView, context: Context, request: gr.Request
) -> Update:
    """Partial suggestions (a long text being read) come without the heatmap: it follows them with the tokens
    scored so far, then fills in by itself (`fill_in`)."""
    if (not view.on or suggestions is None or suggestions.text != text or not suggestions.result.partial
            or reading(view.shown, text)):
        return gr.skip()
    return show_heatmap(text, view, context, request, rescore=True)


def resend_heatmap(text: str, view: HeatmapView, context: Context, request: gr.Request) -> Update:
    """The whole heatmap again, for a page that missed an update (HEATMAP_JS asks)."""
    return show_heatmap(text, replace(view, shown=None), context, request)


def rewind(heatmap_shown: Shown | None, history: History, event: gr.EventData) -> Update:
    """Put the clicked alternative in place of its token in the text the heatmap shows, dropping what followed; the
    old text stays in the tree."""
    tokens = heatmap_tokens(heatmap_shown)
    text = heatmap_shown.text
    index = int(event.index)
    if not 0 <= index < len(tokens):
        raise refuse("That token is no longer shown.")
    alternative = next((a for a in tokens[index].alternatives or () if a.token_id == int(event.token_id)), None)
    if alternative is None:
        raise refuse("That alternative is no longer shown.")
    if "\ufffd" in alternative.token:
        raise refuse("That alternative is part of a character split over several tokens.")
    history.fork(text[: tokens[index].start] + alternative.token, "rewind", [alternative.token_id],
                 {"model": heatmap_shown.result.model, "from": history.current,
                  **accepted("rewind", len(tokens[index].alternatives), alternative.prob)})
    return edited(history)


class HeatmapPanel:
    def build(self, compare_with: gr.Dropdown, history: gr.State) -> None:
        """The view and its controls; `compare_with`: the page's choice of a second model (its colourings);
        `history`: the session's tree (which tokens were accepted from the model)."""
        with gr.Accordion("Your text through the model's eyes", open=True, elem_id="heatmap-panel"):
            with gr.Row(equal_height=True):
                self.on = gr.Checkbox(False, label="Colour my text by the model's probabilities", elem_id="heatmap-on")
                self.mode = gr.Radio(list(MODES), value="probability", label="Colour by", elem_id="heatmap-mode")
                self.threshold = gr.Slider(2, 1000, value=10, step=1, elem_id="threshold",
                                           label="Disagreement: the model's choice at least this many times likelier")
            self.view = gr.HTML("", html_template=HEATMAP_TEMPLATE, elem_id="heatmap", js_on_load=HEATMAP_JS)
            self.resync = gr.Button(elem_id="heatmap-resync")  # hidden: pressed by HEATMAP_JS
        self.state = gr.State(None)  # what the page's heatmap shows (ui/heatmap.py's Shown)
        self.timer = gr.Timer(READ_POLL_SECONDS, active=False)  # on while it shows part of a long text (read_timer)
        self.compare_with = compare_with
        self.controls = Controls(HeatmapView, on=self.on, colour_by=self.mode, threshold=self.threshold,
                                 shown=self.state, compare_with=compare_with, history=history)

    def slots(self) -> dict:
        return {"heatmap": self.view, "heatmap_state": self.state, "heatmap_on": self.on, "heatmap_mode": self.mode}

    def wire(self, wiring: Wiring, context: Controls, refresh: dict) -> None:
        inputs = dict(text="text_box", view=self.controls, context=context)
        # always_last: a colouring chosen while the heatmap is being turned on is shown after it (not dropped)
        gr.on([self.on.input, self.mode.input, self.threshold.release],
              **wiring.handler(colour, inputs, ["heatmap", "heatmap_state", "heatmap_mode"],
                               trigger_mode="always_last"))
        self.compare_with.input(**wiring.handler(recolour, inputs, ["heatmap", "heatmap_state", "heatmap_mode"]))
        self.resync.click(**wiring.handler(resend_heatmap, inputs, ["heatmap", "heatmap_state"]))
        # While a long text is read: the heatmap of its first tokens follows the partial suggestions, then fills in
        # by itself, without greying the page each second or stopping a caret's fit. Each new view turns the timer
        # on or off; a listener on the (large) state itself would have gradio hash it around every event.
        ticks = dict(show_progress="hidden", cancels_fit=False, while_continuing=gr.skip)
        wiring.slots["read_timer"].tick(**wiring.handler(
            follow_suggestions, dict(inputs, suggestions="shown_state"), ["heatmap", "heatmap_state"], **ticks))
        self.timer.tick(**wiring.handler(fill_in, inputs, ["heatmap", "heatmap_state"], **ticks))
        self.view.change(read_timer, self.state, self.timer, queue=False, show_progress="hidden",
                         api_visibility="private")
        self.view.select(**wiring.handler(rewind, dict(heatmap_shown=self.state, history="history_state"),
                                          EDITED)).success(**refresh)
