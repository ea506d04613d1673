"""What a forward pass of n tokens costs on the machine at hand, and the linear path that makes it cheapest.

A decoding pass on a CPU is bound by reading the weights, so feeding a few tokens instead of one
should cost about the same: that is what makes guessing tokens (lookahead decoding, branch trees)
pay. Whether it does depends on the CPU and its BLAS. For 2 to ~30 rows MKL's GEMM took twice the
one-row time on one machine, where `weight @ x.T` kept it near one row; on another (Xeon, AVX-512
and AMX) `F.linear` at 2 rows cost as much as 1 and the transposed product 4x more. One row is a
GEMV, which MKL ran on one thread on a 2-core AMD EPYC (16 GB/s, where a GEMM of two columns
streamed 36), so the transposed path feeds a single row as two, itself twice: a one-token pass there
took 23 ms instead of 38. Nothing here is written down: when a model is loaded on a CPU,
`measure_pass_costs` times whole forward passes of n tokens after a short context, through each
linear path, and `use_linear_path` sends each row count down the path that was faster. The curve
(`PassCosts.seconds`) is also what lookahead decoding plans its pass widths by. Measurements are
cached on disk per CPU model, torch version, thread count, model, dtype and the measurement's
settings, so only a machine's first start pays for them (~14 s for the embedded model on a 2-core
AMD EPYC).
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

ROWS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)  # pass widths measured; between them costs interpolate
MAX_ROWS = ROWS[-1]  # wider passes (prompt prefills) always use GEMM's own path
CONTEXT_TOKENS = 128  # the passes measured follow this many cached tokens
ROUNDS = 5  # timed rounds over every width and path (each one's fastest counts), after one untimed
PATHS = ("linear", "transposed")
TRANSPOSED_ROWS = range(1, MAX_ROWS + 1)  # row counts the transposed path can take


class MeasuredLinear(nn.Linear):
    """nn.Linear that computes the row counts in `transposed_rows` as weight @ x.T (same result up to rounding),
    a single row as two (itself twice), so that the product is a GEMM that streams the weights on every thread."""

    transposed_rows: frozenset[int] = frozenset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows not in self.transposed_rows:
            return super().forward(x)
        flat = x.reshape(rows, -1)
        columns = flat.expand(2, -1).contiguous() if rows == 1 else flat  # one row as two: a GEMM, not a GEMV
        out = (self.weight @ columns.T)[:, :rows].T
        if self.bias is not None:
            out = out + self.bias
        return out.contiguous().reshape(*x.shape[:-1], -1)


def use_linear_path(model: nn.Module, transposed_rows: Iterable[int]) -> None:
    """Switch the model's nn.Linear layers (in place; weights untouched) to compute `transposed_rows` transposed."""
    rows = frozenset(transposed_rows)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.__class__ = MeasuredLinear
            module.transposed_rows = rows


@dataclass(frozen=True)
class PassCosts:
    """Seconds per forward pass of n tokens, per linear path, as measured on this machine."""

    rows: tuple[int, ...]
    seconds: dict[str, tuple[float, ...]]  # path -> seconds at each of `rows`
    machine: str  # what was measured: CPU, torch, threads, model

    def faster_path(self, n: int) -> str:
        return min(self.seconds, key=lambda path: self._at(path, n))

    def transposed_rows(self) -> list[int]:
        """Row counts (up to MAX_ROWS) whose passes were faster through weight @ x.T."""
        return [n for n in TRANSPOSED_ROWS if n <= self.rows[-1] and self.faster_path(n) == "transposed"]

    def __call__(self, n: int) -> float:
        """Seconds for a pass of n tokens through the faster path (interpolated between measured widths)."""
        return min(self._at(path, n) for path in self.seconds)

    def _at(self, path: str, n: int) -> float:
        rows, seconds = self.rows, self.seconds[path]
        if n <= rows[0]:
            return seconds[0]
        if n >= rows[-1]:
            return seconds[-1] * n / rows[-1]  # past the measured widths: compute-bound, linear in n
        i = next(i for i, r in enumerate(rows) if r >= n)
        share = (n - rows[i - 1]) / (rows[i] - rows[i - 1])
        return seconds[i - 1] + share * (seconds[i] - seconds[i - 1])

    def table(self) -> str:
        """The curve as a Markdown table: ms per pass for each path, and the path chosen."""
        lines = ["| tokens per pass | " + " | ".join(f"{p} ms" for p in self.seconds) + " | chosen |",
                 "|---:|" + "---:|" * len(self.seconds) + "---|"]
        for i, n in enumerate(self.rows):
            cells = " | ".join(f"{1000 * self.seconds[p][i]:.1f}" for p in self.seconds)
            lines.append(f"| {n} | {cells} | {self.faster_path(n)} |")
        return "\n".join(lines)


