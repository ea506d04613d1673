"""The writer's text through the model's eyes: each token coloured by its probability (or its rank,
as GLTR does), its alternatives on hover or focus, and where the model disagreed most. With a second model
chosen: coloured by where the two models part (the Jensen–Shannon divergence of their next-token
distributions) or by which of them expects the writer's token more, and the places they part most.

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
from dataclasses import dataclass
from typing import NamedTuple

from lookahead.outputs import ComparedToken, ComparedWord, ModelComparison, PartialScores, ScoredToken, TokenScores
from ui.render import percent, times, visible
from ui.scripts import static

HEATMAP_TOKENS = 400  # the last this many tokens are shown: the update stays the same size however long the text
DISAGREEMENTS = 8  # rows in "where the model disagreed"
# (lower bound, colour, label): probability buckets on a log scale, and GLTR's rank buckets.
PROBABILITY_BUCKETS = [(0.5, "#86efac", "≥ 50%"), (0.1, "#d9f99d", "10–50%"), (0.01, "#fde68a", "1–10%"),
                       (0.001, "#fdba74", "0.1–1%"), (0.0, "#fca5a5", "< 0.1%")]
RANK_BUCKETS = [(1, "#86efac", "top 1"), (10, "#fde68a", "top 10"), (100, "#fdba74", "top 100"),
                (math.inf, "#fca5a5", "beyond")]
# Where two models part: the divergence (bits) between their distributions before the token.
PARTING_BUCKETS = [(0.5, "#fca5a5", "≥ 0.5 bits"), (0.2, "#fdba74", "0.2–0.5"), (0.05, "#fde68a", "0.05–0.2"),
                   (0.01, "#d9f99d", "0.01–0.05"), (0.0, "#86efac", "< 0.01: agree")]
# Which model expects the writer's token more: log2 of the second model's probability over the first's.
PREFERENCE_BOUNDS = [(2.0, "#93c5fd", "{b} ≥ 4× likelier"), (0.5, "#dbeafe", "{b} 1.4–4×"),
                     (-0.5, "#f5f5f5", "about equal"), (-2.0, "#fed7aa", "{a} 1.4–4×"),
                     (-math.inf, "#fdba74", "{a} ≥ 4× likelier")]
UNSCORED_COLOR = "transparent"
# A token outside the top N a server returned: below all of them, how far unknown (striped in the lowest colour).
OUTSIDE_COLOR = "repeating-linear-gradient(135deg, #fca5a5 0 3px, transparent 3px 6px)"
PARTING, PREFERENCE = "where the models part", "which model expects it"
COMPARING = (PARTING, PREFERENCE)  # these need a second model (the "Compare with…" choice)
MODES = ("probability", "rank", *COMPARING)

TOKEN_STYLE = "border-radius:3px;cursor:pointer;padding:1px 0;color:#111"  # every token's, in the <style> block
ACCEPTED_CLASS = "am"  # a token the writer accepted from the model
ACCEPTED_STYLE = "text-decoration:underline 2px var(--color-accent);text-underline-offset:4px"
TEXT_STYLE = "white-space:pre-wrap;font:14px/1.9 ui-monospace,monospace;max-height:360px;overflow:auto"
DETAILS_STYLE = ("min-height:3.4em;font:13px ui-monospace,monospace;padding:6px 8px;margin-bottom:6px;"
                 "border:1px solid var(--border-color-primary);border-radius:6px")
PLACES_STYLE = "margin-top:10px;font-size:13px"
ALT_STYLE = ("font:12px ui-monospace,monospace;margin:2px 4px 0 0;padding:1px 6px;border-radius:4px;"
             "border:1px solid var(--border-color-primary);background:var(--background-fill-secondary);cursor:pointer")

# The component's template never changes, so gradio never redraws it: HEATMAP_JS builds the view from
# messages (the whole view, or the tokens after the first that changed), each naming the one it follows.
MESSAGE_VERSION = 1  # of heatmap_message's messages; HEATMAP_JS asks for the whole view on another
HEATMAP_TEMPLATE = '<div class="heatmap-view"></div>'
HEATMAP_JS = static("heatmap.js")


def buckets(mode: str, models: list[str] | None = None) -> list[tuple[float, str, str]]:
    """(lower bound, colour, label) of each of `mode`'s buckets; a comparison's labels name its two models."""
    if mode == PREFERENCE:
        a, b = (short_name(name) for name in models)
        return [(bound, colour, label.format(a=a, b=b)) for bound, colour, label in PREFERENCE_BOUNDS]
    return {"rank": RANK_BUCKETS, PARTING: PARTING_BUCKETS}.get(mode, PROBABILITY_BUCKETS)


def short_name(model_name: str) -> str:
    """A model's name as a legend says it: a Hub id or folder without the path before it."""
    return model_name.rstrip("/").rsplit("/", 1)[-1]


