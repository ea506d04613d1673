"""The suggestions panel: for one model, the branches as buttons, the next-token plot and the status line; a click
inserts a branch (or a token of the plot) at the caret and brings the next suggestions in the same event.

Built once per model shown: each panel refreshes on the writer's edits and caret moves, with its own model.
"""

from __future__ import annotations

import itertools
import math
import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import replace

import gradio as gr

import custom_llm_inference as inference
from history import History
from history.authorship import accepted
from lookahead.outputs import Branch, LeadTokens, Suggestions
from ui.chat import awaiting_user
from ui.constrain import applying
from ui.controls import MAX_BUTTONS, Controls, Draft, Settings
from ui.errors import refuse
from ui.heatmap_update import show_heatmap
from ui.history_updates import edited, history_shown
from ui.insertion import Place, caret_in, caret_out, continued, inserted
from ui.on_screen import OnScreen, before_choice, forced_ids, forced_text, node_settings
from ui.preparing import Preparation
from ui.render import branch_label, caret_marker, distribution_plot, first_word, plot_heading
from ui.scripts import ANSWER_JS, CLICK_TOKEN_JS
from ui.turns import send_reply
from ui.wiring import EXPLANATIONS_AT_ONCE, Update, Wiring, session_key

MIN_WIDTH = 320  # px of a panel's column: two side by side where there is room for both, else one under the other
# While a long text is read, partial suggestions (lookahead/reading.py) are asked again this often, to show the
# read's progress and, once it ends, the exact suggestions.
READ_POLL_SECONDS = 1.0
# While the model is prepared at start, the page asks this often whether it is ready (a few tiny requests: the
# first suggestions come as soon as it is).
PREPARING_POLL_SECONDS = 0.25
# While the writer reads, compute what each shown branch gives if taken (LOOKAHEAD_PRECOMPUTE=0: off).
PRECOMPUTE = os.environ.get("LOOKAHEAD_PRECOMPUTE", "1") != "0"
FIT_TOKENS = 32  # tokens after the caret each branch's fit is measured on (the API's default)
ANSWERS = itertools.count(1)  # numbers the suggestions shown (OnScreen.serial)
PREPARATION = Preparation()  # the model's, in the background from launch: the page answers at once


def status_line(result: Suggestions, ms: float, constraint: dict | None, caret: int | None = None) -> str:
    """Where the suggestions came from: the model, the device, what it read and the time it took. A partial answer
    says which of the text's tokens it read, its own time, and how far the whole text's read has got."""
    partial = result.partial
    if partial:
        read, total = partial.read_tokens, partial.context_tokens
        read_line = (f"⏳ **Partial:** from the last {partial.window_tokens:,} of {total:,} tokens in "
                     f"{1000 * partial.seconds:.0f} ms, while the whole text is read ({read:,} of {total:,} "
                     f"tokens, {100 * read // total}%); the exact suggestions follow")
    else:
        read_line = f"{result.context_tokens:,} context tokens · {result.reused_tokens:,} reused · {ms:.0f} ms"
    line = (
        ("" if caret is None else f"At the caret (character {caret:,}) · ")
        + f"**{result.model}** on {result.device} · {read_line} · branches {result.branch_mode}"
        + (f" (seed {result.seed})" if result.branch_mode == "sample" else "")
    )
    if constraint is not None:
        line += f" · constrained ({constraint['type']})"
    if result.notice and not partial:
        line += f" · ⚠️ {result.notice}"
    elif partial and result.truncated_tokens:
        line += (f" · ⚠️ The text is longer than the model's context: its first {result.truncated_tokens:,} "
                 "tokens are left out")
    return line


def branch_choices(branches: list[Branch], lead: LeadTokens | None = None, on_screen: OnScreen | None = None
                   ) -> Update:
    """A button per branch, labelled with it (after the `lead` they share); the buttons beyond are hidden.

    A button's visibility is sent only where it changes (`on_screen`: the suggestions its panel's buttons show now;
    None: not known), else its label alone: gradio builds a new component for every property update it sends, and
    the page redraws it, where a label is one value set (a hidden button's is empty)."""
    labels = [branch_label(branch, lead) for branch in branches]
    shown = None if on_screen is None else len(on_screen.result.branches)

    def button(i: int) -> object:
        visible, was_visible = i < len(labels), shown is None or i < shown
        if shown is not None and visible == was_visible:
            return labels[i] if visible else ""
        return gr.update(value=labels[i], visible=True) if visible else gr.update(visible=False)

    return {"branches": [button(i) for i in range(MAX_BUTTONS)]}


