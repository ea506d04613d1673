"""The writer's text through the model's eyes: each token coloured by its probability (or its rank,
as GLTR does), its alternatives on hover or focus, and where the model disagreed most.

Plain data to HTML, like ui/render.py. Each token carries what its details line needs (probability,
rank, entropy, alternatives) as compact JSON in data attributes, its colour as a bucket class, so an
update of 400 tokens stays near 100 kB; HEATMAP_JS shows the details and turns a click on an
alternative into a select event (a rewind) with the token's index and the alternative's id.
"""

from __future__ import annotations

import html
import json
import math

from ui.render import visible

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

HEATMAP_JS = """
const details = () => element.querySelector('#token-details');
const show = (token) => {
  const box = details();
  if (!token || !box) return;
  element.querySelectorAll('.tk[data-selected]').forEach(t => t.removeAttribute('data-selected'));
  token.setAttribute('data-selected', '');
  box.replaceChildren();
  const head = document.createElement('div');
  const [text, prob, rank, label, entropy] = JSON.parse(token.dataset.s);
  head.textContent = prob === undefined ? `${text}: nothing before it to predict it from`
    : `${text}: ${prob}, rank ${rank} (${label}), entropy ${entropy} bits. The model's top choices:`;
  box.appendChild(head);
  for (const [id, text, prob] of JSON.parse(token.dataset.a || '[]')) {
    const button = document.createElement('button');
    button.className = 'alt';
    button.dataset.index = token.dataset.i;
    button.dataset.tokenId = id;
    button.textContent = `${text} ${prob}`;
    box.appendChild(button);
  }
};
element.addEventListener('mouseover', (e) => show(e.target.closest('.tk')));
element.addEventListener('focusin', (e) => show(e.target.closest('.tk')));
element.addEventListener('click', (e) => {
  const alt = e.target.closest('[data-token-id]');
  if (alt) trigger('select', {index: Number(alt.dataset.index), token_id: Number(alt.dataset.tokenId)});
  else show(e.target.closest('.tk'));
});
"""


def bucket(token: dict, mode: str) -> int | None:
    """The index of a token's bucket under `mode` (None: nothing before it to score it by)."""
    if token["prob"] is None:
        return None
    if mode == "rank":
        return next(i for i, (bound, _, _) in enumerate(RANK_BUCKETS) if token["rank"] <= bound)
    return next(i for i, (bound, _, _) in enumerate(PROBABILITY_BUCKETS) if token["prob"] >= bound)


def percent(p: float) -> str:
    return f"{100 * p:.1f}%" if p >= 0.001 else f"{100 * p:.2g}%"


def shown_text(token_text: str) -> str:
    """A token as shown: whitespace-only tokens made visible (a newline also breaks the line)."""
    if token_text.strip():
        return token_text
    return visible(token_text) + ("\n" if "\n" in token_text else "")


def heatmap_view(text: str, result: dict, mode: str, threshold: float) -> str:
    """The coloured text (its last HEATMAP_TOKENS tokens), a legend, the details line, and the disagreements."""
    tokens = result["tokens"]
    first = max(0, len(tokens) - HEATMAP_TOKENS)
    spans = []
    buckets = RANK_BUCKETS if mode == "rank" else PROBABILITY_BUCKETS
    for i in range(first, len(tokens)):
        token = tokens[i]
        piece = text[token["start"] : token["end"]]
        if not piece:
            continue  # a later piece of a character split over several tokens: the first shows it
        index = bucket(token, mode)
        details = [visible(token["token"])] if index is None else [
            visible(token["token"]), percent(token["prob"]), token["rank"], buckets[index][2], f"{token['entropy']:.2f}"
        ]
        spans.append(
            f'<span class="tk b{"u" if index is None else index}" tabindex="0" data-i="{i}" '
            f"data-s='{attribute_json(details)}' data-a='{attribute_json(alternatives(token))}'>"
            f"{html.escape(shown_text(piece))}</span>"
        )
    earlier = f'<span style="color:var(--body-text-color-subdued)">… {first} earlier tokens … </span>' if first else ""
    legend = " ".join(
        f'<span style="background:{c};color:#111;border-radius:3px;padding:0 6px">{label}</span>' for _, c, label in buckets
    )
    colours = " ".join(f"#heatmap .b{i} {{ background: {c} }}" for i, (_, c, _) in enumerate(buckets))
    return (
        f"<style>#heatmap .tk {{ {TOKEN_STYLE} }} #heatmap .bu {{ background: {UNSCORED_COLOR} }} {colours}"
        f" #heatmap .alt {{ {ALT_STYLE} }} #heatmap .tk[data-selected] {{ outline: 2px solid var(--color-accent) }}"
        f" #heatmap .tk:focus {{ outline: 2px solid var(--color-accent) }}</style>"
        f'<div style="font-size:12px;margin-bottom:6px">Colour by {mode}: {legend}</div>'
        f'<div id="token-details" style="{DETAILS_STYLE}">Hover over a token (or focus it) to see what the model '
        "expected there; click an alternative to rewind to it.</div>"
        f'<div id="heatmap-text" style="{TEXT_STYLE}">{earlier}{"".join(spans)}</div>'
        + disagreements_view(tokens, threshold)
    )


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
            f'{html.escape(visible(top["token"]))} {percent(top["prob"])}</button> ({gap:,.0f}× likelier)</div>'
        )
    heading = f"<b>Where the model disagreed</b> (its choice at least {threshold:g}× likelier than yours)"
    body = "".join(rows) or '<div style="color:var(--body-text-color-subdued)">Nowhere, at this threshold.</div>'
    return f'<div id="disagreements" style="margin-top:10px;font-size:13px">{heading}{body}</div>'
