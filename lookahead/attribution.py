"""Why this token: how much each token of the context drove the model's probability of one next token.

f = log p(target | context) at the last position, as a function of the input embeddings e_i:
  saliency              ‖∂f/∂e_i‖₂
  input_x_gradient      ‖e_i ⊙ ∂f/∂e_i‖₂
  integrated_gradients  ‖e_i ⊙ (1/m) Σ_{k=1..m} ∂f/∂e_i at (k/m)·e‖₂   (zero baseline, m steps)
  attention             the last position's attention weights to each position, averaged over layers and heads
Scores are normalised to sum to 1. A gradient costs a forward and a backward over the whole window (no
KV cache helps), so callers bound the window; integrated gradients runs its m points a few at a time, and on a CPU
a long window's attention runs in blocks of query rows (a long job yields to clicks between module calls).
Attention weights need the eager attention path: the model switches to it for the last token's step.
"""

from __future__ import annotations

import threading
from collections.abc import Generator

import torch
from torch.nn.functional import scaled_dot_product_attention
from torch.overrides import TorchFunctionMode
from transformers import PreTrainedModel

from lookahead.kv_cache import GrowableCache

METHODS = ("saliency", "input_x_gradient", "integrated_gradients", "attention")
IG_BATCH = 4  # integrated-gradients points per forward/backward at most (memory grows with it)
# Rows (points x tokens) one forward/backward runs at most: a long job yields to a click between module calls, so a
# click waits for the rest of one (a linear layer over this many rows: tens of ms on a 2-core CPU, where four points
# of a 2,048-token window took a click 1.2x its time alone).
IG_ROWS = 2048
# Query rows x keys one attention call of a gradient pass covers at most. The backward of one layer's attention over a
# 2,048-token window is a single kernel of ~120 ms on a 2-core CPU, which a click arriving meanwhile shares the cores
# with; in blocks of 256 query rows each backward is a module call of its own (at most ~30 ms, as long as a linear
# layer's), between which a sliced job yields (lookahead/scheduler.py).
ATTENTION_PAIRS = 256 * 2048
_eager = threading.Lock()  # one attention-weights forward at a time switches the model's attention path


def attribute(
    model: PreTrainedModel, ids: list[int], target: int, method: str, steps: int
) -> tuple[torch.Tensor, float]:
    """(scores (n,) summing to 1, p(target)) for the context `ids` and the next token `target`."""
    work = attribute_stepwise(model, ids, target, method, steps)
    while True:
        try:
            next(work)
        except StopIteration as finished:
            return finished.value