def ordered_by_fit(branches: list[Branch]) -> list[Branch]:
    """The branches, those that lead best into the text after the caret first (those without a fit last)."""
    return sorted(branches, key=lambda b: -math.inf if b.fit is None else b.fit, reverse=True)


def fit_after() -> bool:
    """Whether the branches at a caret come first and their fit after, in a second ask. The fit runs the caret's
    next 32 tokens once per branch and once more: on a CPU several times a click's work (bench/bench_caret.py),
    so it follows the branches, yields to every other call, and the writer's next event cancels it. With the
    model on a GPU (ZeroGPU too, where each ask costs GPU time of its own) or behind a server, one ask
    brings both."""
    return not inference.backend().capabilities.cheap_fit


def answer_mark(serial: int, text: str) -> str:
    """What tells the page an answer arrived and for which text (answer.js compares it with the box's text): its
    number, and the CRC-32 of the text's UTF-16 code units, as the browser holds them."""
    return f"{serial}:{zlib.crc32(text.encode('utf-16-le'))}"


def ask(place: Place, settings: Settings, request: gr.Request, fit_tokens: int, yielding: bool = False
        ) -> tuple[Suggestions, str | None]:
    """The lookahead at `place` with the page's settings (a constraint applies from the caret if it began after
    it), and why the constraint does not apply, where the text no longer fits it (ui/constrain.applying)."""
    shape, context, constraints = settings.shape, settings.context, settings.constraints
    return applying(lambda constraint: inference.lookahead.typed(
        place.text, int(shape.n_branches), int(shape.depth), branch_mode=shape.branch_mode, seed=shape.seed,
        sampling=settings.sampling, session=session_key(request), model_name=context.model_name,
        messages=context.messages, precompute=PRECOMPUTE and not yielding, partial=not yielding,
        constraint=constraint, stop=constraints.stop_strings, fit_tokens=fit_tokens,
        yielding=yielding, caret=place.caret,
    ), constraints.for_text(place.before))


def suggestions_for(place: Place, settings: Settings, request: gr.Request) -> tuple[OnScreen, float]:
    """The suggestions at `place` with the page's settings, and the milliseconds they took. Where the constraint does
    not apply, they are made and kept without it, and say so."""
    if settings.shape.seed is None:
        raise refuse("Give a seed (a whole number, 0 or more).")
    place = continued(place, settings.context.messages is not None)
    start = time.perf_counter()
    fit_tokens = 0 if place.caret is not None and fit_after() else FIT_TOKENS  # then complete_at_caret's
    result, released = ask(place, settings, request, fit_tokens)
    ms = 1000 * (time.perf_counter() - start)
    if settings.shape.by_fit:
        result = replace(result, branches=ordered_by_fit(result.branches))
    if released:
        result = replace(result, notice="; ".join(filter(None, [released, result.notice])))
        settings = replace(settings, constraints=replace(settings.constraints, constraint=None))
    return OnScreen(place.text, result, place.caret, next(ANSWERS), settings), ms


def heatmap_after(text: str, settings: Settings, request: gr.Request) -> Update:
    """The heatmap's colours for the new text (none where this panel has no heatmap)."""
    if settings.view is None:
        return {}
    return show_heatmap(text, settings.view, settings.context, request, rescore=True)