class SecondView(NamedTuple):
    """How the second model sees a token: its probability (of the token's word, per word), the divergence before it,
    log2 of its probability over the first model's, and its own first choices as [id, text, probability]."""

    prob: float | None
    js: float | None
    log2_ratio: float | None
    alternatives: list[list]


class Parting(NamedTuple):
    """A token or word of a comparison as the list of partings shows it."""

    text: str
    probs: list[float | None]
    log2_ratio: float | None
    js: float | None
    top: list[str] | None


@dataclass(frozen=True)
class Listing:
    """What the heatmap colours: the first model's listing of the text's tokens and, comparing two models, how the
    second sees each token (`compared`, one per token), by token or by word (`per`), and the places they part."""

    model: str
    tokens: list[ScoredToken]
    partial: PartialScores | None = None
    models: list[str] | None = None
    per: str | None = None
    compared: list[SecondView | None] | None = None
    places: list[Parting] | None = None
    accepted: frozenset[int] = frozenset()  # the tokens the writer accepted from the model (underlined)

    @classmethod
    def of(cls, scores: TokenScores) -> Listing:
        return cls(scores.model, scores.tokens, scores.partial)

    def second(self, i: int) -> SecondView | None:
        """How the second model sees token `i` (None: no comparison, or nothing known there)."""
        return None if self.compared is None else self.compared[i]


def bucket(token: ScoredToken, mode: str, compared: SecondView | None = None) -> int | None:
    """The index of a token's bucket under `mode` (None: nothing before it to score it by)."""
    if mode in COMPARING:
        value = None if compared is None else compared.js if mode == PARTING else compared.log2_ratio
        if value is None:
            return None
        return next(i for i, (bound, _, _) in enumerate(buckets(mode, ["", ""])) if value >= bound)
    if token.prob is None:
        return None
    if mode == "rank":
        return next(i for i, (bound, _, _) in enumerate(RANK_BUCKETS) if token.rank <= bound)
    return next(i for i, (bound, _, _) in enumerate(PROBABILITY_BUCKETS) if token.prob >= bound)


def shown_text(token_text: str) -> str:
    """A token as shown: whitespace-only tokens made visible (a newline also breaks the line)."""
    if token_text.strip():
        return token_text
    return visible(token_text) + ("\n" if "\n" in token_text else "")


class Shown(NamedTuple):
    """What the page's heatmap shows: the text, its token_probabilities result, the colouring, and the id of
    the message that brought it (each message names the one it follows)."""

    text: str
    result: Listing
    mode: str
    id: int


