"""The writer's text through the model's eyes: each token coloured by its probability (or its rank,
as GLTR does), its alternatives on hover or focus, and where the model disagreed most.

Plain data to HTML, like ui/render.py. Each token carries what its details line needs (probability,
rank, entropy, alternatives) as compact JSON in data attributes, its colour as a bucket class. The
whole view (~100 kB for 400 tokens) is sent once; after that each update sends only the tokens from
the first that changed (a click: the branch's few), as `heatmap_message` says (the message's fields:
docs/architecture.md, "Page state messages"), and HEATMAP_JS (ui/static/heatmap.js) applies it. It also
shows the details, turns a click on an alternative into a select event (a rewind) with the token's index
and the alternative's id, and a click on "why?" into a click event (explain).
"""

from __future__ import annotations

import html
import json
import math
from typing import NamedTuple

from ui.render import percent, times, visible
from ui.scripts import static

HEATMAP_TOKENS = 400  # the last this many tokens are shown: the update stays the same size however long the text
DISAGREEMENTS = 8  # rows in "where the model disagreed"
# (lower bound, colour, label): probability buckets on a log scale, and GLTR's rank buckets.
PROBABILITY_BUCKETS = [(0.5, "#86efac", "≥ 50%"), (0.1, "#d9f99d", "10–50%"), (0.01, "#fde68a", "1–10%"),
                       (0.001, "#fdba74", "0.1–1%"), (0.0, "#fca5a5", "< 0.1%")]
RANK_BUCKETS = [(1, "#86efac", "top 1"), (10, "#fde68a", "top 10"), (100, "#fdba74", "top 100"),
                (math.inf, "#fca5a5", "beyond")]
UNSCORED_COLOR = "transparent"
MODES = ("probability", "rank")

TOKEN_STYLE = "border-radius:3px;cursor:pointer;padding:1px 0;color:#111"  # every token's, in the <style> block
TEXT_STYLE = "white-space:pre-wrap;font:14px/1.9 ui-monospace,monospace;max-height:360px;overflow:auto"
DETAILS_STYLE = ("min-height:3.4em;font:13px ui-monospace,monospace;padding:6px 8px;margin-bottom:6px;"
                 "border:1px solid var(--border-color-primary);border-radius:6px")
ALT_STYLE = ("font:12px ui-monospace,monospace;margin:2px 4px 0 0;padding:1px 6px;border-radius:4px;"
             "border:1px solid var(--border-color-primary);background:var(--background-fill-secondary);cursor:pointer")

# The component's template never changes, so gradio never redraws it: HEATMAP_JS builds the view from
# messages (the whole view, or the tokens after the first that changed), each naming the one it follows.
MESSAGE_VERSION = 1  # of heatmap_message's messages; HEATMAP_JS asks for the whole view on another
HEATMAP_TEMPLATE = '<div class="heatmap-view"></div>'
HEATMAP_JS = static("heatmap.js")


def bucket(token: dict, mode: str) -> int | None:
    """The index of a token's bucket under `mode` (None: nothing before it to score it by)."""
    if token["prob"] is None:
        return None
    if mode == "rank":
        return next(i for i, (bound, _, _) in enumerate(RANK_BUCKETS) if token["rank"] <= bound)
    return next(i for i, (bound, _, _) in enumerate(PROBABILITY_BUCKETS) if token["prob"] >= bound)


def shown_text(token_text: str) -> str:
    """A token as shown: whitespace-only tokens made visible (a newline also breaks the line)."""
    if token_text.strip():
        return token_text
    return visible(token_text) + ("\n" if "\n" in token_text else "")


class Shown(NamedTuple):
    """What the page's heatmap shows: the text, its token_probabilities result, the colouring, and the id of
    the message that brought it (each message names the one it follows)."""

    text: str
    result: dict
    mode: str
    id: int


def heatmap_message(text: str, result: dict, mode: str, threshold: float, before: Shown | None) -> tuple[str, Shown]:
    """The message that brings the page from `before` to this view (JSON for HEATMAP_JS), and what it then shows.

    The whole view when there is nothing to build on (or the colouring changed); else only the tokens from
    the first that changed, which after a click are the branch's few: the update stays small however long
    the text.
    """
    tokens = result["tokens"]
    first = max(0, len(tokens) - HEATMAP_TOKENS)
    shown = Shown(text, result, mode, before.id + 1 if before else 0)
    if before is None or before.mode != mode:
        return _message({"id": shown.id, "frame": heatmap_view(text, result, mode, threshold)}), shown
    old = before.result["tokens"]
    keep = next((i for i, (a, b) in enumerate(zip(old, tokens)) if a != b), min(len(old), len(tokens)))
    return _message({
        "id": shown.id, "base": before.id, "keep": keep, "first": first, "earlier": earlier_view(first),
        "spans": "".join(token_span(text, tokens[i], i, mode) for i in range(max(keep, first), len(tokens))),
        "disagreements": disagreements_view(tokens, threshold),
    }), shown