def suggest(draft: Draft, history: History, settings: Settings, request: gr.Request, *,
            on_screen: OnScreen | None = None) -> Update:
    """Recompute everything for the text at the caret: branches, plot, status, heatmap. A typing pause becomes a
    history node.

    In chat mode the text is the assistant's reply, after the conversation. What changed in the tree goes to the
    browser's copy each time, so a reload keeps it. A box that still shows a text the session has moved past asks
    for nothing: the answer on its way brings its own suggestions. `on_screen`: the suggestions the buttons show now.
    """
    text, context = draft.text, settings.context
    if draft.newest(history) != text:
        return gr.skip()
    history.add(text, "type")
    if PREPARATION.failure:
        raise refuse(f"The model could not be prepared ({PREPARATION.failure}); the terminal says more.")
    if PREPARATION.step:  # asked again every quarter second (read_timer) until the model is ready
        return {"status": f"⏳ {PREPARATION.step} Your suggestions appear by themselves when it is ready.",
                "read_timer": gr.Timer(PREPARING_POLL_SECONDS, active=True), **history_shown(history),
                "text_base": str(history.current)}
    if (not text and context.messages is None) or awaiting_user(context.chat_mode, text, context.conversation):
        waiting = ("Write the user's message below to continue the conversation." if context.messages is not None
                   else "Type something to see where the model could go next.")
        no_heatmap = {} if settings.view is None else {"heatmap": "", "heatmap_state": None}
        serial = next(ANSWERS)
        return {"shown_state": None, **branch_choices([], on_screen=on_screen), "plot": "", "status": waiting,
                **history_shown(history), **no_heatmap, "read_timer": gr.Timer(READ_POLL_SECONDS, active=False),
                "marker": "", "text_base": str(history.current), "answer_sync": answer_mark(serial, text),
                "answered": serial}
    shown, ms = suggestions_for(Place(text, caret_in(text, draft.caret)), settings, request)
    result = shown.result
    # After the branches, whose pass scored the text; a long text's colours come once it is read, and at a caret
    # they follow (complete_at_caret): the text after it may have to be read again first.
    heat = {} if result.partial or shown.caret is not None else heatmap_after(text, settings, request)
    return {"shown_state": shown, **branch_choices(result.branches, result.lead, on_screen),
            "plot": distribution_plot(result.distribution, forced_text(result), result.lead),
            "status": status_line(result, ms, shown.settings.constraints.constraint, shown.caret),
            "marker": caret_marker(text, shown.caret),
            "read_timer": gr.Timer(READ_POLL_SECONDS, active=bool(result.partial)), **history_shown(history),
            **heat, "text_base": str(history.current), "answer_sync": answer_mark(shown.serial, text),
            "answered": shown.serial,
            **({"follow_up": shown.serial} if shown.caret is not None and not result.partial else {})}


def suggest_beside(
    draft: Draft, shown: OnScreen | None, history: History, settings: Settings, request: gr.Request
) -> Update:
    """A second model's panel, after each answer of the first's: nothing while no model is chosen for it, nor where
    its suggestions on screen were made for this text, caret and settings already (its own click brought them,
    before the first panel's refresh that follows the click)."""
    if not settings.context.model_name:
        return gr.skip()
    text = draft.newest(history)
    if shown and (shown.text, shown.caret, shown.settings) == (text, caret_in(text, draft.caret), settings):
        return gr.skip()
    return suggest(draft, history, settings, request, on_screen=shown)


def suggest_at_moved_caret(draft: Draft, history: History, settings: Settings, request: gr.Request, *,
                           on_screen: OnScreen | None = None) -> Update:
    """The caret moved: the suggestions there. A caret move never changes the text: one that read a text other than
    the history's was made while a click's insertion was on its way (whose own suggestions are shown now), or
    before an edit whose own refresh follows."""
    if draft.text != history.text:
        return gr.skip()
    return suggest(draft, history, settings, request, on_screen=on_screen)


def complete_at_caret(
    text: str, shown: OnScreen | None, settings: Settings, request: gr.Request, waiting: bool = False
) -> Iterator[Update]:
    """What suggestions at a caret come without, so that they never wait for it: the branches' fit where it
    follows them (`fit_after`), asked again as a call that yields to every other and that the session's next
    event cancels (the buttons then keep what they show); then the heatmap, for which the session reads again
    whatever an insertion changed after the caret. `waiting`: another event of the session waits (it brings its
    own)."""
    if not shown or shown.text != text or shown.caret is None or shown.result.partial or waiting:
        yield gr.skip()
        return
    branches = shown.result.branches
    if bool(shown.place.after and branches) and fit_after() and all(b.fit is None for b in branches):
        try:
            result, _ = ask(shown.place, settings, request, FIT_TOKENS, yielding=True)
        except inference.Cancelled:
            yield gr.skip()
            return
        fits = {tuple(b.token_ids): b.fit for b in result.branches}
        if any(fit is not None for fit in fits.values()):  # none where every branch ends
            branches = [replace(b, fit=fits.get(tuple(b.token_ids))) for b in branches]
            if settings.shape.by_fit:
                branches = ordered_by_fit(branches)
            yield {"shown_state": shown._replace(result=replace(shown.result, branches=branches)),
                   **branch_choices(branches, shown.result.lead, shown)}
    yield heatmap_after(text, settings, request)


