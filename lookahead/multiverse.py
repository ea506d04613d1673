"""The map of futures: every continuation of up to `depth` tokens whose mass is at least `cutoff`, grown over the
prompt's KV cache, and the k likeliest continuations of `depth` tokens read off the same kind of tree.

A node's mass is the product of p_final along its path. The map grows level by level: a level's nodes are laid out
after the cache's entries (the prompt's, then the levels before it) and run in one tree-masked pass, each seeing the
prompt and its own ancestors at the place its depth gives it (lookahead/branches.py lays out k branches so). A node's
logits give its children: every token that keeps the path's mass at least `cutoff`. A level's masses sum to at most
1, so it holds at most 1/cutoff nodes and the map at most depth/cutoff; a pass runs at most MAX_PASS_NODES of them,
so a wide level costs bounded memory. Every node is run, the last level's too: its entropy needs its distribution.
The cache comes back as it came.

`likeliest_paths` reads the k likeliest paths of `depth` tokens off such a map, its cutoff the least mass of k
paths found greedily first: a path is never likelier than its prefix, so every path at least that likely is in it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers import DynamicCache, PreTrainedModel

from lookahead.cache_passes import extend_prompt, visibility_mask
from lookahead.checks import MAX_MAP_NODES
from lookahead.constraints import Guide
from lookahead.models import eos_ids
from lookahead.prefix_cache import Continuation
from lookahead.sampling import Sampling
from lookahead.scoring import Scores

MAX_PASS_NODES = 256  # nodes run in one pass: a level wider than this is run in several
KEPT_PATHS = 8  # the likeliest paths whose KV the session keeps: a click inserting one reads no token again


@dataclass(slots=True, eq=False)
class Node:
    """A continuation: its last token, p_final given its parent's path (`prob`), p_base, and its path's mass."""

    parent: int | None  # None: the root, the text itself
    token_id: int | None
    depth: int
    prob: float
    p_base: float
    mass: float
    path: tuple[int, ...]
    guide: Guide | None  # the constraint's state after the path
    on_text: bool = False  # the writer's own next tokens after a caret
    ends: bool = False  # an end token, or nothing the constraint allows after it: nothing follows
    columns: tuple[int, ...] = ()  # the tree entries of its path, once run
    entropy: float | None = None  # bits, of p_final after it
    children: list[int] = field(default_factory=list)


class Futures(NamedTuple):
    nodes: list[Node]  # nodes[0] is the root
    cache: DynamicCache  # as it came, holding the prompt
    paths: list[Continuation]  # the likeliest run paths with their KV, for the session to keep
    scores: Scores | None  # the prompt's new tokens scored, when asked for
    passes: int  # model passes over the tree (the prompt's own not counted)


class Dist(NamedTuple):
    """A node's next-token distribution: log p_base and log p_final (vocab,)."""

    base: torch.Tensor
    final: torch.Tensor


