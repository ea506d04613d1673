"""The page's HTML renderers: the next-token plot, the history tree, branch labels.

Plain functions from data to HTML strings with inline styles (gr.HTML content does not see
the page's CSS classes), so app.py stays the layout and the wiring.
"""

from __future__ import annotations

import html
import re

from history import History, common_prefix
from lookahead.outputs import Attribution, Branch, LeadTokens, NextToken
from lookahead.results import DISTRIBUTION_ROWS, HALF_CHARACTER, REFUSED_ROWS

VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})
# A token that holds only part of a character's bytes (an emoji is several tokens) shows this in the plot, not "�".
PART_OF_A_CHARACTER = "◌"
PARTIAL_TITLE = "part of a character written over several tokens: a branch that begins with it writes it whole"
ROW_STYLE = "display:flex;align-items:center;gap:8px;margin:3px 0;font:13px ui-monospace,monospace"
TOKEN_STYLE = "flex:0 1 9em;min-width:4em;text-align:right;overflow:hidden;text-overflow:ellipsis;white-space:pre"
TRACK_STYLE = "flex:1 1 auto;min-width:5em;display:flex;flex-direction:column;gap:1px"
BAR_STYLE = "display:block;height:7px;border-radius:2px;min-width:1px"
PCT_STYLE = "flex:0 0 8.5em;text-align:right;color:var(--body-text-color-subdued);white-space:pre"
BASE_COLOR, FINAL_COLOR = "var(--neutral-400)", "var(--color-accent)"
WHY_STYLE = "flex:0 0 auto;font-size:11px;color:var(--color-accent);text-decoration:underline;cursor:help"
STRONGEST = 5  # tokens listed under an explanation
TREE_ROWS = 60  # lines of the history tree shown, around the current node
TREE_STYLE = "max-height:280px;overflow:auto;font:12px ui-monospace,monospace;line-height:1.6"


def visible(text: str) -> str:
    """Whitespace made visible, so a branch of spaces or newlines is not an empty button."""
    return text.translate(VISIBLE_WHITESPACE)


def percent(p: float, digits: int = 1) -> str:
    """A probability as a person reads it, the same way everywhere: "28.1%", "0.05%", "< 0.01%" (never 1.3e-05%)."""
    if p == 0:
        return "0%"
    if p < 0.0001:
        return "< 0.01%"
    return f"{100 * p:.{digits if p >= 0.01 else 2}f}%"


RATIO_UNITS = ((1e9, "B"), (1e6, "M"), (1e3, "k"))


def times(ratio: float) -> str:
    """How many times likelier, as a person reads it: "3.1M×", "12k×", "240×", "2.5×"."""
    for size, unit in RATIO_UNITS:
        if ratio >= size:
            return f"{ratio / size:.{1 if ratio < 10 * size else 0}f}{unit}×"
    return f"{ratio:.{1 if ratio < 10 else 0}f}×"


def lead_heading(lead: LeadTokens) -> str:
    """What the model all but certainly writes before the choice the plot shows (a lookahead's "lead")."""
    if not lead.text:  # the whitespace the text ends with, as one token
        return f"The model all but certainly keeps your whitespace as it is ({percent(lead.prob)})"
    return f"The model all but certainly writes {html.escape(visible(lead.text))} first ({percent(lead.prob)})"