def current(
    draft: Draft, shown: OnScreen | None, history: History, settings: Settings, request: gr.Request
) -> OnScreen:
    """The suggestions a click applies to: those on screen when they were made for the text the click acts on, else
    fresh ones for it, computed now. A click that came before an edit's suggestions (a paste, typing) waits for
    them and applies to them, instead of being refused; its session's events ahead of it have run (ui/ordering.py)."""
    text = draft.newest(history)
    if shown and shown.text == text:
        return shown
    context = settings.context
    if (not text and context.messages is None) or awaiting_user(context.chat_mode, text, context.conversation):
        raise refuse("Write something first: there is nothing to continue yet.")
    history.add(text, "type")
    caret = caret_in(text, draft.caret) if text == draft.text else None
    return suggestions_for(Place(text, caret), settings, request)[0]


def take_branch(
    index: int, shown: OnScreen, history: History, word: bool = False
) -> tuple[str, int | None, History]:
    """The text with branch `index` inserted at the caret, exactly as the engine spelled it (with `word`, only its
    first word), and the caret after it."""
    result = shown.result
    if index >= len(result.branches):
        raise refuse("That branch is no longer shown.")
    branch = result.branches[index]
    piece = first_word(branch.text) if word else branch.text
    whole = piece == branch.text
    new_text, caret = inserted(shown.place, piece)
    kind = "branch" if whole else "word"
    taken_from = {} if whole else {"branch_token_ids": branch.token_ids}  # a word may end inside a token
    history.add(new_text, kind, branch.token_ids if whole else [],
                {**node_settings(shown), **accepted(kind, len(result.branches), branch.p_final), **taken_from})
    if whole and branch.ends:
        gr.Info("The model would end here (the branch reached its end-of-sequence token).")
    elif whole and branch.stop:
        gr.Info(f"The branch stopped at the stop string {branch.stop!r} (left out of the text).")
    return history.text, caret, history


def take_branch_and_suggest(
    index: int, draft: Draft, shown: OnScreen | None, history: History, settings: Settings, request: gr.Request,
    word: bool = False,
) -> Update:
    """A click: the branch inserted at the caret and the new suggestions, in one event (at the end of the text they
    were precomputed while the writer read, so this is usually instant). `word`: the first branch's next word
    only. In chat mode a branch that ends the reply sends it as a turn."""
    on_screen, shown = shown, current(draft, shown, history, settings, request)
    text, caret, history = take_branch(index, shown, history, word)
    context = settings.context
    conversation = context.conversation
    replying = context.chat_mode == "chat" and conversation and conversation[-1]["role"] == "user"
    ends = shown.result.branches[index].ends and not word and shown.caret is None
    turn = (send_reply(text, conversation, history) if replying and ends
            else {"text_box": text, "caret_sync": caret_out(caret), "conversation_state": conversation,
                  "conversation_view": conversation})
    settings = replace(settings, context=replace(context, conversation=turn["conversation_state"]))
    written = Draft(turn["text_box"], turn["caret_sync"], str(history.current))
    return {**turn, **suggest(written, history, settings, request, on_screen=on_screen)}


def take_word_and_suggest(
    draft: Draft, shown: OnScreen | None, history: History, settings: Settings, request: gr.Request
) -> Update:
    """Alt+W: the first branch's next word only, inserted at the caret, and the new suggestions."""
    return take_branch_and_suggest(0, draft, shown, history, settings, request, word=True)


def force_token(
    draft: Draft, shown: OnScreen | None, history: History, settings: Settings, event: gr.EventData,
    request: gr.Request,
) -> Update:
    """Insert the token clicked in the plot at the caret, whatever its probability."""
    shown = current(draft, shown, history, settings, request)
    result = shown.result
    entry = next((d for d in result.distribution if d.token_id == event.token_id), None)
    if entry is None:
        raise refuse("That token is no longer among the likeliest after your edit; click one the plot shows now.")
    if "\ufffd" in entry.token:
        raise refuse("That token is part of a character split over several tokens; take a branch instead.")
    if not entry.valid:
        raise refuse("The constraint does not allow that token (✗); turn the constraint off to write it.")
    new_text, caret = inserted(shown.place, entry.token, before_choice(shown.place.before, result))
    history.add(new_text, "token", [*forced_ids(result), entry.token_id],
                {**node_settings(shown), **accepted("token", len(result.distribution), entry.p_final)})
    return edited(history, caret)


