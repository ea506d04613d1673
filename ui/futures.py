"""The map of futures drawn as an icicle: a column per depth, each block as tall as its mass, nested under its
parent's, the mass the map does not list left blank; zoomed to any block, which then fills the height.

Plain functions from `multiverse`'s typed answer to SVG (ui/panels/futures.py is the panel; ui/static/futures.js
shows a block's numbers as the pointer passes over it and sends clicks). A second model's map can colour each
block by how far the two models part at it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from typing import NamedTuple

from lookahead.outputs import FutureNode, Multiverse
from ui.render import percent, visible

HEIGHT_PX = 320  # the icicle's height: the focused block's
MIN_BLOCK_PX = 1.0  # a block (and so its subtree) shorter than this is not drawn
LABEL_PX = 14.0  # a block at least this tall shows its token
ON_TEXT_MIN_PX = 3.0  # the writer's own next tokens are drawn at least this tall, however unlikely, to be seen
LABEL_CHARS = 24  # of a token shown in its block (the block clips what does not fit)
BLOCK_GAP = "var(--background-fill-primary, #fff)"  # the stroke between blocks
ON_TEXT_COLOUR = "#ea580c"  # the outline of the writer's own next tokens
TEXT_COLOUR = "#111827"
# A block's fill: by its probability, lighter for the less likely.
PROB_HUE, PROB_LIGHTNESS = 212, (94, 68)
# Comparing: by log2(mass_a / mass_b), clipped to ±RATIO_BITS, blue where the first model gives it more mass, red
# where the second does.
RATIO_BITS = 4.0
MORE_IN_A_HUE, MORE_IN_B_HUE = 212, 4
BELOW_B = "futures-below-b"  # the hatching of a block missing from the second model's map
END_MARK = "⏹"
ROOT_WIDTH = 12.0  # % of the width for the focused block's column: the columns after it share the rest
BUTTON_STYLE = ("font:12px ui-monospace,monospace;padding:1px 8px;margin:0 2px;border-radius:8px;cursor:pointer;"
                "border:1px solid var(--color-accent);background:var(--background-fill-primary);"
                "color:var(--color-accent)")


class Block(NamedTuple):
    """A node's place in the icicle: its column (its depth below the focused node) and its top and height, as
    fractions of the focused node's mass."""

    node: FutureNode
    column: int
    top: float
    height: float


class Parting(NamedTuple):
    """How the second model sees the map: each node's log2(mass_a / mass_b) by id, None where the second model's
    map does not list it (below its cutoff); or `unavailable`, why no block can be coloured."""

    model: str
    ratios: dict[int, float | None]
    unavailable: str | None = None


def children_of(nodes: list[FutureNode]) -> dict[int, list[FutureNode]]:
    """Each node's children, in the map's order (by mass)."""
    children: dict[int, list[FutureNode]] = {node.id: [] for node in nodes}
    for node in nodes[1:]:
        children[node.parent].append(node)
    return children


def icicle(nodes: list[FutureNode], focus: int = 0, min_height: float = 0.0) -> list[Block]:
    """The blocks of `focus` and its subtree, pre-order: `focus` fills the height, every other block is as tall as
    its mass over focus's, its children stacked from its top by mass, and what they leave (the node's `rest`, and
    the mass of an end) stays blank. Blocks shorter than `min_height` (a fraction) are left out with their
    subtrees, but for the writer's own next tokens."""
    children, root = children_of(nodes), nodes[focus]

    def under(block: Block) -> Iterator[Block]:
        yield block
        top = block.top
        for child in children[block.node.id]:
            height = child.mass / root.mass
            if height >= min_height or child.on_text:
                yield from under(Block(child, block.column + 1, top, height))
            top += height

    return list(under(Block(root, 0, 0.0, 1.0)))


def path_to(nodes: list[FutureNode], node_id: int) -> list[FutureNode]:
    """The nodes from the root to `node_id`."""
    path = [nodes[node_id]]
    while path[-1].parent is not None:
        path.append(nodes[path[-1].parent])
    return path[::-1]


def path_ids(nodes: list[FutureNode], node_id: int) -> list[int]:
    """The token ids inserting the node's path writes."""
    return [node.token_id for node in path_to(nodes, node_id)[1:]]


def bits(mass: float) -> float:
    """A mass as bits of surprise: −log2(mass)."""
    return -math.log2(mass) if mass > 0 else math.inf


