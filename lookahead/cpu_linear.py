"""Linear layers that stay cheap when a CPU forward feeds a few tokens instead of one.

A decoding pass on CPU is bound by reading the weights. For one token, `F.linear` runs a
matrix-vector product at memory speed; for 2 to ~30 tokens MKL's GEMM takes a path that
costs about twice that (it measured 34 ms for one token and 72 ms for two over the
135M model's layers). Computing `W @ x.T` instead keeps that case at about the
one-token cost up to 4 tokens and well under it beyond, which is what makes guessing
several tokens per pass (lookahead decoding, branch trees) pay on CPU.
"""

from __future__ import annotations

import torch
from torch import nn


MAX_ROWS = 64  # beyond this (prompt prefills) GEMM's own path is as fast, so it is left alone


class SkinnyLinear(nn.Linear):
    """nn.Linear computing 2 to MAX_ROWS rows as weight @ x.T (same result up to rounding)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if not 1 < rows <= MAX_ROWS:
            return super().forward(x)
        out = (self.weight @ x.reshape(rows, -1).T).T
        if self.bias is not None:
            out = out + self.bias
        return out.contiguous().reshape(*x.shape[:-1], -1)


def use_skinny_linears(model: nn.Module) -> None:
    """Switch the model's nn.Linear layers (in place) to SkinnyLinear; weights are untouched."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = SkinnyLinear
