"""The in-process backend: the model in this process, and each session's caches kept here.

custom_llm_inference checks every argument and hands a typed request (lookahead/requests.py) to one of
`InProcess`'s methods; the request then runs in the one `@spaces.GPU` entry point (`on_gpu`,
lookahead/backends/zerogpu.py), which calls `answer` with the backend's number.
Each session's KV cache, precomputed answers, constraint matchers and token listing are kept by the backend that
answered it, in this process (its `Stores`, lookahead/backends/in_process_stores.py); each request type runs in
lookahead/backends/runners/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from lookahead import reading
from lookahead.backends.base import Capabilities
from lookahead.backends.in_process_stores import Stores, registered
from lookahead.backends.runners.attribution import run_attribution
from lookahead.backends.runners.branches import run_distribution, run_lookahead
from lookahead.backends.runners.comparison import run_comparison
from lookahead.backends.runners.generation import run_generation
from lookahead.backends.runners.multiverse import run_multiverse
from lookahead.backends.runners.reads import partial_lookahead, partial_scores, read_first, wait_for_read
from lookahead.backends.runners.scores import run_scores
from lookahead.models import converted, default_model_name, device, load_model, on_zero_gpu
from lookahead.outputs import (
    Attribution,
    AttributionProgress,
    Continuation,
    ModelComparison,
    Multiverse,
    NextToken,
    Suggestions,
    TokenScores,
    last,
)
from lookahead.requests import (
    AttributionRequest,
    CompareRequest,
    DistributionRequest,
    GenerateRequest,
    LookaheadRequest,
    MultiverseRequest,
    Request,
    ScoresRequest,
)
from lookahead.scheduler import Cancelled, scheduler
from lookahead.sessions import SessionStore

CANCEL_POLL_SECONDS = 0.05  # how often a yielding call that waits for precomputation looks whether it was cancelled


class InProcess(Stores):
    """The default backend: the model in this process (on ZeroGPU, in its GPU workers), sessions' caches kept in
    its own stores.

    `on_gpu(number, request)` runs a checked request where the model is (the one `@spaces.GPU` function,
    lookahead/backends/zerogpu.py, which calls `answer`), against the stores of the backend numbered `number`. Every
    call but a yielding one goes through `_serve`: it pre-empts precomputation, and may find its answer ready.
    """

    @property
    def capabilities(self) -> Capabilities:
        """Off ZeroGPU the process outlives a request: it precomputes and reads in the background. On a GPU a
        caret's fit costs little beside the branches; calls share this process's cores or GPU, never batched."""
        local = not on_zero_gpu()
        return Capabilities(precomputation=local, partial_reads=local, cheap_fit=not local or device().type != "cpu",
                            attribution=True, prompt_scores=True, batching=False)

    def __init__(self, on_gpu: Callable[[int, Request], Iterator[object]]) -> None:
        super().__init__()
        self.on_gpu = on_gpu

    def lookahead(self, request: LookaheadRequest, precompute: bool = False, partial: bool = True,
                  yielding: bool = False) -> Suggestions:
        if yielding:
            return self._yielding(request, "lookahead")
        stop_stale_maps(request)
        read = read_first(self, request, begin=False) if partial else None
        if read is not None:
            return self._first_answer(request, read)
        with scheduler.interactive():
            result = last(self._serve(request))
        if precompute and not on_zero_gpu():
            self.last_shown.put(request.key, (request, result))
            self.speculator.start(clicks_ahead(self.last_shown, request, result),
                                  lambda taken, scratch: run_lookahead(self, taken, store=scratch))
        return result

    def distribution(self, request: DistributionRequest) -> list[NextToken]:
        wait_for_read(self, request)
        with scheduler.interactive():
            return last(self._serve(request))

    def scores(self, request: ScoresRequest) -> TokenScores:
        # Scores the session already holds (the branches' pass scored the new tokens) need no model
        # work: answered here, without pre-empting the precomputation that pass started.
        ready = run_scores(self, request, stored_only=True)
        if ready is not None:
            return ready
        read = read_first(self, request)
        if read is not None:  # a long text: the tokens its read has scored so far, at once (lookahead/reading.py)
            return partial_scores(request, read)
        # The few tokens left (at most READ_IN_CALL_WINDOWS windows), as a long job rather than interactive work: a
        # newer read of the session, Stop or its departure stops them within a slice, and other visitors' clicks
        # come first.
        with scheduler.long_job(request.session, "read", request, request.model):
            return last(self._serve(request))

    def generate(self, request: GenerateRequest) -> Iterator[Continuation]:
        yield from self._serve(request)

    def attribution(self, request: AttributionRequest) -> Iterator[AttributionProgress | Attribution]:
        yield from self._serve(request)

    def compare(self, request: CompareRequest) -> ModelComparison:
        with scheduler.interactive():
            return last(self._serve(request))

    def multiverse(self, request: MultiverseRequest, yielding: bool = False) -> Multiverse:
        # After what is being precomputed for the session, and beside its ready answers (over a copy of the session's
        # cache): the page asks a map after every answer, and as a real request (`_serve`) it would stop the
        # precomputation and drop what a click on a branch is about to claim.
        wait_for_read(self, request)
        if yielding:
            return self._yielding(request, "map")
        self.speculator.wait(key=request.key)
        with scheduler.interactive():
            return last(self._on_gpu(request))

    def warm_up(self) -> Iterator[str]:
        """Load the default model, and time what a first answer to a long text may read, while the machine is
        idle (a crowd arriving at once would make the timing, and every first answer after it, too short).
        Before each step, what it does, for the page and the terminal: a first start converts the embedded model
        and measures this CPU."""
        name = default_model_name()
        first = not converted(name)
        if first:
            yield "Preparing the embedded model (once, about a minute)…"
        yield "Loading the model and measuring this CPU (once)…" if first else "Loading the model…"
        model, _ = load_model(name)
        if not on_zero_gpu() and reading.FIRST_ANSWER_SECONDS > 0:
            yield "Timing how much of a long text this CPU reads in a second (once a start)…"
            self.reader.window(name, model)

    def forget(self, session: str) -> None:
        """Stop the session's long jobs and drop everything kept for it (`Stores.forget`).

        On ZeroGPU the stores the requests used live in the GPU workers, out of reach here; there they age out as
        any cache does.
        """
        scheduler.cancel(session)
        super().forget(session)

    def _yielding(self, request: Request, kind: str) -> object:
        """`request` as a long job of `kind`: after what is being precomputed for the session (it makes the next click
        instant; as one more real request this call would stop it and drop the ready answers), then every module call
        waits while interactive work runs. Cancelled, it stops at once, waiting or not."""
        with scheduler.long_job(request.session, kind, request, request.model) as job:
            while not self.speculator.wait(CANCEL_POLL_SECONDS, request.key):
                if job.cancelled:
                    raise Cancelled(f"the {kind} was cancelled")
            return last(self._on_gpu(request))

    def _first_answer(self, request: LookaheadRequest, read: reading.Read) -> Suggestions:
        """A long text's answer from its last tokens, given at once while `read` reads it all (lookahead/reading.py).
        Reading those tokens is a second of model work: a part of the read's long job rather than interactive work,
        so other visitors' clicks come first; the rest of the read begins once it is given (the cores are this
        answer's meanwhile)."""
        try:
            with scheduler.long_job(request.session, "read", read.ids, request.model):
                return last(self._serve(request, lambda: iter([partial_lookahead(self, request, read)])))
        finally:
            self.reader.begin(read)

    def _serve(self, request: Request, compute: Callable[[], Iterator[object]] | None = None) -> Iterator[object]:
        """`request`'s answers: a precomputed one if ready, else `compute`'s (by default the GPU entry point's)."""
        ready = self.speculator.arrived(request.key, request)
        try:
            result = self.speculator.claim(request.key, ready) if ready else None
            if result is not None:
                yield result
            else:
                yield from (compute or (lambda: self._on_gpu(request)))()
        finally:
            self.speculator.finished()

    def _on_gpu(self, request: Request) -> Iterator[object]:
        """`request`'s answers from the GPU entry point, run against this backend's stores."""
        return self.on_gpu(self.number, request)


