"""The Constrain panel and the stop strings: from what the writer typed in the controls to API arguments.

A constraint is kept in the page's state as the API takes it ({"type", "value", "start"}): set by
"Constrain from here" (at the caret; in chat mode, from the reply's start), cleared by "Off".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from lookahead.constraints import ConstraintMismatch, check_constraint
from ui.errors import refuse

TYPES = ("choice", "regex", "json_schema", "grammar")
# A preset that begins a value accepts the one space that separates it from the word before ("was 1888", not
# "was1888"): the model then writes the space itself where the text needs one.
PRESETS: dict[str, tuple[str, str]] = {
    "yes / no / maybe": ("choice", "yes\nno\nmaybe"),
    "a date (YYYY-MM-DD)": ("regex", r" ?[0-9]{4}-[0-9]{2}-[0-9]{2}"),
    "a phone number": ("regex", r" ?\([0-9]{3}\) [0-9]{3}-[0-9]{4}"),
    "a small JSON object": ("json_schema", json.dumps({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }, indent=1)),
    "a sentence (Lark grammar)": ("grammar", 'start: " "? "The answer is " ANSWER "."\nANSWER: "yes" | "no"'),
}
VALUE_LABELS = {
    "choice": "Options, one per line (exactly as they are to be written)",
    "regex": "Regular expression (the whole constrained part matches it)",
    "json_schema": "JSON schema",
    "grammar": "Lark grammar (llguidance's dialect; the rule `start` is the whole part)",
}


def preset_fields(name: str | None) -> tuple[str, str]:
    """The type and value a preset fills in."""
    if name not in PRESETS:
        raise refuse(f"Unknown preset {name!r}.")
    return PRESETS[name]


def constraint_from(kind: str, value: str, chat_mode: str, caret: float | None, text: str) -> dict:
    """The constraint "Constrain from here" sets: from the caret (a code-point offset), or the reply's start in chat."""
    if not (value or "").strip():
        raise refuse("Write the constraint's value first (or pick a preset).")
    start = 0 if chat_mode == "chat" else min(max(0, int(caret or 0)), len(text))
    options = [line for line in value.split("\n") if line] if kind == "choice" else value
    constraint = {"type": kind, "value": options, "start": start}
    try:  # one that does not compile is not set: the one in force (if any) stays, and the panel says so
        check_constraint(constraint, text)
    except ValueError as error:
        raise refuse(f"Not constrained: {error}.") from None
    return constraint


def kept_constraint(kept: str | None, text: str) -> dict | None:
    """The constraint a browser kept as JSON, if it is one that holds for `text`; None otherwise."""
    try:
        constraint = json.loads(kept) if kept else None
        if not isinstance(constraint, dict) or not isinstance(constraint.get("start"), int):
            return None
        check_constraint(in_force(constraint, text), text)
    except ValueError:
        return None
    return constraint


def in_force(constraint: dict | None, text: str) -> dict | None:
    """The constraint for `text`: one that began past its end (after an undo) applies from the end."""
    if constraint is None:
        return None
    return {**constraint, "start": min(constraint["start"], len(text))}


Answer = TypeVar("Answer")


def applying(ask: Callable[[dict | None], Answer], constraint: dict | None) -> tuple[Answer, str | None]:
    """`ask(constraint)`; where the text written after the constraint's start no longer fits it, `ask(None)` and a
    line saying that the constraint does not apply and how to release it: the writer's text is never refused."""
    try:
        return ask(constraint), None
    except ConstraintMismatch as error:
        return ask(None), f"not constrained here: {error} (or release it: Constrain → Off)"


def describe(constraint: dict | None, text: str) -> str:
    """One line for the panel: what is constrained, from where."""
    if constraint is None:
        return "No constraint: every token is allowed."
    start = min(constraint["start"], len(text))
    before = text[max(0, start - 20) : start].replace("\n", "↵")
    return (f"**{constraint['type']}** from character {start} (after “…{before}”): tokens it refuses are marked ✗ "
            "in the plot, and branches and Continue keep to it.")


def stop_strings(lines: str | None) -> list[str] | None:
    """Stop strings from the box: one per line, `\\n` and `\\t` standing for a newline and a tab."""
    stops = [line.replace("\\n", "\n").replace("\\t", "\t") for line in (lines or "").split("\n") if line]
    return stops or None
