"""What a forward pass of n tokens costs on the machine at hand, and the linear path that makes it cheapest.

A decoding pass on a CPU is bound by reading the weights, so feeding a few tokens should cost about what one does:
that is what makes guessing tokens (lookahead decoding, branch trees) pay. Whether it does depends on the CPU and its
BLAS, so each nn.Linear can take either of two paths, and which is faster at each row count is measured, not assumed:
- "linear", nn.Linear's own: one row is a GEMV, more rows a GEMM. MKL on a 2-core AMD EPYC runs the GEMV on one
  thread and takes about twice the one-row time for 2 to ~30 rows; on a Xeon with AVX-512 and AMX this path is the
  fast one, 2 rows costing what 1 does.
- "transposed" (`MeasuredLinear`): `weight @ x.T`, a single row fed as two, so that every row count is a GEMM that
  streams the weights on every thread (on that EPYC at 36 GB/s where the GEMV reads 16: a one-token pass takes 23 ms
  this way, 38 through the GEMV).
When a model is loaded on a CPU, passes of n tokens after a short context are timed through each path
(`measure_pass_costs`), and `use_linear_path` sends each row count down the faster one. The curve (`PassCosts`) is
also what lookahead decoding plans its pass widths by. `python bench/bench_passes.py` measures the curve afresh, the
weight bytes each width reads per second against the memory bandwidth, and a click's model time on each path.

How it is measured, so that a first start answers soon and a bad figure does not stay:
- Measured at load, the full curve (`ROWS`, `ROUNDS`) makes a first start's `load_model` take ~13 s on a 2-core
  Intel Xeon, ~110 s while other processes keep both cores busy. So a first start measures quickly (`QUICK_ROWS`,
  `QUICK_ROUNDS`: the widths that set the path for 1 to 32 rows, the rest interpolated; `load_model` then takes ~2 s
  there) and the model answers with that; the full curve is then measured in the background (~15 s more there,
  `refine_in_background`) and replaces it for planning. `python bench/bench_start.py` times a first start and a
  later one.
- Every measurement is cached on disk per CPU model, torch version, thread count, model, dtype and the measurement's
  settings. At load a cached curve is checked with a few passes (`CHECK_ROWS`; ~0.4 s of a start) and measured again
  when it is off by more than `CHECK_TOLERANCE` either way (another host under the same CPU name, a new BLAS, a curve
  taken while the machine was busy).
- A measurement records whether other processes took more than `BUSY_SHARE` of the machine while its passes ran; a
  busy one, like a quick one, is measured again in the background on the next start, and a measurement never
  replaces a full quiet one on disk unless it is one too.
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import json
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch
from torch import nn

ROWS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)  # pass widths measured; between them costs interpolate
MAX_ROWS = ROWS[-1]  # wider passes (prompt prefills) always use GEMM's own path
CONTEXT_TOKENS = 128  # the passes measured follow this many cached tokens
ROUNDS = 5  # timed rounds over every width and path; each one's fastest counts
# A first start's measurement: the widths of the passes first answers take (a click appends its branch's 1-3 tokens,
# then runs 5 branches at once): one row, a case of its own (a GEMV on F.linear's path, two rows on the other), 2, 4
# and 8 rows; and the widest. Each is the fastest of two rounds; between them the path interpolates, as it does between
# the full curve's widths.
QUICK_ROWS = (1, 2, 4, 8, 32)
QUICK_ROUNDS = 2
# A cached curve is checked at load at one row and a mid width, through the paths it chose, each the faster of
# QUICK_ROUNDS passes, and measured again when a pass now takes more than CHECK_TOLERANCE times its figure or less than
# its inverse. Paths and widths are chosen by the curve's shape, not its scale, so the tolerance is wide: it catches a
# curve from other conditions (hosts sold under one CPU name differ about 2x: a one-token pass takes 23 ms on one AMD
# EPYC host, 48-56 on another; a curve taken while the machine was busy can be 9x off) without measuring again for
# every small drift.
CHECK_ROWS = (1, 8)
CHECK_TOLERANCE = 2.0
# A path that took more than LOSING_RATIO times the other's time at a width is not timed there again: one round shows
# it is not the one chosen, and its passes are the slowest of the measurement (on a Xeon with AMX the transposed path
# takes 4x F.linear's time at 2 rows).
LOSING_RATIO = 2.0
# A measurement is busy when other processes (and, on a VM, the hypervisor: steal time) took more than this share of
# the machine's CPU time while its passes ran: a pass needs every core its threads run on (each waits for the slowest
# at every layer) and the memory bandwidth, so others taking a quarter of the machine slow it by a third or more, which
# the fastest of a few rounds does not hide.
BUSY_SHARE = 0.25
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
    quick: bool = False  # measured at QUICK_ROWS in QUICK_ROUNDS, not the full curve
    busy: bool = False  # other processes took more than BUSY_SHARE of the machine while it was measured
    # The rows the model computes transposed where an earlier measurement chose them (the process keeps its first
    # choice: `refine_in_background`); None: wherever this curve found that path faster.
    pinned: frozenset[int] | None = None

    @property
    def final(self) -> bool:
        """Measured in full on a quiet machine: never measured again unless the check at load finds it off."""
        return not (self.quick or self.busy)

    def faster_path(self, n: int) -> str:
        return min(self.seconds, key=lambda path: self._at(path, n))

    def transposed_rows(self) -> list[int]:
        """Row counts (up to MAX_ROWS) the model computes through weight @ x.T: where that was faster, or as pinned."""
        return sorted(self._transposed)

    def path(self, n: int) -> str:
        """The linear path a pass of n tokens takes."""
        return "transposed" if n in self._transposed else "linear"

    @cached_property
    def _transposed(self) -> frozenset[int]:
        if self.pinned is not None:
            return self.pinned
        return frozenset(n for n in TRANSPOSED_ROWS if n <= self.rows[-1] and self.faster_path(n) == "transposed")

    def __call__(self, n: int) -> float:
        """Seconds for a pass of n tokens through the path it takes (interpolated between measured widths)."""
        return self._at(self.path(n), n)

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
            lines.append(f"| {n} | {cells} | {self.path(n)} |")
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
                                    "quick": [QUICK_ROWS, QUICK_ROUNDS], "losing": LOSING_RATIO,
                                    "transposed": [TRANSPOSED_ROWS.start, TRANSPOSED_ROWS.stop]}}, sort_keys=True)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Stopped(Exception):
    """The process is exiting: a measurement beside a model stops before its next pass."""


class ModelUse:
    """The forward passes of a model in every thread (hooks on its outermost module), so that a measurement beside it
    can wait until it is idle and tell whether it ran meanwhile."""

    def __init__(self, model: nn.Module) -> None:
        self._changed = threading.Condition()
        self._running = self._started = 0
        self._stopped = False
        self._inside = threading.local()
        self._hooks = (model.register_forward_pre_hook(self._enter),
                       model.register_forward_hook(self._leave, always_call=True))

    def _enter(self, module: nn.Module, args: tuple) -> None:
        self._inside.now = True
        with self._changed:
            self._running += 1
            self._started += 1

    def _leave(self, module: nn.Module, args: tuple, output: object) -> None:
        if getattr(self._inside, "now", False):  # not where an earlier pre-hook raised (a cancelled job): never in
            self._inside.now = False
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def idle(self) -> int:
        """Wait until no pass of the model runs; how many had started by then. Raises `Stopped` once stopped."""
        with self._changed:
            self._changed.wait_for(lambda: not self._running or self._stopped)
            if self._stopped:
                raise Stopped
            return self._started

    def started(self) -> int:
        with self._changed:
            return self._started

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _others_machine_seconds() -> float | None:
    """How much of the machine's time, in seconds of all its CPUs at once, anything but this process has taken since
    boot: other processes, the kernel's interrupts and, on a VM, other guests (steal). None where /proc/stat is not
    there (not Linux): a measurement there is never marked busy."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in lines[0].split()[1:9])
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3].isdigit())
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return (busy - time.process_time()) / cpus


