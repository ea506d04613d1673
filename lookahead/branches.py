"""Tensor-level lookahead: top-k next tokens, each continued a few tokens, over one shared KV cache.

The k branches are laid out after the prompt as one sequence and kept apart by a
tree-attention mask, so the prompt's KV cache is never copied (the seed repeated it
k times). Each of the depth-1 greedy steps feeds the k newest branch tokens at once:
the token of branch b at depth d sits at position T+d and sees the prompt plus branch
b's own earlier tokens. Afterwards the cache is cropped back to the prompt, exactly
as it was; each branch's fed tokens keep their KV on the side (`branch_kv`), valid to
append after the prompt, so taking a branch costs one token's forward instead of depth.
Under a constraint each branch carries its own copy of the grammar's state (lookahead/constraints.py),
and every token it takes is one its state allows.

At a caret inside the text, the cache may hold the whole text: the tokens after the caret stay in it,
masked out (`hidden`), and the prompt's own tail runs beside them, so moving the caret never reads the
text before it again. What follows the caret (`follow`) is then run once after each branch, and once
without one, in the same kind of tree pass: how much each branch makes it likelier is the branch's fit.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import DynamicCache, PreTrainedModel

from lookahead.cache_passes import additive_mask, extend_prompt, tree_attention_mask, visibility_mask
from lookahead.constraints import Guide
from lookahead.kv_cache import GrowableCache
from lookahead.multiverse import Dist, likeliest_paths
from lookahead.sampling import PLAIN, Sampling, choose, ranked
from lookahead.scoring import Scores


class Lookahead(NamedTuple):
    sequences: torch.Tensor  # (k, depth) branch token ids; row i starts with the i-th most likely token
    next_token_logits: torch.Tensor  # (vocab,) raw logits after the prompt (no mask applied)
    step_logits: list[torch.Tensor]  # depth-1 tensors (k, vocab): logits that chose each later token
    cache: DynamicCache  # KV cache of exactly the prompt's tokens
    branch_kv: list[list[tuple[torch.Tensor, torch.Tensor]]]  # per branch, per layer: KV of its first depth-1 tokens
    scores: Scores | None  # the prompt's tokens scored, when asked for (lookahead/scoring.py)
    valid: torch.Tensor | None  # (vocab,) bool: the tokens a constraint allows next (None: no constraint)
    fit: torch.Tensor | None  # (k,) per token of `follow`: log p(follow | prompt + branch) - log p(follow | prompt)
    lead: list[int] = []  # the tokens written all but certainly after the prompt (`Lead`), before every branch
    lead_probs: list[float] = []  # their p_base each


LOOKUP_MATCH = 2  # a lead's next tokens are guessed where the text's last this many tokens occurred before


class Lead(NamedTuple):
    """Where the next token is this likely (p_base and p_final), and not one of `stops`, it is no choice: it is
    read after the prompt and the branches fork after it, up to `max_tokens` such tokens in a row."""
    prob: float
    max_tokens: int
    stops: frozenset[int]










@torch.inference_mode()
def get_lookahead_sequences(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    n_branch_tokens: int = 5,
    depth: int = 3,
    cache: DynamicCache | None = None,
    allowed_first_tokens: torch.Tensor | None = None,
    sampling: Sampling = PLAIN,
    branch_mode: str = "greedy",
    generator: torch.Generator | None = None,
    known_scores: Scores | None = None,
    guide: Guide | None = None,
    hidden: int = 0,
    follow: list[int] | None = None,
    unforced: int | None = None,
    lead: Lead | None = None,
) -> Lookahead:
    """Top `n_branch_tokens` next tokens after `input_ids` (1, T), each continued to `depth` tokens.

    `cache` may hold the KV of any proper prefix of `input_ids` (it is extended in place
    and comes back holding exactly `input_ids`). `allowed_first_tokens` (bool, vocab)
    restricts the first token, for token healing. First tokens are ranked by p_final
    under `sampling`; later ones are chosen by `branch_mode` (greedy or sampled from
    p_final with `generator`), see lookahead/sampling.py. With `known_scores` (the rows of the
    tokens the cache holds, see extend_and_score) the new prompt tokens are scored as they run.
    With a `guide` (a constraint's state after the prompt) branches start from valid tokens only and
    each continues under its own copy of it.

    At a caret: the cache's last `hidden` entries (the text after the caret) are masked out of every pass and
    kept; it comes back as it came, holding them. With `follow` (the caret's next tokens), `fit` compares
    them after each branch with them after the prompt's first `unforced` tokens (default: all of them).

    With `lead`, tokens the model all but certainly writes next are read first (one pass each, or one for several
    where the text repeats itself: `_guessed`), and the branches fork after them (`Lookahead.lead`); the cache
    still comes back holding `input_ids` only, each branch's `branch_kv` beginning with theirs.
    """
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"expected input_ids of shape (1, T), got {tuple(input_ids.shape)}")
    cache = GrowableCache() if cache is None else cache
    prompt_len = input_ids.shape[1]
    stored = cache.get_seq_length()  # the hidden entries included
    logits, scores, places = extend_prompt(model, input_ids, cache, hidden, known_scores)
    read = len(places)  # cache entries of the prompt: what comes back
    unforced = prompt_len if unforced is None else unforced  # a lead is the branches' own, as a constraint's is not
    lead_ids, lead_probs = [], []
    guessed: list[tuple[int, torch.Tensor]] = []  # guesses run after the lead's last token, with their logits
    while True:
        first = logits if allowed_first_tokens is None else logits.masked_fill(~allowed_first_tokens, float("-inf"))
        first = first.float()  # rank exactly as the distribution shown does (same ties)
        first_valid = None if guide is None else guide.valid()
        if first_valid is not None:
            if not (first_valid & torch.isfinite(first)).any():
                raise ValueError("no token can continue the text under the constraint")
        valid = None if first_valid is None else first_valid[None]
        final = sampling.final_scores(input_ids, first[None], valid)[0]
        certain = None if lead is None or len(lead_ids) == lead.max_tokens else _certain(first, final, lead)
        if guessed and (certain is None or guessed[0][0] != certain[0]):
            cache.crop(-len(guessed))  # the guesses that were wrong
            guessed = []
        if certain is None:
            break
        token, prob = certain
        lead_ids.append(token)
        lead_probs.append(prob)
        guide = None if guide is None else guide.fork()
        if guide is not None:
            guide.advance(token)
        if not guessed:  # the token, and what the text's own repetition says comes after it: one pass
            fed = [token, *_guessed(input_ids[0].tolist() + [token], lead.max_tokens - len(lead_ids))]
            guessed = list(zip(fed, _extend(model, fed, cache, places, prompt_len)))
        logits = guessed.pop(0)[1]
        input_ids = torch.cat([input_ids, input_ids.new_tensor([[token]])], dim=1)
        places = torch.cat([places, places.new_tensor([prompt_len])])
        prompt_len, allowed_first_tokens = prompt_len + 1, None  # healing bears on the text's next token only
    if first_valid is not None:
        first = first.masked_fill(~first_valid, float("-inf"))  # branches start from valid tokens only
    if branch_mode == "mass":
        root = Dist(torch.log_softmax(first, -1), torch.log_softmax(final, -1))
        paths = likeliest_paths(model, input_ids, cache, places, root, sampling, guide, n_branch_tokens, depth)
        sequences, step_logits = _run_paths(model, cache, places, paths, depth, prompt_len)
    else:
        sequences, step_logits = _continued(model, cache, places, input_ids, ranked(first, final, n_branch_tokens),
                                            guide, sampling, branch_mode, generator, depth)
    k = len(sequences[0])
    fed = depth > 1 or lead_ids
    branch_kv = [_branch_kv(cache, read, len(places), k, b) if fed else [] for b in range(k)]
    sequences = torch.stack(sequences, dim=1)
    fit = None
    if follow:
        fit = _fit(model, cache, places, sequences, input_ids[0, unforced - 1], unforced, follow, prompt_len)
    cache.crop(-(cache.get_seq_length() - (stored if hidden else read)))
    return Lookahead(sequences, logits, step_logits, cache, branch_kv, scores, first_valid, fit, lead_ids, lead_probs)




def _continued(model: PreTrainedModel, cache: DynamicCache, places: torch.Tensor, input_ids: torch.Tensor,
               firsts: torch.Tensor, guide: Guide | None, sampling: Sampling, branch_mode: str,
               generator: torch.Generator | None, depth: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each first token continued to `depth` tokens, one step a pass (greedy or sampled from p_final, under its own
    copy of the constraint's state): the tokens of each step (k,), and the logits (k, vocab) that chose each later
    one."""
    k, prompt_len = len(firsts), input_ids.shape[1]
    guides = _forked(guide, firsts.tolist())
    sequences, step_logits = [firsts], []
    for step in range(1, depth):
        mask = tree_attention_mask(places >= 0, k, step, model.dtype, input_ids.device)
        positions = torch.full((1, k), prompt_len + step - 1, device=input_ids.device)
        out = model(sequences[-1][None], past_key_values=cache, attention_mask=mask, position_ids=positions,
                    use_cache=True)
        step_logits.append(out.logits[0])
        context = torch.cat([input_ids.expand(k, -1), torch.stack(sequences, dim=1)], dim=1)
        valid = None if guides is None else torch.stack([_still_valid(g) for g in guides])
        tokens = choose(sampling.final_scores(context, out.logits[0], valid), branch_mode, generator)
        if guides is not None:
            for g, token in zip(guides, tokens.tolist()):
                g.advance(token)
        sequences.append(tokens)
    return sequences, step_logits


def _run_paths(model: PreTrainedModel, cache: DynamicCache, places: torch.Tensor, paths: list[list[int]], depth: int,
               prompt_len: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Paths chosen already (a path that ended early padded with its end token), laid out as `_continued` lays out
    its steps, all in one pass: each step's tokens (k,), and the logits (k, vocab) after each but the last step."""
    k, device = len(paths), places.device
    padded = torch.tensor([path + path[-1:] * (depth - len(path)) for path in paths], device=device)
    sequences = list(padded.T)
    if depth == 1:
        return sequences, []
    steps = torch.arange(depth - 1, device=device).repeat_interleave(k)  # each row's step; its branch: row % k
    branch = torch.arange(k, device=device).repeat(depth - 1)
    own = (branch[:, None] == branch[None]) & (steps[:, None] >= steps[None])
    mask = additive_mask(places >= 0, own, model.dtype, device)
    out = model(padded[:, :-1].T.reshape(1, -1), past_key_values=cache, attention_mask=mask,
                position_ids=(prompt_len + steps)[None], use_cache=True)
    return sequences, list(out.logits[0].view(depth - 1, k, -1))


def _certain(base: torch.Tensor, final: torch.Tensor, lead: Lead) -> tuple[int, float] | None:
    """The next token and its p_base if it is no choice (`Lead`): the distribution's first entry (by p_final,
    then p_base) at least `lead.prob` likely both ways; None otherwise."""
    base, final = torch.log_softmax(base, -1), torch.log_softmax(final, -1)
    top = int(ranked(base, final, 1)[0])
    prob = float(base[top].exp())
    certain = prob >= lead.prob and float(final[top].exp()) >= lead.prob and top not in lead.stops
    return (top, prob) if certain else None


def _extend(model: PreTrainedModel, tokens: list[int], cache: DynamicCache, places: torch.Tensor,
            position: int) -> torch.Tensor:
    """Run `tokens` from `position` on after the cache's entries, each seeing those `places` marks visible (>= 0)
    and the tokens before it; their logits (len(tokens), vocab)."""
    n = len(tokens)
    mask = additive_mask(places >= 0, torch.ones(n, n, dtype=torch.bool).tril(), model.dtype, places.device)
    out = model(places.new_tensor([tokens]), past_key_values=cache, attention_mask=mask,
                position_ids=torch.arange(position, position + n, device=places.device)[None], use_cache=True)
    return out.logits[0]


def _guessed(ids: list[int], n: int) -> list[int]:
    """Up to `n` tokens that followed the last LOOKUP_MATCH tokens of `ids` where these last occurred before: a text
    that repeats itself is led by what it repeats, and guesses run in the same pass as the token before them cost
    next to nothing (a pass reads the weights once, whatever its few tokens)."""
    tail = ids[-LOOKUP_MATCH:]
    for start in range(len(ids) - LOOKUP_MATCH - 1, -1, -1) if n > 0 else ():
        if ids[start:start + LOOKUP_MATCH] == tail:
            return ids[start + LOOKUP_MATCH:start + LOOKUP_MATCH + n]
    return []




def _fit(model: PreTrainedModel, cache: DynamicCache, places: torch.Tensor, sequences: torch.Tensor,
         last_unforced: torch.Tensor, unforced: int, follow: list[int], prompt_len: int) -> torch.Tensor:
    """(k,) mean log-probability gain of `follow` after each branch over `follow` after the prompt's first
    `unforced` tokens, from one pass of k + 1 blocks: each branch's last token then `follow`, and the
    prompt's last unforced token (run again, beside its own entry) then `follow`."""
    k, depth = sequences.shape
    n = len(follow)
    device = sequences.device
    follow_ids = torch.tensor(follow, device=device)
    tokens = torch.cat([torch.cat([sequences[:, -1:], follow_ids.expand(k, -1)], dim=1).flatten(),
                        last_unforced.reshape(1), follow_ids])
    steps = torch.arange(n + 1, device=device)
    positions = torch.cat([(prompt_len + depth - 1 + steps).repeat(k), unforced - 1 + steps])
    tree = torch.arange(cache.get_seq_length() - len(places), device=device) % k  # each tree entry's branch
    block = torch.arange(k + 1, device=device).repeat_interleave(n + 1)  # each row's block; k: the baseline
    before_unforced = (places >= 0) & (places < unforced - 1)
    sees_prompt = torch.where((block < k)[:, None], (places >= 0)[None], before_unforced[None])
    sees_tree = (tree[None] == block[:, None]) & (block < k)[:, None]
    row = torch.arange(len(block), device=device)
    causal = (block[:, None] == block[None]) & (row[:, None] >= row[None])
    mask = visibility_mask(torch.cat([sees_prompt, sees_tree, causal], dim=1), model.dtype, device)
    logits = model(tokens[None], past_key_values=cache, attention_mask=mask, position_ids=positions[None],
                   use_cache=True).logits[0].float()
    scored = torch.log_softmax(logits.view(k + 1, n + 1, -1)[:, :n], dim=-1)
    totals = scored.gather(-1, follow_ids.expand(k + 1, -1)[..., None])[..., 0].sum(dim=1)
    return (totals[:k] - totals[k]) / n


def _forked(guide: Guide | None, firsts: list[int]) -> list[Guide] | None:
    """Each branch's own state, having taken its first token."""
    if guide is None:
        return None
    guides = [guide.fork() for _ in firsts]
    for g, token in zip(guides, firsts):
        g.advance(token)
    return guides


def _still_valid(guide: Guide) -> torch.Tensor:
    """What a branch may take next; anything once its constraint is spent (after the end token, which
    ends the branch: what follows is cut off), so the row still has a token to take."""
    valid = guide.valid()
    return valid if valid.any() else torch.ones_like(valid)


def _branch_kv(cache: DynamicCache, read: int, tree_start: int, k: int,
               branch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Branch `branch`'s entries past the prompt's `read`: the lead's (up to `tree_start`), then its own of the
    tree part (laid out step by step, index step*k + branch)."""
    device = cache.layers[0].keys.device
    idx = torch.cat([torch.arange(read, tree_start, device=device),
                     torch.arange(tree_start + branch, cache.get_seq_length(), k, device=device)])
    return [(layer.keys[..., idx, :], layer.values[..., idx, :]) for layer in cache.layers]
