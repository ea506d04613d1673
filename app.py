"""Gradio UI: write, see where the model could go next, click a branch to take it.

UI only: every number shown comes from custom_llm_inference. Run with `python app.py`.

The page's handlers come first: each takes what it needs by name (ui/controls.py) and answers
{component: value} for the page's components, laid out at the end of the file with the wiring.
"""

from __future__ import annotations

import argparse
import os


def argument_parser() -> argparse.ArgumentParser:
    """`python app.py`'s command line; --help answers before gradio and the model's libraries load."""
    parser = argparse.ArgumentParser(description="Serve the Interactive Lookahead Text Generator.")
    parser.add_argument("--backend", default=os.environ.get("LOOKAHEAD_BACKEND") or "in-process",
                        help="where the model runs (LOOKAHEAD_BACKEND): in-process (the default), or vllm (a vLLM "
                             "server)")
    parser.add_argument("--server-url", default=os.environ.get("LOOKAHEAD_SERVER_URL"),
                        help="the vLLM server's OpenAI-compatible URL, e.g. http://localhost:8000/v1 "
                             "(LOOKAHEAD_SERVER_URL)")
    parser.add_argument("--mcp", action="store_true",
                        help="also serve the endpoints as MCP tools at /gradio_api/mcp/ (or GRADIO_MCP_SERVER=true)")
    return parser


if __name__ == "__main__":
    PARSER = argument_parser()
    ARGUMENTS = PARSER.parse_args()

import itertools
import json
import math
import secrets
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from itertools import zip_longest
from typing import NamedTuple

import gradio as gr

import custom_llm_inference as cli
from history import History
from ui.chat import MODES as CHAT_MODES
from ui.chat import TEXT_LABELS, awaiting_user, started_by, with_reply, with_user_message
from ui.constrain import PRESETS as CONSTRAINT_PRESETS
from ui.constrain import TYPES as CONSTRAINT_TYPES
from ui.constrain import VALUE_LABELS, constraint_from, describe, preset_fields
from ui.controls import BranchShape, Constraints, Context, Controls, Draft, HeatmapView, SamplingSettings, by_name
from ui.errors import handled, refuse
from ui.heatmap import HEATMAP_JS, HEATMAP_TEMPLATE, MODES, Shown, heatmap_message
from ui.ordering import SessionOrder
from ui.preparing import Preparation
from ui.render import attribution_view, branch_label, caret_marker, distribution_plot, first_word, tree_view
from ui.scripts import (
    ANSWER_JS,
    BRANCH_WHY_JS,
    CARET_JS,
    CLICK_TOKEN_JS,
    CSS,
    DOWNLOAD_JS,
    FOLD_ON_PHONE_JS,
    IMPORT_HTML,
    IMPORT_JS,
    KEEP_SETTINGS_JS,
    KEYBOARD_JS,
    PLACE_CARET_JS,
    READ_STORED_JS,
    SAVE_HISTORY_JS,
    SELECT_NODE_JS,
    WHY_BRANCH_JS,
)

SOURCE_LABELS = {"ngram": "n-gram draft", "recycled": "recycled prediction", "step": "plain step"}
SOURCE_COLORS = {"n-gram draft": "#34d399", "recycled prediction": "#fbbf24", "plain step": "#e5e7eb"}
MAX_BUTTONS = 10  # the n_branches slider's maximum; buttons beyond n_branches are hidden
DEFAULT_TEXT = "The old lighthouse keeper climbed the stairs and"
PRESET_NAMES = [*cli.PRESETS, "custom"]
HEATMAP_ALTERNATIVES = 5  # per token, in the heatmap's details
# Every visitor is answered: room for this many waiting events (on a ZeroGPU Space gradio
# would otherwise let one event wait and turn the rest away with "Queue is full").
QUEUE_SIZE = 512
# Explanations running at once, each paused while suggestions are computed: room for a visitor's newer question
# to start (and cancel their older one) while another visitor's explanation runs.
EXPLANATIONS_AT_ONCE = 4
# While a long text is read, partial suggestions (lookahead/reading.py) are asked again this often, to show the
# read's progress and, once it ends, the exact suggestions.
READ_POLL_SECONDS = 1.0
# While the model is prepared at start, the page asks this often whether it is ready (a few tiny requests: the
# first suggestions come as soon as it is).
PREPARING_POLL_SECONDS = 0.25
# While the writer reads, compute what each shown branch gives if taken (LOOKAHEAD_PRECOMPUTE=0: off).
PRECOMPUTE = os.environ.get("LOOKAHEAD_PRECOMPUTE", "1") != "0"
FIT_TOKENS = 32  # tokens after the caret each branch's fit is measured on (the API's default)
ANSWERS = itertools.count(1)  # numbers the suggestions shown (Suggestions.serial)
PREPARATION = Preparation()  # the model's, in the background from launch: the page answers at once


class Suggestions(NamedTuple):
    """The suggestions on screen: the text they were made for, the result, and where in the text (the caret)."""

    text: str
    result: dict
    caret: int | None  # a character offset into `text`; None: its end
    # Each answer's own number: gradio signals a change of state only when its value differs, and what follows new
    # suggestions at a caret (complete_at_caret, through `follow_up`) must follow every answer, one equal to the last
    # included; the page's stale mark clears by it too (answer_mark).
    serial: int = 0

    @property
    def before(self) -> str:
        """The text before the caret: what the suggestions continue."""
        return self.text if self.caret is None else self.text[: self.caret]

    @property
    def after(self) -> str:
        """The text after the caret, kept as it is when a suggestion is inserted."""
        return "" if self.caret is None else self.text[self.caret:]


def caret_in(text: str, caret: str | None) -> int | None:
    """The caret the page sent (a character offset, as Python counts them; "" at the end) as the API takes it:
    None at the end of `text`, or where an edit left it past the end."""
    if not caret:
        return None
    at = int(caret)
    return at if 0 <= at < len(text) else None


def caret_out(caret: int | None) -> str:
    """A caret for the page's copy (place_caret.js puts the text box's caret there)."""
    return "" if caret is None else str(caret)


def inserted(shown: Suggestions, piece: str, before: str | None = None) -> tuple[str, int | None]:
    """The text with `piece` inserted at the caret the suggestions were made for (after `before`, the text up to the
    choice they show, if that differs), joined as `joined` says, and the caret after the insertion (None: still
    the end)."""
    start = shown.before if before is None else before
    piece, space = joined(start, piece, shown.after)
    caret = None if shown.caret is None else len(start + piece)
    return start + piece + space + shown.after, caret


def joined(before: str, piece: str, after: str) -> tuple[str, str]:
    """How an insertion reads right between the text before and after it: a space never doubled (one of two that
    would meet is dropped), and a space between the insertion and the text after it where a letter or digit would
    meet a letter or digit (a branch before "But" ends a word of its own). The insertion's own start is the
    model's: a branch that goes on with a word ("walk" + "ing") is written as it is. Returns the piece as it goes
    in, and the space that follows it ("" or " ")."""
    if before.endswith(" ") and piece.startswith(" "):
        piece = piece[1:]
    if after.startswith(" ") and piece.endswith(" "):
        piece = piece[:-1]
    space = " " if piece and after and piece[-1].isalnum() and after[0].isalnum() else ""
    return piece, space


def node_settings(shown: Suggestions | None) -> dict:
    """The settings the suggestions on screen were made with, to record in the history (and where, at a caret)."""
    if not shown:
        return {}
    result = shown.result
    return {**result["sampling"], "branch_mode": result["branch_mode"], "seed": result["seed"],
            "model": result["model"], "n_branches": len(result["branches"]),
            "depth": len(result["branches"][0]["token_ids"]) - len(forced_ids(result)),
            **({"caret": shown.caret} if shown.caret is not None else {})}


def forced_ids(result: dict) -> list[int]:
    """The tokens a constraint wrote by itself before the branches' first choice (they lead every branch)."""
    return result["forced"]["token_ids"] if result.get("forced") else []


def forced_text(result: dict) -> str | None:
    """What a constraint writes by itself after the text, if anything beyond healing's whitespace (already there)."""
    return (result.get("forced") or {}).get("text") or None


def preset_values(name: str) -> dict:
    """What a preset sets, by SamplingSettings field: the sampling and the branch mode (the seed is no preset's)."""
    sampling, mode = cli.PRESETS[name]
    return {**sampling.as_dict(), "branch_mode": mode}


def apply_preset(name: str) -> dict:
    """The sampling controls set to a preset."""
    return sampling_controls.update(preset_values(name))


def matching_preset(sampling: SamplingSettings) -> dict:
    """The preset the sampling controls now hold, or "custom"."""
    settings = asdict(sampling)
    matching = (name for name in cli.PRESETS
                if all(settings[field] == value for field, value in preset_values(name).items()))
    return {preset: next(matching, "custom")}


