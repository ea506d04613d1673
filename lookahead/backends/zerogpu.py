"""The ZeroGPU entry point: the one `@spaces.GPU` function in-process requests run in, the GPU time each asks for,
and the offered models loaded at import, as ZeroGPU requires. Off ZeroGPU the decorator changes nothing and
nothing loads at import.

On ZeroGPU `spaces` patches torch's CUDA initialisation as it is imported, so it must come before torch: this
module imports it before any part of the engine, and custom_llm_inference imports this module before any other
(each of them imports torch).

A cancel (Stop, a newer question, a closed tab) runs in the app's process, while on ZeroGPU a long job (an
explanation, a continuation) runs in a GPU worker forked from it, under the worker's own scheduler. So
`run_on_gpu` also starts each long job in this process's scheduler, where the cancel finds it, and passes the
cancel on through shared memory (lookahead/backends/cancel_channel.py) to the worker, which checks it before every
module call: the job stops within one slice, as off ZeroGPU, and the GPU call returns at once, giving the GPU back
and sparing the visitor's quota.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import spaces  # before the engine below: on ZeroGPU it patches CUDA initialisation, which torch must not run first

from lookahead.backends import cancel_channel
from lookahead.backends.in_process import InProcess, answer
from lookahead.models import available_models, load_model, on_zero_gpu
from lookahead.requests import AttributionRequest, CompareRequest, GenerateRequest, Request
from lookahead.scheduler import Cancelled, Job, before_every_module_call, scheduler

# GPU time asked of ZeroGPU per call (before its duration factor, 1.5 on current hardware).
# The request is checked against the visitor's remaining quota (~2 minutes for an anonymous
# visitor) before anything runs, so ask for what a call needs, not a safe maximum.
INTERACTION_GPU_SECONDS = 10  # a lookahead or distribution: well under a second of work
# An attribution: a forward and a backward (~3 forwards) per token of the window and per step; 2048 tokens x
# 64 steps asks for 10 + 53 s (x1.5: under an anonymous visitor's ~2 minutes).
ATTRIBUTION_GPU_SECONDS_PER_TOKEN_PASS = 0.0004
GENERATE_GPU_SECONDS = 4.0  # a continuation: the prompt's pass and start-up ...
GENERATE_GPU_SECONDS_PER_TOKEN = 0.015  # ... plus this per new token (MAX_NEW_TOKENS: 20 s)

# The requests that run as long jobs, and their kinds (lookahead/scheduler.py): on ZeroGPU a cancel reaches them.
LONG_JOBS: dict[type[Request], str] = {AttributionRequest: "attribution", GenerateRequest: "continuation"}
# How often the app's process looks whether a long job running in a GPU worker was cancelled (a thread per such call,
# looking at a flag): the worker then stops within this and one slice.
CANCEL_WATCH_SECONDS = 0.02


def gpu_seconds(request: Request) -> int:
    """The GPU duration `on_gpu(request)` asks ZeroGPU for, by the request's type, in whole seconds (spaces drops
    a fraction)."""
    if isinstance(request, GenerateRequest):
        return math.ceil(GENERATE_GPU_SECONDS + GENERATE_GPU_SECONDS_PER_TOKEN * request.max_new_tokens)
    if isinstance(request, AttributionRequest):  # a forward and a backward over the window, per step
        steps = request.steps if request.method == "integrated_gradients" else 1
        return math.ceil(INTERACTION_GPU_SECONDS + ATTRIBUTION_GPU_SECONDS_PER_TOKEN_PASS * request.window * steps)
    if isinstance(request, CompareRequest):  # both models, in one call
        return 2 * INTERACTION_GPU_SECONDS
    return INTERACTION_GPU_SECONDS


def call_gpu_seconds(backend: int, request: Request, call: int | None = None) -> int:
    """`gpu_seconds`, called as spaces calls a duration: with the GPU function's arguments."""
    return gpu_seconds(request)


@spaces.GPU(duration=call_gpu_seconds)
def on_gpu(backend: int, request: Request, call: int | None = None) -> Iterator[object]:
    """Run one checked request against the stores of the in-process backend numbered `backend`; everything that
    touches the model runs here (`answer` dispatches on its type).

    One entry point, a generator (Continue streams): spaces keeps one worker pool per
    decorated function, so every endpoint's calls land in the same workers and share
    their session caches. Off ZeroGPU the decorator changes nothing. On ZeroGPU the arguments are pickled into a
    worker forked from this process: a backend's number crosses, and the worker finds the stores it forked with.
    With `call` (a long job's number in cancel_channel), every module call first looks whether the app's process
    cancelled it, and raises `Cancelled` if so.
    """
    if call is None:
        yield from answer(backend, request)
        return

    def check() -> None:
        if cancel_channel.cancelled(call):
            raise Cancelled(f"the {LONG_JOBS[type(request)]} was cancelled")

    with before_every_module_call(check):
        yield from answer(backend, request)


def run_on_gpu(backend: int, request: Request) -> Iterator[object]:
    """`on_gpu(backend, request)`'s answers. On ZeroGPU a long job runs in a GPU worker, out of this process's reach:
    it is started in this process's scheduler as well, where a cancel finds it, and the cancel is passed on to the
    worker."""
    kind = LONG_JOBS.get(type(request))
    if kind is None or not on_zero_gpu():
        yield from on_gpu(backend, request)
        return
    job = scheduler.start(request.session, kind, request)  # a newer question of the session cancels the one before
    if job.cancelled:  # its session cancelled that kind after the question was asked: it asks for no GPU
        scheduler.finish(job)
        raise Cancelled(f"the {kind} was cancelled")
    call = cancel_channel.new_call()
    ended = threading.Event()
    threading.Thread(target=pass_on_cancel, args=(job, call, ended), daemon=True).start()
    try:
        yield from on_gpu(backend, request, call)
    except Exception as error:  # the worker's Cancelled arrives as spaces' "ZeroGPU worker error"
        if job.cancelled:
            raise Cancelled(f"the {kind} was cancelled") from error
        raise
    finally:
        ended.set()
        scheduler.finish(job)


def pass_on_cancel(job: Job, call: int, ended: threading.Event) -> None:
    """Until `ended`, look whether `job` was cancelled in this process; once it is, cancel `call` in the worker."""
    while not ended.wait(CANCEL_WATCH_SECONDS):
        if job.cancelled:
            cancel_channel.cancel(call)
            return


def in_process_backend() -> InProcess:
    """The in-process backend (the "in-process" entry of lookahead/backends), its requests run in `on_gpu` (by way
    of `run_on_gpu`)."""
    return InProcess(run_on_gpu)


if on_zero_gpu():
    # ZeroGPU wants the models loaded (and moved to CUDA) at import time, outside GPU functions.
    for _name in available_models():
        load_model(_name)
