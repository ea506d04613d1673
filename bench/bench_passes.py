"""What a forward pass of n tokens costs on this machine, through each linear path, and what a click costs.

Prints, in one run on the embedded model:
  1. the machine: CPU model, torch threads, and its memory bandwidth (a large tensor summed);
  2. the measured pass-cost curve (lookahead/cpu_linear.py, measured afresh, not read from the disk
     cache): ms per pass of n tokens after 128 cached tokens, nn.Linear's path and weight @ x.T,
     the path chosen, and the weight bytes read per second against the bandwidth;
  3. a click's model time (append a 3-token branch, then 5 branches of depth 3: the `floor` of
     bench_lookahead.py) at each context, with the linears on nn.Linear's path alone, on the
     transposed path for 2-64 rows (what the app did before it measured), and as measured.
Run: python bench/bench_passes.py [--contexts 1024 3072] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_lookahead import corpus  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from lookahead.branches import get_lookahead_sequences  # noqa: E402
from lookahead.cache_passes import extend_cache  # noqa: E402
from lookahead.cpu_linear import cpu_model, machine_key, measure_pass_costs, use_linear_path  # noqa: E402
from lookahead.kv_cache import GrowableCache  # noqa: E402
from lookahead.models import model_pass_costs  # noqa: E402

N_BRANCHES, DEPTH, BRANCH_TOKENS = 5, 3, 3


def memory_bandwidth_gb_s(megabytes: int = 1024, repeats: int = 5) -> float:
    """Bytes read per second summing a tensor far larger than the caches (the best of a few runs)."""
    data = torch.ones(megabytes * 2**20 // 4)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.nbytes / best / 1e9


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a decoding pass reads (tied embeddings once)."""
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


@torch.inference_mode()
def click_seconds(model, ids: torch.Tensor, configurations: dict[str, object], repeats: int) -> dict[str, float]:
    """Median model time of a click per linear configuration (interleaved, so the machine's noise is shared):
    the branch's tokens appended to a warm cache, then the branch tree."""
    cache = GrowableCache()
    extend_cache(model, ids[:, :-BRANCH_TOKENS], cache)
    times: dict[str, list[float]] = {name: [] for name in configurations}
    for _ in range(repeats + 1):
        for name, rows in configurations.items():
            use_linear_path(model, rows)
            start = time.perf_counter()
            get_lookahead_sequences(model, ids, N_BRANCHES, DEPTH, cache)
            times[name].append(time.perf_counter() - start)
            cache.crop(-BRANCH_TOKENS)
    return {name: statistics.median(t[1:]) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 3072])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    model, tokenizer = inference.load_model()
    model_pass_costs(complete=True)  # a first start refines its curve in the background: on these cores
    bandwidth = memory_bandwidth_gb_s()
    weights = weight_bytes(model)
    print(f"CPU {cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads; memory bandwidth "
          f"{bandwidth:.1f} GB/s (a 1 GiB sum); {inference.default_model_name()}: {weights / 1e6:.0f} MB of weights\n")
    costs = measure_pass_costs(model, machine_key(model, inference.default_model_name()))
    print(costs.table())
    print("\nWeights read per second at the chosen path, against the bandwidth:")
    print("| tokens per pass | GB/s | share of bandwidth |\n|---:|---:|---:|")
    for n in costs.rows:
        rate = weights / costs(n) / 1e9
        print(f"| {n} | {rate:.1f} | {rate / bandwidth:.0%} |")

    all_ids = tokenizer(corpus())["input_ids"]
    configurations = {"nn.Linear": (), "transposed 2-64 rows (before)": range(2, 65),
                      "measured (now)": costs.transposed_rows()}
    print(f"\nA click's model time (a {BRANCH_TOKENS}-token branch appended, then {N_BRANCHES} branches of depth "
          f"{DEPTH}), median of {args.repeats}, the configurations interleaved:\n")
    print("| context tokens | " + " | ".join(configurations) + " | now vs before |")
    print("|---:|" + "---:|" * (len(configurations) + 1))
    for n in args.contexts:
        ids = torch.tensor([all_ids[:n]])
        ms = {name: 1000 * t for name, t in click_seconds(model, ids, configurations, args.repeats).items()}
        cells = " | ".join(f"{v:.0f} ms" for v in ms.values())
        print(f"| {n} | {cells} | {ms['transposed 2-64 rows (before)'] / ms['measured (now)']:.2f}× |", flush=True)
    use_linear_path(model, costs.transposed_rows())


if __name__ == "__main__":
    main()
