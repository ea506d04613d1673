"""Gradio UI: write, see where the model could go next, click a branch to take it. Run with `python app.py`.

This file assembles the page from its panels (ui/panels/: each builds its components and wires its own events,
its handlers plain functions of typed values; ui/wiring.py holds the one rule for a session's order), adds the API
(ui/endpoints.py, also the MCP tools) and launches. Every number shown comes from custom_llm_inference.
"""

from __future__ import annotations

import argparse
import os


def argument_parser() -> argparse.ArgumentParser:
    """`python app.py`'s command line; --help answers before gradio and the model's libraries load."""
    from lookahead.backends import BACKENDS  # no model library: a table of names

    parser = argparse.ArgumentParser(description="Serve the Interactive Lookahead Text Generator.")
    parser.add_argument("--backend", default=os.environ.get("LOOKAHEAD_BACKEND") or "in-process",
                        help="where the model runs (LOOKAHEAD_BACKEND): "
                             + "; ".join(f"{name}: {entry.summary}" for name, entry in BACKENDS.items()))
    parser.add_argument("--server-url", default=os.environ.get("LOOKAHEAD_SERVER_URL"),
                        help="a server backend's OpenAI-compatible URL, e.g. http://localhost:8000/v1, or several "
                             "comma-separated, each model asked of the server that serves it (vLLM serves one: "
                             "compare takes two) (LOOKAHEAD_SERVER_URL)")
    parser.add_argument("--mcp", action="store_true",
                        help="also serve the endpoints as MCP tools at /gradio_api/mcp/ (or GRADIO_MCP_SERVER=true)")
    return parser


if __name__ == "__main__":
    PARSER = argument_parser()
    ARGUMENTS = PARSER.parse_args()

# After every event gradio recomputes its monitoring summary (pandas over every event it has recorded, up to 10,000):
# 4-10 ms of CPU, holding the GIL, between a click's answer and the page's next event. This page shows no summary.
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(2**31))

import gradio as gr

import custom_llm_inference as inference
from ui.controls import Constraints, Context, Controls, Settings
from ui.endpoints import serve_endpoints
from ui.errors import handled
from ui.panels.chat import ChatPanel
from ui.panels.compare import ComparePanel
from ui.panels.constrain import ConstrainPanel
from ui.panels.continuation import ContinuationPanel
from ui.panels.futures import FuturesPanel
from ui.panels.heatmap import HeatmapPanel
from ui.panels.history import HistoryPanel, KeptSettings
from ui.panels.ledger import LedgerPanel
from ui.panels.sampling import SamplingPanel
from ui.panels.suggestions import PREPARATION, SuggestionsPanel
from ui.panels.why import WhyPanel
from ui.panels.writer import WriterPanel
from ui.scripts import BRANCH_WHY_JS, CSS, FOLD_ON_PHONE_JS, KEYBOARD_JS, WORKING_JS
from ui.server_limits import server_limits
from ui.wiring import Wiring, concurrency, session_key

# Every visitor is answered: room for this many waiting events (on a ZeroGPU Space gradio
# would otherwise let one event wait and turn the rest away with "Queue is full").
QUEUE_SIZE = 512
# How often gradio's queue, while it has nothing to run, looks for a new event and for progress to send. Its own
# 1 ms and 10 ms kept 7% of a core busy in an idle app on a 2-core AMD EPYC; at 20 ms and 50 ms it uses 2% (10 ms:
# 3%, 50 ms: 1%), and a queued call (an API call, a Continue, a map: a click on the page skips the queue) starts at
# most 20 ms later.
IDLE_POLL_SECONDS = (0.02, 0.05)
INTRODUCTION = (  # the keys' hints are hidden on a touch screen (page.css)
    "## Interactive Lookahead\nWrite, and see where the model could go next, at the end of your text or "
    "wherever you put the caret. Click a branch or any token in the plot to insert it"
    '<span class="keys"> (or press <b>Alt+1…9</b>; <b>Alt+W</b> takes the first branch\'s next word only; '
    "<b>Ctrl+Enter</b> refreshes)</span>."
)