def distribution_plot(distribution: list[NextToken], forced: str | None = None, lead: LeadTokens | None = None
                      ) -> str:
    """p_base and p_final bars for the top tokens and the rest ("other"); cut tokens greyed, and those a
    constraint refuses marked ✗. Rows are clickable. `forced`: the text a constraint writes by itself first;
    `lead`: what the model all but certainly writes then (a lookahead's "lead"); the plot is of the choice after."""
    refused = [d for d in distribution if not d.valid][:REFUSED_ROWS]
    top = [d for d in distribution if d.valid][: DISTRIBUTION_ROWS - len(refused)] + refused
    rows = [(d, visible(d.token).replace(HALF_CHARACTER, PART_OF_A_CHARACTER), d.prob, d.p_final, d.kept)
            for d in top]
    other = (None, "other", max(0.0, 1 - sum(r[2] for r in rows)), max(0.0, 1 - sum(r[3] for r in rows)), True)
    constrained = any(not d.valid for d in top)
    # Bars are scaled to the likeliest token, not to "other" (often the largest on a flat
    # distribution), so the tokens' bars stay readable; a longer "other" bar is cut, and fades out.
    scale = max((max(r[2], r[3]) for r in rows), default=0.0) or 1.0
    clipped = max(other[2], other[3]) > scale

    def bar(color: str, p: float) -> str:
        fill = f"linear-gradient(90deg,{color} 80%,transparent)" if p > scale else color
        return f'<span style="{BAR_STYLE};background:{fill};width:{min(100.0, 100 * p / scale):.1f}%"></span>'

    legend = (
        '<div style="font-size:12px;color:var(--body-text-color-subdued);margin-bottom:4px">'
        + (f'<b class="forced">The constraint writes {html.escape(visible(forced))} first; the choice after it:</b> '
           if forced is not None else "")
        + (f'<b class="forced">{lead_heading(lead)}; the choice after it:</b> ' if lead else "")
        + f'<span style="color:{BASE_COLOR}">■</span> p_base (plain softmax) '
        f'<span style="color:{FINAL_COLOR}">■</span> p_final (after the sampling settings) · '
        f'greyed: cut by the filters' + (" · ✗: the constraint refuses it" if constrained else "")
        + ' · click a token to write it at the caret'
        + (" · bars are to the top token's scale; \"other\" is longer than shown" if clipped else "")
        + "</div>"
    )
    html_rows = []
    for entry, token, p_base, p_final, kept in [*rows, other]:
        refused = entry is not None and not entry.valid
        partial = entry is not None and HALF_CHARACTER in entry.token
        title = ("the constraint refuses it" if refused else PARTIAL_TITLE if partial
                 else f"append {html.escape(token)}")
        attrs = (f'data-token-id="{entry.token_id}" title="{title}"' + (" data-partial" if partial else "")
                 if entry else "")
        style = ROW_STYLE + (";cursor:pointer" if entry and not partial else "") + ("" if kept else ";opacity:.4")
        final_text = "    ✗" if refused else f"{percent(p_final):>6}" if kept else "  cut"
        html_rows.append(
            f'<div class="dist-row" {attrs} style="{style}">'
            f'<span style="{TOKEN_STYLE}">{html.escape(token)}</span>'
            f'<span style="{TRACK_STYLE}">{bar(BASE_COLOR, p_base)}{bar(FINAL_COLOR, p_final)}</span>'
            f'<span style="{PCT_STYLE}">{percent(p_base):>6} → {final_text}</span>'
            + (f'<span class="why" title="why? what in the text drives this token" style="{WHY_STYLE}">why?</span>'
               if entry else "")
            + "</div>"
        )
    return f'<div class="distribution">{legend}{"".join(html_rows)}</div>'