class Tree:
    """Nodes run over one cache: each run node's token sits after the prompt's entries, in the order run."""

    def __init__(self, model: PreTrainedModel, context: torch.Tensor, cache: DynamicCache, places: torch.Tensor,
                 sampling: Sampling, stops: frozenset[int], root: Node) -> None:
        self.model, self.context, self.cache, self.sampling, self.stops = model, context, cache, sampling, stops
        self.visible = places >= 0  # the prompt's entries each node sees
        self.read = cache.get_seq_length()  # the prompt's entries (hidden ones included)
        self.nodes = [root]
        self.passes = 0

    def run(self, ids: Sequence[int]) -> Iterator[tuple[int, Dist]]:
        """Run the nodes `ids` (their parents run already), MAX_PASS_NODES a pass; each one's distribution."""
        for start in range(0, len(ids), MAX_PASS_NODES):
            chunk = ids[start:start + MAX_PASS_NODES]
            logits = self._pass(chunk)
            for depth in sorted({self.nodes[i].depth for i in chunk}):  # the penalties read rows of one length
                rows = [row for row, i in enumerate(chunk) if self.nodes[i].depth == depth]
                for row, dist in zip(rows, self.distributions([chunk[row] for row in rows], logits[rows])):
                    yield chunk[row], dist

    def distributions(self, ids: Sequence[int], logits: torch.Tensor) -> list[Dist]:
        """The distributions after nodes of one depth, from their logits (len(ids), vocab); each node's entropy."""
        nodes = [self.nodes[i] for i in ids]
        paths = torch.tensor([node.path for node in nodes], dtype=torch.long, device=self.context.device)
        context = torch.cat([self.context.expand(len(nodes), -1), paths.view(len(nodes), nodes[0].depth)], dim=1)
        valid = None if nodes[0].guide is None else torch.stack([node.guide.valid() for node in nodes])
        final = torch.log_softmax(self.sampling.final_scores(context, logits, valid), dim=-1)
        base = torch.log_softmax(logits.float(), dim=-1)
        entropy = (torch.special.entr(final.exp()).sum(dim=-1) / math.log(2)).tolist()
        for node, bits, row in zip(nodes, entropy, range(len(nodes))):
            if valid is not None and not valid[row].any():  # the constraint refused its token: nothing follows
                node.ends = True
            else:
                node.entropy = bits
        return [Dist(b, f) for b, f in zip(base, final)]

    def _pass(self, ids: Sequence[int]) -> torch.Tensor:
        """One tree-masked pass over the nodes `ids`: each sees the prompt, its ancestors' entries and itself."""
        nodes = [self.nodes[i] for i in ids]
        device = self.context.device
        ran = self.cache.get_seq_length() - self.read
        rows = [row for row, node in enumerate(nodes) for _ in self.nodes[node.parent].columns]
        cols = [column for node in nodes for column in self.nodes[node.parent].columns]
        sees_tree = torch.zeros(len(nodes), ran, dtype=torch.bool, device=device)
        sees_tree[rows, cols] = True
        own = torch.eye(len(nodes), dtype=torch.bool, device=device)
        mask = visibility_mask(torch.cat([self.visible.expand(len(nodes), -1), sees_tree, own], dim=1),
                               self.model.dtype, device)
        tokens = torch.tensor([[node.token_id for node in nodes]], device=device)
        positions = torch.tensor([[self.context.shape[1] + node.depth - 1 for node in nodes]], device=device)
        out = self.model(tokens, past_key_values=self.cache, attention_mask=mask, position_ids=positions,
                         use_cache=True)
        for row, node in enumerate(nodes):
            node.columns = self.nodes[node.parent].columns + (ran + row,)
        self.passes += 1
        return out.logits[0]

    def kept_paths(self, n: int) -> list[Continuation]:
        """The n likeliest run paths among those no run path extends, with their KV (valid after the prompt)."""
        leaves = [node for node in self.nodes[1:] if node.columns and not any(
            self.nodes[child].columns for child in node.children)]
        leaves.sort(key=lambda node: -node.mass)
        layers = self.cache.layers
        kept = []
        for node in leaves[:n]:
            idx = torch.tensor(node.columns, device=layers[0].keys.device) + self.read
            kept.append((list(node.path), [(layer.keys[..., idx, :], layer.values[..., idx, :]) for layer in layers]))
        return kept


def expand(nodes: list[Node], i: int, dist: Dist, depth: int, cutoff: float, writer: Sequence[int],
           stops: frozenset[int]) -> list[int]:
    """Add node i's children in the map, by mass: those at least `cutoff` likely, and the writer's next token if i
    is on the writer's path; the new nodes that must run (all but those that end). `dist` may hold a server's top
    tokens only (-inf for the others): the map then holds those of them that reach the cutoff."""
    node = nodes[i]
    if node.ends or node.depth == depth:
        return []
    # p_final >= cutoff / mass, a little loosely (float32), then exactly
    loose = math.log(cutoff / node.mass) - 1e-5 if node.mass > 0 else math.inf
    candidates = (dist.final >= loose).nonzero()[:, 0].tolist()
    probs = dist.final[candidates].exp().tolist()
    tokens = [t for t, p in sorted(zip(candidates, probs), key=lambda c: -c[1]) if node.mass * p >= cutoff]
    on_text = node.on_text and node.depth < len(writer)
    if on_text and writer[node.depth] not in tokens:
        tokens.append(writer[node.depth])
        tokens.sort(key=lambda t: -float(dist.final[t]))
    children = [add_child(nodes, i, t, dist, stops, on_text and t == writer[node.depth]) for t in tokens]
    return [c for c in children if not nodes[c].ends]


def add_child(nodes: list[Node], parent: int, token: int, dist: Dist, stops: frozenset[int],
              on_text: bool = False) -> int:
    """A child of `parent` taking `token`, its probabilities read off `dist` (the parent's), added to `nodes`; its
    id. It ends at an end token in `stops`, or one the constraint refuses."""
    above = nodes[parent]
    prob = float(dist.final[token].exp())
    guide = None if above.guide is None else above.guide.fork()
    allowed = guide is None or guide.advance(token)
    node = Node(parent, token, above.depth + 1, prob, float(dist.base[token].exp()), above.mass * prob,
                above.path + (token,), guide, on_text, ends=token in stops or not allowed)
    nodes.append(node)
    above.children.append(len(nodes) - 1)
    return len(nodes) - 1


