"""The why panel: what in the text drives the model towards a token (beside a token in the plot, on a branch, or at
a token of the heatmap), by one of lookahead/attribution.py's methods, with its progress and a Stop.

An explanation takes no turn in its session's order (typing overtakes it) and runs in a group of its own, its model
work yielding to everyone's suggestions; a newer question of the session cancels it (ui/wiring.py).
"""

from __future__ import annotations

from typing import NamedTuple

import gradio as gr

import custom_llm_inference as inference
from lookahead.outputs import AttributionProgress, Suggestions
from ui.controls import Context, Controls
from ui.errors import handled, refuse
from ui.heatmap import Shown
from ui.heatmap_update import heatmap_tokens
from ui.on_screen import OnScreen, before_choice, forced_ids, on_screen
from ui.render import attribution_view
from ui.scripts import WHY_BRANCH_JS
from ui.wiring import Update, Wiring, session_key
from ui.working import shows_working

WHY_OUTPUTS = ["why", "why_state"]


class Question(NamedTuple):
    """What a "why?" asks: which token (None: the model's first choice) after which text, or at which of its tokens
    (`at_token`, the writer's token `where`), and the probability the page showed for it (`shown_prob`)."""

    text: str
    target_token_id: int | None
    at_token: int | None
    where: str | None
    messages: list[dict] | None
    model_name: str | None
    shown_prob: float | None = None


def explain_token(
    shown: OnScreen | None, method: str, context: Context, request: gr.Request, event: gr.EventData,
    progress=gr.Progress(),
) -> Update:
    """"why?" beside a token in the plot: what in the text (before the caret) drives the model towards it."""
    shown = on_screen(shown)
    entry = next((d for d in shown.result.distribution if d.token_id == event.token_id), None)
    if entry is None:
        raise refuse("That token is no longer shown.")
    return explain(next_token_question(shown.place.before, shown.result, entry.token_id, context), method, request,
                   progress)


def explain_branch(
    index: int, shown: OnScreen | None, method: str, context: Context, request: gr.Request,
    progress=gr.Progress(),
) -> Update:
    """"why?" on a branch: what in the text (before the caret) drives the model towards the branch's first token."""
    shown = on_screen(shown)
    result = shown.result
    if index is None or not 0 <= int(index) < len(result.branches):
        raise refuse("That branch is no longer shown.")
    first = result.branches[int(index)].token_ids[len(forced_ids(result))]
    return explain(next_token_question(shown.place.before, result, first, context), method, request, progress)


def explain_heatmap_token(
    heatmap_shown: Shown | None, method: str, context: Context, request: gr.Request, event: gr.EventData,
    progress=gr.Progress(),
) -> Update:
    """"why the first?" on a token of the heatmap: what in the text before it made the model expect its own
    first choice there."""
    tokens = heatmap_tokens(heatmap_shown)
    text = heatmap_shown.text
    index = int(event.index)
    if not 0 <= index < len(tokens) or tokens[index].prob is None:
        raise refuse("That token is no longer shown.")
    question = Question(text, None, index, tokens[index].token, context.messages, context.model_name)
    return explain(question, method, request, progress)


def next_token_question(text: str, result: Suggestions, token_id: int, context: Context) -> Question:
    """Why `token_id` next, as the suggestions on screen saw the text."""
    shown_prob = next((d.prob for d in result.distribution if d.token_id == token_id), None)
    return Question(before_choice(text, result), token_id, None, None, context.messages, context.model_name,
                    shown_prob)


def explain(question: Question | None, method: str, request: gr.Request, progress=gr.Progress()) -> Update:
    """The explanation asked by `question` (which token, after which text) by `method`, the progress shown as
    it goes (integrated gradients takes several passes); also the question, for a switch of method."""
    if question is None:
        return {"why": gr.skip(), "why_state": None}
    result = None
    try:
        for result in inference.attribution_stream.typed(
            question.text, question.target_token_id, method, session=session_key(request),
            messages=question.messages, model_name=question.model_name, at_token=question.at_token,
        ):
            if isinstance(result, AttributionProgress):
                progress((result.done, result.of), desc=f"why? {method.replace('_', ' ')}", unit="passes")
    except inference.Cancelled:  # a newer question, Stop, or the tab closed: what the page shows stays
        return {"why": gr.skip(), "why_state": gr.skip()}
    return {"why": attribution_view(question.text, result, question.where, question.shown_prob),
            "why_state": question}


def stop_explaining(request: gr.Request) -> None:
    """Stop: the running "why?" ends within one slice of its model work."""
    if not inference.cancel(session_key(request), "attribution"):
        gr.Info("Nothing to stop: no explanation is running.")


class WhyPanel:
    def build(self) -> None:
        with gr.Accordion("Why? (“why?” beside a token, on a branch, or in the heatmap)", open=True,
                          elem_id="why-panel"):
            with gr.Row():
                self.method = gr.Radio(list(inference.ATTRIBUTION_METHODS), value="input_x_gradient", label="Method",
                                       elem_id="why-method", scale=4)
                self.stop = gr.Button("Stop", elem_id="why-stop", size="sm", scale=0, min_width=70)
            self.view = gr.HTML(elem_id="why-view")
            self.state = gr.State(None)  # the token explained and its context, for a switch of method
            self.branch = gr.Button(elem_id="why-branch")  # hidden: pressed by BRANCH_WHY_JS's chip
            self.branch_index = gr.Number(visible=False)  # the branch asked about, read by WHY_BRANCH_JS

    def slots(self) -> dict:
        return {"why": self.view, "why_state": self.state}

    def wire(self, wiring: Wiring, plot: gr.HTML, heatmap: gr.HTML, context: Controls) -> None:
        """"why?" beside a token of `plot`, on a branch chip, and on a token of `heatmap`."""
        wiring = wiring.adding(**self.slots())
        asked = dict(method=self.method, context=context)
        working = shows_working("Explaining why")
        plot.select(**wiring.handler(explain_token, dict(shown="shown_state", **asked), WHY_OUTPUTS, **working))
        self.branch.click(js=WHY_BRANCH_JS, **wiring.handler(
            explain_branch, dict(index=self.branch_index, shown="shown_state", **asked), WHY_OUTPUTS, **working))
        heatmap.click(**wiring.handler(explain_heatmap_token, dict(heatmap_shown="heatmap_state", **asked),
                                       WHY_OUTPUTS, **working))
        self.method.input(**wiring.handler(explain, dict(question=self.state, method=self.method), WHY_OUTPUTS,
                                           **working))
        self.stop.click(handled(stop_explaining), None, None, queue=False, api_visibility="private")