def token_label(node: FutureNode) -> str:
    """A block's token as its label shows it (whitespace made visible)."""
    return (END_MARK if node.ends else "") + visible(node.token)[:LABEL_CHARS]


def caption(node: FutureNode, parting: Parting | None = None) -> str:
    """What a block says as the pointer passes over it: its path's text, p, mass, bits and entropy (and how the
    second model sees it, comparing)."""
    if node.parent is None:
        words = ["your text"]
    else:
        words = [f"“{visible(node.text)}”", f"p {percent(node.prob)}", f"mass {percent(node.mass)}",
                 f"{bits(node.mass):.2f} bits"]
    if node.entropy is not None:
        words.append(f"entropy after it {node.entropy:.2f} bits")
    if node.on_text and node.parent is not None:
        words.append("your own next tokens")
    if node.ends:
        words.append("ends here")
    if parting is not None and not parting.unavailable and node.parent is not None:
        ratio = parting.ratios.get(node.id)
        words.append(f"below {parting.model}'s cutoff" if ratio is None
                     else f"log2(mass / {parting.model}'s) {ratio:+.2f}")
    return " · ".join(words)


def fill(node: FutureNode, parting: Parting | None) -> str:
    """A block's colour: by its probability, or, comparing, by how far the two models part at it."""
    if parting is None or parting.unavailable:
        light, dark = PROB_LIGHTNESS
        return f"hsl({PROB_HUE} 70% {light - (light - dark) * node.prob:.0f}%)"
    ratio = parting.ratios.get(node.id)
    return f"url(#{BELOW_B})" if ratio is None else ratio_colour(ratio)


def ratio_colour(ratio: float) -> str:
    """The colour of log2(mass_a / mass_b): deeper the further the two models part, up to RATIO_BITS."""
    strength = min(abs(ratio), RATIO_BITS) / RATIO_BITS
    return f"hsl({MORE_IN_A_HUE if ratio >= 0 else MORE_IN_B_HUE} 75% {95 - 35 * strength:.0f}%)"


def column_place(column: int, columns: int) -> tuple[float, float]:
    """Where a column starts and how wide it is (% of the width): the focused block's narrow, the rest alike."""
    if columns == 1:
        return 0.0, 100.0
    width = (100 - ROOT_WIDTH) / (columns - 1)
    return (0.0, ROOT_WIDTH) if column == 0 else (ROOT_WIDTH + (column - 1) * width, width)


def block_svg(block: Block, columns: int, parting: Parting | None) -> str:
    """One block: a clipping viewport with its rectangle, its label if tall enough, and its numbers as a title."""
    node, (left, width) = block.node, column_place(block.column, columns)
    top, height = block.top * HEIGHT_PX, block.height * HEIGHT_PX
    if node.on_text:
        height = max(height, ON_TEXT_MIN_PX)
    outline = (f'stroke="{ON_TEXT_COLOUR}" stroke-width="3"' if node.on_text and node.parent is not None
               else f'stroke="{BLOCK_GAP}" stroke-width="1"')
    label = ("" if height < LABEL_PX else
             f'<text x="4" y="{min(height / 2, LABEL_PX) + 4:.1f}" fill="{TEXT_COLOUR}">'
             f"{html.escape(token_label(node) if node.parent is not None else '▸')}</text>")
    words = html.escape(caption(node, parting))
    return (f'<svg class="future-block" x="{left:.4f}%" y="{top:.2f}" width="{width:.4f}%" '
            f'height="{height:.2f}" data-node="{node.id}" data-caption="{words}"><title>{words}</title>'
            f'<rect width="100%" height="100%" fill="{fill(node, parting)}" {outline}/>{label}</svg>')


def breadcrumb(nodes: list[FutureNode], focus: int) -> str:
    """The way back out: each block on the path to the focused one, a click zooming to it, and "↑ out"."""
    path = path_to(nodes, focus)
    steps = [f'<span class="futures-step" data-node="{node.id}" role="button" style="cursor:pointer;'
             f'text-decoration:underline">{html.escape("your text" if node.parent is None else token_label(node))}'
             "</span>" for node in path]
    if len(path) == 1:
        return " › ".join(steps)
    node = path[-1]
    return (f'<button class="futures-out" data-node="{node.parent}" type="button" style="{BUTTON_STYLE}">↑ out'
            "</button> "
            + " › ".join(steps)
            + f' <span class="futures-zoom">· zoom {bits(node.mass):.2f} bits (mass {percent(node.mass)})</span> '
            f'<button class="futures-insert" data-insert="{node.id}" type="button" style="{BUTTON_STYLE}">insert “'
            f"{html.escape(visible(node.text))}”</button>")


