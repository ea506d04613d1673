"""Two models side by side: what a click costs with a second model's suggestions shown, and the heatmap's comparison.

Clicks (the engine's calls the page makes for one click on a shown branch, at the end of a ~1k-token text):
  one model        lookahead for the text with the branch taken, the chosen model
  two models       the same for both models (the second model's panel refreshes after every click)
each without precomputation (the click computes) and with it (the writer read first: the answers were computed in
the background and the click finds them). The models: the embedded model, and a second copy of it loaded under
another name (its converted folder), so both cost the same and the ratio shows what a second model adds: ideally
~2 computed (two models' passes), and ~1 precomputed. Each offered model's own click is timed too (the embedded
model in bfloat16 is the other one a fresh install offers).

Heatmap: the comparison of a ~3k-token text (inference.compare with no branches, as the heatmap asks it), first read and
after a click's few tokens (the kept comparison reads only them), beside one model's token listing (the plain
heatmap's).

Each figure is the median of --repeats, all in one run; the weights' bytes read per second are set beside the
machine's memory bandwidth (bench_passes.py's measurement). Run: python bench/bench_compare.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

# Every text is read within its call, as the comparison reads it: one model's listing is then whole, not a long
# text's first partial answer (lookahead/reading.py).
os.environ["LOOKAHEAD_FIRST_ANSWER_SECONDS"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_lookahead import corpus  # noqa: E402
from bench_passes import memory_bandwidth_gb_s, weight_bytes  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from lookahead.models import EMBEDDED_MODEL, EMBEDDED_MODEL_BF16, embedded_model_dir, model_pass_costs  # noqa: E402

N_BRANCHES, DEPTH = 5, 3
CLICK_TOKENS, HEATMAP_TOKENS = 1000, 3000


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def click(text: str, models: list[str], session: str, precompute: bool) -> float:
    """Seconds for one click on the first model's first branch, the session shown `text` by every model first (and,
    precomputing, the background work given its time, as a writer reading gives it)."""
    shown = [inference.lookahead(text, N_BRANCHES, DEPTH, session=session, model_name=name, precompute=precompute)
             for name in models]
    inference.backend().speculator.wait()
    taken = text + shown[0]["branches"][0]["text"]
    return timed(lambda: [inference.lookahead(taken, N_BRANCHES, DEPTH, session=session, model_name=name,
                                        precompute=precompute) for name in models])


def clicks(text: str, models: list[str], precompute: bool, repeats: int) -> float:
    """The median click, each from a fresh session warmed on the text (its cache as the writer left it)."""
    times = []
    for i in range(repeats):
        session = f"click {len(models)} {precompute} {i}"
        for name in models:
            inference.lookahead(text, N_BRANCHES, DEPTH, session=session, model_name=name)
        times.append(click(text, models, session, precompute))
        inference.backend().forget(session)
    return statistics.median(times)


def heatmap(text: str, models: list[str], repeats: int) -> dict[str, float]:
    """Seconds for the heatmap's comparison of `text` read first, and after a click's few tokens; and one model's
    listing after the same click."""
    first, again, alone_first, alone = [], [], [], []
    taken = text + " and then the lamp went out"
    for i in range(repeats):
        session, alone_session = f"heatmap {i}", f"heatmap alone {i}"
        first.append(timed(lambda: inference.compare(text, models, k=1, n_branches=0, session=session)))
        again.append(timed(lambda: inference.compare(taken, models, k=1, n_branches=0, session=session)))
        alone_first.append(
            timed(lambda: inference.token_probabilities(text, 5, session=alone_session, model_name=models[0])))
        alone.append(
            timed(lambda: inference.token_probabilities(taken, 5, session=alone_session, model_name=models[0])))
        inference.backend().forget(session)
        inference.backend().forget(alone_session)
    return {"first": statistics.median(first), "click": statistics.median(again),
            "one first": statistics.median(alone_first), "one": statistics.median(alone)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--heatmap-only", action="store_true", help="only the heatmap's comparison")
    args = parser.parse_args()
    models, offered = [EMBEDDED_MODEL, str(embedded_model_dir())], [EMBEDDED_MODEL, EMBEDDED_MODEL_BF16]
    loaded = [inference.load_model(name) for name in models]
    for name in {*models, *offered}:  # a first load refines its pass costs in the background: not while timing
        model_pass_costs(name, complete=True)
    for _ in inference.backend().warm_up():  # as the app does at launch: what a first answer to a long text may read
        pass
    tokenizer = loaded[0][1]
    ids = tokenizer(corpus())["input_ids"]
    text, long_text = tokenizer.decode(ids[:CLICK_TOKENS]), tokenizer.decode(ids[:HEATMAP_TOKENS])
    for name in models:
        inference.lookahead("Warm-up: token healing builds its token table once. ", session="warm-up", model_name=name)
    bandwidth = memory_bandwidth_gb_s()
    print(f"models {' and '.join(models)}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"k={N_BRANCHES} depth={DEPTH}; memory bandwidth {bandwidth:.1f} GB/s, weights "
          + ", ".join(f"{weight_bytes(model) / 1e6:.0f} MB" for model, _ in loaded) + "\n")
    if not args.heatmap_only:
        print(f"Click at {CLICK_TOKENS:,} tokens (median of {args.repeats}):\n")
        print("| click | one model (ms) | two models (ms) | two / one |")
        print("|---|---:|---:|---:|")
        for precompute in (False, True):
            one = clicks(text, models[:1], precompute, args.repeats)
            two = clicks(text, models, precompute, args.repeats)
            print(f"| {'precomputed' if precompute else 'computed'} | {1000 * one:.0f} | {1000 * two:.0f} | "
                  f"{two / one:.2f}× |", flush=True)
        each = [clicks(text, [name], False, args.repeats) for name in offered]
        print("\nEach offered model's computed click alone: "
              + ", ".join(f"{name} {1000 * seconds:.0f} ms" for name, seconds in zip(offered, each)))
    times = heatmap(long_text, models, args.repeats)
    print(f"\nHeatmap at {HEATMAP_TOKENS:,} tokens (median of {args.repeats}): the comparison read first "
          f"{1000 * times['first']:.0f} ms, one model's listing {1000 * times['one first']:.0f} ms "
          f"({times['first'] / times['one first']:.2f}×); after a click {1000 * times['click']:.0f} ms, one model's "
          f"listing {1000 * times['one']:.0f} ms ({times['click'] / times['one']:.2f}×)")


if __name__ == "__main__":
    main()
