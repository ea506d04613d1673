"""Generation speed: lossless lookahead decoding versus transformers, on a small prompt set.

Methods, timed in the same run on the embedded model (greedy, fp32, same tokens):
  hf-greedy        model.generate(do_sample=False)  (the baseline: ratios are against it)
  hf-prompt-lookup model.generate(do_sample=False, prompt_lookup_num_tokens=10)
  greedy           custom_llm_inference.generate(method="greedy"): our plain cached loop
  lookahead        custom_llm_inference.generate(method="lookahead")
Against the physical limit, as gpt-fast prints it: lookahead's tokens/s and passes/s, and the weight
bytes its passes read per second against this machine's memory bandwidth (bench_passes.py measures
both); and which draft source gave the accepted guesses.
With --busy every prompt is timed twice, quiet and then beside one busy loop per core (rows marked "busy"): all
methods under the same load, as when other programs share the machine.
Run: python bench/bench_decoding.py [--new-tokens 96] [--repeats 2] [--busy] [--prompts code prose ...] [--ours]
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import shlex
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_passes import memory_bandwidth_gb_s, weight_bytes  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from lookahead.cpu_linear import cpu_model  # noqa: E402
from lookahead.models import model_pass_costs  # noqa: E402

PROMPTS = {
    "code": textwrap.dedent(inspect.getsource(textwrap.TextWrapper._wrap_chunks))[:2500],
    "code-json": textwrap.dedent(inspect.getsource(json.JSONDecoder.raw_decode))[:1500],
    "code-shlex": textwrap.dedent(inspect.getsource(shlex.shlex.read_token))[:1200],
    "prose": "The lighthouse stood at the edge of the world. Every evening the keeper climbed its hundred "
    "steps, lit the great lamp, and watched the sea. One night, a ship appeared on the horizon that",
    "code-repetition": "".join(f"def test_add_{i}():\n    assert add({i}, {i}) == {2 * i}\n\n\n" for i in range(1, 4))
    + "def test_add_4():\n    assert add(",
    "qa": "Q: What are three reasons people keep journals?\nA: 1.",
    "list": "Things to pack for a week of camping:\n1. A tent\n2. A sleeping bag\n3.",
    "repetition": "Row, row, row your boat, gently down the stream. Merrily, merrily, merrily, merrily, "
    "life is but a dream. Row, row, row your boat, gently down the stream. Merrily,",
}


METHODS = ("hf-greedy", "hf-prompt-lookup", "greedy", "lookahead")
OURS = ("greedy", "lookahead")  # beside busy loops transformers' generate can take minutes a prompt: --ours skips it


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes spinning, one per core, until the block ends (even on an error): other programs' load."""
    spinners: list[subprocess.Popen] = []
    try:
        spin = f"import os\nwhile os.getppid() == {os.getpid()}: pass"  # ends with this process, however it ends
        spinners += [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def timed(model, tokenizer, text: str, n: int, repeats: int,
          methods: tuple[str, ...] = METHODS) -> tuple[dict[str, float], dict[str, list[int]], dict]:
    """Each method's median seconds and tokens for `text`, the methods taking turns in each repeat (so each sees the
    same spells of other load), and the result of lookahead's last run (how its passes went depends on how long they
    took)."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    ours: dict[str, dict] = {}

    def generate(method: str) -> list[int]:
        ours[method] = inference.generate(text, n, method)
        return ours[method]["token_ids"]

    runs = {
        "hf-greedy": lambda: model.generate(ids, do_sample=False, max_new_tokens=n)[0, ids.shape[1] :].tolist(),
        "hf-prompt-lookup": lambda: model.generate(
            ids, do_sample=False, max_new_tokens=n, prompt_lookup_num_tokens=10
        )[0, ids.shape[1] :].tolist(),
        "greedy": lambda: generate("greedy"),
        "lookahead": lambda: generate("lookahead"),
    }
    runs = {method: runs[method] for method in methods}
    times: dict[str, list[float]] = {method: [] for method in runs}
    tokens: dict[str, list[int]] = {}
    for _ in range(repeats):
        for method, run in runs.items():
            start = time.perf_counter()
            tokens[method] = run()
            times[method].append(time.perf_counter() - start)
    return {method: statistics.median(t) for method, t in times.items()}, tokens, ours["lookahead"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--busy", action="store_true", help="also time every prompt beside one busy loop per core")
    parser.add_argument("--prompts", nargs="+", choices=PROMPTS, default=list(PROMPTS))
    parser.add_argument("--ours", action="store_true", help="only lookahead against our greedy loop")
    args = parser.parse_args()
    if args.ours:
        return ours_only(args)
    model, tokenizer = inference.load_model()
    costs = model_pass_costs(complete=True)  # a first start refines its curve in the background: on these cores
    n = args.new_tokens
    bandwidth, weights = memory_bandwidth_gb_s(), weight_bytes(model)
    print(f"model {inference.default_model_name()} on {model.device} ({cpu_model()}), torch threads "
          f"{torch.get_num_threads()}, {os.cpu_count()} cores, {n} new tokens, median of {args.repeats}; "
          f"memory bandwidth {bandwidth:.1f} GB/s, "
          f"weights {weights / 1e6:.0f} MB\n")
    print(costs.table() + "\n")
    timed(model, tokenizer, PROMPTS[args.prompts[0]], 4, 1)  # first calls take one-off costs: warm up, untimed
    print("| prompt | hf-greedy tok/s | hf-prompt-lookup | greedy (ours) | **lookahead** | lookahead / greedy (ours) | "
          "tokens/pass | passes | lookahead tok/s | passes/s | weights GB/s (of bandwidth) | "
          "accepted guesses by source |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    loads = {"": nullcontext} | ({" (busy)": lambda: busy_loops(os.cpu_count() or 1)} if args.busy else {})
    for name in args.prompts:
        for label, load in loads.items():
            with load():
                seconds, tokens, detail = timed(model, tokenizer, PROMPTS[name], n, args.repeats)
            assert tokens["lookahead"] == tokens["hf-greedy"] == tokens["greedy"], f"{name}{label}: outputs differ"
            rate = {m: len(tokens[m]) / s for m, s in seconds.items()}
            ratio = lambda m: f"{rate[m] / rate['hf-greedy']:.2f}×"  # noqa: E731
            passes_per_second = detail["forward_passes"] / seconds["lookahead"]
            read = passes_per_second * weights / 1e9
            guessed = collections.Counter(s for s in detail["draft_source_per_token"] if s != "step")
            print(f"| {name}{label} | {rate['hf-greedy']:.1f} | {ratio('hf-prompt-lookup')} | {ratio('greedy')} | "
                  f"**{ratio('lookahead')}** | {rate['lookahead'] / rate['greedy']:.2f}× | "
                  f"{len(detail['token_ids']) / detail['forward_passes']:.2f} | "
                  f"{detail['forward_passes']} | {rate['lookahead']:.1f} | {passes_per_second:.1f} | "
                  f"{read:.1f} ({read / bandwidth:.0%}) | {dict(guessed.most_common())} |", flush=True)


def ours_only(args: argparse.Namespace) -> None:
    """Lookahead against our plain greedy loop per prompt, quiet and (with --busy) beside busy loops, taking turns."""
    model, tokenizer = inference.load_model()
    model_pass_costs(complete=True)
    print(f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, {args.new_tokens} new tokens, median of "
          f"{args.repeats}\n")
    timed(model, tokenizer, PROMPTS[args.prompts[0]], 4, 1, OURS)  # one-off costs, untimed
    print("| prompt | greedy tok/s | **lookahead / greedy** | tokens/pass |\n|---|---:|---:|---:|")
    loads = {"": nullcontext} | ({" (busy)": lambda: busy_loops(os.cpu_count() or 1)} if args.busy else {})
    for name in args.prompts:
        for label, load in loads.items():
            with load():
                seconds, tokens, detail = timed(model, tokenizer, PROMPTS[name], args.new_tokens, args.repeats, OURS)
            assert tokens["lookahead"] == tokens["greedy"], f"{name}{label}: outputs differ"
            print(f"| {name}{label} | {len(tokens['greedy']) / seconds['greedy']:.1f} | "
                  f"**{seconds['greedy'] / seconds['lookahead']:.2f}×** | "
                  f"{len(detail['token_ids']) / detail['forward_passes']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
