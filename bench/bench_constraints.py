"""What a constraint costs: per click and per generated token at ~1k tokens of context, against unconstrained.

Timed in the same run on the embedded model (fp32, this machine's threads):
  mask          one `Guide.valid()` (llguidance's token mask, unpacked to a bool tensor), and one advance
  click         a branch taken and the next lookahead (5 branches, depth 3) on the session's warm cache
  token         greedy `generate` of up to 48 tokens (lookahead decoding off and on), seconds per token
                (the prompt's pass included), against as many tokens unconstrained (a choice ends early)
Ratios are against the unconstrained call of the same kind in the same run (machines are noisy).
Run: python bench/bench_constraints.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import custom_llm_inference as inference  # noqa: E402
from lookahead.constraints import check_constraint  # noqa: E402
from lookahead.cpu_linear import cpu_model  # noqa: E402
from lookahead.models import stop_tokens  # noqa: E402

STORY = ("The lighthouse stood at the edge of the world. Every evening the keeper climbed its hundred steps, lit the "
         "great lamp, and watched the sea. ") * 40  # ~1k tokens
CONSTRAINTS = {
    "none": None,
    "choice": {"type": "choice", "value": ["The ship came back.", "The ship never came back.", "Nobody knows."]},
    "regex": {"type": "regex", "value": r"[A-Za-z ,.']{1,400}"},
    "json_schema": {"type": "json_schema", "value": {
        "type": "object", "properties": {"ship": {"type": "string"}, "crew": {"type": "integer"},
                                         "log": {"type": "string"}}, "required": ["ship", "crew", "log"]}},
}


def seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def click_seconds(constraint: dict | None, repeats: int) -> float:
    """A click on a warm session: the first branch taken, and the lookahead after it."""
    session = f"bench {json.dumps(constraint)}"
    text = STORY
    first = inference.lookahead(text, 5, 3, session=session, constraint=constraint)
    taken = text + first["branches"][0]["text"]
    constraint = None if constraint is None else {**constraint, "start": len(STORY)}

    def click() -> None:
        # each repeat from the same warm state: the text's cache, then the click
        inference.backend().prefix_caches.clear()
        inference.lookahead(text, 5, 3, session=session, constraint=constraint)
        start = time.perf_counter()
        inference.lookahead(taken, 5, 3, session=session, constraint=constraint)
        click.took.append(time.perf_counter() - start)

    click.took = []
    for _ in range(repeats):
        click()
    return statistics.median(click.took)


def mask_microseconds(constraint: dict, n: int = 200) -> tuple[float, float]:
    """One mask and one advance of a guide just after the constraint's start (its busiest state: many tokens valid)."""
    model, tokenizer = inference.load_model()
    checked = check_constraint({**constraint, "start": None}, "Log:")
    _, guide = inference.backend().matchers.context_and_guide(
        (inference.default_model_name(), "bench mask"), checked, tokenizer, "Log:", "Log:", None, stop_tokens(None),
        model.config.get_text_config().vocab_size, model.device)
    start = time.perf_counter()
    for _ in range(n):
        valid = guide.valid()
    mask = (time.perf_counter() - start) / n
    token = int(torch.nonzero(valid)[0])
    start = time.perf_counter()
    for _ in range(n):
        forked = guide.fork()
        forked.advance(token)
    advance = (time.perf_counter() - start) / n
    return 1e6 * mask, 1e6 * advance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, tokenizer = inference.load_model()
    print(f"model {inference.default_model_name()} on {model.device} ({cpu_model()}), "
          f"torch threads {torch.get_num_threads()}, "
          f"context {len(tokenizer(STORY)['input_ids'])} tokens, median of {args.repeats}\n")
    print("| constraint | mask µs | fork+advance µs | click ms | click × none | greedy ms/token | × none | "
          "lookahead ms/token | × none | tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base: dict[str, float] = {}  # the unconstrained click
    for name, constraint in CONSTRAINTS.items():
        mask, advance = mask_microseconds(constraint) if constraint else (0.0, 0.0)
        click = click_seconds(constraint, args.repeats)
        row = [f"{mask:.0f}", f"{advance:.0f}", f"{1000 * click:.0f}"]
        base.setdefault("click", click)
        row.append(f"{click / base['click']:.2f}×")
        prompt = STORY + "\nThe keeper's log for that night:"
        for method in ("greedy", "lookahead"):
            n = len(inference.generate(prompt, 48, method, constraint=constraint)["token_ids"])
            took = seconds(lambda: inference.generate(prompt, n, method, constraint=constraint), args.repeats)
            free = seconds(lambda: inference.generate(prompt, n, method), args.repeats)  # as many tokens, unconstrained
            row += [f"{1000 * took / n:.1f}", f"{took / free:.2f}×"]
        row.append(str(n))
        print(f"| {name} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
