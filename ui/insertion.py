"""Where a suggestion goes into the writer's text, and how it joins the words around it."""

from __future__ import annotations

from typing import NamedTuple


class Place(NamedTuple):
    """A text and a caret in it: where suggestions are made for, and where an insertion goes."""

    text: str
    caret: int | None  # a character offset into `text`; None: its end

    @property
    def before(self) -> str:
        """The text before the caret: what suggestions continue."""
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


def continued(place: Place, chat: bool) -> Place:
    """Where the model continues `place`: at its caret, or at the end where nothing before the caret is there to
    continue (a caret at 0 outside chat mode, which the API refuses)."""
    return Place(place.text, None) if place.caret == 0 and not chat else place


def caret_out(caret: int | None) -> str:
    """A caret for the page's copy (place_caret.js puts the text box's caret there)."""
    return "" if caret is None else str(caret)


def inserted(place: Place, piece: str, before: str | None = None) -> tuple[str, int | None]:
    """The text with `piece` inserted at the caret (after `before`, the text up to the choice the suggestions show,
    if that differs), joined as `joined` says, and the caret after the insertion (None: still the end)."""
    start = place.before if before is None else before
    piece, space = joined(start, piece, place.after)
    caret = None if place.caret is None else len(start + piece)
    return start + piece + space + place.after, caret


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
