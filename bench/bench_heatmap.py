"""What the heatmap costs: per click on a long text, and in memory for a cold long text.

1. Clicks: a ~3000-token text, then a branch taken again and again. Side by side in one run,
   alternating: a session that shows only the branches (lookahead), and one that shows branches
   and heatmap (lookahead, then token_probabilities on the same text). The heatmap session scores
   each new token in the same pass that computes the branches, so the ratio should be near 1.
2. Memory: peak resident memory of a fresh process that scores a cold ~8k-token text, against
   one that runs a plain prefill of it (lookahead with one branch of depth one), both over the
   memory of the loaded model. The heatmap never holds (positions x vocabulary) logits.

Run: python bench/bench_heatmap.py [--tokens 3000] [--clicks 20] [--cold-tokens 8000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PASSAGE = (
    "The harbour town woke slowly. Fishermen hauled their nets along the quay, gulls argued over "
    "scraps, and the baker's boy ran between the houses with a basket of warm loaves. "
)
TOKENS_PER_PASSAGE = 40  # about, for the embedded model's tokenizer


def clicks(tokens: int, n: int) -> dict:
    import custom_llm_inference as inference

    text = {"branches": (PASSAGE * (tokens // TOKENS_PER_PASSAGE)).rstrip()}
    text["both"] = text["branches"]
    inference.lookahead(text["branches"], session="branches")
    inference.lookahead(text["both"], session="both")
    inference.token_probabilities(text["both"], session="both")
    times: dict[str, list[float]] = {"branches": [], "both": []}
    ran = 0  # heatmap calls that had tokens to run (a text ending in whitespace: the branches' pass healed it)
    for _ in range(n):
        for session in ("branches", "both"):
            start = time.perf_counter()
            shown = inference.lookahead(text[session], session=session)
            if session == "both":
                heat = inference.token_probabilities(text[session], session=session)
                ran += heat["reused_tokens"] < heat["context_tokens"]
            times[session].append(time.perf_counter() - start)
            text[session] += shown["branches"][0]["text"]
    return {s: 1000 * statistics.median(t) for s, t in times.items()} | {"context": shown["context_tokens"], "ran": ran}


def peak_memory(kind: str, tokens: int) -> None:
    """In a fresh process: print the resident memory after loading the model, and the peak after the call."""
    import resource

    import custom_llm_inference as inference

    inference.load_model()
    loaded = _rss_bytes()
    text = PASSAGE * (tokens // TOKENS_PER_PASSAGE)
    start = time.perf_counter()
    result = inference.token_probabilities(text) if kind == "heatmap" else inference.lookahead(text, 1, 1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"loaded": loaded, "peak": peak, "seconds": time.perf_counter() - start,
                      "context": result["context_tokens"]}))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measured_in_a_fresh_process(kind: str, tokens: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--peak", kind, "--cold-tokens", str(tokens)],
                         capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--clicks", type=int, default=20)
    parser.add_argument("--cold-tokens", type=int, default=8000)
    parser.add_argument("--peak", choices=["heatmap", "prefill"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak:
        return peak_memory(args.peak, args.cold_tokens)
    print(f"{os.cpu_count()} CPU cores\n")
    r = clicks(args.tokens, args.clicks)
    print("| text (context tokens) | clicks | branches only, p50 | branches + heatmap, p50 | ratio "
          "| heatmap calls that ran the model |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {r['context']} | {args.clicks} | {r['branches']:.0f} ms | {r['both']:.0f} ms "
          f"| **{r['both'] / r['branches']:.2f}×** | {r['ran']} |\n")
    print("| cold text (context tokens) | call | time | memory over the loaded model, peak | ratio |")
    print("|---:|---|---:|---:|---:|")
    runs = {kind: measured_in_a_fresh_process(kind, args.cold_tokens) for kind in ("prefill", "heatmap")}
    base = runs["prefill"]["peak"] - runs["prefill"]["loaded"]
    for kind, m in runs.items():
        over = m["peak"] - m["loaded"]
        print(f"| {m['context']} | {kind} | {m['seconds']:.1f} s | {over / 2**20:.0f} MiB | **{over / base:.2f}×** |")


if __name__ == "__main__":
    main()