def heatmap_message(text: str, result: Listing, mode: str, threshold: float, before: Shown | None
                    ) -> tuple[str, Shown]:
    """The message that brings the page from `before` to this view (JSON for HEATMAP_JS), and what it then shows.

    The whole view when there is nothing to build on (or the colouring changed); else only the tokens from
    the first that changed, which after a click are the branch's few: the update stays small however long
    the text.
    """
    tokens = result.tokens
    first = max(0, len(tokens) - HEATMAP_TOKENS)
    shown = Shown(text, result, mode, before.id + 1 if before else 0)
    if before is None or before.mode != mode:
        return _message({"id": shown.id, "frame": heatmap_view(text, result, mode, threshold)}), shown
    old = before.result
    keep = next((i for i, (a, b) in enumerate(zip(old.tokens, tokens))
                 if a != b or old.second(i) != result.second(i) or (i in old.accepted) != (i in result.accepted)),
                min(len(old.tokens), len(tokens)))
    return _message({
        "id": shown.id, "base": before.id, "keep": keep, "first": first, "earlier": earlier_view(first),
        "spans": "".join(token_span(text, result, i, mode) for i in range(max(keep, first), len(tokens))),
        "disagreements": places_view(result, mode, threshold),
    }), shown


def places_view(result: Listing, mode: str, threshold: float) -> str:
    """Under the text: how far the read of a long text got, while it goes on; then where the two models part most,
    when comparing, else where the model disagreed. One element, which every update message replaces."""
    places = partings_view(result, mode) if mode in COMPARING else disagreements_view(result.tokens, threshold)
    return f'<div id="disagreements" style="{PLACES_STYLE}">{progress_view(result.partial)}{places}</div>'


def progress_view(partial: PartialScores | None) -> str:
    """While a long text is read, how much of it the colours cover: its first tokens, the rest following."""
    if not partial:
        return ""
    return (f'<div id="heatmap-progress" style="margin-bottom:6px">⏳ Scored {partial.read_tokens:,} of '
            f'{partial.context_tokens:,} tokens… the rest is coloured as the text is read.</div>')


def heatmap_view(text: str, result: Listing, mode: str, threshold: float) -> str:
    """The coloured text (its last HEATMAP_TOKENS tokens), a legend, the details line, and the disagreements."""
    tokens, models = result.tokens, result.models
    first = max(0, len(tokens) - HEATMAP_TOKENS)
    spans = "".join(token_span(text, result, i, mode) for i in range(first, len(tokens)))
    shades = buckets(mode, models)
    outside = None if mode in COMPARING else next((t.rank_above for t in tokens if t.rank_above), None)
    keys = [(c, label) for _, c, label in shades] + ([(OUTSIDE_COLOR, f"outside the server's top {outside}")]
                                                     if outside else [])
    legend = " ".join(f'<span style="background:{c};color:#111;border-radius:3px;padding:0 6px">{label}</span>'
                      for c, label in keys)
    colours = " ".join(f"#heatmap .b{i} {{ background: {c} }}" for i, (_, c, _) in enumerate(shades))
    by = (f"where {short_name(models[0])} and {short_name(models[1])} part" if mode == PARTING else
          f"which of {short_name(models[0])} and {short_name(models[1])} expects each "
          + ("word" if result.per == "word" else "token") + " more") if mode in COMPARING else mode
    return (
        f"<style>#heatmap .tk {{ {TOKEN_STYLE} }} #heatmap .bu {{ background: {UNSCORED_COLOR} }}"
        f" #heatmap .bo {{ background: {OUTSIDE_COLOR} }} {colours}"
        f" #heatmap .alt {{ {ALT_STYLE} }} #heatmap .tk.{ACCEPTED_CLASS} {{ {ACCEPTED_STYLE} }}"
        f" #heatmap .tk[data-selected] {{ outline: 2px solid var(--color-accent) }}"
        f" #heatmap .tk:focus {{ outline: 2px solid var(--color-accent) }}</style>"
        f'<div style="font-size:12px;margin-bottom:6px">Colour by {html.escape(by)}: {legend}; '
        f'<span style="{ACCEPTED_STYLE}">underlined</span>: accepted from the model</div>'
        f'<div id="token-details" style="{DETAILS_STYLE}">Hover over a token (or focus it) to see what the model '
        "expected there; click an alternative to rewind to it, or “why the first?” to see what led the model to "
        "it.</div>"
        f'<div id="heatmap-text" style="{TEXT_STYLE}">{earlier_view(first)}{spans}</div>'
        + places_view(result, mode, threshold)
    )