def status_line(result: dict, ms: float, constraint: dict | None, caret: int | None = None) -> str:
    """Where the suggestions came from: the model, the device, what it read and the time it took. A partial answer
    says which of the text's tokens it read, its own time, and how far the whole text's read has got."""
    partial = result.get("partial")
    if partial:
        read, total = partial["read_tokens"], partial["context_tokens"]
        read_line = (f"⏳ **Partial:** from the last {partial['window_tokens']:,} of {total:,} tokens in "
                     f"{1000 * partial['seconds']:.0f} ms, while the whole text is read ({read:,} of {total:,} "
                     f"tokens, {100 * read // total}%); the exact suggestions follow")
    else:
        read_line = (f"{result['context_tokens']:,} context tokens · {result['reused_tokens']:,} reused · "
                     f"{ms:.0f} ms")
    line = (
        ("" if caret is None else f"At the caret (character {caret:,}) · ")
        + f"**{result['model']}** on {result['device']} · {read_line} · branches {result['branch_mode']}"
        + (f" (seed {result['seed']})" if result["branch_mode"] == "sample" else "")
    )
    if constraint is not None:
        line += f" · constrained ({constraint['type']})"
    if result["notice"] and not partial:
        line += f" · ⚠️ {result['notice']}"
    return line


def branch_choices(branches: list[dict]) -> dict:
    """A button per branch, labelled with it; the buttons beyond are hidden."""
    return {button: gr.update(value=branch_label(branch), visible=True) if branch else gr.update(visible=False)
            for button, branch in zip_longest(branch_buttons, branches)}


def history_shown(history: History) -> dict:
    """The session's history, its tree on the page, and what the browser's copy of it lacks."""
    return {history_state: history, tree: tree_view(history), history_sync: history_changes(history)}


def ordered_by_fit(branches: list[dict]) -> list[dict]:
    """The branches, those that lead best into the text after the caret first (those without a fit last)."""
    return sorted(branches, key=lambda b: -math.inf if b["fit"] is None else b["fit"], reverse=True)


def fit_after(model_name: str | None) -> bool:
    """Whether the branches at a caret come first and their fit after, in a second ask. The fit runs the caret's
    next 32 tokens once per branch and once more: on a CPU several times a click's work (bench/bench_caret.py),
    so it follows the branches, yields to every other call, and the writer's next event cancels it. With the
    model on a GPU (ZeroGPU too, where each ask costs GPU time of its own) or behind a vLLM server, one ask
    brings both."""
    return not cli.backend().capabilities.cheap_fit


def ask(
    text: str, caret: int | None, shape: BranchShape, sampling: SamplingSettings, context: Context,
    constraints: Constraints, request: gr.Request, fit_tokens: int, yielding: bool = False,
) -> dict:
    """The lookahead for `text` at `caret` with the page's settings (a constraint applies from the caret if it
    began after it)."""
    return cli.lookahead(
        text, int(shape.n_branches), int(shape.depth), sampling.temperature, sampling.top_k, sampling.top_p,
        sampling.repetition_penalty, sampling.branch_mode, sampling.seed, session=session_key(request),
        model_name=context.model_name, messages=context.messages, precompute=PRECOMPUTE and not yielding,
        partial=not yielding, presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
        constraint=constraints.for_text(text if caret is None else text[:caret]), stop=constraints.stop_strings,
        fit_tokens=fit_tokens, yielding=yielding, caret=caret,
    )


def suggest(
    draft: Draft, history: History, shape: BranchShape, sampling: SamplingSettings, view: HeatmapView,
    context: Context, constraints: Constraints, request: gr.Request,
) -> dict:
    """Recompute everything for the text at the caret: branches, plot, status, heatmap. A typing pause becomes a
    history node.

    In chat mode the text is the assistant's reply, after the conversation. What changed in the tree goes to the
    browser's copy each time, so a reload keeps it. A box that still shows a text the session has moved past asks
    for nothing: the answer on its way brings its own suggestions.
    """
    text = draft.text
    if draft.newest(history) != text:
        return gr.skip()
    history.add(text, "type")
    messages = context.messages
    at = caret_in(text, draft.caret)
    if PREPARATION.failure:
        raise refuse(f"The model could not be prepared ({PREPARATION.failure}); the terminal says more.")
    if PREPARATION.step:  # asked again every second (read_timer) until the model is ready
        return {status: f"⏳ {PREPARATION.step} Your suggestions appear by themselves when it is ready.",
                read_timer: gr.Timer(PREPARING_POLL_SECONDS, active=True), **history_shown(history),
                text_base: str(history.current)}
    if (not text and messages is None) or awaiting_user(context.chat_mode, text, context.conversation):
        waiting = ("Write the user's message below to continue the conversation." if messages is not None
                   else "Type something to see where the model could go next.")
        return {shown_state: None, **branch_choices([]), plot: "", status: waiting, **history_shown(history),
                heatmap: "", heatmap_state: None, read_timer: gr.Timer(READ_POLL_SECONDS, active=False), marker: "",
                text_base: str(history.current), answer_sync: answer_mark(next(ANSWERS), text)}
    shown, ms = suggestions_for(text, at, shape, sampling, context, constraints, request)
    result = shown.result
    # After the branches, whose pass scored the text; a long text's colours come once it is read, and at a caret
    # they follow (complete_at_caret): the text after it may have to be read again first.
    heat = ({} if result["partial"] or shown.caret is not None
            else show_heatmap(text, view, context, request, rescore=True))
    return {shown_state: shown, **branch_choices(result["branches"]),
            plot: distribution_plot(result["distribution"], forced_text(result)),
            status: status_line(result, ms, constraints.constraint, shown.caret),
            marker: caret_marker(text, shown.caret),
            read_timer: gr.Timer(READ_POLL_SECONDS, active=bool(result["partial"])), **history_shown(history), **heat,
            text_base: str(history.current), answer_sync: answer_mark(shown.serial, text),
            **({follow_up: shown.serial} if shown.caret is not None and not result["partial"] else {})}


def answer_mark(serial: int, text: str) -> str:
    """What tells the page an answer arrived and for which text (answer.js compares it with the box's text): its
    number, and the CRC-32 of the text's UTF-16 code units, as the browser holds them."""
    return f"{serial}:{zlib.crc32(text.encode('utf-16-le'))}"


def suggestions_for(
    text: str, at: int | None, shape: BranchShape, sampling: SamplingSettings, context: Context,
    constraints: Constraints, request: gr.Request,
) -> tuple[Suggestions, float]:
    """The suggestions for `text` at the caret `at` with the page's settings, and the milliseconds they took."""
    if sampling.seed is None:
        raise refuse("Give a seed (a whole number, 0 or more).")
    if at == 0 and context.messages is None:
        at = None  # nothing before the caret to continue: suggestions for the end instead
    start = time.perf_counter()
    fit_tokens = 0 if at is not None and fit_after(context.model_name) else FIT_TOKENS  # then complete_at_caret's
    result = ask(text, at, shape, sampling, context, constraints, request, fit_tokens)
    ms = 1000 * (time.perf_counter() - start)
    if shape.by_fit:
        result = {**result, "branches": ordered_by_fit(result["branches"])}
    return Suggestions(text, result, at, next(ANSWERS)), ms


def suggest_at_moved_caret(
    draft: Draft, history: History, shape: BranchShape, sampling: SamplingSettings, view: HeatmapView,
    context: Context, constraints: Constraints, request: gr.Request,
) -> dict:
    """The caret moved: the suggestions there. A caret move never changes the text: one that read a text other than
    the history's was made while a click's insertion was on its way (whose own suggestions are shown now), or
    before an edit whose own refresh follows."""
    if draft.text != history.text:
        return gr.skip()
    return suggest(draft, history, shape, sampling, view, context, constraints, request)


def complete_at_caret(
    text: str, shown: Suggestions | None, shape: BranchShape, sampling: SamplingSettings, view: HeatmapView,
    context: Context, constraints: Constraints, request: gr.Request,
) -> Iterator[dict]:
    """What suggestions at a caret come without, so that they never wait for it: the branches' fit where it
    follows them (`fit_after`), asked again as a call that yields to every other and that the session's next
    event cancels (the buttons then keep what they show); then the heatmap, for which the session reads again
    whatever an insertion changed after the caret."""
    if (not shown or shown.text != text or shown.caret is None or shown.result["partial"]
            or order.others_waiting(session_key(request))):  # a newer event brings its own
        yield gr.skip()
        return
    branches = shown.result["branches"]
    fit_follows = bool(shown.after and branches) and fit_after(context.model_name)
    if fit_follows and all(b["fit"] is None for b in branches):
        try:
            result = ask(text, shown.caret, shape, sampling, context, constraints, request, FIT_TOKENS,
                         yielding=True)
        except cli.Cancelled:
            yield gr.skip()
            return
        fits = {tuple(b["token_ids"]): b["fit"] for b in result["branches"]}
        if any(fit is not None for fit in fits.values()):  # none where every branch ends
            branches = [{**b, "fit": fits.get(tuple(b["token_ids"]))} for b in branches]
            if shape.by_fit:
                branches = ordered_by_fit(branches)
            yield {shown_state: shown._replace(result={**shown.result, "branches": branches}),
                   **branch_choices(branches)}
    yield show_heatmap(text, view, context, request, rescore=True)