def stop_stale_maps(request: LookaheadRequest) -> None:
    """Suggestions asked for another text (a click, an edit) make the session's map of futures being grown stale: it
    stops within a slice, so the click has the cores (the page asks a new map after the answer)."""
    for job in scheduler.running(request.session):
        map_ = job.question
        if job.kind == "map" and (map_.text, map_.after, map_.messages) != (request.text, request.after,
                                                                               request.messages):
            scheduler.stop(job)


def clicks_ahead(last_shown: SessionStore[tuple[str, str], tuple[LookaheadRequest, Suggestions]],
                 request: LookaheadRequest, result: Suggestions) -> list[tuple[tuple[str, str], LookaheadRequest]]:
    """The requests a click on a shown branch sends, keyed by the cache each reads: each branch taken, asked of this
    model and of every other model whose suggestions the session was `last_shown` for the same text (a second
    model's panel refreshes after each click too), the likeliest branches of each first."""
    beside = [last_shown.get(key) for key in last_shown if key[1] == request.session and key != request.key]
    asked = [(request, result), *((other, answer) for other, answer in filter(None, beside)
                                  if (other.text, other.after, other.messages) == (request.text, request.after,
                                                                                   request.messages))]
    ranks = max(len(answer.branches) for _, answer in asked)
    return [(model.key, replace(model, text=request.text + answer.branches[rank].text))
            for rank in range(ranks) for _, answer in asked if rank < len(answer.branches)
            for model, _ in asked]


def answer(backend: int, request: Request) -> Iterator[object]:
    """Run one checked request with the model in this process, against the stores of the backend numbered `backend`
    (inside the GPU entry point)."""
    stores = registered(backend)
    match request:
        case LookaheadRequest():
            yield run_lookahead(stores, request)
        case DistributionRequest():
            yield run_distribution(stores, request)
        case ScoresRequest():
            yield run_scores(stores, request)
        case GenerateRequest():
            yield from run_generation(stores, request)
        case AttributionRequest():
            yield from run_attribution(request)
        case CompareRequest():
            yield run_comparison(stores, request)
        case MultiverseRequest():
            yield run_multiverse(stores, request)
        case _:
            raise TypeError(f"not a request: {request!r}")
