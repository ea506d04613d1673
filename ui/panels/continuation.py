"""The continuation panel: Continue writes the model's greedy continuation into the text at the caret, streamed,
then shows which tokens came from accepted drafts (lossless lookahead decoding: the same text in fewer passes).
Stop (or the writer's first keystroke in the text: keyboard.js holds it and presses Stop) ends it after the token
being written, keeping what it wrote. Its "Stop at" strings end branches too."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import gradio as gr

import custom_llm_inference as inference
from history import History
from history.authorship import accepted
from ui.chat import awaiting_user
from ui.controls import Constraints, Context, Controls, Draft
from ui.errors import refuse
from ui.insertion import Place, caret_in, caret_out, inserted
from ui.wiring import Update, Wiring, session_key
from ui.working import shows_working

SOURCE_LABELS = {"ngram": "n-gram draft", "recycled": "recycled prediction", "step": "plain step"}
SOURCE_COLORS = {"n-gram draft": "#34d399", "recycled prediction": "#fbbf24", "plain step": "#e5e7eb"}
MAX_PAGE_TOKENS = 256  # a Continue from the page (the API takes up to MAX_NEW_TOKENS)
# What the page does once a Continue's event has ended, however it ended: the keystrokes held meanwhile go in.
CONTINUE_ENDED_JS = "() => window.continueEnded?.()"
# The name of the Continue the page starts (keyboard.js names it as the button is clicked), as the event's last input;
# and the one a Stop is for.
CONTINUE_RUN_JS = "(...values) => [...values.slice(0, -1), window.continueRun ?? '']"
STOP_RUN_JS = "() => [window.continueRun ?? '']"


class StopRequests:
    """The Continues their writers asked to stop, by session and by the run's name (the page names each Continue it
    starts, keyboard.js): a Stop reaches its own run whether it arrives while that run writes or before it has begun
    (still waiting its turn, or reading the text), and never another run."""

    KEPT = 1024  # sessions whose last Stop is remembered (a Stop for a run that was refused is never collected)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: dict[str, str] = {}  # session -> the run its writer last asked to stop
        self._running: dict[str, str] = {}  # session -> its run under way

    def start(self, session: str, run: str) -> None:
        with self._lock:
            self._running[session] = run

    def ask(self, session: str, run: str) -> bool:
        """Ask `run` to stop; whether it is under way (then its model work is to be cancelled too)."""
        with self._lock:
            self._asked.pop(session, None)
            self._asked[session] = run
            while len(self._asked) > self.KEPT:
                del self._asked[next(iter(self._asked))]
            return self._running.get(session) == run

    def asked(self, session: str, run: str) -> bool:
        with self._lock:
            return bool(run) and self._asked.get(session) == run

    def end(self, session: str, run: str) -> None:
        with self._lock:
            for runs in (self._asked, self._running):
                if runs.get(session) == run:
                    del runs[session]


STOPS = StopRequests()


def stop_continuing(run: str, request: gr.Request) -> None:
    """The writer's Stop: their Continue `run` ends after the token it is writing, or before it writes one (one still
    reading the text stops within a slice of its work)."""
    session = session_key(request)
    if STOPS.ask(session, run or ""):  # only that run's work: a late Stop must not cancel a Continue asked since
        inference.cancel(session, "continuation")


def continue_text(
    draft: Draft, n_tokens: int, lossless: bool, history: History, context: Context, constraints: Constraints,
    request: gr.Request, run: str = "",
) -> Iterator[Update]:
    """Stream a greedy continuation into the text (in chat mode, the reply) at the caret, then show which tokens
    came from accepted drafts."""
    messages = context.messages
    text = draft.newest(history)
    at = caret_in(text, draft.caret) if text == draft.text else None
    if at == 0 and messages is None:
        at = None
    if awaiting_user(context.chat_mode, text, context.conversation) or (not text and messages is None):
        raise refuse("Write the user's message first." if messages is not None else "Type something to continue.")
    if n_tokens is None or not 1 <= n_tokens <= MAX_PAGE_TOKENS:
        raise refuse(f"Say how many tokens to continue by: 1 to {MAX_PAGE_TOKENS}.")
    result = None
    method = "lookahead" if lossless else "greedy"
    where = Place(text, at)
    session = session_key(request)
    STOPS.start(session, run)
    try:
        if not STOPS.asked(session, run):  # a Stop that came before the run began: it writes nothing
            with contextlib.closing(_continuation(text, int(n_tokens), method, session, context, constraints,
                                                  where, at)) as results:
                for result in results:
                    if STOPS.asked(session, run):
                        break
                    so_far, caret = inserted(where, result.text)  # the caret after it: its line stays in view
                    yield {"text_box": so_far, "caret_sync": caret_out(caret), "history_state": history,
                           "continuation_status": f"{len(result.token_ids)} tokens…"}
    except inference.Cancelled:
        if not STOPS.asked(session, run):
            raise
    finally:
        stopped = STOPS.asked(session, run)
        STOPS.end(session, run)
    if result is None or not result.token_ids:  # the box keeps the text Continue was asked for, as it was
        yield {"text_box": text, "caret_sync": caret_out(at), "history_state": history,
               "continuation_status": "Stopped before it wrote anything."}
        return
    new_text, at = inserted(where, result.text)
    constraint = constraints.for_text(where.before)
    history.add(new_text, "continue", result.token_ids,
                {"method": result.method, "model": result.model,
                 **({"constraint": constraint} if constraint is not None else {}),
                 **({"caret": where.caret} if where.caret is not None else {}), **accepted("continue", 1)})
    pieces = [(piece, SOURCE_LABELS[source])
              for piece, source in zip(result.token_texts, result.draft_source_per_token)]
    n, passes = len(result.token_ids), result.forward_passes
    summary = (
        f"{n} tokens in **{passes} forward passes** ({n / passes:.2f} tokens per pass: a {n / passes:.1f}× "
        f"speed-up in passes over one token at a time) · {result.seconds:.2f} s, "
        f"{n / result.seconds:.1f} tokens/s"
        + (" · stopped early to stay within the GPU time it asked for" if result.stopped_for_time else "")
        + (f" · stopped at {result.stop!r}" if result.stop else "")
        + (" · stopped by you" if stopped else "")
    )
    yield {"text_box": history.text, "caret_sync": caret_out(at), "text_base": str(history.current),
           "continuation": gr.update(value=pieces, visible=True), "continuation_status": summary,
           "history_state": history}


def _continuation(text: str, n_tokens: int, method: str, session: str, context: Context, constraints: Constraints,
                  where: Place, at: int | None) -> Iterator:
    """The engine's growing continuation; a text that no longer fits the constraint is refused in the page's words."""
    try:
        with contextlib.closing(inference.generate_stream.typed(
                text, n_tokens, method, session=session, messages=context.messages, model_name=context.model_name,
                constraint=constraints.for_text(where.before), stop=constraints.stop_strings, caret=at)) as results:
            yield from results
    except inference.ConstraintMismatch as error:
        raise refuse(f"Continue did not start: {error}. Edit the text there, or turn the constraint off "
                     "(Constrain → Off).") from None


class ContinuationPanel:
    def build(self) -> None:
        with gr.Row():
            self.n_tokens = gr.Number(64, minimum=1, maximum=MAX_PAGE_TOKENS, step=1, precision=0,
                                      label="Tokens to continue")
            self.lossless = gr.Checkbox(True, label="Lookahead decoding (same text, fewer passes)")
            self.stops = gr.Textbox(label="Stop at (one per line; \\n is a newline)", lines=1, max_lines=4,
                                    elem_id="stops", placeholder="e.g. .")
            self.button = gr.Button("Continue", elem_id="continue", variant="primary", scale=0, min_width=140)
            # Shown while a Continue writes (page.css): keyboard.js marks the page so.
            self.stop = gr.Button("Stop", elem_id="continue-stop", variant="stop", scale=0, min_width=140)
        self.view = gr.HighlightedText(
            label="Last continuation: where each token came from", color_map=SOURCE_COLORS, combine_adjacent=False,
            show_legend=True, elem_id="continuation", visible=False,
        )
        self.status = gr.Markdown(elem_id="continuation-status")
        self.run = gr.Textbox(visible=False)  # carries the run's name (CONTINUE_RUN_JS, STOP_RUN_JS)

    def slots(self) -> dict:
        return {"continuation": self.view, "continuation_status": self.status}

    def wire(self, wiring: Wiring, draft: Controls, context: Controls, constraints: Controls, refresh: dict) -> None:
        writing = self.button.click(**wiring.handler(
            continue_text,
            dict(draft=draft, n_tokens=self.n_tokens, lossless=self.lossless, history="history_state",
                 context=context, constraints=constraints, run=self.run),
            ["text_box", "caret_sync", "text_base", "continuation", "continuation_status", "history_state"],
            concurrency_id="generate", **shows_working("Continuing"), js=CONTINUE_RUN_JS,
        ))
        writing.success(**refresh)
        # gradio's page runs a .then() after a success alone: a refused Continue ends too.
        for ended in (writing.then, writing.failure):
            ended(None, None, None, js=CONTINUE_ENDED_JS)
        # At once, beside everything: a Stop waits for nothing (it touches no state of the session).
        self.stop.click(js=STOP_RUN_JS, **wiring.handler(stop_continuing, dict(run=self.run), [],
                                                         concurrency_id="stop", concurrency_limit=None))
        self.stops.blur(**refresh)
