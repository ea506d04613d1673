"""The ledger panel, "Who wrote what": how much of the text the writer wrote and how much they accepted from the
model, the bits spent choosing, and how surprising the model found each side's tokens (ui/ledger.py computes them);
and an export of the text for analysis, each token with its logprobs and its author (ui/logprobs_export.py).

It follows the history: a change the browser's copy of the tree is sent (`history_sync`) refreshes it once the writer
pauses (LEDGER_PAUSE_MS: a round trip after every click would come between the click and its suggestions on screen),
as does another model, from the session's token scores, which the engine keeps (the heatmap's, when it is on).
"""

from __future__ import annotations

import json

import gradio as gr

import custom_llm_inference as inference
from history import History
from lookahead.outputs import TokenScores
from ui.controls import Context, Controls
from ui.errors import refuse
from ui.ledger import LEDGER_ALTERNATIVES, ledger, ledger_view
from ui.logprobs_export import FILE_NAME, logprobs_json
from ui.scripts import DOWNLOAD_JS
from ui.wiring import Update, Wiring, session_key

EMPTY = "<p>Nothing written yet.</p>"
LEDGER_PAUSE_MS = 400  # after the history's last change: a writer reading, not clicking on
# history_sync's change: the hidden #ledger-resync pressed once the history has not changed for LEDGER_PAUSE_MS.
LEDGER_DUE_JS = (f"() => {{ clearTimeout(window.ledgerDue); window.ledgerDue = setTimeout("
                 f"() => document.getElementById('ledger-resync')?.click(), {LEDGER_PAUSE_MS}); }}")


def text_scores(text: str, context: Context, session: str, whole: bool = False) -> TokenScores | None:
    """The engine's scores of the text's tokens (None where the backend cannot score a text): while a long text is
    read, those scored so far, unless `whole`."""
    if not inference.backend().capabilities.prompt_scores:
        return None
    return inference.token_probabilities.typed(text, LEDGER_ALTERNATIVES, session=session,
                                               model_name=context.model_name, messages=context.messages,
                                               partial=not whole)


def show_ledger(history: History, context: Context, heatmap_on: bool, request: gr.Request) -> Update:
    """The ledger of the history's current text; the model's surprise at each side's tokens only while the heatmap
    is shown, whose scores the engine keeps: otherwise scoring every token would make every click score the tokens
    it adds, and a long text's read would run for the ledger alone."""
    if not history.text:
        return {"ledger": EMPTY}
    scores = text_scores(history.text, context, session_key(request)) if heatmap_on else None
    return {"ledger": ledger_view(ledger(history, scores.tokens if scores else []))}


def export_for_analysis(history: History, context: Context, request: gr.Request) -> Update:
    """The text's tokens with their logprobs and authors, as JSON for the browser to save."""
    if not history.text:
        raise refuse("Write something first: there is nothing to export yet.")
    scores = text_scores(history.text, context, session_key(request), whole=True)
    if scores is None:
        raise refuse("The model's server does not score a text's tokens, so there are no logprobs to export.")
    return {"analysis_json": json.dumps({"name": FILE_NAME, "text": logprobs_json(history, scores)})}


class LedgerPanel:
    def build(self) -> None:
        with gr.Accordion("Who wrote what", open=True, elem_id="ledger-panel"):
            self.view = gr.HTML(EMPTY, elem_id="ledger")
            self.export = gr.Button("Export for analysis (JSON)", elem_id="export-analysis", size="sm", scale=0,
                                    min_width=200)
        self.json = gr.Textbox(visible=False)  # carries an export ({"name", "text"}) to the browser's download
        self.resync = gr.Button(elem_id="ledger-resync", elem_classes="pressed-by-script")  # by LEDGER_DUE_JS

    def slots(self) -> dict:
        return {"ledger": self.view, "analysis_json": self.json}

    def wire(self, wiring: Wiring, context: Controls) -> None:
        inputs = dict(history="history_state", context=context)
        wiring.slots["history_sync"].change(None, None, None, js=LEDGER_DUE_JS)
        refreshed_by = [self.resync.click, context.components["model_name"].change, wiring.slots["heatmap_on"].change]
        gr.on(refreshed_by, **wiring.handler(
            show_ledger, {**inputs, "heatmap_on": "heatmap_on"}, ["ledger"], while_continuing=gr.skip,
            cancels_fit=False, concurrency_id="ledger", trigger_mode="always_last", show_progress="hidden"))
        self.export.click(**wiring.handler(export_for_analysis, inputs, ["analysis_json"])).success(
            None, self.json, None, js=DOWNLOAD_JS)