def tree_view(history: History, rows: int = TREE_ROWS) -> str:
    """The history tree, one line per node, indented where it forks; the current path highlighted.

    At most `rows` lines, around the current node (the update after every click stays the same size
    however long the session; undo, redo and the lines themselves move the window).
    """
    path, kids, all_rows = set(history.path()), history.child_map(), history.rows()
    here_row = next(i for i, (node, _) in enumerate(all_rows) if node.id == history.current)
    first = min(max(0, here_row - rows * 2 // 3), max(0, len(all_rows) - rows))
    lines = [_more_line(first, "earlier")] if first else []
    for node, indent in all_rows[first : first + rows]:
        parent = history.nodes[node.parent].text if node.parent is not None else None
        turns = node.settings.get("messages") if node.kind == "turn" else None
        if turns:  # a sent turn: what was said, not the (empty) box
            label = f"{turns[-1]['role']}: " + ("…" if len(turns[-1]["content"]) > 40 else "") + visible(
                turns[-1]["content"][-40:])
        elif parent is not None and (piece := insertion(parent, node.text)) is not None:
            label = "+" + visible(piece)
        else:
            label = ("…" if len(node.text) > 40 else "") + visible(node.text[-40:]) or "(empty)"
        siblings = kids[node.parent]
        fork = ("└ " if node.id == siblings[-1] else "├ ") if len(siblings) > 1 else ""
        here = node.id == history.current
        style = f"padding-left:{indent}em;white-space:pre-wrap;overflow-wrap:anywhere;cursor:pointer"
        if node.id in path:
            style += ";font-weight:600;color:var(--color-accent)"
        marker = "▶ " if here else "  "
        lines.append(
            f'<div class="tree-node" data-node="{node.id}" style="{style}"{" data-current" if here else ""}>'
            f'{marker}{fork}<span style="color:var(--body-text-color-subdued)">{node.kind}</span> '
            f"{html.escape(label[:60])}</div>"
        )
    if first + rows < len(all_rows):
        lines.append(_more_line(len(all_rows) - first - rows, "later"))
    return f'<div id="tree" style="{TREE_STYLE}">{"".join(lines)}</div>'


def insertion(parent: str, text: str) -> str | None:
    """What `text` inserts into `parent` (at its end or anywhere inside it), or None if it changes more."""
    kept = len(text) - len(parent)
    if kept < 0:
        return None
    start = common_prefix(parent, text)
    return text[start : start + kept] if text.endswith(parent[start:]) else None


def _more_line(n: int, where: str) -> str:
    return (f'<div class="tree-more" style="color:var(--body-text-color-subdued)">'
            f'  ⋯ {n} {where} line{"s" * (n != 1)}</div>')


def plot_heading(model_name: str | None) -> str:
    """The heading over a panel's plot: with its model's name where two models' plots are shown."""
    return "**Next token**" + (f" · {model_name}" if model_name else "")


END_MARK = "⏹"  # a branch that reaches the end-of-sequence token: the model would stop there
STOP_MARK = "✂"  # a branch cut at a stop string
LEAD_MARK = "…"  # in a branch's label, the lead's text (what every branch writes before the choice)


def branch_label(branch: Branch, lead: LeadTokens | None = None) -> str:
    """A branch button's label: its text, whether it ends, its first token's p_final, and at a caret with text after
    it, its fit (how much likelier per token, in nats, that text becomes with the branch inserted). The text of a
    `lead` that every branch begins with (the plot's heading names it) is shown as "…": the labels show the choice."""
    end = END_MARK if branch.ends else STOP_MARK if branch.stop else ""
    fit = f"  ·  fit {branch.fit:+.2f}" if branch.fit is not None else ""
    led = lead.text if lead else ""
    text = LEAD_MARK + branch.text[len(led):] if led and branch.text.startswith(led) else branch.text
    return f"{visible(text)}{end}  ·  " + (percent(branch.p_final, 0) if branch.p_final > 0 else "cut") + fit


WORD = re.compile(r"\s*(\w+|[^\w\s]+)")
MARKER_CHARS = 48  # of the text shown on each side of the caret's marker


def first_word(text: str) -> str:
    """The first word of a branch's text, with the whitespace before it (or its first run of punctuation)."""
    match = WORD.match(text)
    return match.group(0) if match else text


def caret_marker(text: str, caret: int | None) -> str:
    """Where a branch would go: the text around the caret, the caret marked (nothing when it is at the end)."""
    if caret is None:
        return ""
    before, after = text[max(0, caret - MARKER_CHARS): caret], text[caret: caret + MARKER_CHARS]
    return (
        '<div class="caret-marker">Suggestions at the caret: '
        f'<span class="caret-text">{"…" if caret > MARKER_CHARS else ""}{html.escape(before)}'
        f'<mark class="caret-mark">▌</mark>{html.escape(after)}'
        f'{"…" if len(text) - caret > MARKER_CHARS else ""}</span></div>'
    )




def attribution_view(text: str, result: Attribution, where: str | None = None, shown_prob: float | None = None) -> str:
    """The explained window of the text coloured by each token's share of the explanation (the text before it, which
    the explanation did not read, left out), and the strongest few listed.

    `where`: the writer's token at the place explained (the heatmap's "why the first?"), if not after the text.
    `shown_prob`: the probability the plot shows for the token, read over the whole text: where the window's
    differs, the heading says why.
    """
    tokens = [t for t in result.tokens if t.score is not None]
    top = max((t.score for t in tokens), default=0.0) or 1.0
    earlier = len(result.tokens) - len(tokens)
    spans = [f'<div class="why-earlier" style="color:var(--body-text-color-subdued)">⋯ {earlier:,} earlier '
             f'token{"s" * (earlier != 1)}, outside the explained window</div>'] if earlier else []
    for t in tokens:
        piece = text[t.start : t.end]
        if not piece:
            continue
        spans.append(f'<span title="{html.escape(visible(t.token))}: {percent(t.score)}" style="background:'
                     f'rgba(234,88,12,{0.85 * t.score / top:.2f});border-radius:2px;white-space:pre-wrap">'
                     f'{html.escape(piece)}</span>')
    strongest = sorted(tokens, key=lambda t: -t.score)[:STRONGEST]
    listed = " · ".join(f"<b>{html.escape(visible(t.token))}</b> {percent(t.score, 0)}" for t in strongest)
    target, window = result.target, result.window_tokens
    token = f"<b>{html.escape(visible(target.token))}</b>"
    question = (f"Why the model expected {token} where you wrote <b>{html.escape(visible(where))}</b>"
                if where is not None else f"Why {token} next")
    method = result.method.replace("_", " ") + (f", {result.steps} steps"
                                                if result.method == "integrated_gradients" else "")
    differs = shown_prob is not None and earlier and percent(shown_prob) != percent(target.prob)
    return (
        f'<div id="why" style="font-size:13px"><div style="margin-bottom:6px">{question}: {method}, over the '
        f"last <b>{window:,} tokens</b>, where the model gives it {percent(target.prob)}"
        + (f" (the plot's {percent(shown_prob)} reads the whole text: the {earlier:,} earlier tokens change it)"
           if differs else "")
        + "</div>"
        f'<div style="line-height:1.7;max-height:220px;overflow:auto">{"".join(spans)}</div>'
        f'<div style="margin-top:6px">Strongest: {listed}</div></div>'
    )