def ig_batch(n_tokens: int) -> int:
    """Integrated-gradients points per forward/backward over a window of `n_tokens`."""
    return max(1, min(IG_BATCH, IG_ROWS // max(n_tokens, 1)))


def passes(method: str, steps: int, n_tokens: int) -> int:
    """Forward(-and-backward) passes over a window of `n_tokens` that `method` takes: what a progress bar counts."""
    return -(-steps // ig_batch(n_tokens)) if method == "integrated_gradients" else 1


def attribute_stepwise(
    model: PreTrainedModel, ids: list[int], target: int, method: str, steps: int
) -> Generator[int, None, tuple[torch.Tensor, float]]:
    """As `attribute`, yielding the passes done after each (of `passes(method, steps, len(ids))`), for a progress
    bar."""
    if method == "attention":
        weights, prob = _attention(model, ids, target)
        yield 1
    else:
        weights, prob = yield from _gradients(model, ids, target, method, steps)
    return weights / weights.sum().clamp_min(1e-30), prob


def _log_prob(model: PreTrainedModel, embeds: torch.Tensor, target: int) -> torch.Tensor:
    """log p(target) after each row of `embeds` (B, n, d), as a (B,) tensor."""
    logits = model(inputs_embeds=embeds, use_cache=False, logits_to_keep=1).logits[:, -1].float()
    return torch.log_softmax(logits, -1)[:, target]


def _gradient(model: PreTrainedModel, points: torch.Tensor, target: int) -> torch.Tensor:
    """∂ log p(target) / ∂ points for each row of `points` (B, n, d). Grad mode is set here, not around a
    `yield`: a generator may resume in another thread, whose grad mode is its own."""
    points = points.detach().requires_grad_(True)
    with torch.enable_grad(), _AttentionInBlocks():
        (grad,) = torch.autograd.grad(_log_prob(model, points, target).sum(), points)
    return grad


class _AttentionRows(torch.nn.Module):
    """The attention of one block of query rows: a module call, so a sliced job checks in before its forward and
    again once its backward is done."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                **options) -> torch.Tensor:
        return scaled_dot_product_attention(query, key, value, attn_mask=mask, **options)


class _AttentionInBlocks(TorchFunctionMode):
    """In this thread, every long attention call on the CPU (queries x keys above ATTENTION_PAIRS) runs as blocks of
    query rows, each seeing the keys its rows may see: the same result up to rounding. (On a GPU the calls only
    queue kernels: a block would not shorten the wait for them.)"""

    rows = _AttentionRows()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not scaled_dot_product_attention:
            return func(*args, **kwargs)
        query, key, value, *rest = args
        options = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), rest)) | kwargs
        mask, causal = options.pop("attn_mask", None), options.pop("is_causal", False)
        n_queries, n_keys = query.shape[-2], key.shape[-2]
        block = max(1, ATTENTION_PAIRS // n_keys)
        if n_queries <= block or options.get("dropout_p") or query.device.type != "cpu":  # a GPU's kernels are queued
            return func(query, key, value, attn_mask=mask, is_causal=causal, **options)
        outputs = []
        for start in range(0, n_queries, block):
            end = min(start + block, n_queries)
            if causal:  # row i sees keys 0..i, as torch's is_causal means it
                seen = min(end, n_keys)
                block_mask = torch.ones(end - start, seen, dtype=torch.bool, device=query.device).tril(start)
                outputs.append(self.rows(query[..., start:end, :], key[..., :seen, :], value[..., :seen, :],
                                         block_mask, **options))
            else:
                block_mask = None if mask is None else mask[..., start:end, :]
                outputs.append(self.rows(query[..., start:end, :], key, value, block_mask, **options))
        return torch.cat(outputs, dim=-2)


def _gradients(
    model: PreTrainedModel, ids: list[int], target: int, method: str, steps: int
) -> Generator[int, None, tuple[torch.Tensor, float]]:
    embeds = model.get_input_embeddings()(torch.tensor([ids], device=model.device)).detach()
    if method == "integrated_gradients":
        total, batch = torch.zeros_like(embeds[0]), ig_batch(len(ids))
        for first in range(1, steps + 1, batch):
            alphas = torch.arange(first, min(first + batch, steps + 1), device=embeds.device) / steps
            total += _gradient(model, (alphas[:, None, None] * embeds).to(embeds.dtype), target).sum(0)
            yield (first - 1) // batch + 1
        grad = total / steps
    else:
        grad = _gradient(model, embeds, target)[0]
        yield 1
    with torch.inference_mode():
        prob = float(_log_prob(model, embeds, target).exp())
    weighted = grad if method == "saliency" else embeds[0] * grad
    return weighted.float().norm(dim=-1), prob


@torch.inference_mode()
def _attention(model: PreTrainedModel, ids: list[int], target: int) -> tuple[torch.Tensor, float]:
    """The last position's attention weights: the tokens before it read on the model's own attention path into a
    cache, then the last one on the eager path, the one that returns weights. Only its row of weights is made: the
    whole window on that path made every position's (30 layers of 9 x 2,048 x 2,048 at 2,048 tokens, 4.5 GB)."""
    config, device = model.config.get_text_config(), model.device
    cache = GrowableCache()
    if len(ids) > 1:
        model(torch.tensor([ids[:-1]], device=device), past_key_values=cache, use_cache=True, logits_to_keep=1)
    with _eager:
        previous = config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            out = model(torch.tensor([ids[-1:]], device=device), past_key_values=cache, use_cache=True,
                        output_attentions=True)
        finally:
            model.set_attn_implementation(previous)
    last = torch.stack([layer[0, :, -1, :].float() for layer in out.attentions])  # (layers, heads, n)
    prob = float(torch.softmax(out.logits[0, -1].float(), -1)[target])
    return last.mean(dim=(0, 1)), prob
