"""Latency of one interaction (append a branch, get new suggestions) versus context length.

Methods, all on the embedded model, timed in the same run:
  seed          the seed notebook's algorithm: fresh cache, full prefill, the cache repeated
                once per branch, depth-1 batched greedy steps
  seed-nocache  the seed's uncached method: every step re-runs every branch's full sequence
  batched       ours, but the branches batched over a repeated copy of the prefix cache
  ours          custom_llm_inference.lookahead: session prefix cache + tree-attention branches
  floor         ours at the tensor level alone (get_lookahead_sequences on a warm cache): one
                forward of the appended tokens + depth-1 forwards of the k branch tokens, no
                tokenizing, decoding or session bookkeeping
Ratios are speed-ups over `seed` (higher is better). Run: python bench/bench_lookahead.py
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import custom_llm_inference as inference  # noqa: E402
from lookahead.branches import get_lookahead_sequences  # noqa: E402
from lookahead.cache_passes import extend_cache  # noqa: E402

N_BRANCHES, DEPTH = 5, 3


@torch.inference_mode()
def seed_lookahead(model, ids: torch.Tensor, k: int, depth: int) -> torch.Tensor:
    cache = DynamicCache()
    logits = model(ids, past_key_values=cache).logits[0, -1]
    seqs = logits.topk(k).indices[:, None]
    cache.batch_repeat_interleave(k)
    for _ in range(depth - 1):
        out = model(seqs[:, -1:], past_key_values=cache, attention_mask=torch.ones(k, 1, dtype=torch.long))
        seqs = torch.cat([seqs, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seqs


@torch.inference_mode()
def seed_nocache_lookahead(model, ids: torch.Tensor, k: int, depth: int) -> torch.Tensor:
    logits = model(ids, use_cache=False).logits[0, -1]
    seqs = torch.cat([ids.repeat(k, 1), logits.topk(k).indices[:, None]], dim=1)
    for _ in range(depth - 1):
        nxt = [model(s[None], use_cache=False).logits[0, -1].argmax() for s in seqs]
        seqs = torch.cat([seqs, torch.stack(nxt)[:, None]], dim=1)
    return seqs[:, ids.shape[1] :]


@torch.inference_mode()
def batched_lookahead(model, ids: torch.Tensor, prefix_cache: DynamicCache, k: int, depth: int) -> torch.Tensor:
    """Incremental prefix like ours, then the seed's batching over k copies of the cache."""
    logits = extend_cache(model, ids, prefix_cache)
    seqs = logits.topk(k).indices[:, None]
    branch_cache = DynamicCache()
    for layer in prefix_cache.layers:
        branch_cache.update(layer.keys.repeat(k, 1, 1, 1), layer.values.repeat(k, 1, 1, 1), len(branch_cache.layers))
    for _ in range(depth - 1):
        out = model(seqs[:, -1:], past_key_values=branch_cache)
        seqs = torch.cat([seqs, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seqs


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def corpus() -> str:
    import argparse as a
    import collections as c
    import inspect as i
    import typing as t

    return "\n\n".join(inspect.getsource(m) for m in (a, c, i, t))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nocache-max", type=int, default=1024, help="skip seed-nocache above this context")
    args = parser.parse_args()

    model, tokenizer = inference.load_model()
    all_ids = tokenizer(corpus())["input_ids"]
    inference.lookahead("Warm-up: token healing builds its token table once. ", session="warm-up")
    print(f"model {inference.default_model_name()} on {model.device}, torch threads {torch.get_num_threads()}, "
          f"k={N_BRANCHES} depth={DEPTH}\n")
    print("| context tokens | seed (s) | seed-nocache | batched | **ours** | floor | ours (ms) | reused |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.contexts:
        text = tokenizer.decode(all_ids[:n])
        times: dict[str, list[float]] = {k: [] for k in ("seed", "seed-nocache", "batched", "ours", "floor")}
        reused = []
        session = f"bench-{n}"
        inference.lookahead(text, N_BRANCHES, DEPTH, session=session)  # the writer's state before the click
        for _ in range(args.repeats):
            branch = inference.lookahead(text, N_BRANCHES, DEPTH, session=session)["branches"][0]
            text += branch["text"]  # the click
            ids = torch.tensor([tokenizer(text)["input_ids"]])
            # Each incremental method starts from a cache of the text before the click.
            before = ids[:, : -len(branch["token_ids"])]
            warm = DynamicCache()
            extend_cache(model, before, warm)
            times["floor"].append(timed(lambda: get_lookahead_sequences(model, ids, N_BRANCHES, DEPTH, warm)))
            warm.crop(before.shape[1] - ids.shape[1])
            times["batched"].append(timed(lambda: batched_lookahead(model, ids, warm, N_BRANCHES, DEPTH)))
            times["seed"].append(timed(lambda: seed_lookahead(model, ids, N_BRANCHES, DEPTH)))
            if n <= args.nocache_max:
                times["seed-nocache"].append(timed(lambda: seed_nocache_lookahead(model, ids, N_BRANCHES, DEPTH)))
            # Re-warm the session on the text before the click, then time the click itself.
            inference.lookahead(tokenizer.decode(before[0]), N_BRANCHES, DEPTH, session=session)
            start = time.perf_counter()
            result = inference.lookahead(text, N_BRANCHES, DEPTH, session=session)
            times["ours"].append(time.perf_counter() - start)
            reused.append(result["reused_tokens"] / result["context_tokens"])
        med = {k: statistics.median(v) if v else None for k, v in times.items()}
        ratio = lambda k: f"{med['seed'] / med[k]:.1f}×" if med[k] else "—"  # noqa: E731
        print(f"| {ids.shape[1]} | {med['seed']:.3f} | {ratio('seed-nocache')} | {ratio('batched')} | "
              f"**{ratio('ours')}** | {ratio('floor')} | {1000 * med['ours']:.0f} | {statistics.mean(reused):.1%} |",
              flush=True)


if __name__ == "__main__":
    main()