@torch.inference_mode()
def map_futures(
    model: PreTrainedModel, context: torch.Tensor, cache: DynamicCache, depth: int, cutoff: float,
    sampling: Sampling, stops: frozenset[int], allowed: torch.Tensor | None = None, guide: Guide | None = None,
    writer: Sequence[int] = (), hidden: int = 0, known_scores: Scores | None = None,
) -> Futures:
    """Every continuation of `context` (1, T) of at most `depth` tokens whose mass is at least `cutoff`, and the
    `writer`'s own next tokens (listed whatever their mass), over `cache` (any proper prefix of the context's KV, and
    at a caret the text after it: its last `hidden` entries; it comes back as it came). `allowed` (healing's mask)
    restricts the first token, renormalised; `guide` (a constraint's state) every token; an end token in `stops`
    ends a path."""
    stored = cache.get_seq_length()
    logits, scores, places = extend_prompt(model, context, cache, hidden, known_scores)
    root = Node(None, None, 0, 1.0, 1.0, 1.0, (), guide, on_text=True)
    tree = Tree(model, context, cache, places, sampling, stops, root)
    first = logits[None] if allowed is None else logits.masked_fill(~allowed, float("-inf"))[None]
    level = expand(tree.nodes, 0, tree.distributions([0], first)[0], depth, cutoff, writer, stops)
    while level:
        level = [child for i, dist in tree.run(level)
                 for child in expand(tree.nodes, i, dist, depth, cutoff, writer, stops)]
    paths = tree.kept_paths(KEPT_PATHS)
    cache.crop(stored - cache.get_seq_length() if hidden else len(places) - cache.get_seq_length())
    return Futures(tree.nodes, cache, paths, scores, tree.passes)


def likeliest_paths(model: PreTrainedModel, context: torch.Tensor, cache: DynamicCache, places: torch.Tensor,
                    root: Dist, sampling: Sampling, guide: Guide | None, k: int, depth: int) -> list[list[int]]:
    """The k likeliest paths of `depth` tokens after `context` (1, T) by mass, likeliest first, over `cache` (holding
    the context's entries, `places` each one's position, -1 hidden; it comes back as it came). `root` is the
    distribution after the context. A path that reaches an end token ends there, shorter.

    First the k likeliest first tokens are continued greedily: k whole paths, so the k-th likeliest path has at least
    the least of their masses. Then every path at least that likely is grown, a level a pass, as the map grows (the
    greedy paths' nodes not run again), and the k likeliest are read off it: exact, in 2 (depth - 1) passes. Where
    that bound is so low that the map could pass MAX_MAP_NODES, the map stops at that many's cutoff instead, and the
    greedy paths stand in for any it misses."""
    stops = frozenset(eos_ids(model.generation_config))
    tree = Tree(model, context, cache, places, sampling, stops, Node(None, None, 0, 1.0, 1.0, 1.0, (), guide))
    dists, children = {0: root}, {}  # the run nodes' distributions; (parent, token) -> node

    def child(parent: int, token: int) -> int:
        if (parent, token) not in children:
            children[parent, token] = add_child(tree.nodes, parent, token, dists[parent], stops)
        return children[parent, token]

    def run(nodes: list[int]) -> None:
        dists.update(tree.run([i for i in nodes if i not in dists and not tree.nodes[i].ends]))

    greedy = [child(0, t) for t in root.final.topk(min(k, int(torch.isfinite(root.final).sum()))).indices.tolist()]
    for _ in range(depth - 1):
        run(greedy)
        greedy = [i if i not in dists else child(i, int(dists[i].final.argmax())) for i in greedy]
    cutoff = max(min(tree.nodes[i].mass for i in greedy), depth / MAX_MAP_NODES)
    level, whole = [0], set(greedy)
    for _ in range(depth):
        run(level)
        level = [child(i, t) for i in level if i in dists
                 for t in (dists[i].final >= math.log(cutoff / tree.nodes[i].mass) - 1e-5).nonzero()[:, 0].tolist()]
        level = [i for i in level if tree.nodes[i].mass >= cutoff]
        whole.update(i for i in level if tree.nodes[i].ends or tree.nodes[i].depth == depth)
    cache.crop(len(places) - cache.get_seq_length())
    return [list(tree.nodes[i].path) for i in sorted(whole, key=lambda i: -tree.nodes[i].mass)[:k]]