def machine_key(model: nn.Module, name: str) -> str:
    """What a measurement depends on: the CPU, torch, its threads, the model (by name and shape), the dtype,
    and how it was measured."""
    config = getattr(model, "config", None)
    shape = config.to_json_string(use_diff=False) if config is not None else ""
    device = next(model.parameters()).device
    processor = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    return json.dumps({"processor": processor, "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "model": name, "shape": hashlib.sha256(shape.encode()).hexdigest()[:16],
                       "dtype": str(next(model.parameters()).dtype),
                       "measured": {"rows": ROWS, "context": CONTEXT_TOKENS, "rounds": ROUNDS,
                                    "transposed": [TRANSPOSED_ROWS.start, TRANSPOSED_ROWS.stop]}}, sort_keys=True)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@torch.inference_mode()
def measure_pass_costs(model: nn.Module, machine: str, paths: Iterable[str] = PATHS) -> PassCosts:
    """Time forward passes of each width in ROWS after CONTEXT_TOKENS cached tokens, through each linear path."""
    from lookahead.kv_cache import GrowableCache  # a pass here is a decoding pass: the same cache

    device = next(model.parameters()).device
    vocab = model.get_output_embeddings().weight.shape[0]
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None) or 10**9
    context_tokens = max(1, min(CONTEXT_TOKENS, positions - MAX_ROWS))  # a small test model has few positions
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(vocab, (1, context_tokens), generator=generator).to(device)
    cache = GrowableCache()
    model(context, past_key_values=cache, use_cache=True, logits_to_keep=1)
    feeds = [torch.randint(vocab, (1, n), generator=generator).to(device) for n in ROWS]
    paths = tuple(paths)
    runs: dict[str, list[list[float]]] = {path: [[] for _ in ROWS] for path in paths}
    # Rounds over every width and path, so a busy moment of the machine (another process, a
    # frequency change) weighs on one pass of each, never on all the passes of one width.
    for _ in range(ROUNDS + 1):
        for path in paths:
            use_linear_path(model, TRANSPOSED_ROWS if path == "transposed" else ())
            for feed, times in zip(feeds, runs[path]):
                times.append(_timed_pass(model, feed, cache))
    seconds = {path: tuple(min(times[1:]) for times in runs[path]) for path in paths}  # the least disturbed
    return PassCosts(ROWS, seconds, machine)


def _timed_pass(model: nn.Module, feed: torch.Tensor, cache) -> float:
    """Seconds for one forward pass of `feed` after the cache (which is cut back after)."""
    cuda = feed.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(feed.device)
    start = time.perf_counter()
    model(feed, past_key_values=cache, use_cache=True)
    if cuda:
        torch.cuda.synchronize(feed.device)
    seconds = time.perf_counter() - start
    cache.crop(-feed.shape[1])
    return seconds


def pass_costs(model: nn.Module, name: str, directory: Path | None) -> PassCosts:
    """The model's measured pass costs on this machine: read from `directory` if measured before, else measured
    (and written there). On a CPU both linear paths are measured, on a GPU the one it has."""
    machine = machine_key(model, name)
    cache_file = directory / f"{hashlib.sha256(machine.encode()).hexdigest()[:20]}.json" if directory else None
    if cache_file is not None and cache_file.is_file():
        try:
            stored = json.loads(cache_file.read_text())
            if stored["machine"] == machine:
                return PassCosts(tuple(stored["rows"]), {p: tuple(s) for p, s in stored["seconds"].items()}, machine)
        except (ValueError, KeyError, TypeError):
            pass  # unreadable: measure again
    on_cpu = next(model.parameters()).device.type == "cpu"
    costs = measure_pass_costs(model, machine, PATHS if on_cpu else PATHS[:1])
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        staging = cache_file.with_suffix(f".{time.monotonic_ns()}.tmp")
        staging.write_text(json.dumps({"machine": machine, "rows": costs.rows, "seconds": costs.seconds}))
        staging.replace(cache_file)  # atomic: racing processes each write a whole file
    return costs
