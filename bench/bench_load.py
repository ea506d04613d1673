"""A crowd on one server: N simultaneous gradio_client visitors, each its own text and three interactions.

Each visitor asks for suggestions on its ~600-token text, then takes the first branch twice
(as a writer clicking), all visitors starting at the same moment. Reported per server mode:
answered/failed, p50/p95 latency of a call, the share of follow-up calls that reused the
session's KV cache, and the server's peak memory (PSS of the server and its GPU workers, so
forked workers' shared pages count once). The baseline, measured first in the same run, is one
visitor alone on the same server: its cold first call and warm follow-ups.

Modes: `plain` is `python app.py`; `zerogpu` is the same app under ZeroGPU emulation
(tests/zerogpu_space.py: real `spaces` package, forked GPU workers, stubbed device manager),
with as many workers at once as the CPU has cores; `vllm` is `python app.py --backend vllm` in
front of a vLLM server serving the same model (started here from VLLM_PYTHON's venv, as the tests
do, or the one at --server-url); its memory counts both processes.

Run: python bench/bench_load.py [--visitors 50] [--modes plain zerogpu vllm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from serving import start_server

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from api_client import Client  # noqa: E402
from lookahead.models import EMBEDDED_MODEL, embedded_model_dir  # noqa: E402
from vllm_server import VLLMServer  # noqa: E402

CALLS = 3
# Seconds a visitor's HTTP requests may take. gradio_client's default, 5 s, would turn a visitor away
# whenever the server is slow to take an event into its queue, which no browser does.
VISITOR_TIMEOUT = 120
N_BRANCHES, DEPTH = 5, 3
PASSAGE = (
    "The harbour town woke slowly. Fishermen hauled their nets along the quay, gulls argued over "
    "scraps, and the baker's boy ran between the houses with a basket of warm loaves. Up on the cliff "
    "the old lighthouse stood white against the morning, its lamp dark now, its keeper asleep after the "
    "long night watch. "
)


def visitor_text(i: int) -> str:
    """About 600 tokens, different for every visitor from the first words on."""
    return f"Chapter {i + 1}. Visitor {i} begins a story of their own.\n\n" + PASSAGE * 9


# Where the emulated Space's spaces offloads the model for its workers (~770 MB).
OFFLOAD_DIR = str(Path(tempfile.gettempdir()) / f"zerogpu-offload-bench-{os.getpid()}")


def serve(mode: str, server_url: str | None) -> tuple[subprocess.Popen, str]:
    if mode == "plain":
        return start_server(lambda port: [sys.executable, str(ROOT / "app.py")], {}, "load_plain")
    if mode == "vllm":
        command = [sys.executable, str(ROOT / "app.py"), "--backend", "vllm", "--server-url", server_url]
        # A crowd on a CPU server waits minutes in its queue: measure how long, rather than time out at 60 s.
        return start_server(lambda port: command, {"LOOKAHEAD_SERVER_TIMEOUT": "900"}, "load_vllm")
    log = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name  # the emulated scheduler's requests
    os.makedirs(OFFLOAD_DIR, exist_ok=True)
    # The emulation computes on this CPU: as many GPU workers at once as it has cores (a Space's
    # default, 8, would only make forked workers fight over two cores).
    return start_server(lambda port: [sys.executable, str(ROOT / "tests" / "zerogpu_space.py"), str(port), log],
                        {"LOOKAHEAD_CONCURRENCY": str(os.cpu_count()), "ZEROGPU_OFFLOAD_DIR": OFFLOAD_DIR},
                        "load_zerogpu")


class PeakMemory:
    """Polls the PSS of processes and their children until stopped."""

    def __init__(self, *pids: int):
        self.processes, self.peak, self._stop = [psutil.Process(pid) for pid in pids], 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            total = 0
            for p in [q for process in self.processes for q in (process, *process.children(recursive=True))]:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def visitor(url: str) -> Client:
    return Client(url, verbose=False, httpx_kwargs={"timeout": VISITOR_TIMEOUT})


def interactions(client: Client, text: str) -> list[tuple[float, dict | None]]:
    """Three calls as a writer makes them: suggestions, then take the first branch, twice."""
    calls = []
    for _ in range(CALLS):
        start = time.perf_counter()
        try:
            result = client.predict(text, N_BRANCHES, DEPTH, api_name="/lookahead")
        except Exception as error:  # noqa: BLE001 - a refused or failed call is what we count
            calls.append((time.perf_counter() - start, None))
            print(f"  failed: {str(error)[:120]}", file=sys.stderr)
            return calls
        calls.append((time.perf_counter() - start, result))
        text += result["branches"][0]["text"]
    return calls


def run_mode(mode: str, visitors: int, vllm_python: str) -> dict:
    vllm = None
    if mode == "vllm":  # started for this mode only, so that it takes no CPU from the others
        # The KV cache's room: the in-process app's session budget here (a quarter of 24 GB).
        vllm = VLLMServer(vllm_python, embedded_model_dir(), EMBEDDED_MODEL, kv_cache_gb=6)
        vllm.wait()
    server, url = serve(mode, vllm and vllm.url)
    try:
        lone = interactions(visitor(url), visitor_text(visitors))  # the baseline, alone
        memory = PeakMemory(server.pid, *([vllm.process.pid] if vllm else []))
        clients = [visitor(url) for _ in range(visitors)]
        together = threading.Barrier(visitors)

        def visit(i: int):
            together.wait()
            return interactions(clients[i], visitor_text(i))

        started = time.perf_counter()
        with ThreadPoolExecutor(visitors) as pool:
            calls = [c for visit_calls in pool.map(visit, range(visitors)) for c in visit_calls]
        wall = time.perf_counter() - started
        peak = memory.stop()
    finally:
        os.killpg(server.pid, 9)
        server.wait()
        shutil.rmtree(OFFLOAD_DIR, ignore_errors=True)  # killed, the emulated Space cannot remove it
        if vllm:
            vllm.stop()
    answered = [(s, r) for s, r in calls if r is not None]
    latencies = sorted(s for s, _ in answered) or [float("nan")]
    follow_ups = [r for i, (_, r) in enumerate(calls) if r is not None and i % CALLS]
    return {
        "mode": mode,
        "answered": len(answered),
        "failed": visitors * CALLS - len(answered),
        "p50": statistics.median(latencies),
        "p95": latencies[int(0.95 * (len(latencies) - 1))],
        "wall": wall,
        "hit_rate": sum(r["reused_tokens"] > 0 for r in follow_ups) / max(1, len(follow_ups)),
        "peak_gib": peak / 1024**3,
        "context": answered[0][1]["context_tokens"],
        "lone_cold": lone[0][0],
        "lone_warm": statistics.median(s for s, _ in lone[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--visitors", type=int, default=50)
    modes = ["plain", "zerogpu", "vllm"]
    parser.add_argument("--modes", nargs="+", default=modes, choices=modes)
    parser.add_argument("--vllm-python",
                        default=os.environ.get("VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python")))
    args = parser.parse_args()
    print(f"{args.visitors} visitors x {CALLS} calls (/lookahead, k={N_BRANCHES}, depth={DEPTH}), all at once; "
          f"{os.cpu_count()} CPU cores")
    print("| server | context tokens | answered | failed | p50 (s) | p95 (s) | all done (s) | lone cold (s) "
          "| lone warm (s) | p50 / lone warm | cache hits | peak memory (GiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes:
        r = run_mode(mode, args.visitors, args.vllm_python)
        print(f"| {r['mode']} | {r['context']} | {r['answered']} | {r['failed']} | {r['p50']:.1f} | {r['p95']:.1f} "
              f"| {r['wall']:.1f} | {r['lone_cold']:.2f} | {r['lone_warm']:.2f} | {r['p50'] / r['lone_warm']:.0f}× "
              f"| {100 * r['hit_rate']:.0f}% | {r['peak_gib']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