def heatmap_view(text: str, result: dict, mode: str, threshold: float) -> str:
    """The coloured text (its last HEATMAP_TOKENS tokens), a legend, the details line, and the disagreements."""
    tokens = result["tokens"]
    first = max(0, len(tokens) - HEATMAP_TOKENS)
    spans = "".join(token_span(text, tokens[i], i, mode) for i in range(first, len(tokens)))
    buckets = RANK_BUCKETS if mode == "rank" else PROBABILITY_BUCKETS
    legend = " ".join(
        f'<span style="background:{c};color:#111;border-radius:3px;padding:0 6px">{label}</span>'
        for _, c, label in buckets
    )
    colours = " ".join(f"#heatmap .b{i} {{ background: {c} }}" for i, (_, c, _) in enumerate(buckets))
    return (
        f"<style>#heatmap .tk {{ {TOKEN_STYLE} }} #heatmap .bu {{ background: {UNSCORED_COLOR} }} {colours}"
        f" #heatmap .alt {{ {ALT_STYLE} }} #heatmap .tk[data-selected] {{ outline: 2px solid var(--color-accent) }}"
        f" #heatmap .tk:focus {{ outline: 2px solid var(--color-accent) }}</style>"
        f'<div style="font-size:12px;margin-bottom:6px">Colour by {mode}: {legend}</div>'
        f'<div id="token-details" style="{DETAILS_STYLE}">Hover over a token (or focus it) to see what the model '
        "expected there; click an alternative to rewind to it, or “why the first?” to see what led the model to "
        "it.</div>"
        f'<div id="heatmap-text" style="{TEXT_STYLE}">{earlier_view(first)}{spans}</div>'
        + disagreements_view(tokens, threshold)
    )


def earlier_view(first: int) -> str:
    """The note that the text's first `first` tokens are not shown."""
    return (f'<span class="earlier" style="color:var(--body-text-color-subdued)">… {first} earlier tokens … </span>'
            if first else "")


def token_span(text: str, token: dict, i: int, mode: str) -> str:
    """Token `i` as shown: its piece of the text in its bucket's colour, with its details in data attributes."""
    piece = text[token["start"] : token["end"]]
    if not piece:
        return ""  # a later piece of a character split over several tokens: the first shows it
    index = bucket(token, mode)
    buckets = RANK_BUCKETS if mode == "rank" else PROBABILITY_BUCKETS
    details = [visible(token["token"])] if index is None else [
        visible(token["token"]), percent(token["prob"]), token["rank"], buckets[index][2], f"{token['entropy']:.2f}"
    ]
    return (
        f'<span class="tk b{"u" if index is None else index}" tabindex="0" data-i="{i}" '
        f"data-s='{attribute_json(details)}' data-a='{attribute_json(alternatives(token))}'>"
        f"{html.escape(shown_text(piece))}</span>"
    )


def _message(fields: dict) -> str:
    """A heatmap update message, as JSON, with the version HEATMAP_JS checks."""
    return json.dumps({"v": MESSAGE_VERSION, **fields}, ensure_ascii=False, separators=(",", ":"))


def alternatives(token: dict) -> list:
    return [[a["token_id"], visible(a["token"]), percent(a["prob"])] for a in token["alternatives"] or []]


def attribute_json(value: object) -> str:
    """`value` as JSON for a single-quoted HTML attribute (its double quotes need no escaping there)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return html.escape(text, quote=False).replace("'", "&#x27;")


def disagreements(tokens: list[dict], threshold: float) -> list[tuple[float, int]]:
    """(how many times likelier the model's first choice was, token index), largest first, above `threshold`."""
    gaps = [
        (t["alternatives"][0]["prob"] / t["prob"], i)
        for i, t in enumerate(tokens)
        if t["prob"] and t["rank"] > 1 and t["alternatives"][0]["prob"] >= threshold * t["prob"]
    ]
    return sorted(gaps, reverse=True)[:DISAGREEMENTS]


def disagreements_view(tokens: list[dict], threshold: float) -> str:
    rows = []
    for gap, i in disagreements(tokens, threshold):
        token, top = tokens[i], tokens[i]["alternatives"][0]
        rows.append(
            f'<div style="margin:2px 0">{html.escape(visible(token["token"]))} ({percent(token["prob"])}) — the model '
            f'preferred <button class="alt" data-index="{i}" data-token-id="{top["token_id"]}">'
            f'{html.escape(visible(top["token"]))} {percent(top["prob"])}</button> ({times(gap)} likelier)</div>'
        )
    heading = f"<b>Where the model disagreed</b> (its choice at least {threshold:g}× likelier than yours)"
    body = "".join(rows) or '<div style="color:var(--body-text-color-subdued)">Nowhere, at this threshold.</div>'
    return f'<div id="disagreements" style="margin-top:10px;font-size:13px">{heading}{body}</div>'
