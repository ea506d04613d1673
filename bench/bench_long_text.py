"""A long text answers at once, then exactly: a cold paste of 1k, 3k and 8k tokens, in-process.

For each length, a new session asks for suggestions once (the paste), then asks again every second, as the
page does, until the answer is exact. Reported: the first answer's seconds and whether it was
partial (and from how many tokens), the seconds until the exact answer, and, in the same run, the seconds one
call takes to read the same text whole (LOOKAHEAD_FIRST_ANSWER_SECONDS=0's behaviour): their ratio is what
reading in chunks, in the background, costs over one pass (the target is at most 1.15x).

Then the heatmap of a cold paste (8k tokens by default): a new session asks for its tokens' scores, then asks
again every second, as the page's heatmap does while it fills in. Reported: the seconds to the first answer, to
the first coloured rows (the first answer that lists a scored token) and to the whole heatmap, and the seconds
one call takes to score the same text whole.
Run: python bench/bench_long_text.py [--tokens 1000 3000 8000] [--heatmap-tokens 8000]
(a smoke run: --tokens 300 --heatmap-tokens 300)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import custom_llm_inference as inference  # noqa: E402
from lookahead import reading  # noqa: E402
from lookahead.cpu_linear import cpu_model  # noqa: E402

PASSAGE = (
    "The harbour town woke slowly. Fishermen hauled their nets along the quay, gulls argued over scraps, and the "
    "baker's boy ran between the houses with a basket of warm loaves. "
)
POLL_SECONDS = 1.0  # as the page asks again (ui/panels/suggestions.py's and ui/panels/heatmap.py's READ_POLL_SECONDS)


def text_of(tokens: int, tokenizer) -> str:
    """A text of about `tokens` tokens (numbered paragraphs, so no two chunks are alike)."""
    text, i = "", 0
    while len(tokenizer(text)["input_ids"]) < tokens:
        text += f"{i}. {PASSAGE}"
        i += 1
    return text


def paste(text: str, session: str) -> tuple[float, dict, float]:
    """Seconds to the first answer, that answer, and seconds until the exact one."""
    start = time.perf_counter()
    first = inference.lookahead(text, session=session)
    first_seconds = time.perf_counter() - start
    result = first
    while result["partial"]:
        time.sleep(POLL_SECONDS)
        result = inference.lookahead(text, session=session)
    return first_seconds, first, time.perf_counter() - start


def heatmap(text: str, session: str) -> tuple[float, float, float]:
    """Seconds to the first answer, to the first that lists a scored token, and until the whole one."""
    start = time.perf_counter()
    result = inference.token_probabilities(text, session=session)
    first_seconds, coloured_seconds = time.perf_counter() - start, None
    while True:
        if coloured_seconds is None and any(token["prob"] is not None for token in result["tokens"]):
            coloured_seconds = time.perf_counter() - start
        if "partial" not in result:
            return first_seconds, coloured_seconds, time.perf_counter() - start
        time.sleep(POLL_SECONDS)
        result = inference.token_probabilities(text, session=session)


def read_whole(text: str, session: str, call=inference.lookahead) -> float:
    """Seconds `call` takes on `text` reading it whole within the call (LOOKAHEAD_FIRST_ANSWER_SECONDS=0)."""
    reading.FIRST_ANSWER_SECONDS, saved = 0, reading.FIRST_ANSWER_SECONDS
    try:
        start = time.perf_counter()
        call(text, session=session)
        return time.perf_counter() - start
    finally:
        reading.FIRST_ANSWER_SECONDS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1000, 3000, 8000])
    parser.add_argument("--heatmap-tokens", type=int, nargs="+", default=[8000])
    args = parser.parse_args()
    model, tokenizer = inference.load_model()
    inference.lookahead("Warm-up.", session="warm-up")
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, {platform.python_version()};"
          f" a first answer reads {inference.backend().reader.window(inference.default_model_name(), model)} tokens "
          f"(LOOKAHEAD_FIRST_ANSWER_SECONDS={reading.FIRST_ANSWER_SECONDS:g})")
    print("| tokens | first answer s | partial: from tokens | exact answer s | one call reading it whole s | "
          "exact ÷ whole |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.tokens:
        text = text_of(n, tokenizer)
        first_seconds, first, exact_seconds = paste(text, f"paste-{n}")
        whole = read_whole(text, f"whole-{n}")
        window = first["partial"]["window_tokens"] if first["partial"] else "exact"
        print(f"| {n} | {first_seconds:.2f} | {window} | {exact_seconds:.2f} | {whole:.2f} | "
              f"{exact_seconds / whole:.2f}× |", flush=True)
    print("\n| heatmap tokens | first answer s | first coloured rows s | whole heatmap s | one call scoring it "
          "whole s |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.heatmap_tokens:
        text = text_of(n, tokenizer)
        first_seconds, coloured_seconds, whole_seconds = heatmap(text, f"heatmap-{n}")
        whole = read_whole(text, f"heatmap-whole-{n}", inference.token_probabilities)
        print(f"| {n} | {first_seconds:.2f} | {coloured_seconds:.2f} | {whole_seconds:.2f} | {whole:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
