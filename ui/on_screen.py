"""The suggestions on screen: what a click, a "why?" or the history reads of the answer the writer sees, and of
the text it was made for. Several panels read it; the suggestions panel shows it."""

from __future__ import annotations

from typing import NamedTuple

from lookahead.outputs import Suggestions
from ui.controls import Settings
from ui.errors import refuse
from ui.insertion import Place


class OnScreen(NamedTuple):
    """The suggestions on screen: the text they were made for, the engine's answer, and where in the text (the
    caret)."""

    text: str
    result: Suggestions
    caret: int | None  # a character offset into `text`; None: its end
    # Each answer's own number: gradio signals a change of state only when its value differs, and what follows new
    # suggestions at a caret (complete_at_caret, through `follow_up`) must follow every answer, one equal to the last
    # included; the page's stale mark clears by it too (answer_mark).
    serial: int = 0
    settings: Settings | None = None  # what they were asked with (a second model's panel asks no more for the same)

    @property
    def place(self) -> Place:
        return Place(self.text, self.caret)


def node_settings(shown: OnScreen | None) -> dict:
    """The settings the suggestions on screen were made with, to record in the history: the model, where it ran
    (the answer's device), the sampling, the constraint in force, and where, at a caret."""
    if not shown:
        return {}
    result = shown.result
    constraint = shown.settings.constraints.for_text(shown.place.before) if shown.settings else None
    return {**result.sampling.as_dict(), "branch_mode": result.branch_mode, "seed": result.seed,
            "model": result.model, "backend": result.device, "n_branches": len(result.branches),
            "depth": len(result.branches[0].token_ids) - len(forced_ids(result)),
            **({"constraint": constraint} if constraint is not None else {}),
            **({"caret": shown.caret} if shown.caret is not None else {})}


def forced_ids(result: Suggestions) -> list[int]:
    """The tokens before the branches' first choice, which lead every branch: those a constraint wrote by itself,
    then those the model all but certainly writes."""
    return [token for part in (result.forced, result.lead) if part for token in part.token_ids]


def forced_text(result: Suggestions) -> str | None:
    """What a constraint writes by itself after the text, if anything beyond healing's whitespace (already there)."""
    return result.forced.text if result.forced and result.forced.text else None


def before_choice(text: str, result: Suggestions) -> str:
    """The text as the suggestions on screen read it up to the choice they show: with healing, its trailing
    whitespace is the next token's own, so it ends before it; after what a constraint writes by itself and what
    the model all but certainly writes, it is the text and those."""
    if result.forced or result.lead:
        return text + "".join(part.text for part in (result.forced, result.lead) if part)
    return text[: len(text) - len(result.healed_whitespace)]


def on_screen(shown: OnScreen | None) -> OnScreen:
    """The suggestions the writer sees, whichever text they were made for (a "why?" asks about what is shown)."""
    if not shown:
        raise refuse("No suggestions are shown yet: write something first.")
    return shown
