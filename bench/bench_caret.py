"""Suggestions at a caret inside a long text, in-process.

On a ~3k-token text whose session cache holds it whole:
  - a click at a caret in the middle (the branch inserted there, then the suggestions after it: without fit, as
    the page first asks on a CPU, and with it, one ask) against a click at the end (the branch appended, then the
    suggestions after it), precomputation off so that every click computes; then both with precomputation, the
    click made once the branches' answers are ready; each the median of several, alternated, in one run;
  - moving the caret and asking again: the tokens run (context_tokens - reused_tokens) and the seconds, without
    fit and with it;
  - the cost of `fit` (5 branches x 32 tokens): the same caret asked with fit_tokens=32 and with 0;
  - an insertion at 1k of the 3k tokens: what the suggestions after it run, then what the next call at the end
    of the text reads again, and when.
Each click is also put against the physical limit: the weight bytes its passes read per second, against this
machine's memory bandwidth (bench_passes.py's measurements).
Run: python bench/bench_caret.py [--tokens 3000] [--repeats 7]
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


def timed(call) -> tuple[float, dict]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def run(result: dict) -> int:
    """Tokens of the context a call ran (the rest came from the session's cache)."""
    return result["context_tokens"] - result["reused_tokens"]


def click_at_end(text: str, session: str, precompute: bool = False) -> float:
    """Suggestions at the end of `text` (its cache held), then a click: the first branch appended and asked again
    (with `precompute`, once the branches' answers are ready, as after the writer read them)."""
    branch = inference.lookahead(text, session=session, precompute=precompute)["branches"][0]["text"]
    inference.backend().speculator.wait()
    return timed(lambda: inference.lookahead(text + branch, session=session))[0]


def click_at_caret(text: str, caret: int, session: str, fit_tokens: int, precompute: bool = False) -> float:
    """Suggestions at `caret` (the whole text's cache held), then a click: the first branch inserted there and the
    suggestions after it (with `precompute`, once ready)."""
    shown = inference.lookahead(text, session=session, caret=caret, fit_tokens=fit_tokens, precompute=precompute)
    inference.backend().speculator.wait()
    branch = shown["branches"][0]["text"]
    inserted = text[:caret] + branch + text[caret:]
    return timed(lambda: inference.lookahead(inserted, session=session, caret=caret + len(branch),
                                       fit_tokens=fit_tokens))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    model, tokenizer = inference.load_model()
    inference.lookahead("Warm-up.", session="warm-up", caret=3)
    bandwidth, weights = memory_bandwidth_gb_s(), weight_bytes(model)
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, {platform.python_version()}; "
          f"memory bandwidth {bandwidth:.1f} GB/s, weights {weights / 1e9:.3f} GB")
    text = text_of(args.tokens, tokenizer)
    middle = text.index(" ", len(text) // 2)
    n = len(tokenizer(text)["input_ids"])
    inference.lookahead(text, session="s")  # the session's cache holds the whole text

    kinds = {  # name: (click, passes it runs: the new tokens' pass, depth - 1 = 2 tree steps, and the fit's)
        "at the end": (lambda: click_at_end(text, "s"), 3),
        "at a caret in the middle, without fit": (lambda: click_at_caret(text, middle, "s", 0), 3),
        "at a caret in the middle, with fit (32 tokens)": (lambda: click_at_caret(text, middle, "s", 32), 4),
        "at the end, precomputed": (lambda: click_at_end(text, "s", precompute=True), 0),
        "at a caret in the middle, precomputed, without fit": (
            lambda: click_at_caret(text, middle, "s", 0, precompute=True), 0),
    }
    times = {name: [] for name in kinds}
    for _ in range(args.repeats):  # alternated, so all see the same machine
        for name, (click, _) in kinds.items():
            times[name].append(click())
    end = statistics.median(times["at the end"])
    print(f"\n{n}-token text, caret at token ~{len(tokenizer(text[:middle])['input_ids'])}; median of {args.repeats}")
    print("| click | passes | ms | ratio to the end | weights GB/s (of bandwidth) |")
    print("|---|---:|---:|---:|---:|")
    for name, (_, passes) in kinds.items():
        seconds = statistics.median(times[name])
        rate = passes * weights / seconds / 1e9
        print(f"| {name} | {passes} | {1000 * seconds:.0f} | {seconds / end:.2f}× | "
              + (f"{rate:.2f} ({100 * rate / bandwidth:.0f}%) |" if passes else "— |"))

    inference.lookahead(text, session="s")
    moves = [text.index(" ", len(text) * i // 10) for i in (3, 7, 2, 5)]
    print("\n| caret moved to token | tokens run | of the tokens before it | seconds, branches | seconds, with fit |")
    print("|---:|---:|---:|---:|---:|")
    for at in moves:
        seconds, result = timed(lambda: inference.lookahead(text, session="s", caret=at, fit_tokens=0))
        fitted_seconds, _ = timed(lambda: inference.lookahead(text, session="s", caret=at))
        print(f"| {result['context_tokens']} | {run(result)} | {result['context_tokens']} | "
              f"{seconds:.3f} | {fitted_seconds:.3f} |")

    fits, plain = [], []
    for _ in range(args.repeats):
        fits.append(timed(lambda: inference.lookahead(text, session="s", caret=middle, fit_tokens=32))[0])
        plain.append(timed(lambda: inference.lookahead(text, session="s", caret=middle, fit_tokens=0))[0])
    fit, no_fit = statistics.median(fits), statistics.median(plain)
    print(f"\nfit, 5 branches × 32 tokens: {fit:.3f} s against {no_fit:.3f} s without "
          f"(+{1000 * (fit - no_fit):.0f} ms, {fit / no_fit:.2f}×)")

    at = text.index(" ", len(text) // 3)
    inference.lookahead(text, session="s")
    branch = inference.lookahead(text, session="s", caret=at)["branches"][0]["text"]
    inserted = text[:at] + branch + text[at:]
    after_seconds, after = timed(
        lambda: inference.lookahead(inserted, session="s", caret=at + len(branch), fit_tokens=0)
    )
    end_seconds, at_end = timed(lambda: inference.lookahead(inserted, session="s"))
    again_seconds, again = timed(lambda: inference.lookahead(inserted, session="s"))
    print(f"\ninsertion at token {after['context_tokens']} of {n}:")
    print("| next call | tokens run | seconds |")
    print("|---|---:|---:|")
    print(f"| suggestions after the insertion (without fit) | {run(after)} | {after_seconds:.3f} |")
    print(f"| then suggestions at the end: the text after the insertion read again | {run(at_end)} | "
          f"{end_seconds:.3f} |")
    print(f"| then at the end again | {run(again)} | {again_seconds:.3f} |")


if __name__ == "__main__":
    main()