def legend(parting: Parting | None) -> str:
    """What the colours mean."""
    if parting is None:
        return "Colour: the token's probability after its parent; outlined: your own next tokens."
    if parting.unavailable:
        return f"Colouring by the second model is unavailable: {html.escape(parting.unavailable)}"
    swatches = "".join(f'<span style="display:inline-block;width:14px;height:10px;background:'
                       f'{ratio_colour(r)}'
                       f'"></span>' for r in (-RATIO_BITS, -RATIO_BITS / 2, 0, RATIO_BITS / 2, RATIO_BITS))
    hatch = (f'<svg width="14" height="10" style="vertical-align:middle"><rect width="14" height="10" '
             f'fill="url(#{BELOW_B})"/></svg>')
    name = html.escape(parting.model)
    return (f"log2(mass / {name}'s mass): {name} likelier −{RATIO_BITS:g} {swatches} +{RATIO_BITS:g} this model "
            f"likelier · {hatch} below {name}'s cutoff")


def futures_view(result: Multiverse, focus: int = 0, parting: Parting | None = None, serial: int = 0) -> str:
    """The map, zoomed to `focus`: the way back out, the icicle, the focused block's numbers (the caption the
    pointer changes) and the legend. `serial`: the map's number, which a click sends back with the block's."""
    nodes = result.nodes
    blocks = icicle(nodes, focus, MIN_BLOCK_PX / HEIGHT_PX)
    columns = result.depth - nodes[focus].depth + 1
    drawn = "".join(block_svg(block, columns, parting) for block in blocks)
    pattern = (f'<defs><pattern id="{BELOW_B}" width="6" height="6" patternUnits="userSpaceOnUse" '
               'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f4f6"/>'
               '<rect width="2" height="6" fill="#9ca3af"/></pattern></defs>')
    focused = html.escape(caption(nodes[focus], parting))
    listed = (f"{len(nodes) - 1} futures of up to {result.depth} tokens at mass ≥ {percent(result.cutoff)} · "
              f"{result.model} · {result.passes} passes")
    return (f'<div class="futures" data-map="{serial}" data-focus="{focus}" style="font:12px ui-monospace,monospace">'
            f'<div class="futures-path" style="margin-bottom:4px;overflow-wrap:anywhere">'
            f"{breadcrumb(nodes, focus)}</div>"
            f'<svg class="futures-icicle" width="100%" height="{HEIGHT_PX}" style="display:block;font-size:12px">'
            f"{pattern}{drawn}</svg>"
            f'<div class="futures-caption" data-focused="{focused}" style="min-height:2.6em;margin-top:4px;'
            f'overflow-wrap:anywhere">{focused}</div>'
            f'<div class="futures-legend" style="color:var(--body-text-color-subdued)">{legend(parting)} · '
            f"{html.escape(listed)}</div></div>")


def parting(a: Multiverse, b: Multiverse) -> Parting:
    """How far the second model's map `b` parts from `a` at each of a's blocks, matched by their token-id paths:
    log2(mass_a / mass_b), None where b does not list the path. Only where the two read the text as the same tokens
    and spell each token both list alike (one tokenizer, as far as the maps show): else token ids mean different
    things, and the colouring says it is unavailable."""
    b_paths = {tuple(path_ids(b.nodes, node.id)): node for node in b.nodes}
    spelled = {path: node.token for path, node in b_paths.items()}
    a_paths = {node.id: tuple(path_ids(a.nodes, node.id)) for node in a.nodes}
    if a.context_tokens != b.context_tokens or any(
            path in spelled and spelled[path] != a.nodes[node_id].token for node_id, path in a_paths.items()):
        return Parting(b.model, {}, f"{b.model}'s tokenizer differs from this model's, so their blocks cannot be "
                       "matched.")
    return Parting(b.model, {node_id: (math.log2(a.nodes[node_id].mass / b_paths[path].mass) if path in b_paths
                                       and b_paths[path].mass > 0 else None)
                             for node_id, path in a_paths.items()})
