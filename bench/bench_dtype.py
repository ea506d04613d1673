"""Does lookahead decoding still give greedy's exact text in bfloat16? Measured against float32.

Lookahead decoding verifies several guessed tokens in one pass; greedy runs one token per
pass. The two passes use different kernel shapes, so their logits round differently, and a
near-tie between the two best tokens can flip. In float32 the rounding is ~1e-6 relative; in
bfloat16 ~1e-2. For each dtype this runs greedy and lookahead decoding on the decoding
benchmark's prompts (the embedded model on CPU, with the same fast few-row linears the app
uses) and reports where the two texts first differ, and how far greedy in that dtype drifts
from float32 greedy. Run: python bench/bench_dtype.py [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_decoding import PROMPTS  # noqa: E402

from lookahead.cpu_linear import pass_costs, use_linear_path  # noqa: E402
from lookahead.decoding import greedy_passes, lookahead_passes  # noqa: E402
from lookahead.models import embedded_model_dir  # noqa: E402


def decode(passes) -> list[int]:
    return [token for step in passes for token in step.tokens]


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    folder = embedded_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos = {tokenizer.eos_token_id}
    reference: dict[str, list[int]] = {}
    print(f"embedded SmolLM2-135M-Instruct on CPU, {args.new_tokens} new tokens; "
          "a position is the first new token where the texts differ ('same' if none)\n")
    print("| dtype | prompt | lookahead vs greedy (same dtype) | greedy vs float32 greedy |")
    print("|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
        costs = pass_costs(model, f"embedded {dtype}", None)  # measured for this dtype: its own curve
        use_linear_path(model, costs.transposed_rows())
        for name, text in PROMPTS.items():
            ids = tokenizer(text)["input_ids"]
            with torch.inference_mode():
                greedy = decode(greedy_passes(model, ids, args.new_tokens, eos))
                lookahead = decode(lookahead_passes(model, ids, args.new_tokens, eos, costs))
            reference.setdefault(name, greedy)
            show = lambda i: "same" if i is None else f"differ from token {i}"  # noqa: E731
            print(f"| {str(dtype).removeprefix('torch.')} | {name} | {show(first_difference(lookahead, greedy))} "
                  f"| {show(first_difference(greedy, reference[name]))} |", flush=True)


if __name__ == "__main__":
    main()