def cancel_fit(session: str) -> None:
    """A newer event of the session makes the fit being asked for stale: it stops within a slice."""
    cli.cancel(session, "lookahead")


def show_heatmap(text: str, view: HeatmapView, context: Context, request: gr.Request, *, rescore: bool = False) -> dict:
    """The heatmap's update from what the page shows (`view.shown`) to `text`: the tokens that changed (ui/heatmap.py).

    The scores are the shown ones when only the colouring changed; `rescore`: the context may have changed too.
    """
    if not view.on or not text:
        return {heatmap: "", heatmap_state: None}
    shown = view.shown
    if rescore or not shown or shown.text != text or shown.result["model"] != context.model_name:
        result = cli.token_probabilities(text, HEATMAP_ALTERNATIVES, session=session_key(request),
                                         model_name=context.model_name, messages=context.messages)
    else:
        result = shown.result
    message, shown = heatmap_message(text, result, view.colour_by, view.threshold, shown)
    return {heatmap: message, heatmap_state: shown}


def resend_heatmap(text: str, view: HeatmapView, context: Context, request: gr.Request) -> dict:
    """The whole heatmap again, for a page that missed an update (HEATMAP_JS asks)."""
    return show_heatmap(text, replace(view, shown=None), context, request)


def heatmap_tokens(heatmap_shown: Shown | None) -> list[dict]:
    """The tokens the heatmap shows: a click acts on what the writer sees, even while the colours follow an edit."""
    if not heatmap_shown:
        raise refuse("The heatmap shows nothing yet: turn it on first.")
    return heatmap_shown.result["tokens"]


def edited(history: History, caret: int | None = None) -> dict:
    """The text box, its caret and the history, after an edit recorded in the history."""
    return {text_box: history.text, caret_sync: caret_out(caret), text_base: str(history.current),
            history_state: history}


def rewind(heatmap_shown: Shown | None, history: History, event: gr.EventData) -> dict:
    """Put the clicked alternative in place of its token in the text the heatmap shows, dropping what followed; the
    old text stays in the tree."""
    tokens = heatmap_tokens(heatmap_shown)
    text = heatmap_shown.text
    index = int(event.index)
    if not 0 <= index < len(tokens):
        raise refuse("That token is no longer shown.")
    alternative = next((a for a in tokens[index]["alternatives"] or [] if a["token_id"] == int(event.token_id)), None)
    if alternative is None:
        raise refuse("That alternative is no longer shown.")
    if "\ufffd" in alternative["token"]:
        raise refuse("That alternative is part of a character split over several tokens.")
    history.fork(text[: tokens[index]["start"]] + alternative["token"], "rewind", [alternative["token_id"]])
    return edited(history)


def history_changes(history: History, whole: bool = False) -> str:
    """What the browser's copy of the tree lacks, as JSON (SAVE_HISTORY_JS applies it)."""
    return json.dumps(history.changes(whole), ensure_ascii=False, separators=(",", ":"))


def resend_history(history: History) -> dict:
    """The whole tree for the browser's copy, which could not apply an update (SAVE_HISTORY_JS asks)."""
    return {history_sync: history_changes(history, whole=True)}


def on_screen(shown: Suggestions | None) -> Suggestions:
    """The suggestions the writer sees, whichever text they were made for (a "why?" asks about what is shown)."""
    if not shown:
        raise refuse("No suggestions are shown yet: write something first.")
    return shown


def current(
    draft: Draft, shown: Suggestions | None, history: History, shape: BranchShape, sampling: SamplingSettings,
    context: Context, constraints: Constraints, request: gr.Request,
) -> Suggestions:
    """The suggestions a click applies to: those on screen when they were made for the text the click acts on, else
    fresh ones for it, computed now. A click that came before an edit's suggestions (a paste, typing) waits for
    them and applies to them, instead of being refused; its session's events ahead of it have run (ui/ordering.py)."""
    text = draft.newest(history)
    if shown and shown.text == text:
        return shown
    if (not text and context.messages is None) or awaiting_user(context.chat_mode, text, context.conversation):
        raise refuse("Write something first: there is nothing to continue yet.")
    history.add(text, "type")
    return suggestions_for(text, caret_in(text, draft.caret) if text == draft.text else None, shape, sampling,
                           context, constraints, request)[0]


def take_branch(
    index: int, shown: Suggestions, history: History, word: bool = False
) -> tuple[str, int | None, History]:
    """The text with branch `index` inserted at the caret, exactly as the engine spelled it (with `word`, only its
    first word), and the caret after it."""
    result = shown.result
    if index >= len(result["branches"]):
        raise refuse("That branch is no longer shown.")
    branch = result["branches"][index]
    piece = first_word(branch["text"]) if word else branch["text"]
    whole = piece == branch["text"]
    new_text, caret = inserted(shown, piece)
    history.add(new_text, "branch" if whole else "word", branch["token_ids"] if whole else [], node_settings(shown))
    if whole and branch.get("ends"):
        gr.Info("The model would end here (the branch reached its end-of-sequence token).")
    elif whole and branch.get("stop"):
        gr.Info(f"The branch stopped at the stop string {branch['stop']!r} (left out of the text).")
    return history.text, caret, history


def take_branch_and_suggest(
    index: int, draft: Draft, shown: Suggestions | None, history: History, shape: BranchShape,
    sampling: SamplingSettings, view: HeatmapView, context: Context, constraints: Constraints, request: gr.Request,
    word: bool = False,
) -> dict:
    """A click: the branch inserted at the caret and the new suggestions, in one event (at the end of the text they
    were precomputed while the writer read, so this is usually instant). `word`: the first branch's next word
    only. In chat mode a branch that ends the reply sends it as a turn."""
    shown = current(draft, shown, history, shape, sampling, context, constraints, request)
    text, caret, history = take_branch(index, shown, history, word)
    conversation = context.conversation
    replying = context.chat_mode == "chat" and conversation and conversation[-1]["role"] == "user"
    ends = shown.result["branches"][index].get("ends") and not word and shown.caret is None
    turn = (send_reply(text, conversation, history) if replying and ends
            else {text_box: text, caret_sync: caret_out(caret), conversation_state: conversation,
                  conversation_view: conversation})
    context = replace(context, conversation=turn[conversation_state])
    written = Draft(turn[text_box], turn[caret_sync], str(history.current))
    return {**turn, **suggest(written, history, shape, sampling, view, context, constraints, request)}


def take_word_and_suggest(
    draft: Draft, shown: Suggestions | None, history: History, shape: BranchShape, sampling: SamplingSettings,
    view: HeatmapView, context: Context, constraints: Constraints, request: gr.Request,
) -> dict:
    """Alt+W: the first branch's next word only, inserted at the caret, and the new suggestions."""
    return take_branch_and_suggest(0, draft, shown, history, shape, sampling, view, context, constraints, request,
                                   word=True)


def took_turn(conversation: list[dict], history: History) -> dict:
    """A turn sent: recorded in the history, the box emptied for the next one."""
    history.add("", "turn", [], {"messages": conversation})
    return {text_box: "", caret_sync: "", text_base: str(history.current), conversation_state: conversation,
            conversation_view: conversation, history_state: history}


def send_user_message(text: str, message: str, conversation: list[dict], history: History) -> dict:
    """The user's turn: a reply begun in the box goes first; the box then holds the next reply, empty."""
    return {**took_turn(with_user_message(text, message, conversation), history), user_message: ""}


def send_reply(text: str, conversation: list[dict], history: History) -> dict:
    """The reply in the box becomes the assistant's turn; the next turn is the user's."""
    return took_turn(with_reply(text, conversation), history)


def switch_mode(mode: str, text: str, conversation: list[dict] | None, history: History) -> dict:
    """Show or hide the chat panel. A chat begun from plain text starts with that text as the user's first
    message (a conversation opens with the user), the box then holding the reply; undo brings the text back."""
    conversation = conversation or []
    opened = started_by(mode, text, conversation)
    box = gr.update(label=TEXT_LABELS[mode])  # the text as it is (the writer may have typed on meanwhile) ...
    if opened != conversation:
        history.add("", "turn", [], {"messages": opened})
        gr.Info("Chat: your text is now the user's first message, and the box holds the assistant's reply. "
                "Undo brings your text back.")
        box["value"] = ""  # ... unless it moved into the conversation
    return {text_base: str(history.current), chat_panel: gr.update(visible=mode == "chat"), text_box: box,
            caret_sync: "", conversation_state: opened,
            conversation_view: opened, history_state: history}


