"""The map of futures, in-process: a level per tree-masked pass against one pass per node.

On a ~1k-token text whose session cache holds it (the user guide's opening, cut mid-sentence where a writer's
caret would be: prose the model has not seen; `--repeated`: bench_long_text.py's numbered passage, which the model
soon predicts, so its map is small), every continuation of up to `depth` tokens at least `cutoff` likely
(depth 3, cutoff 0.005 by default), computed
  - as `multiverse` does: the text's last token again (its logits are not kept), then one tree-masked pass per level
    over the kept cache;
  - node by node over a cached prefix, as loom-style tools do (one request per node): the text's last token, then
    one pass of one token per node, each over the text and its ancestors' cache entries, depth first.
Both list the same nodes (checked); each is put against the physical limit: the weight bytes its passes read per
second, against this machine's memory bandwidth (bench_passes.py's measurement). Then branches by mass (the 5
likeliest paths of 3 tokens, read off such a map) against greedy branches (5 first tokens each continued greedily), on
the same text and cache. Medians of several runs, alternated.
Run: python bench/bench_multiverse.py [--tokens 1000] [--depth 3] [--cutoff 0.005] [--repeats 5] [--repeated]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ["LOOKAHEAD_FIRST_ANSWER_SECONDS"] = "0"  # every call reads what it needs: nothing runs in the background
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_long_text import text_of  # noqa: E402
from bench_passes import memory_bandwidth_gb_s, weight_bytes  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from lookahead.cpu_linear import cpu_model  # noqa: E402
from lookahead.kv_cache import GrowableCache  # noqa: E402
from lookahead.models import eos_ids  # noqa: E402


@torch.inference_mode()
def node_by_node(model, ids: list[int], cache: GrowableCache, depth: int, cutoff: float) -> tuple[set, int]:
    """Every path at least `cutoff` likely, one single-token pass per node over `cache` (holding all of `ids` but
    the last; an end token ends its path); the paths and the passes run."""
    paths, passes, stops = set(), 0, eos_ids(model.generation_config)

    def visit(path: tuple[int, ...], token: int, mass: float) -> None:
        nonlocal passes
        logits = model(torch.tensor([[token]]), past_key_values=cache, use_cache=True).logits[0, -1]
        passes += 1
        if len(path) < depth:
            probs = torch.softmax(logits.float(), -1)
            for child in (probs * mass >= cutoff).nonzero()[:, 0].tolist():
                paths.add(path + (child,))
                if child not in stops:
                    visit(path + (child,), child, mass * float(probs[child]))
        cache.crop(-1)

    visit((), ids[-1], 1.0)
    return paths, passes


def prose(tokens: int, tokenizer) -> str:
    """The user guide's first `tokens` tokens, cut back to the last whole word: an unseen text, mid-sentence."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text()
    ids = tokenizer(guide)["input_ids"][:tokens]
    return tokenizer.decode(ids).rsplit(" ", 1)[0]


def map_paths(result: dict) -> set:
    nodes, paths = result["nodes"], {0: ()}
    for node in nodes[1:]:
        paths[node["id"]] = paths[node["parent"]] + (node["token_id"],)
    return set(paths.values()) - {()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--cutoff", type=float, default=0.005)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--repeated", action="store_true", help="the numbered passage instead of the user guide")
    args = parser.parse_args()
    model, tokenizer = inference.load_model()
    inference.multiverse("Warm-up.", session="warm-up")
    bandwidth, weights = memory_bandwidth_gb_s(), weight_bytes(model)
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, {platform.python_version()}; "
          f"memory bandwidth {bandwidth:.1f} GB/s, weights {weights / 1e9:.3f} GB")
    text = text_of(args.tokens, tokenizer).rstrip() if args.repeated else prose(args.tokens, tokenizer)
    ids = tokenizer(text)["input_ids"]
    inference.lookahead(text, session="s")  # the session's cache holds the text
    prefix = GrowableCache()
    with torch.inference_mode():
        model(torch.tensor([ids[:-1]]), past_key_values=prefix, use_cache=True)

    ours, theirs, result, paths, passes = [], [], None, None, 0
    for _ in range(args.repeats):  # alternated, so both see the same machine
        start = time.perf_counter()
        result = inference.multiverse(text, args.depth, args.cutoff, session="s")
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        paths, passes = node_by_node(model, ids, prefix, args.depth, args.cutoff)
        theirs.append(time.perf_counter() - start)
    listed = map_paths(result)
    same = listed == paths
    mine, base = statistics.median(ours), statistics.median(theirs)
    levels = [sum(1 for n in result["nodes"] if n["depth"] == d) for d in range(1, args.depth + 1)]
    print(f"\n{len(ids)}-token text, depth {args.depth}, cutoff {args.cutoff}: {len(listed)} nodes "
          f"(per level {levels}), the same in both: {same}; median of {args.repeats}")
    print("| how | passes | ms | speed-up | weights GB/s (of bandwidth) |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds, n in (("node by node over a cached prefix", base, passes),
                             ("a tree-masked pass per level (multiverse)", mine, result["passes"] + 1)):
        rate = n * weights / seconds / 1e9
        print(f"| {name} | {n} | {1000 * seconds:.0f} | {base / seconds:.2f}× | {rate:.2f} ({rate / bandwidth:.0%}) |")
    assert same, "the two computations listed different nodes"

    modes = {mode: [] for mode in ("greedy", "mass")}
    for _ in range(args.repeats):
        for mode, times in modes.items():
            start = time.perf_counter()
            inference.lookahead(text, 5, 3, branch_mode=mode, session="s")
            times.append(time.perf_counter() - start)
    greedy = statistics.median(modes["greedy"])
    print("\n| branches, 5 of 3 tokens | ms | against greedy |\n|---|---:|---:|")
    for mode, times in modes.items():
        print(f"| {mode} | {1000 * statistics.median(times):.0f} | {statistics.median(times) / greedy:.2f}× |")


if __name__ == "__main__":
    main()
