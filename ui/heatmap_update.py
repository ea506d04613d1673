"""The heatmap's update for a text: the scores asked of the engine (a second model's too, comparing), and the
message that brings the page from what it shows to them (ui/heatmap.py draws it). The heatmap panel, and the
suggestions that bring its colours with them, answer with it."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

import custom_llm_inference as inference
from lookahead.outputs import ScoredToken
from ui.controls import Context, HeatmapView
from ui.errors import refuse
from ui.heatmap import COMPARING, MODES, Listing, Shown, heatmap_message, with_comparison
from ui.ledger import accepted_tokens
from ui.wiring import Update, session_key

HEATMAP_ALTERNATIVES = 5  # per token, in the heatmap's details

def show_heatmap(
    text: str, view: HeatmapView, context: Context, request: gr.Request, *, rescore: bool = False
) -> Update:
    """The heatmap's update from what the page shows (`view.shown`) to `text`: the tokens that changed (ui/heatmap.py).

    The scores are the shown ones when only the colouring changed; `rescore`: the context may have changed too. The
    tokens accepted from the model are underlined, from the history's authorship.
    """
    if not view.on or not text:
        return {"heatmap": "", "heatmap_state": None}
    if view.colour_by in COMPARING and not view.compare_with:  # no second model (any more): the first's colours
        view = replace(view, colour_by=MODES[0])
    shown = view.shown
    comparing = view.colour_by in COMPARING
    if (rescore or not shown or shown.text != text or shown.result.model != context.model_name
            or comparing and shown.result.models != [context.model_name, view.compare_with]):
        result = scores(text, view, context, session_key(request))
    else:
        result = shown.result
    if view.history is not None:
        result = replace(result, accepted=accepted_tokens(view.history, text, result.tokens))
    mode = MODES[0] if comparing and result.models is None else view.colour_by  # compared once read
    message, shown = heatmap_message(text, result, mode, view.threshold, shown)
    return {"heatmap": message, "heatmap_state": shown}


def scores(text: str, view: HeatmapView, context: Context, session: str) -> Listing:
    """The first model's listing of the text's tokens; comparing, with how the second model sees each (once the
    text is read: while its first tokens alone are listed, they are coloured by probability)."""
    asked = dict(session=session, messages=context.messages)
    result = inference.token_probabilities.typed(text, HEATMAP_ALTERNATIVES, model_name=context.model_name, **asked)
    if view.colour_by not in COMPARING or result.partial is not None:
        return Listing.of(result)
    models = [context.model_name or inference.default_model_name(), view.compare_with]
    comparison = inference.compare.typed(text, models, k=1, n_branches=0, **asked)
    second = (inference.token_probabilities.typed(text, HEATMAP_ALTERNATIVES, model_name=models[1], **asked)
              if comparison.per == "token" else None)
    return with_comparison(result, comparison, second)


def heatmap_tokens(heatmap_shown: Shown | None) -> list[ScoredToken]:
    """The tokens the heatmap shows: a click acts on what the writer sees, even while the colours follow an edit."""
    if not heatmap_shown:
        raise refuse("The heatmap shows nothing yet: turn it on first.")
    return heatmap_shown.result.tokens