def force_token(
    draft: Draft, shown: Suggestions | None, history: History, shape: BranchShape, sampling: SamplingSettings,
    context: Context, constraints: Constraints, event: gr.EventData, request: gr.Request,
) -> dict:
    """Insert the token clicked in the plot at the caret, whatever its probability."""
    shown = current(draft, shown, history, shape, sampling, context, constraints, request)
    result = shown.result
    entry = next((d for d in result["distribution"] if d["token_id"] == event.token_id), None)
    if entry is None:
        raise refuse("That token is no longer among the likeliest after your edit; click one the plot shows now.")
    if "\ufffd" in entry["token"]:
        raise refuse("That token is part of a character split over several tokens; take a branch instead.")
    if not entry.get("valid", True):
        raise refuse("The constraint does not allow that token (✗); turn the constraint off to write it.")
    new_text, caret = inserted(shown, entry["token"], before_choice(shown.before, result))
    history.add(new_text, "token", [*forced_ids(result), entry["token_id"]], node_settings(shown))
    return edited(history, caret)


def explain_token(
    shown: Suggestions | None, method: str, context: Context, request: gr.Request, event: gr.EventData,
    progress=gr.Progress(),
) -> dict:
    """"why?" beside a token in the plot: what in the text (before the caret) drives the model towards it."""
    shown = on_screen(shown)
    entry = next((d for d in shown.result["distribution"] if d["token_id"] == event.token_id), None)
    if entry is None:
        raise refuse("That token is no longer shown.")
    return explain(next_token_question(shown.before, shown.result, entry["token_id"], context), method, request,
                   progress)


def explain_branch(
    index: int, shown: Suggestions | None, method: str, context: Context, request: gr.Request,
    progress=gr.Progress(),
) -> dict:
    """"why?" on a branch: what in the text (before the caret) drives the model towards the branch's first token."""
    shown = on_screen(shown)
    result = shown.result
    if index is None or not 0 <= int(index) < len(result["branches"]):
        raise refuse("That branch is no longer shown.")
    first = result["branches"][int(index)]["token_ids"][len(forced_ids(result))]
    return explain(next_token_question(shown.before, result, first, context), method, request, progress)


def explain_heatmap_token(
    heatmap_shown: Shown | None, method: str, context: Context, request: gr.Request, event: gr.EventData,
    progress=gr.Progress(),
) -> dict:
    """"why the first?" on a token of the heatmap: what in the text before it made the model expect its own
    first choice there."""
    tokens = heatmap_tokens(heatmap_shown)
    text = heatmap_shown.text
    index = int(event.index)
    if not 0 <= index < len(tokens) or tokens[index]["prob"] is None:
        raise refuse("That token is no longer shown.")
    question = {"text": text, "target_token_id": None, "at_token": index, "where": tokens[index]["token"],
                "messages": context.messages, "model_name": context.model_name}
    return explain(question, method, request, progress)


def before_choice(text: str, result: dict) -> str:
    """The text as the suggestions on screen read it up to the choice they show: with healing, its trailing
    whitespace is the next token's own, so it ends before it; after what a constraint writes by itself, it is
    the text and that."""
    if result.get("forced"):
        return text + result["forced"]["text"]
    return text[: len(text) - len(result["healed_whitespace"])]


def next_token_question(text: str, result: dict, token_id: int, context: Context) -> dict:
    """Why `token_id` next, as the suggestions on screen saw the text."""
    shown_prob = next((d["prob"] for d in result["distribution"] if d["token_id"] == token_id), None)
    return {"text": before_choice(text, result), "target_token_id": token_id, "at_token": None, "where": None,
            "messages": context.messages, "model_name": context.model_name, "shown_prob": shown_prob}


def explain(question: dict | None, method: str, request: gr.Request, progress=gr.Progress()) -> dict:
    """The explanation asked by `question` (which token, after which text) by `method`, the progress shown as
    it goes (integrated gradients takes several passes); also the question, for a switch of method."""
    if question is None:
        return {why: gr.skip(), why_state: None}
    result = None
    try:
        for result in cli.attribution_stream(
            question["text"], question["target_token_id"], method, session=session_key(request),
            messages=question["messages"], model_name=question["model_name"], at_token=question["at_token"],
        ):
            if "done" in result:
                progress((result["done"], result["of"]), desc=f"why? {method.replace('_', ' ')}", unit="passes")
    except cli.Cancelled:  # a newer question, Stop, or the tab closed: what the page shows stays
        return {why: gr.skip(), why_state: gr.skip()}
    return {why: attribution_view(question["text"], result, question["where"], question.get("shown_prob")),
            why_state: question}


def still_continuing() -> None:
    """What an event of a session whose Continue is still writing answers, at once."""
    raise refuse("Continue is still writing your text; try again when it has finished.")


def stop_explaining(request: gr.Request) -> None:
    """Stop: the running "why?" ends within one slice of its model work."""
    if not cli.cancel(session_key(request), "attribution"):
        gr.Info("Nothing to stop: no explanation is running.")


def leave(request: gr.Request) -> None:
    """The tab closed or reloaded: its long jobs stop (its caches age out as any cache does)."""
    cli.cancel(session_key(request))


def append_text(draft: Draft, extra: str, shown: Suggestions | None, history: History) -> dict:
    """Insert the text typed beside Append at the caret (at the end, without one), as it is."""
    if not extra:
        raise refuse("Type the text to append first.")
    text = draft.newest(history)
    at = caret_in(text, draft.caret) if text == draft.text else None
    new_text, at = inserted(Suggestions(text, {}, at), extra)
    history.add(new_text, "append", [], node_settings(shown if shown and shown.text == text else None))
    return {**edited(history, at), extra_box: ""}


def move(history: History, step: str) -> dict:
    """Undo (to the parent) or redo (to the child last visited)."""
    if not (history.undo() if step == "undo" else history.redo()):
        gr.Info(f"Nothing to {step}: this is the {'first' if step == 'undo' else 'latest'} step on this path.")
        return gr.skip()
    return at_node(history)


def select_node(history: History, event: gr.EventData) -> dict:
    history.select(int(event.node))
    return at_node(history)


def at_node(history: History) -> dict:
    """The text box, the conversation (state and view) and the tree, as at the history's current node."""
    conversation = history.conversation()
    return {text_box: history.text, caret_sync: "", text_base: str(history.current),
            conversation_state: conversation, conversation_view: conversation, history_state: history}


def clear(history: History) -> dict:
    history.add("", "clear")
    return edited(history)


def export_history(history: History) -> dict:
    """The tree as JSON, for the browser to save as a file (DOWNLOAD_JS)."""
    return {history_json: history.to_json()}


def import_history(history: History, event: gr.EventData) -> dict:
    """Replace the session's tree with an exported one; its current node's text becomes the text."""
    try:
        imported = History.from_json(event.json)
    except ValueError as error:
        raise refuse(f"Could not import that file: {error}") from None
    if imported.model != history.model:
        gr.Warning(f"This history was written with {imported.model}; suggestions now come from {history.model}.")
    return at_node(imported)


def restore(stored: str | None, settings: str | None, history: History) -> dict:
    """The tree this browser kept (READ_STORED_JS reads it), if it has a readable one, and the settings kept with
    it: the heatmap switch, and chat mode (whose conversation the tree holds).

    Without a tree the box is left as it is: the writer may have started typing before the page
    finished loading (under load, this event can wait in the queue for seconds).
    """
    try:
        restored = History.from_json(stored) if stored else None
    except ValueError:
        restored = None  # written by another version of the app: start afresh
    try:
        kept = json.loads(settings) if settings else {}
    except ValueError:
        kept = {}
    page = at_node(restored) if restored else {history_state: history}
    if kept.get("heatmap_on") is True:
        page[heatmap_on] = True
    if kept.get("chat_mode") in CHAT_MODES and restored:
        mode = kept["chat_mode"]
        page |= {chat_mode: mode, chat_panel: gr.update(visible=mode == "chat"),
                 text_box: gr.update(value=restored.text, label=TEXT_LABELS[mode])}
    return page