def build_page(compare_with: str | None = None) -> tuple[gr.Blocks, dict]:
    """The page, and its panels by name (tests reach the components through them). `compare_with`: a model whose
    suggestions are shown beside the chosen model's from the start (the page's "Compare with…" choice)."""
    chat, writer, suggestions, history = ChatPanel(), WriterPanel(), SuggestionsPanel(), HistoryPanel()
    second = SuggestionsPanel(suffix="-2", beside=True, visible=bool(compare_with))
    continuation, heatmap, why, sampling, constrain, futures = (ContinuationPanel(), HeatmapPanel(), WhyPanel(),
                                                                SamplingPanel(), ConstrainPanel(), FuturesPanel())
    ledger = LedgerPanel()
    with gr.Blocks(title="Interactive Lookahead") as demo:
        compare = ComparePanel(compare_with)
        gr.Markdown(INTRODUCTION)
        limits = gr.Markdown(visible=False, elem_id="server-limits")  # what the model's server cannot give
        history.build_state()
        with gr.Row(elem_id="main-row"):  # on a phone: the text, its suggestions and the plot first (page.css)
            with gr.Column(scale=3, elem_id="writer-column"):
                chat.build_switch()
                chat.build()
                writer.build()
                with gr.Row(elem_id="suggestion-panels"):  # side by side where both fit, else one under the other
                    suggestions.build()
                    second.build()
                with gr.Column(elem_id="writer-tools"):
                    with gr.Row():
                        suggestions.build_refresh()
                        writer.build_keys()
                        history.build_buttons()
                    writer.build_append()
                    continuation.build()
                    history.build_tree()
                    heatmap.build(compare.other, history.state)
                    ledger.build()
            with gr.Column(scale=2, elem_id="side-column"):
                with gr.Column(elem_id="plot-column"):
                    suggestions.build_plot()
                    second.build_plot()
                futures.build()
                why.build()
                model = gr.Dropdown(inference.available_models(), value=inference.default_model_name(), label="Model",
                                    elem_id="model")
                compare.build()
                sampling.build()
                constrain.build()
        panels = dict(chat=chat, writer=writer, suggestions=suggestions, history=history, continuation=continuation,
                      heatmap=heatmap, why=why, sampling=sampling, constrain=constrain, compare=compare,
                      second=second, futures=futures, ledger=ledger)
        wiring = Wiring({name: slot for panel in panels.values() if hasattr(panel, "slots")
                         for name, slot in panel.slots().items() if panel is not second})
        context = Controls(Context, chat_mode=chat.mode, system_prompt=chat.system_prompt,
                           conversation=chat.state, model_name=model)
        constraints = Controls(Constraints, constraint=constrain.state, stops=continuation.stops)
        knobs = dict(shape=sampling.shape_box, sampling=sampling.sampling_box)  # the panel's values, as mirrored
        settings = Controls(Settings, **knobs, context=context, constraints=constraints, view=heatmap.controls)
        refresh = suggestions.wire(wiring, writer, settings)
        other = Controls(Context, chat_mode=chat.mode, system_prompt=chat.system_prompt, conversation=chat.state,
                         model_name=compare.other)
        second.wire(wiring, writer, Controls(Settings, **knobs, context=other, constraints=constraints, view=None))
        second.follow(suggestions)
        compare.wire(wiring, model, second)
        writer.wire(wiring, refresh)
        # Every setting on the page comes back after a reload as it was (chat mode with the tree it belongs to).
        kept = KeptSettings({
            "heatmap_on": heatmap.on, "chat_mode": chat.mode, "model": model, "compare_with": compare.other,
            "preset": sampling.preset, **sampling.sliders, "branch_mode": sampling.branch_mode, "seed": sampling.seed,
            "n_branches": sampling.n_branches, "depth": sampling.depth, "by_fit": sampling.by_fit,
            "continue_tokens": continuation.n_tokens, "lossless": continuation.lossless, "stops": continuation.stops,
            "colour_by": heatmap.mode, "threshold": heatmap.threshold, "why_method": why.method,
            "constraint_type": constrain.type, "constraint_value": constrain.value, "constraint": constrain.kept,
            "futures_depth": futures.map_depth, "futures_cutoff": futures.map_cutoff,
            "futures_by_second": futures.colour_by_second,
        })
        constrain.wire(wiring, refresh)
        sampling.wire(wiring, refresh)
        history.wire(wiring, demo, refresh, kept, restored=[compare.shown, constrain.restored, sampling.mirrored])
        chat.wire(wiring, refresh)
        continuation.wire(wiring, writer.draft, context, constraints, refresh)
        heatmap.wire(wiring, context, refresh)
        ledger.wire(wiring, context)
        why.wire(wiring, suggestions.plot, heatmap.view, context)
        futures.wire(wiring, writer.draft, Controls(Settings, **knobs, context=context, constraints=constraints,
                                                    view=None),
                     compare.other, suggestions.answered, refresh)
        model.input(**refresh)
        demo.load(None, None, None, js=FOLD_ON_PHONE_JS)
        demo.load(handled(server_limits), None,
                  [heatmap.on, why.method, constrain.constrain, constrain.status, limits], queue=False,
                  api_visibility="private")
        demo.unload(leave)
        serve_endpoints()
    return demo, panels


def leave(request: gr.Request) -> None:
    """The tab closed or reloaded: its long jobs stop (its caches age out as any cache does)."""
    inference.cancel(session_key(request))


demo, PANELS = build_page()


def launch(page: gr.Blocks | None = None, **kwargs):
    """Start the app (`page`: another build of it) with its keyboard shortcuts and styles (Gradio 6 takes them at
    launch). The page answers at once; the model is prepared in the background meanwhile (PREPARATION), and what a
    first answer to a long text may read is timed while the machine is still idle."""
    PREPARATION.start(inference.backend().warm_up())
    queued = (page or demo).queue(max_size=QUEUE_SIZE, default_concurrency_limit=concurrency())
    queued._queue.sleep_when_free, queued._queue.progress_update_sleep_when_free = IDLE_POLL_SECONDS
    return queued.launch(head=KEYBOARD_JS + BRANCH_WHY_JS + WORKING_JS, css=CSS, **kwargs)


if __name__ == "__main__":
    try:
        inference.use_backend(ARGUMENTS.backend, ARGUMENTS.server_url)
    except ValueError as error:
        PARSER.error(str(error))
    launch(mcp_server=ARGUMENTS.mcp or None)  # None: gradio reads GRADIO_MCP_SERVER