def earlier_view(first: int) -> str:
    """The note that the text's first `first` tokens are not shown."""
    return (f'<span class="earlier" style="color:var(--body-text-color-subdued)">… {first} earlier tokens … </span>'
            if first else "")


def token_span(text: str, result: Listing, i: int, mode: str) -> str:
    """Token `i` as shown: its piece of the text in its bucket's colour, with its details in data attributes (and,
    comparing, the second model's view of it: `data-b`)."""
    token, compared, models = result.tokens[i], result.second(i), result.models
    piece = text[token.start : token.end]
    if not piece:
        return ""  # a later piece of a character split over several tokens: the first shows it
    index = bucket(token, mode, compared)
    label = None if index is None else buckets(mode, models)[index][2]
    shade = "u" if index is None else index
    if token.rank_above and mode not in COMPARING:
        shade, details = "o", outside_details(token)
    elif token.prob is None:
        details = [visible(token.token)]
    else:
        details = [visible(token.token), percent(token.prob), token.rank, label or "", f"{token.entropy:.2f}"]
    other = ("" if mode not in COMPARING or not compared else
             f" data-b='{attribute_json(second_view(compared, models))}'")
    accepted = f" {ACCEPTED_CLASS}" if i in result.accepted else ""
    return (
        f'<span class="tk b{shade}{accepted}" tabindex="0" data-i="{i}" '
        f"data-s='{attribute_json(details)}' data-a='{attribute_json(alternatives(token))}'{other}>"
        f"{html.escape(shown_text(piece))}</span>"
    )


def outside_details(token: ScoredToken) -> list:
    """The details line's fields for a token outside the top N a server returned: what is known is a bound."""
    n, least = token.rank_above, min((a.prob for a in token.alternatives), default=None)
    return [visible(token.token), "?" if least is None else f"below {percent(least)}", f"> {n}",
            f"outside the server's top {n}", f"≥ {token.entropy:.2f}"]


def second_view(compared: SecondView, models: list[str]) -> list:
    """What the details line says of the second model at a token: its name, its probability of the token (of the
    word, per word), the divergence, and its own first choices as [id, text, probability]."""
    prob = compared.prob
    return [short_name(models[1]), None if prob is None else percent(prob),
            None if compared.js is None else f"{compared.js:.3f}", compared.alternatives]


def _message(fields: dict) -> str:
    """A heatmap update message, as JSON, with the version HEATMAP_JS checks."""
    return json.dumps({"v": MESSAGE_VERSION, **fields}, ensure_ascii=False, separators=(",", ":"))


def alternatives(token: ScoredToken) -> list:
    return [[a.token_id, visible(a.token), percent(a.prob)] for a in token.alternatives or ()]