def continue_text(
    draft: Draft, n_tokens: int, lossless: bool, history: History, context: Context, constraints: Constraints,
    request: gr.Request,
) -> Iterator[dict]:
    """Stream a greedy continuation into the text (in chat mode, the reply) at the caret, then show which tokens
    came from accepted drafts."""
    messages = context.messages
    text = draft.newest(history)
    at = caret_in(text, draft.caret) if text == draft.text else None
    if at == 0 and messages is None:
        at = None
    if awaiting_user(context.chat_mode, text, context.conversation) or (not text and messages is None):
        raise refuse("Write the user's message first." if messages is not None else "Type something to continue.")
    if n_tokens is None:
        raise refuse("Say how many tokens to continue by.")
    result = None
    method = "lookahead" if lossless else "greedy"
    where = Suggestions(text, {}, at)
    results = cli.generate_stream(text, int(n_tokens), method, session=session_key(request), messages=messages,
                                  model_name=context.model_name, constraint=constraints.for_text(where.before),
                                  stop=constraints.stop_strings, caret=at)
    for result in results:
        yield {text_box: inserted(where, result["text"])[0], continuation_status: f"{len(result['token_ids'])} tokens…",
               history_state: history}
    new_text, at = inserted(where, result["text"])
    history.add(new_text, "continue", result["token_ids"],
                {"method": result["method"], **({"caret": where.caret} if where.caret is not None else {})})
    pieces = [(piece, SOURCE_LABELS[source]) for piece, source in
              zip(result["token_texts"], result["draft_source_per_token"])]
    n, passes = len(result["token_ids"]), result["forward_passes"]
    summary = (
        f"{n} tokens in **{passes} forward passes** ({n / passes:.2f} tokens per pass: a {n / passes:.1f}× "
        f"speed-up in passes over one token at a time) · {result['seconds']:.2f} s, "
        f"{n / result['seconds']:.1f} tokens/s"
        + (" · stopped early to stay within the GPU time it asked for" if result["stopped_for_time"] else "")
        + (f" · stopped at {result['stop']!r}" if result["stop"] else "")
    )
    yield {text_box: history.text, caret_sync: caret_out(at), text_base: str(history.current),
           continuation: gr.update(value=pieces, visible=True), continuation_status: summary, history_state: history}


def fill_constraint(name: str | None) -> dict:
    """The type and value a constraint preset fills in."""
    kind, value = preset_fields(name)
    return {constraint_type: kind, constraint_value: value}


def relabel_constraint_value(kind: str) -> dict:
    return {constraint_value: gr.update(label=VALUE_LABELS[kind])}


def constrain(kind: str, value: str, chat_mode: str, caret: float | None, text: str) -> dict:
    """"Constrain from here": the constraint from the caret (in chat mode, from the reply's start)."""
    constraint = constraint_from(kind, value, chat_mode, caret, text)
    return {constraint_state: constraint, constraint_status: describe(constraint, text)}


def unconstrain() -> dict:
    return {constraint_state: None, constraint_status: describe(None, "")}


