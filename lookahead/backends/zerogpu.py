"""The ZeroGPU entry point: the one `@spaces.GPU` function in-process requests run in, the GPU time each asks for,
and the offered models loaded at import, as ZeroGPU requires. Off ZeroGPU the decorator changes nothing and
nothing loads at import.

On ZeroGPU `spaces` patches torch's CUDA initialisation as it is imported, so it must come before torch: this
module imports it before any part of the engine, and custom_llm_inference imports this module before any other
(each of them imports torch).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import spaces  # before the engine below: on ZeroGPU it patches CUDA initialisation, which torch must not run first

from lookahead.backends.in_process import InProcess, answer
from lookahead.models import available_models, load_model, on_zero_gpu
from lookahead.requests import AttributionRequest, CompareRequest, GenerateRequest, Request

# GPU time asked of ZeroGPU per call (before its duration factor, 1.5 on current hardware).
# The request is checked against the visitor's remaining quota (~2 minutes for an anonymous
# visitor) before anything runs, so ask for what a call needs, not a safe maximum.
INTERACTION_GPU_SECONDS = 10  # a lookahead or distribution: well under a second of work
# An attribution: a forward and a backward (~3 forwards) per token of the window and per step; 2048 tokens x
# 64 steps asks for 10 + 53 s (x1.5: under an anonymous visitor's ~2 minutes).
ATTRIBUTION_GPU_SECONDS_PER_TOKEN_PASS = 0.0004
GENERATE_GPU_SECONDS = 4.0  # a continuation: the prompt's pass and start-up ...
GENERATE_GPU_SECONDS_PER_TOKEN = 0.015  # ... plus this per new token (MAX_NEW_TOKENS: 20 s)


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


@spaces.GPU(duration=gpu_seconds)
def on_gpu(request: Request) -> Iterator[dict]:
    """Run one checked request; everything that touches the model runs here (`answer` dispatches on its type).

    One entry point, a generator (Continue streams): spaces keeps one worker pool per
    decorated function, so every endpoint's calls land in the same workers and share
    their session caches. Off ZeroGPU the decorator changes nothing.
    """
    yield from answer(request)


def in_process_backend() -> InProcess:
    """The in-process backend (the "in-process" entry of lookahead/backends), its requests run in `on_gpu`."""
    return InProcess(on_gpu)


if on_zero_gpu():
    # ZeroGPU wants the models loaded (and moved to CUDA) at import time, outside GPU functions.
    for _name in available_models():
        load_model(_name)
