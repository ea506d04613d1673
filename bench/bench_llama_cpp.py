"""The embedded model through llama.cpp (its GGUF file as it ships, Q4_1, on llama-cpp-python's server) against the
in-process float32 engine, in one run, on this CPU.

Measured, each the median of --repeats runs, the two engines taking turns:
- a click: 5 branches x 3 tokens right after the text grew by a few tokens (a branch taken), its session warm, at
  ~1k and ~3k tokens;
- a cold paste of ~3k tokens: a new session's first suggestions (in-process read whole within the call, as
  LOOKAHEAD_FIRST_ANSWER_SECONDS=0 does, so both give the exact answer);
- the heatmap of a ~1k-token text, cold (token_probabilities);
- Continue: tokens per second of a 64-token greedy continuation of a ~1k-token text once its first token is out
  (in-process: lookahead decoding and plain greedy);
- the bytes of weights a decoding pass reads, against the memory bandwidth measured here: the least time a pass
  can take, beside the time a token took.
Run only on an otherwise idle machine: python bench/bench_llama_cpp.py [--repeats 3] [--tokens 1000 3000]
(the server's venv: LLAMA_CPP_PYTHON, else .venv-llama-cpp, made by scripts/test.sh).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from bench_long_text import text_of  # noqa: E402
from bench_passes import memory_bandwidth_gb_s, weight_bytes  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from llama_cpp_server import LlamaCppServer  # noqa: E402
from lookahead.models import EMBEDDED_MODEL, embedded_gguf_path  # noqa: E402

N_BRANCHES, DEPTH = 5, 3
CONTINUE_TOKENS = 64
SETTLE_SECONDS = 0.5  # after a server call: its threads spin a while before they sleep
STEP = " The keeper climbed"  # what a click adds to the text (a branch taken)


def seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


class Engines:
    """The two backends, each used through the public API; `use(name)` switches."""

    def __init__(self, server_url: str) -> None:
        self.url = server_url
        self.sessions = 0

    def use(self, name: str) -> None:
        if name == "llama.cpp":
            inference.use_backend("llama-cpp", self.url)
        else:
            inference.use_backend()
        time.sleep(SETTLE_SECONDS)

    def session(self) -> str:
        self.sessions += 1
        return f"bench {self.sessions}"


def click(text: str) -> Callable[[str], float]:
    """A warm session's click: its text read, then the text grown by a few tokens."""
    def run(session: str) -> float:
        inference.lookahead(text, N_BRANCHES, DEPTH, session=session, partial=False)
        return seconds(lambda: inference.lookahead(text + STEP, N_BRANCHES, DEPTH, session=session, partial=False))
    return run


def paste(text: str) -> Callable[[str], float]:
    return lambda session: seconds(lambda: inference.lookahead(text, N_BRANCHES, DEPTH, session=session, partial=False))


def heatmap(text: str) -> Callable[[str], float]:
    return lambda session: seconds(lambda: inference.token_probabilities(text, 5, session=session))


def continuation(text: str, method: str) -> Callable[[str], float]:
    """Tokens per second of Continue once its first token is written (the text's read, cold in-process and on a new
    session's turn of the server, is the paste's)."""
    def run(session: str) -> float:
        first = last = None
        for step in inference.generate_stream(text, CONTINUE_TOKENS, method, session=session):
            last = (time.perf_counter(), len(step["token_ids"]))
            first = first or last
        return (last[1] - first[1]) / (last[0] - first[0])
    return run


def measure(engines: Engines, tasks: dict[str, dict[str, Callable[[str], float]]], repeats: int) -> dict:
    """Each task's median per engine, the engines taking turns on each repeat."""
    results: dict[str, dict[str, list[float]]] = {task: {} for task in tasks}
    for _ in range(repeats):
        for task, by_engine in tasks.items():
            for engine, run in by_engine.items():
                engines.use("llama.cpp" if engine == "llama.cpp" else "in-process")
                results[task].setdefault(engine, []).append(run(engines.session()))
    return {task: {engine: statistics.median(values) for engine, values in by_engine.items()}
            for task, by_engine in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, nargs=2, default=[1000, 3000], metavar=("SHORT", "LONG"),
                        help="the two texts' lengths")
    args = parser.parse_args()
    short, long = args.tokens
    python = os.environ.get("LLAMA_CPP_PYTHON") or str(ROOT / ".venv-llama-cpp" / "bin" / "python")
    model, tokenizer = inference.load_model()
    texts = {n: text_of(n, tokenizer) for n in (short, long)}
    server = LlamaCppServer(python, embedded_gguf_path(), EMBEDDED_MODEL, os.cpu_count() or 1)
    try:
        engines = Engines(server.wait())
        both = ("llama.cpp", "in-process")
        tasks = {
            f"click at {short} tokens (s)": {e: click(texts[short]) for e in both},
            f"click at {long} tokens (s)": {e: click(texts[long]) for e in both},
            f"cold paste of {long} tokens (s)": {e: paste(texts[long]) for e in both},
            f"heatmap of {short} tokens, cold (s)": {e: heatmap(texts[short]) for e in both},
            f"Continue at {short} tokens (tokens/s)": {"llama.cpp": continuation(texts[short], "greedy"),
                                                       "in-process": continuation(texts[short], "lookahead"),
                                                       "in-process greedy": continuation(texts[short], "greedy")},
        }
        results = measure(engines, tasks, args.repeats)
    finally:
        inference.use_backend()
        server.stop()
    bandwidth = memory_bandwidth_gb_s()
    weights = {"llama.cpp": embedded_gguf_path().stat().st_size, "in-process": weight_bytes(model)}
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}, "
          f"median of {args.repeats}")
    print("| | llama.cpp (Q4_1) | in-process (float32) | ratio |")
    print("|---|---|---|---|")
    for task, by_engine in results.items():
        ours, theirs = by_engine["llama.cpp"], by_engine["in-process"]
        faster = ours / theirs if "tokens/s" in task else theirs / ours
        extra = f" (greedy: {by_engine['in-process greedy']:.1f})" if "in-process greedy" in by_engine else ""
        print(f"| {task} | {ours:.2f} | {theirs:.2f}{extra} | llama.cpp {faster:.2f}x as fast |")
    for engine, size in weights.items():
        floor = size / (bandwidth * 1e9)
        print(f"| weights read per pass, {engine} | {size / 1e6:.0f} MB | at {bandwidth:.1f} GB/s: "
              f"{floor * 1000:.1f} ms a pass at least | |")


if __name__ == "__main__":
    main()