def attribute_json(value: object) -> str:
    """`value` as JSON for a single-quoted HTML attribute (its double quotes need no escaping there)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return html.escape(text, quote=False).replace("'", "&#x27;")


def disagreements(tokens: list[ScoredToken], threshold: float) -> list[tuple[float, int]]:
    """(how many times likelier the model's first choice was, token index), largest first, above `threshold`."""
    gaps = [
        (t.alternatives[0].prob / t.prob, i)
        for i, t in enumerate(tokens)
        if t.prob and t.rank > 1 and t.alternatives[0].prob >= threshold * t.prob
    ]
    return sorted(gaps, reverse=True)[:DISAGREEMENTS]


def partings(units: list[Parting], mode: str) -> list[Parting]:
    """The places where the models part most: by divergence, or by how much likelier one finds the writer's text."""
    value = (lambda unit: unit.js) if mode == PARTING else (lambda unit: unit.log2_ratio)
    scored = [unit for unit in units if value(unit) is not None]
    return sorted(scored, key=lambda unit: abs(value(unit)), reverse=True)[:DISAGREEMENTS]


def partings_view(result: Listing, mode: str) -> str:
    """Where the two models part most, each place with both models' probability of the writer's text there and,
    per token, what each would have written instead."""
    a, b = (short_name(name) for name in result.models)
    rows = []
    for unit in partings(result.places, mode):  # each row names the models by letter, the heading in full
        probs = " · ".join(f"{name}: {'—' if p is None else percent(p)}" for name, p in zip("AB", unit.probs))
        tops = ("" if not unit.top else
                f" — A would write {html.escape(repr(visible(unit.top[0])))}, "
                f"B {html.escape(repr(visible(unit.top[1])))}")
        js = "" if unit.js is None else f" · {unit.js:.3f} bits apart"
        rows.append(f'<div style="margin:2px 0"><b>{html.escape(visible(unit.text))}</b> ({html.escape(probs)})'
                    f"{tops}{js}</div>")
    per = " (per word: their tokenizers differ)" if result.per == "word" else ""
    models = f"A ({html.escape(a)}) and B ({html.escape(b)})"
    heading = (f"<b>Where {models} part most</b>{per}" if mode == PARTING else
               f"<b>Where one of {models} expects your text far more</b>{per}")
    body = "".join(rows) or '<div style="color:var(--body-text-color-subdued)">Nowhere yet.</div>'
    return heading + body


def with_comparison(result: TokenScores, comparison: ModelComparison, second: TokenScores | None) -> Listing:
    """The first model's token listing (`result`), each token with how the second model sees it (`compared`): its
    probability (of the token's word, per word) and, per token, its first choices (`second`'s listing) and the
    divergence; and the places to list where they part (`places`), tokens or words."""
    per_word = comparison.per == "word"
    units = comparison.words if per_word else comparison.tokens
    places = [place(unit, unit.text if per_word else result.tokens[i].token) for i, unit in enumerate(units)]
    word_of = _unit_at(units, result.tokens) if per_word else list(range(len(units)))
    compared = []
    for i in range(len(result.tokens)):
        shared = places[word_of[i]] if word_of[i] is not None else None
        theirs = second.tokens[i] if second else None
        compared.append(None if shared is None else SecondView(shared.probs[1], shared.js, shared.log2_ratio,
                                                               [] if theirs is None else alternatives(theirs)))
    return Listing(result.model, result.tokens, result.partial, comparison.models, comparison.per, compared, places)


def place(unit: ComparedToken | ComparedWord, text: str) -> Parting:
    """A token or word of the comparison as the list of partings shows it."""
    logprobs = unit.logprob
    known = None not in logprobs
    return Parting(text, [None if lp is None else math.exp(lp) for lp in logprobs],
                   (logprobs[1] - logprobs[0]) / math.log(2) if known else None,
                   getattr(unit, "js", None), getattr(unit, "top", None))


def _unit_at(units: list[ComparedWord], tokens: list[ScoredToken]) -> list[int | None]:
    """For each token (by its end), the index of the word it ends in (None before any)."""
    found, j = [], 0
    for token in tokens:
        while j < len(units) and units[j].end < token.end:
            j += 1
        found.append(j if j < len(units) else None)
    return found


REWIND_HINT = "A click on its choice writes it there in place of yours and drops the text after it"


def disagreements_view(tokens: list[ScoredToken], threshold: float) -> str:
    rows = []
    for gap, i in disagreements(tokens, threshold):
        token, top = tokens[i], tokens[i].alternatives[0]
        rows.append(
            f'<div style="margin:2px 0">{html.escape(visible(token.token))} ({percent(token.prob)}) — the model '
            f'preferred <button class="alt" data-index="{i}" data-token-id="{top.token_id}" title="{REWIND_HINT}">'
            f'{html.escape(visible(top.token))} {percent(top.prob)}</button> ({times(gap)} likelier)</div>'
        )
    heading = (f"<b>Where the model disagreed</b> (its choice at least {threshold:g}× likelier than yours; "
               f"{REWIND_HINT[0].lower()}{REWIND_HINT[1:]}, as a new branch of the history)")
    body = "".join(rows) or '<div style="color:var(--body-text-color-subdued)">Nowhere, at this threshold.</div>'
    return heading + body