class SuggestionsPanel:
    """One model's suggestions: built where the page places them (`build`, then `build_plot` for the plot)."""

    def __init__(self, suffix: str = "", beside: bool = False, visible: bool = True) -> None:
        self.suffix = suffix  # on the components' elem_ids, for a second panel on one page
        self.beside = beside  # a second model's, following the first's answers (`follow`)
        self.visible = visible  # at first (ui/panels/compare.py shows a second model's as one is chosen)
        self.refresh_button: gr.Button | None = None  # the first panel's: Ctrl+Enter presses it

    def build(self) -> None:
        """The caret's marker, the branch buttons and the status line, under the text, in a column of their own
        (beside another model's, or under it on a narrow screen)."""
        # Each answer's mark: the page marks this panel's suggestions stale on an edit until the next one arrives
        # (outside the column: a hidden box in a column shown later would show too).
        self.answer_sync = gr.Textbox(visible="hidden", elem_id=f"answer-sync{self.suffix}")
        # Numbers whose change the page reports, after a click's answer too (which skips gradio's queue; a state's
        # change is reported by the queue alone): the number of suggestions at a caret, which their fit and heatmap
        # follow; the number of the answer shown, which the map of futures follows.
        self.follow_up = gr.Number(visible="hidden", precision=0, elem_id=f"follow-up{self.suffix}")
        self.answered = gr.Number(visible="hidden", precision=0, elem_id=f"answered{self.suffix}")
        if self.beside:  # pressed by answer.js after each of the first panel's answers, while this panel is shown
            self.asked = gr.Button(elem_id=f"asked{self.suffix}", elem_classes="pressed-by-script")
        with gr.Column(visible=self.visible, min_width=MIN_WIDTH, elem_id=f"suggestions{self.suffix}") as self.column:
            self._build()

    def _build(self) -> None:
        self.shown_state = gr.State(None)  # the suggestions behind the buttons on screen (OnScreen)
        self.marker = gr.HTML(elem_id=f"caret-marker-view{self.suffix}")
        with gr.Row(equal_height=True, elem_id=f"branches{self.suffix}"):
            self.buttons = [gr.Button(visible=False, elem_id=f"branch{self.suffix}-{i}", elem_classes="branch-btn",
                                      size="sm", min_width=100) for i in range(MAX_BUTTONS)]
        self.status = gr.Markdown(elem_id=f"status{self.suffix}")
        # On while the suggestions shown are partial, or the model is still being prepared.
        self.read_timer = gr.Timer(READ_POLL_SECONDS, active=False)

    def build_refresh(self) -> None:
        self.refresh_button = gr.Button("Refresh", elem_id=f"refresh{self.suffix}", size="sm")

    def build_plot(self) -> None:
        with gr.Column(visible=self.visible, elem_id=f"plot-panel{self.suffix}") as self.plot_column:
            self.heading = gr.Markdown(plot_heading(None), elem_id=f"plot-heading{self.suffix}")
            self.plot = gr.HTML(elem_id=f"plot{self.suffix}", js_on_load=CLICK_TOKEN_JS)

    def slots(self) -> dict:
        return {"shown_state": self.shown_state, "follow_up": self.follow_up, "answered": self.answered,
                "answer_sync": self.answer_sync, "marker": self.marker, "heading": self.heading,
                "branches": self.buttons, "status": self.status, "read_timer": self.read_timer, "plot": self.plot}

    def wire(self, wiring: Wiring, writer, settings: Controls) -> dict:
        """Refresh on the writer's edits and caret moves; take a branch, a word or a plot's token. Returns the
        refresh's listener arguments, for the other panels' events to follow (`.then(**refresh)`)."""
        wiring = wiring.adding(**self.slots())
        draft, history = writer.draft, "history_state"
        outputs = ["shown_state", "branches", "plot", "status", "marker", "history_state", "tree", "history_sync",
                   "read_timer", "text_base", "answer_sync", "follow_up", "answered"]
        if settings.components["view"] is not None:
            outputs += ["heatmap", "heatmap_state"]
        # A refresh asked while the session's Continue writes is skipped: the Continue refreshes when it ends.
        # always_last: while one update runs, only the newest of those asked meanwhile runs next (with its own
        # text: two quick undos refresh for the text of the second, which "once", gradio's default, would drop).
        # A second model's panel follows the first's answers (`follow`), not the writer's edits and caret moves: its
        # refresh never asks while no model is chosen for it, and never stops the first panel's fit.
        asked = (dict(fn=suggest_beside, inputs=dict(draft=draft, shown="shown_state", history=history,
                                                     settings=settings), cancels_fit=False) if self.beside else
                 dict(fn=suggest, inputs=dict(draft=draft, history=history, settings=settings,
                                              on_screen="shown_state")))
        refresh = wiring.handler(**asked, outputs=outputs, while_continuing=gr.skip, trigger_mode="always_last")
        self.answer_sync.change(None, self.answer_sync, None, js=f"(answer) => ({ANSWER_JS})(answer, {self.suffix!r})")
        if not self.beside:
            writer.text_edited.click(**refresh)
            writer.caret_moved.click(**wiring.handler(
                suggest_at_moved_caret, dict(draft=draft, history=history, settings=settings, on_screen="shown_state"),
                outputs,
                while_continuing=gr.skip, trigger_mode="always_last"))
        if self.refresh_button is not None:
            self.refresh_button.click(**refresh)
        # While a long text is read: the progress, then the exact suggestions, without greying the page each second.
        self.read_timer.tick(**{**refresh, "show_progress": "hidden"})
        # New suggestions at a caret: their fit (where it came without) and the heatmap follow, in a group of their
        # own, so the slot held while the fit yields to everyone's clicks is nobody's suggestions' slot. Suggestions
        # at the end of the text bring everything themselves: no event follows them (a round trip per click saved).
        order = wiring.order

        def completing(text: str, shown: OnScreen | None, settings: Settings,
                       request: gr.Request) -> Iterator[Update]:
            yield from complete_at_caret(text, shown, settings, request, order.others_waiting(session_key(request)))

        completing.__name__ = complete_at_caret.__name__
        completed = ["shown_state", "branches", *(["heatmap", "heatmap_state"] if "heatmap" in outputs else [])]
        self.follow_up.change(**wiring.handler(
            completing, dict(text="text_box", shown="shown_state", settings=settings), completed,
            while_continuing=gr.skip, cancels_fit=False, concurrency_id="fit",
            concurrency_limit=EXPLANATIONS_AT_ONCE, show_progress="hidden"))
        # Every click counts, one on a button whose last click is still running included (gradio's "once" would
        # drop it): each waits its session's turn and applies to the text the one before it left.
        taking = ["text_box", "caret_sync", "conversation_state", "conversation_view", *outputs]
        # A click skips gradio's queue (direct): the writer waits for its round trip.
        taking_inputs = dict(draft=draft, shown="shown_state", history=history, settings=settings)
        self.taken = [button.click(**wiring.handler(take_branch_and_suggest, dict(index=gr.State(i), **taking_inputs),
                                                    taking, trigger_mode="multiple", direct=True))
                      for i, button in enumerate(self.buttons)]
        if not self.suffix:  # Alt+W takes the first panel's word
            self.taken.append(writer.take_word.click(**wiring.handler(take_word_and_suggest, taking_inputs, taking,
                                                                      trigger_mode="multiple", direct=True)))
        token = self.plot.click(**wiring.handler(force_token, taking_inputs, ["text_box", "caret_sync", "text_base",
                                                                              "history_state"],
                                                 trigger_mode="multiple", direct=True))
        token.success(**refresh)
        self.taken.append(token)
        self.refresh = refresh
        return refresh

    def follow(self, first: SuggestionsPanel) -> None:
        """Another model's panel beside the first: it refreshes after each answer of the first (which the writer's
        edits ask for) while it is shown, and the text its clicks write refreshes the first. The page asks (answer.js),
        so that no round trip follows every click while no second model is chosen."""
        self.asked.click(**self.refresh)
        for event in self.taken:
            event.then(**first.refresh)