def session_key(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


# Gradio's MCP server sends every tool call through one internal gradio_client, which marks its requests so.
MCP_CLIENT_HEADER = ("x-gradio-user", "mcp")


def from_mcp(request: gr.Request | None) -> bool:
    return request is not None and request.headers.get(MCP_CLIENT_HEADER[0]) == MCP_CLIENT_HEADER[1]


@contextmanager
def caller_session(request: gr.Request | None) -> Iterator[str]:
    """The session an API call runs in.

    A browser or gradio_client caller has its own (gradio's session_hash), kept between its calls. Every MCP call
    arrives with the MCP server's one session_hash, which would give all agents one KV cache (and on the vLLM
    backend one cache salt): one could probe what another wrote. So an MCP call runs in a session of its own,
    shared with nothing, and forgotten when the call ends. Claiming the MCP header only buys that isolation.
    """
    if not from_mcp(request):
        yield session_key(request)
        return
    session = f"mcp-{secrets.token_hex(16)}"
    try:
        yield session
    finally:
        cli.end_session(session)


def reply(result: dict | list, request: gr.Request | None) -> dict | list | str:
    """A result as its caller reads it: JSON text for an MCP client (gradio's MCP server sends str(value), a
    Python repr); the plain value for everyone else, whom gradio sends JSON anyway."""
    return json.dumps(strict_json(result), ensure_ascii=False, allow_nan=False) if from_mcp(request) else result


def strict_json(value: object) -> object:
    """`value` with infinities and NaN as None: JSON has no such numbers (a token the vLLM server did not rank
    has logprob -inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


# The endpoints below are also the MCP tools: gradio takes each tool's description from the docstring's text
# before "Args:", each parameter's from its one line under "Args:" (a wrapped line would be lost), and appends
# the lines under "Returns:". docs/api.md documents them in full.


def api_lookahead(
    text: str, n_branches: int = 5, depth: int = 3, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    repetition_penalty: float = 1.0, branch_mode: str = "greedy", seed: int = 0, messages: list[dict] | None = None,
    model_name: str | None = None, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    constraint: dict | None = None, stop: list[str] | None = None, fit_tokens: int = 32, caret: int | None = None,
    request: gr.Request = None,
) -> dict:
    """Where a language model could go next after a text: its likeliest next tokens, each continued a few tokens.

    Args:
        text: The text so far; the branches continue it. In chat mode, the assistant's reply so far (may be empty).
        n_branches: How many branches (1-20); branch i starts with the i-th likeliest next token by p_final.
        depth: Tokens in each branch (1-16).
        temperature: Sampling temperature applied to p_final (0.01-5; 1 changes nothing).
        top_k: Keep only the top_k likeliest tokens in p_final (0-200; 0 is off).
        top_p: Keep the fewest likeliest tokens whose probabilities sum to top_p (0.01-1; 1 is off).
        repetition_penalty: transformers' repetition penalty over the context (0.01-5; 1 is off).
        branch_mode: "greedy" (each branch takes its likeliest next tokens) or "sample" (drawn from p_final).
        seed: Random seed for branch_mode "sample" (an integer, 0 or more); the same seed gives the same branches.
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        presence_penalty: OpenAI's presence penalty over the context (-2 to 2; 0 is off).
        frequency_penalty: OpenAI's frequency penalty over the context (-2 to 2; 0 is off).
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        stop: Up to 8 stop strings; a branch ends where it completes one, its text cut before it.
        fit_tokens: How many tokens after the caret each branch's fit is measured on (0-256; 0 is off).
        caret: Suggest at this character offset into text instead of its end (null: the end); branches insert there.

    Returns:
        An object: "branches" (each "text" to insert, "prob", "p_final", "token_ids", "ends", "stop", "fit": how
        much likelier per token the text after the caret becomes with the branch inserted, or null),
        "distribution" (the next tokens: "token", "prob", "p_final", "kept", "valid"), token counts and settings.
    """
    with caller_session(request) as session:
        return reply(cli.lookahead(
            text, n_branches, depth, temperature, top_k, top_p, repetition_penalty, branch_mode, seed,
            session=session, partial=not from_mcp(request),  # an MCP call's session ends with it: no read to follow
            messages=messages, model_name=cli.offered_model_name(model_name),
            presence_penalty=presence_penalty, frequency_penalty=frequency_penalty, constraint=constraint, stop=stop,
            fit_tokens=fit_tokens, caret=caret,
        ), request)


def api_token_probabilities(
    text: str, k: int = 5, messages: list[dict] | None = None, model_name: str | None = None,
    request: gr.Request = None,
) -> dict:
    """How likely a language model found each token of a text, given everything before it (GLTR-style).

    Args:
        text: The text to score. In chat mode, the assistant's reply, scored after the conversation.
        k: How many of the model's own top choices to list at each token (1-20).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.

    Returns:
        An object: "tokens", each with "token", "start"/"end" (its characters in text), "prob", "rank" (1 is the
        model's first choice), "entropy" in bits and "alternatives" (the top k there); and token counts.
    """
    with caller_session(request) as session:
        return reply(cli.token_probabilities(
            text, k, session=session, messages=messages, model_name=cli.offered_model_name(model_name)
        ), request)


def api_generate(
    text: str, max_new_tokens: int = 64, method: str = "lookahead", messages: list[dict] | None = None,
    model_name: str | None = None, constraint: dict | None = None, stop: list[str] | None = None,
    caret: int | None = None, request: gr.Request = None,
) -> Iterator[dict]:
    """Continue a text greedily (the model's likeliest token each step), streaming the growing result.

    Args:
        text: The text to continue. In chat mode, the assistant's reply so far (may be empty).
        max_new_tokens: The most tokens to add (1-1024); it stops earlier at the end-of-sequence token or a stop string.
        method: "lookahead" (the same tokens as "greedy" in fewer forward passes) or "greedy" (one token per pass).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        stop: Up to 8 stop strings; the continuation ends where it completes one, cut before it.
        caret: Continue the text before this character offset instead of the whole text (null: the end).

    Returns:
        An object: "text" (the continuation alone), "token_ids", "forward_passes", "tokens_per_pass", "seconds",
        "stop" (the stop string that ended it, or null).
    """
    with caller_session(request) as session:
        for result in cli.generate_stream(text, max_new_tokens, method, session=session, messages=messages,
                                          model_name=cli.offered_model_name(model_name), constraint=constraint,
                                          stop=stop, caret=caret):
            yield reply(result, request)


def api_next_token_distribution(
    text: str, k: int = 10, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    repetition_penalty: float = 1.0, messages: list[dict] | None = None, model_name: str | None = None,
    presence_penalty: float = 0.0, frequency_penalty: float = 0.0, constraint: dict | None = None,
    caret: int | None = None, request: gr.Request = None,
) -> list:
    """The next-token distribution after a text: the k likeliest tokens, before and after the sampling settings.

    Args:
        text: The text so far. In chat mode, the assistant's reply so far (may be empty).
        k: How many tokens to list (1-200).
        temperature: Sampling temperature applied to p_final (0.01-5; 1 changes nothing).
        top_k: Keep only the top_k likeliest tokens in p_final (0-200; 0 is off).
        top_p: Keep the fewest likeliest tokens whose probabilities sum to top_p (0.01-1; 1 is off).
        repetition_penalty: transformers' repetition penalty over the context (0.01-5; 1 is off).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        presence_penalty: OpenAI's presence penalty over the context (-2 to 2; 0 is off).
        frequency_penalty: OpenAI's frequency penalty over the context (-2 to 2; 0 is off).
        constraint: {"type": "choice"|"regex"|"json_schema"|"grammar", "value": ..., "start": offset in text or null}.
        caret: The next tokens at this character offset into text instead of its end (null: the end).

    Returns:
        A list of tokens, likeliest first by p_final: "token", "token_id", "prob" (the plain softmax), "logprob",
        "p_final" (after the settings), "kept" (not cut by top_k/top_p), "valid" (allowed by the constraint).
    """
    with caller_session(request) as session:
        return reply(cli.next_token_distribution(
            text, k, temperature, top_k, top_p, repetition_penalty, session=session, messages=messages,
            model_name=cli.offered_model_name(model_name), presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, constraint=constraint, caret=caret,
        ), request)


def api_attribution(
    text: str, target_token_id: int | None = None, method: str = "input_x_gradient", steps: int = 16,
    window: int = 512, messages: list[dict] | None = None, model_name: str | None = None,
    at_token: int | None = None, request: gr.Request = None,
) -> dict:
    """Why a language model expects a next token after a text: each earlier token's share in that prediction.

    Args:
        text: The text the prediction follows. In chat mode, the assistant's reply so far.
        target_token_id: The token id to explain; empty for the model's first choice.
        method: "input_x_gradient", "saliency", "integrated_gradients" (slow: steps passes) or "attention".
        steps: Integrated gradients' points between a zero baseline and the input (1-64).
        window: How many of the last tokens to attribute over (1-2048).
        messages: Chat mode: the earlier turns, a list of {"role": "system"|"user"|"assistant", "content": text}.
        model_name: One of the models the app offers; empty for the default.
        at_token: Explain the prediction at this token of the text (an index into token_probabilities' tokens).

    Returns:
        An object: "target" ("token", "token_id", "prob"), "method", "tokens" (each "token", "start"/"end" and
        "score": its share, the window's scores summing to 1; null before the window).
    """
    with caller_session(request) as session:
        return reply(cli.attribution(text, target_token_id, method, steps, window, session=session,
                                     messages=messages, model_name=cli.offered_model_name(model_name),
                                     at_token=at_token), request)


with gr.Blocks(title="Interactive Lookahead") as demo:
    gr.Markdown(  # the keys' hints are hidden on a touch screen (page.css)
        "## Interactive Lookahead\nWrite, and see where the model could go next, at the end of your text or "
        "wherever you put the caret. Click a branch or any token in the plot to insert it"
        '<span class="keys"> (or press <b>Alt+1…9</b>; <b>Alt+W</b> takes the first branch\'s next word only; '
        "<b>Ctrl+Enter</b> refreshes)</span>."
    )
    shown_state = gr.State(None)  # the Suggestions behind the buttons on screen
    follow_up = gr.State(None)  # the number of suggestions at a caret, which their fit and the heatmap follow
    heatmap_state = gr.State(None)  # what the page's heatmap shows (ui/heatmap.py's Shown)
    conversation_state = gr.State([])  # chat mode: the turns so far, as {"role", "content"}
    history_state = gr.State(History.start(DEFAULT_TEXT, cli.default_model_name()))
    history_json = gr.Textbox(visible=False)  # carries an export to the browser's download
    # The tree also lives in this browser's localStorage, so a reload picks up where it left off:
    # each update sends it what changed (history.changes), and SAVE_HISTORY_JS keeps the copy.
    history_sync = gr.Textbox(visible="hidden", elem_id="history-sync")
    settings_sync = gr.Textbox(visible="hidden", elem_id="settings-sync")  # carries the kept settings to restore
    with gr.Row(elem_id="main-row"):  # on a phone: the text, its suggestions and the plot first (page.css)
        with gr.Column(scale=3, elem_id="writer-column"):
            chat_mode = gr.Radio(list(CHAT_MODES), value="plain text", label="Write", elem_id="chat-mode")
            with gr.Group(visible=False) as chat_panel:
                system_prompt = gr.Textbox(label="System prompt", lines=1, elem_id="system-prompt")
                conversation_view = gr.Chatbot(label="The conversation so far", elem_id="conversation", height=220)
                with gr.Row(equal_height=True):
                    user_message = gr.Textbox(label="The user's message", elem_id="user-message", scale=4)
                    send_user_button = gr.Button("Send as the user", elem_id="send-user", size="sm", scale=1,
                                                 min_width=120)
                    send_reply_button = gr.Button("Send the reply", elem_id="send-reply", size="sm", scale=1,
                                                  min_width=120)
            text_box = gr.Textbox(label="Your text", lines=8, max_lines=30, elem_id="text", value=DEFAULT_TEXT)
            # Where in the text the suggestions are for (keyboard.js keeps it; "" at the end), and where they go.
            caret_sync = gr.Textbox(visible="hidden", elem_id="caret-sync")
            # The history node whose text the session last put in the box ("" once the writer edits: keyboard.js),
            # so that an event sent before the answer to the one ahead of it acts on the newest text (Draft.newest).
            text_base = gr.Textbox("0", visible="hidden", elem_id="text-base")
            # Each answer's number: the page marks the suggestions stale on an edit until the next one arrives.
            answer_sync = gr.Textbox(visible="hidden", elem_id="answer-sync")
            marker = gr.HTML(elem_id="caret-marker-view")
            with gr.Row(equal_height=True, elem_id="branches"):
                branch_buttons = [
                    gr.Button(visible=False, elem_id=f"branch-{i}", elem_classes="branch-btn", size="sm",
                              min_width=100)
                    for i in range(MAX_BUTTONS)
                ]
            status = gr.Markdown(elem_id="status")
            # On while the suggestions shown are partial, or the model is still being prepared.
            read_timer = gr.Timer(READ_POLL_SECONDS, active=False)
            with gr.Column(elem_id="writer-tools"):
                with gr.Row():
                    refresh_button = gr.Button("Refresh", elem_id="refresh", size="sm")
                    text_edited = gr.Button(elem_id="text-edited")  # hidden: pressed by KEYBOARD_JS on every edit
                    caret_moved = gr.Button(elem_id="caret-moved")  # hidden: pressed by KEYBOARD_JS as the caret moves
                    take_word = gr.Button(elem_id="take-word")  # hidden: pressed by KEYBOARD_JS on Alt+W
                    history_resync = gr.Button(elem_id="history-resync")  # hidden: pressed by SAVE_HISTORY_JS
                    undo_button = gr.Button("Undo", elem_id="undo", size="sm")
                    redo_button = gr.Button("Redo", elem_id="redo", size="sm")
                    clear_button = gr.Button("Clear", elem_id="clear", size="sm")
                with gr.Row(equal_height=True):
                    extra_box = gr.Textbox(show_label=False, placeholder="Text to insert at the caret as is…",
                                           elem_id="extra", scale=4)
                    append_button = gr.Button("Append", elem_id="append", size="sm", scale=1, min_width=90)
                with gr.Row():
                    n_tokens = gr.Number(64, minimum=1, maximum=256, step=1, precision=0, label="Tokens to continue")
                    lossless = gr.Checkbox(True, label="Lookahead decoding (same text, fewer passes)")
                    stops = gr.Textbox(label="Stop at (one per line; \\n is a newline)", lines=1, max_lines=4,
                                       elem_id="stops", placeholder="e.g. .")
                    continue_button = gr.Button("Continue", elem_id="continue", variant="primary", scale=0,
                                                min_width=140)
                continuation = gr.HighlightedText(
                    label="Last continuation: where each token came from", color_map=SOURCE_COLORS,
                    combine_adjacent=False, show_legend=True, elem_id="continuation", visible=False,
                )
                continuation_status = gr.Markdown(elem_id="continuation-status")
                with gr.Accordion("History (click a line to go back there)", open=True, elem_id="history-panel"):
                    tree = gr.HTML(elem_id="history-tree", js_on_load=SELECT_NODE_JS)
                    with gr.Row():
                        export_button = gr.Button("Export JSON", elem_id="export", size="sm", scale=0, min_width=120)
                        importer = gr.HTML(IMPORT_HTML, elem_id="import", js_on_load=IMPORT_JS)
                with gr.Accordion("Your text through the model's eyes", open=True, elem_id="heatmap-panel"):
                    with gr.Row(equal_height=True):
                        heatmap_on = gr.Checkbox(False, label="Colour my text by the model's probabilities",
                                                 elem_id="heatmap-on")
                        heatmap_mode = gr.Radio(list(MODES), value="probability", label="Colour by",
                                                elem_id="heatmap-mode")
                        threshold = gr.Slider(
                            2, 1000, value=10, step=1, elem_id="threshold",
                            label="Disagreement: the model's choice at least this many times likelier")
                    heatmap = gr.HTML("", html_template=HEATMAP_TEMPLATE, elem_id="heatmap", js_on_load=HEATMAP_JS)
                    heatmap_resync = gr.Button(elem_id="heatmap-resync")  # hidden: pressed by HEATMAP_JS
        with gr.Column(scale=2, elem_id="side-column"):
            with gr.Column(elem_id="plot-column"):
                gr.Markdown("**Next token**")
                plot = gr.HTML(elem_id="plot", js_on_load=CLICK_TOKEN_JS)
            with gr.Accordion("Why? (“why?” beside a token, on a branch, or in the heatmap)", open=True,
                              elem_id="why-panel"):
                with gr.Row():
                    why_method = gr.Radio(list(cli.ATTRIBUTION_METHODS), value="input_x_gradient", label="Method",
                                          elem_id="why-method", scale=4)
                    why_stop = gr.Button("Stop", elem_id="why-stop", size="sm", scale=0, min_width=70)
                why = gr.HTML(elem_id="why-view")
                why_state = gr.State(None)  # the token explained and its context, for a switch of method
                why_branch = gr.Button(elem_id="why-branch")  # hidden: pressed by BRANCH_WHY_JS's chip
                why_branch_index = gr.Number(visible=False)  # the branch asked about, read by WHY_BRANCH_JS
            model_choice = gr.Dropdown(cli.available_models(), value=cli.default_model_name(), label="Model",
                                       elem_id="model")
            with gr.Accordion("Sampling", open=True, elem_id="sampling-panel"):
                preset = gr.Radio(PRESET_NAMES, value="greedy", label="Preset", elem_id="preset")
                temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature", elem_id="temperature")
                top_k = gr.Slider(0, cli.MAX_TOP_K, value=0, step=1, label="Top-k (0 = off)", elem_id="top-k")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.01, label="Top-p (1 = off)", elem_id="top-p")
                repetition_penalty = gr.Slider(
                    1.0, 2.0, value=1.0, step=0.05, label="Repetition penalty (1 = off)", elem_id="repetition-penalty"
                )
                with gr.Row():
                    presence_penalty = gr.Slider(-2.0, 2.0, value=0.0, step=0.1, label="Presence penalty (0 = off)",
                                                 elem_id="presence-penalty")
                    frequency_penalty = gr.Slider(-2.0, 2.0, value=0.0, step=0.1, label="Frequency penalty (0 = off)",
                                                  elem_id="frequency-penalty")
                branch_mode = gr.Radio(
                    ["greedy", "sample"], value="greedy", label="Branches continue by", elem_id="branch-mode"
                )
                seed = gr.Number(0, minimum=0, precision=0, label="Seed (for sampled branches)", elem_id="seed")
                with gr.Row():
                    n_branches = gr.Slider(1, MAX_BUTTONS, value=5, step=1, label="Branches")
                    depth = gr.Slider(1, 8, value=3, step=1, label="Depth (tokens per branch)")
                by_fit = gr.Checkbox(False, label="At a caret, order branches by how well they lead into the text "
                                     "after it (fit)", elem_id="by-fit")
            with gr.Accordion("Constrain", open=False, elem_id="constrain-panel"):
                constraint_preset = gr.Dropdown(list(CONSTRAINT_PRESETS), value=None, label="Preset",
                                                elem_id="constraint-preset")
                constraint_type = gr.Radio(list(CONSTRAINT_TYPES), value="choice", label="Type",
                                           elem_id="constraint-type")
                constraint_value = gr.Textbox(label=VALUE_LABELS["choice"], lines=3, max_lines=12,
                                              elem_id="constraint-value")
                with gr.Row():
                    constrain_button = gr.Button("Constrain from here", elem_id="constrain", size="sm")
                    unconstrain_button = gr.Button("Off", elem_id="unconstrain", size="sm")
                constraint_status = gr.Markdown(describe(None, ""), elem_id="constraint-status")
                caret = gr.Number(visible=False)  # the text box's caret, read by CARET_JS
    constraint_state = gr.State(None)  # the constraint in force, as the API takes it (ui/constrain.py)

    # The controls that handlers take as one value each (ui/controls.py).
    draft = Controls(Draft, text=text_box, caret=caret_sync, base=text_base)
    shape_controls = Controls(BranchShape, n_branches=n_branches, depth=depth, by_fit=by_fit)
    sampling_controls = Controls(
        SamplingSettings, temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty,
        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty, branch_mode=branch_mode, seed=seed,
    )
    context_controls = Controls(Context, chat_mode=chat_mode, system_prompt=system_prompt,
                                conversation=conversation_state, model_name=model_choice)
    constraint_controls = Controls(Constraints, constraint=constraint_state, stops=stops)
    heatmap_controls = Controls(HeatmapView, on=heatmap_on, colour_by=heatmap_mode, threshold=threshold,
                                shown=heatmap_state)

    # What a session's events write for its later events to read: the history, the suggestions and the
    # heatmap on screen, the question "why?" answered.
    SESSION_STATE = {history_state, shown_state, heatmap_state, why_state}
    WHY_VIEW = {why, why_state}
    order = SessionOrder()

    def handler(fn: Callable, inputs: dict[str, gr.components.Component | Controls], outputs: set,
                while_continuing: Callable[[], object] = still_continuing, **options) -> dict:
        """An event listener's arguments (`button.click(**handler(...))`) for `fn`, which takes `inputs` by name
        (ui/controls.py) and answers {component: value} for `outputs`; failures reach the visitor as messages.

        One rule decides which events take turns: an event that reads or writes the session's state
        (SESSION_STATE) waits until the events its session started before it have finished (ui/ordering.py),
        so two never work on one history at once (an import and an update still running), while other
        visitors' events run meanwhile. An event between controls alone (a preset, a label, the Constrain
        panel's fields) touches none of it and runs at once. An explanation writes the "why?" view alone
        (WHY_VIEW): it takes no turn either, so typing overtakes it, and it runs in the "explain" group, so
        it never holds up anybody's suggestions (its model work yields to theirs: lookahead/scheduler.py); a
        newer question of the same session cancels it. Continuations pass concurrency_id="generate" and hold
        their session's turn while they write: meanwhile the session's other events answer at once
        (`while_continuing`: a refusal that says so, or a refresh skipped), since waiting would hold their
        "interact" slot, and so everybody's suggestions, for as long as the Continue runs.
        """
        completing = fn is complete_at_caret
        fn, components = by_name(fn, inputs)
        fn = handled(fn)
        if outputs <= WHY_VIEW:
            options = {"concurrency_id": "explain", "concurrency_limit": EXPLANATIONS_AT_ONCE, **options}
        else:  # what is being refreshed shows on the status line alone: the writer's text is never covered
            options = {"show_progress": "minimal", "show_progress_on": [status], **options}
            if SESSION_STATE & {*components, *outputs}:
                fn = order.wrap(fn, long=options.get("concurrency_id") == "generate", while_long=while_continuing,
                                arriving=None if completing else cancel_fit, inputs=components)
        return {"fn": fn, "inputs": components, "outputs": outputs, "api_visibility": "private",
                "concurrency_id": "interact", **options}

    settings = dict(shape=shape_controls, sampling=sampling_controls, view=heatmap_controls, context=context_controls,
                    constraints=constraint_controls)
    suggestion_outputs = {shown_state, *branch_buttons, plot, status, marker, heatmap, heatmap_state, history_state,
                          tree, history_sync, read_timer, text_base, answer_sync, follow_up}
    # A refresh asked while the session's Continue writes is skipped: the Continue refreshes when it ends.
    # always_last: while one update runs, only the newest of those asked meanwhile runs next (with its own text: two
    # quick undos refresh for the text of the second, which "once", gradio's default, would have dropped).
    suggestion = handler(suggest, dict(draft=draft, history=history_state, **settings),
                         suggestion_outputs, while_continuing=gr.skip, trigger_mode="always_last")
    at_node_outputs = {text_box, caret_sync, text_base, conversation_state, conversation_view, history_state}
    edit_outputs = {text_box, caret_sync, text_base, history_state}
    why_outputs = WHY_VIEW

    # New suggestions at a caret: their fit (where it came without) and the heatmap follow, in a group of their own,
    # so the slot held while the fit yields to everyone's clicks is nobody's suggestions' slot. Suggestions at the
    # end of the text bring everything themselves: no event follows them (a round trip per click saved).
    follow_up.change(**handler(complete_at_caret, dict(text=text_box, shown=shown_state, shape=shape_controls,
                                                         sampling=sampling_controls, view=heatmap_controls,
                                                         context=context_controls, constraints=constraint_controls),
                                 {shown_state, *branch_buttons, heatmap, heatmap_state}, while_continuing=gr.skip,
                                 concurrency_id="fit", concurrency_limit=EXPLANATIONS_AT_ONCE, show_progress="hidden"))
    text_edited.click(**suggestion)
    caret_moved.click(**handler(suggest_at_moved_caret, dict(draft=draft, history=history_state, **settings),
                                suggestion_outputs, while_continuing=gr.skip, trigger_mode="always_last"))
    # an insertion moved the caret past it: the text box shows it there
    caret_sync.change(None, caret_sync, None, js=PLACE_CARET_JS)
    answer_sync.change(None, answer_sync, None, js=ANSWER_JS)  # the suggestions are fresh again
    gr.on([refresh_button.click, n_branches.release, depth.release, seed.submit, by_fit.input], **suggestion)
    # While a long text is read: the progress, then the exact suggestions, without greying the page every second.
    read_timer.tick(**{**suggestion, "show_progress": "hidden"})
    demo.load(js=READ_STORED_JS, **handler(restore, dict(stored=history_sync, settings=settings_sync,
                                                         history=history_state),
                                           {*at_node_outputs, heatmap_on, chat_mode, chat_panel})).then(**suggestion)
    gr.on([heatmap_on.change, chat_mode.change], None, [heatmap_on, chat_mode], None, js=KEEP_SETTINGS_JS)
    history_sync.change(None, history_sync, None, js=SAVE_HISTORY_JS)
    demo.load(None, None, None, js=FOLD_ON_PHONE_JS)
    history_resync.click(**handler(resend_history, dict(history=history_state), {history_sync}))
    preset.input(**handler(apply_preset, dict(name=preset), set(sampling_controls) - {seed})).then(**suggestion)
    gr.on(
        [temperature.release, top_k.release, top_p.release, repetition_penalty.release, presence_penalty.release,
         frequency_penalty.release, branch_mode.input],
        **handler(matching_preset, dict(sampling=sampling_controls), {preset}),
    ).then(**suggestion)
    taking_outputs = {text_box, caret_sync, conversation_state, conversation_view, *suggestion_outputs}
    # Every click counts, one on a button whose last click is still running included (gradio's "once" would drop
    # it): each waits its session's turn and applies to the text the one before it left.
    for i, button in enumerate(branch_buttons):
        button.click(**handler(
            take_branch_and_suggest,
            dict(index=gr.State(i), draft=draft, shown=shown_state, history=history_state, **settings),
            taking_outputs, trigger_mode="multiple",
        ))
    take_word.click(**handler(take_word_and_suggest,
                              dict(draft=draft, shown=shown_state, history=history_state, **settings),
                              taking_outputs, trigger_mode="multiple"))
    heatmap_inputs = dict(text=text_box, view=heatmap_controls, context=context_controls)
    gr.on([heatmap_on.input, heatmap_mode.input, threshold.release],
          **handler(show_heatmap, heatmap_inputs, {heatmap, heatmap_state}))
    heatmap_resync.click(**handler(resend_heatmap, heatmap_inputs, {heatmap, heatmap_state}))
    heatmap.select(**handler(rewind, dict(heatmap_shown=heatmap_state, history=history_state),
                             edit_outputs)).success(**suggestion)
    plot.click(**handler(force_token, dict(draft=draft, shown=shown_state, history=history_state,
                                           shape=shape_controls, sampling=sampling_controls, context=context_controls,
                                           constraints=constraint_controls),
                         edit_outputs, trigger_mode="multiple")).success(**suggestion)
    plot.select(**handler(explain_token, dict(shown=shown_state, method=why_method, context=context_controls),
                          why_outputs))
    why_branch.click(js=WHY_BRANCH_JS, **handler(
        explain_branch,
        dict(index=why_branch_index, shown=shown_state, method=why_method, context=context_controls),
        why_outputs,
    ))
    heatmap.click(**handler(explain_heatmap_token, dict(heatmap_shown=heatmap_state, method=why_method,
                                                        context=context_controls), why_outputs))
    why_method.input(**handler(explain, dict(question=why_state, method=why_method), why_outputs))
    why_stop.click(handled(stop_explaining), None, None, queue=False, api_visibility="private")
    demo.unload(leave)
    gr.on([append_button.click, extra_box.submit],
          **handler(append_text, dict(draft=draft, extra=extra_box, shown=shown_state, history=history_state),
                    {*edit_outputs, extra_box})).success(**suggestion)
    undo_button.click(**handler(move, dict(history=history_state, step=gr.State("undo")),
                                at_node_outputs)).success(**suggestion)
    redo_button.click(**handler(move, dict(history=history_state, step=gr.State("redo")),
                                at_node_outputs)).success(**suggestion)
    tree.select(**handler(select_node, dict(history=history_state), at_node_outputs)).success(**suggestion)
    clear_button.click(**handler(clear, dict(history=history_state), edit_outputs)).then(**suggestion)
    export_button.click(**handler(export_history, dict(history=history_state), {history_json})).then(
        None, history_json, None, js=DOWNLOAD_JS
    )
    importer.upload(**handler(import_history, dict(history=history_state), at_node_outputs)).success(**suggestion)
    chat_inputs = dict(text=text_box, conversation=conversation_state, history=history_state)
    chat_mode.input(**handler(switch_mode, dict(mode=chat_mode, **chat_inputs),
                              {chat_panel, *at_node_outputs})).then(**suggestion)
    gr.on([send_user_button.click, user_message.submit],
          **handler(send_user_message, dict(message=user_message, **chat_inputs),
                    {user_message, *at_node_outputs})).success(**suggestion)
    send_reply_button.click(**handler(send_reply, chat_inputs, at_node_outputs)).success(**suggestion)
    gr.on([system_prompt.blur, model_choice.input], **suggestion)
    continue_button.click(**handler(
        continue_text,
        dict(draft=draft, n_tokens=n_tokens, lossless=lossless, history=history_state, context=context_controls,
             constraints=constraint_controls),
        {text_box, caret_sync, text_base, continuation, continuation_status, history_state}, concurrency_id="generate",
        show_progress_on=[continuation_status],
    )).success(**suggestion)

    constraint_preset.input(**handler(fill_constraint, dict(name=constraint_preset),
                                      {constraint_type, constraint_value}))
    constraint_type.change(**handler(relabel_constraint_value, dict(kind=constraint_type), {constraint_value}))
    constrain_button.click(js=CARET_JS, **handler(
        constrain, dict(kind=constraint_type, value=constraint_value, chat_mode=chat_mode, caret=caret, text=text_box),
        {constraint_state, constraint_status},
    )).success(**suggestion)
    unconstrain_button.click(**handler(unconstrain, {}, {constraint_state, constraint_status})).then(**suggestion)
    stops.blur(**suggestion)

    for api, group in [(api_lookahead, "interact"), (api_generate, "generate"),
                       (api_next_token_distribution, "interact"), (api_token_probabilities, "interact"),
                       (api_attribution, "explain")]:
        endpoint = handled(api)
        endpoint.__name__ = api.__name__.removeprefix("api_")  # the MCP tool's name: the endpoint's
        limit = {"concurrency_limit": EXPLANATIONS_AT_ONCE} if group == "explain" else {}
        gr.api(endpoint, api_name=endpoint.__name__, concurrency_id=group, **limit)


def concurrency() -> int:
    """Events of each group running at once (LOOKAHEAD_CONCURRENCY overrides).

    On ZeroGPU each runs in its own GPU worker, scheduled by ZeroGPU; a vLLM server batches what
    arrives together, so many; on one CPU more would only share its cores.
    """
    default = 8 if cli.on_zero_gpu() else 64 if cli.backend().capabilities.batching else 1
    return int(os.environ.get("LOOKAHEAD_CONCURRENCY") or default)


def launch(**kwargs):
    """Start the app with its keyboard shortcuts and styles (Gradio 6 takes them at launch). The page answers at
    once; in-process, the model is prepared in the background meanwhile (PREPARATION), and what a first answer to
    a long text may read is timed while the machine is still idle."""
    PREPARATION.start(cli.backend().warm_up())
    queued = demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=concurrency())
    return queued.launch(head=KEYBOARD_JS + BRANCH_WHY_JS, css=CSS, **kwargs)


if __name__ == "__main__":
    try:
        cli.use_backend(ARGUMENTS.backend, ARGUMENTS.server_url)
    except ValueError as error:
        PARSER.error(str(error))
    launch(mcp_server=ARGUMENTS.mcp or None)  # None: gradio reads GRADIO_MCP_SERVER
