"""What "why?" costs: seconds per attribution method at 128, 512 and 2,048 tokens, and as a multiple of one forward.

A gradient is a forward and a backward over the whole window (no KV cache helps); integrated gradients
takes `steps` of them (16 here, the default), batched a few at a time. One forward is timed in the same
run over the same tokens (machines are noisy: read the multiples). Embedded model, fp32.
Run: python bench/bench_attribution.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_constraints import seconds  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from lookahead.attribution import METHODS, attribute  # noqa: E402
from lookahead.cpu_linear import cpu_model  # noqa: E402

LENGTHS = (128, 512, 2048)
STEPS = 16
STORY = ("The lighthouse stood at the edge of the world. Every evening the keeper climbed its hundred steps, lit the "
         "great lamp, and watched the sea. ") * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    model, tokenizer = inference.load_model()
    story = tokenizer(STORY)["input_ids"]
    print(f"model {inference.default_model_name()} on {model.device} ({cpu_model()}), torch threads "
          f"{torch.get_num_threads()}, integrated gradients with {STEPS} steps, median of {args.repeats}\n")
    print("| tokens | one forward s | " + " | ".join(f"{m} s (× forward)" for m in METHODS) + " |")
    print("|---:|---:|" + "---:|" * len(METHODS))
    for n in LENGTHS:
        ids = story[-n:]
        with torch.inference_mode():
            forward = seconds(lambda: model(torch.tensor([ids]), use_cache=False, logits_to_keep=1), args.repeats)
        cells = []
        for method in METHODS:
            took = seconds(lambda: attribute(model, ids, ids[0], method, STEPS), args.repeats)
            cells.append(f"{took:.2f} ({took / forward:.1f}×)")
        print(f"| {n} | {forward:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