class _Passes:
    """Decoding passes of n tokens after CONTEXT_TOKENS cached tokens, timed one at a time, and how much of the
    machine other processes took while they ran. With `beside` (a model serving requests), a pass waits until that
    model is idle and is timed again if it ran meanwhile: this process's own work then never weighs on a figure."""

    def __init__(self, model: nn.Module, rows: Iterable[int], beside: ModelUse | None = None) -> None:
        from lookahead.kv_cache import GrowableCache  # a pass here is a decoding pass: the same cache

        device = next(model.parameters()).device
        vocab = model.get_output_embeddings().weight.shape[0]
        positions = getattr(model.config.get_text_config(), "max_position_embeddings", None) or 10**9
        context_tokens = max(1, min(CONTEXT_TOKENS, positions - MAX_ROWS))  # a small test model has few positions
        generator = torch.Generator().manual_seed(0)
        context = torch.randint(vocab, (1, context_tokens), generator=generator).to(device)
        self.cache = GrowableCache()
        model(context, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.feeds = {n: torch.randint(vocab, (1, n), generator=generator).to(device) for n in rows}
        self.model, self.beside = model, beside
        self.wall = self.others = 0.0  # seconds the timed passes ran, and the machine's seconds others took meanwhile

    def seconds(self, n: int) -> float:
        """Seconds for one pass of n tokens."""
        while True:
            seen = self.beside.idle() if self.beside is not None else 0
            start, before = time.perf_counter(), _others_machine_seconds()
            seconds = _timed_pass(self.model, self.feeds[n], self.cache)
            wall, after = time.perf_counter() - start, _others_machine_seconds()
            if self.beside is None or self.beside.started() == seen:
                break
        if before is not None and after is not None:
            self.wall += wall
            self.others += after - before
        return seconds

    @property
    def busy(self) -> bool:
        """Whether others took more than BUSY_SHARE of the machine while the passes ran."""
        return self.others > BUSY_SHARE * self.wall


@torch.inference_mode()
def measure_pass_costs(model: nn.Module, machine: str, paths: Iterable[str] = PATHS, quick: bool = False,
                       beside: ModelUse | None = None) -> PassCosts:
    """Time forward passes of each width in ROWS (quick: QUICK_ROWS) after CONTEXT_TOKENS cached tokens, through each
    linear path, in ROUNDS (QUICK_ROUNDS, or one on a busy machine) rounds; `beside`: the model serving requests,
    whose passes it waits for."""
    rows, rounds = (QUICK_ROWS, QUICK_ROUNDS) if quick else (ROWS, ROUNDS)
    paths = tuple(paths)
    passes = _Passes(model, rows, beside)
    runs: dict[str, list[list[float]]] = {path: [[] for _ in rows] for path in paths}
    # Every width and path once per round, so that a first pass's one-off costs or a busy moment of the machine
    # (another process, a frequency change) weighs on one pass of each, never on all the passes of one width; the
    # paths of a width one after the other, in turns, so that they compare passes taken moments apart.
    for turn in range(rounds):
        order = paths if turn % 2 == 0 else paths[::-1]
        for i, n in enumerate(rows):
            for path in order:
                rivals = [min(runs[other][i]) for other in paths if other != path and runs[other][i]]
                if runs[path][i] and rivals and min(runs[path][i]) > LOSING_RATIO * min(rivals):
                    continue
                use_linear_path(model, TRANSPOSED_ROWS if path == "transposed" else ())
                runs[path][i].append(passes.seconds(n))
        if quick and passes.busy:
            break  # more rounds would not make it trustworthy: the model answers now, the background measures again
    seconds = {path: tuple(min(times) for times in runs[path]) for path in paths}  # the least disturbed
    return PassCosts(rows, seconds, machine, quick=quick, busy=passes.busy)


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


@torch.inference_mode()
def _agrees(model: nn.Module, costs: PassCosts) -> bool:
    """Whether passes at CHECK_ROWS, through the paths `costs` chose, take within CHECK_TOLERANCE times its figures.
    Leaves the model on those paths."""
    use_linear_path(model, costs.transposed_rows())
    passes = _Passes(model, CHECK_ROWS)
    rounds = [[passes.seconds(n) for n in CHECK_ROWS] for _ in range(QUICK_ROUNDS)]
    ratios = [min(now) / costs(n) for n, now in zip(CHECK_ROWS, zip(*rounds))]
    return all(1 / CHECK_TOLERANCE <= ratio <= CHECK_TOLERANCE for ratio in ratios)


def _cache_file(directory: Path | None, machine: str) -> Path | None:
    return directory / f"{hashlib.sha256(machine.encode()).hexdigest()[:20]}.json" if directory else None


def _read(cache_file: Path | None, machine: str) -> PassCosts | None:
    if cache_file is None:
        return None
    try:
        stored = json.loads(cache_file.read_text())
        if stored["machine"] == machine:
            return PassCosts(tuple(stored["rows"]), {p: tuple(s) for p, s in stored["seconds"].items()}, machine,
                             quick=stored["quick"], busy=stored["busy"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing or unreadable: measure again
    return None


def _store(cache_file: Path | None, costs: PassCosts) -> None:
    """Write `costs` to the cache, unless that holds a final curve and this one is not."""
    if cache_file is None:
        return
    kept = _read(cache_file, costs.machine)
    if kept is not None and kept.final and not costs.final:
        return  # a quick or busy curve never replaces a full quiet one
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    staging = cache_file.with_suffix(f".{time.monotonic_ns()}.tmp")
    staging.write_text(json.dumps({"machine": costs.machine, "rows": costs.rows, "seconds": costs.seconds,
                                   "quick": costs.quick, "busy": costs.busy}))
    staging.replace(cache_file)  # atomic: racing processes each write a whole file


def pass_costs(model: nn.Module, name: str, directory: Path | None, quick: bool = True) -> PassCosts:
    """The model's pass costs on this machine: read from `directory` if measured before and they pass the check at
    load, else measured (quick: QUICK_ROWS, for `refine_in_background` to complete; else the full curve, which also
    replaces a cached curve that is not final) and written there. On a CPU both linear paths are measured, on a GPU
    the one it has."""
    machine = machine_key(model, name)
    cache_file = _cache_file(directory, machine)
    cached = _read(cache_file, machine)
    if cached is not None and (quick or cached.final) and _agrees(model, cached):
        return cached
    on_cpu = next(model.parameters()).device.type == "cpu"
    costs = measure_pass_costs(model, machine, PATHS if on_cpu else PATHS[:1], quick=quick)
    _store(cache_file, costs)
    return costs


_background: list[tuple[ModelUse, threading.Thread]] = []  # the refinements started in this process


def refine_in_background(model: nn.Module, costs: PassCosts, directory: Path | None,
                         publish: Callable[[PassCosts], None]) -> threading.Thread:
    """Measure the full curve in a daemon thread while `model` serves requests, write it to `directory`, and hand it
    to `publish`, pinned to the linear paths `costs` chose.

    The passes run on a twin of the model that shares its weights, so switching the twin's paths never touches the
    model; each waits until the model is idle, and one the model ran beside is timed again. The model keeps the paths
    of its first measurement for the life of the process: switched while another thread is in a forward, a pass
    would take some layers down each path, and the same request could give other last bits before and after the
    switch (enough to flip a near-tie). The refined curve, priced along those paths, serves planning from then on;
    the next start chooses its paths by it.
    """
    twin = copy.deepcopy(model, {id(t): t for t in (*model.parameters(), *model.buffers())})  # before the hooks
    use = ModelUse(model)

    def refine() -> None:
        try:
            full = measure_pass_costs(twin, costs.machine, tuple(costs.seconds), beside=use)
        except Stopped:
            return
        finally:
            use.close()
        _store(_cache_file(directory, costs.machine), full)
        publish(replace(full, pinned=frozenset(costs.transposed_rows())))

    thread = threading.Thread(target=refine, name="pass-costs", daemon=True)
    _background.append((use, thread))
    thread.start()
    return thread


@atexit.register
def _stop_background() -> None:
    """Stop the refinements still running before the interpreter shuts down, and wait for their current pass: torch
    aborts the process ("terminate called without an active exception") if a thread is in a forward then."""
    for use, _ in _background:
        use.stop()
    for _, thread in _background:
        thread.join()
