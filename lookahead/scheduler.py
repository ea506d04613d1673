"""Who uses the model now: interactive work first; long work in slices that yield to it; every long job
can be cancelled.

Interactive work (a click, a keystroke's refresh, a forced token, the distribution, the heatmap's scores)
takes well under a second. Long work (an explanation, a continuation) can take minutes on a CPU. Both run
in threads of this process, on the same cores. A long job checks in before every torch module's forward
call (a slice: one layer's attention or MLP, at most tens of milliseconds on a CPU): while any interactive
request is running, it waits there, and once it is cancelled it stops there (`Cancelled`). Waiting changes
no arithmetic, so a sliced job gives bit for bit what it gives alone.

First is not always: back-to-back clicks (a crowd, or the writer's own while their "why?" runs) would leave a long
job almost no time. So long work keeps a balance of the machine's time owed to it: while it waits for interactive
work the balance grows by LONG_SHARE / (1 - LONG_SHARE) of a second a second (LONG_SHARE of the time, waited and run
together, is long work's); while it runs alone the balance shrinks a second a second, down to MAX_CREDIT_SECONDS of
credit, and while it runs beside interactive work TURN_PAYS of a second a second (it has part of the cores then). Once
MIN_TURN_SECONDS are owed the long jobs get a turn: they run beside the interactive work, sharing the cores with it,
until the balance is paid. A long job is thus owed only the time it was starved: one
that ran alone in the pause before a click (a writer reading) has had its share of that click in advance and waits
through it, so the click has the cores to itself but for the slice under way; so does long work that starts afresh
(a paste's read beside another visitor's click: it starts with that credit, not yet starved); under clicks without
pauses it still gets its share. No interactive request ever waits for long work: one that runs for long (a
comparison's first read) holds up no click, and a long job keeps finishing.

A session has at most one long job of each kind, or of each kind on each model where the caller names the model (two
models compared side by side each read the text and fit the caret): a new one cancels the one before (the visitor
asked a new question), and `cancel` stops them all (Stop, a closed tab, a reload). A cancel can come before the job
it means has started (a newer event arriving while the older one is on its way to starting it): where the caller
says when the question was asked (`ASKED_AT`), a job of a kind its session cancelled since then starts cancelled.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import torch

from lookahead.cpu_threads import release_workers

# The kinds of long job; a session has at most one of each (on each model named). "lookahead": one asked to yield
# (the page's second ask at a caret, for the branches' fit, which a slow CPU takes a while over); "map": the map of
# futures the page asks after every answer, which the session's next text makes stale.
LONG_JOBS = ("attribution", "continuation", "read", "lookahead", "map")
Step, Result = TypeVar("Step"), TypeVar("Result")
# Long work's share of the time, waited and run, while interactive work keeps coming: what it is owed is run beside the
# clicks (sharing the cores). The aim: under back-to-back clicks, the clicks within 1.5x their time alone and a long job
# within 4x (bench_clicks_first.py --share: a "why?" under another visitor's back-to-back clicks, against each alone).
# On a 2-core AMD EPYC, with a turn paying a second a second, a share of 0.25 gave the "why?" 5.8x and the clicks
# 1.3x: a job beside a click has about half the cores, so its turns paid twice what they gave it (TURN_PAYS). With
# turns paying half: 1/3 gave 4.4x, 0.36 3.95x, 0.4 3.3x, the clicks ~480 ms each time against 280-430 ms alone. Once a
# waiting job handed its CPU workers back (lookahead/cpu_threads.py) the clicks took less and the job more: 0.36 gave
# it 4.1-4.5x, 0.4 3.5-3.9x, the clicks 1.3-1.4x their time alone (~370 ms against ~280 ms) either way.
LONG_SHARE = 0.4
# What a second run beside interactive work pays of the balance: two compute-bound workloads on the same cores each get
# about half of them.
TURN_PAYS = 0.5
MIN_TURN_SECONDS = 0.05  # a turn shorter than a few slices (each at most tens of ms) would only add switches
# The most time long work that ran alone keeps as credit against waiting later. A second pays for a click of up to
# (1 + MIN_TURN_SECONDS) * (1 - LONG_SHARE) / LONG_SHARE = 1.6 s alone (clicks on 2 cores take 0.15-1.2 s, the
# slowest through llama.cpp at ~3k tokens) that follows a pause of a second or more: the long job waits through it, and
# no turn slows it. More would hold long work back for longer without a turn beside interactive work that goes on
# (1.5 s per second of credit: a crowd's first clicks, a comparison's first read); less would let a slow click after a
# pause share the cores again.
MAX_CREDIT_SECONDS = 1.0
KEPT_CANCELS = 4096  # (session, kind) pairs whose last cancel is remembered, for jobs asked before it to start
# When the question a job answers was asked (time.monotonic()), set by the caller where it knows (the page's events).
ASKED_AT: ContextVar[float | None] = ContextVar("asked_at", default=None)


class Cancelled(Exception):
    """The long job was cancelled: its visitor asked a new question of the same kind, pressed Stop, or left."""


@dataclass(eq=False)
class Job:
    """One long job: whose, of which kind, and how far it got."""

    session: str
    kind: str
    question: Hashable = None  # what it answers: the same question asked again does not cancel it
    model: str | None = None  # where named, which model it runs: a question to another model cancels nothing
    cancelled: bool = False
    slices: int = 0  # module calls it has run: a cancelled job's count stops growing
    waits: int = 0  # times it found interactive work running at a slice, and no turn, and waited (again on each look)


class Scheduler:
    """The running interactive requests, and each session's long jobs."""

    def __init__(self, share: float = LONG_SHARE, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share  # of the time interactive work takes, owed to long work waiting for it (0: none)
        self._clock = clock  # what the balance is counted by, in seconds (a test passes one it moves itself)
        self._start_afresh()
        # A process forked from this one (a ZeroGPU worker) starts with none of its work: the requests and jobs
        # counted here run in this process, and would hold that one's long jobs forever.
        os.register_at_fork(after_in_child=self._start_afresh)

    def _start_afresh(self) -> None:
        self._changed = threading.Condition()
        self._interactive = 0  # interactive requests running now
        self._jobs: list[Job] = []  # running, oldest first
        self._blocked = 0  # long jobs waiting at a slice for interactive work
        # Seconds of the machine owed to long work for waiting; below 0, its credit for running. Long work that starts
        # afresh has the most credit: it has not been starved yet, so it waits through the clicks it arrives beside.
        self._owed = -MAX_CREDIT_SECONDS
        self._counted_until = self._clock()  # when the balance was last brought up to date
        self._turn = False  # long work runs beside interactive work, until the balance is paid
        self._cancelled_at: OrderedDict[tuple[str, str], float] = OrderedDict()  # (session, kind) -> its last cancel

    @contextmanager
    def interactive(self) -> Iterator[None]:
        """Run an interactive request, at once: long jobs wait at their next slice until it ends, or their turn."""
        with self._changed:
            self._count_owed()
            self._interactive += 1
        try:
            yield
        finally:
            release_workers()  # a long job waiting, or another request, runs unthrottled (lookahead/cpu_threads.py)
            with self._changed:
                self._count_owed()
                self._interactive -= 1
                self._changed.notify_all()

    def _count_owed(self) -> None:
        """Bring the balance up to date since the last count (called at every change of what runs, so what ran
        between two counts is what runs now): a share of the time long work waited for interactive work is added,
        the time it ran is taken off (TURN_PAYS of it beside interactive work), down to MAX_CREDIT_SECONDS of
        credit."""
        now = self._clock()
        elapsed, self._counted_until = now - self._counted_until, now
        if self._interactive and self._blocked:
            self._owed += elapsed * self.share / (1 - self.share)
        elif self._jobs:
            paid = elapsed * (TURN_PAYS if self._interactive else 1.0)
            self._owed = max(self._owed - paid, -MAX_CREDIT_SECONDS)

    def _in_turn(self) -> bool:
        """Whether long work has its turn now: from when MIN_TURN_SECONDS are owed until the balance is paid."""
        self._count_owed()
        if self._owed >= MIN_TURN_SECONDS:
            self._turn = True
        elif self._owed <= 0:
            self._turn = False
        return self._turn

    def _until_owed(self) -> float | None:
        """Seconds until a waiting long job is owed a turn at the present rate (None: never, with no share)."""
        if not self.share:
            return None
        return max(MIN_TURN_SECONDS - self._owed, 0.0) * (1 - self.share) / self.share + 0.001

    def start(self, session: str, kind: str, question: Hashable = None, model: str | None = None) -> Job:
        """A new long job of `kind` for `session`, answering `question` on `model`; the session's earlier one of that
        kind on that model is cancelled if it answers another question."""
        job = Job(session, kind, question, model)
        asked = ASKED_AT.get()
        with self._changed:
            self._count_owed()
            job.cancelled = asked is not None and self._cancelled_at.get((session, kind), -1.0) > asked
            for earlier in self._jobs:
                same_line = (earlier.session, earlier.kind, earlier.model) == (session, kind, model)
                if same_line and earlier.question != question:
                    earlier.cancelled = True
            self._jobs.append(job)
            self._changed.notify_all()
        return job

    def finish(self, job: Job) -> None:
        with self._changed:
            self._count_owed()
            if job in self._jobs:
                self._jobs.remove(job)
            if not self._jobs:  # nothing is owed to long work that has ended: the next starts afresh
                self._owed, self._turn = -MAX_CREDIT_SECONDS, False

    def cancel(self, session: str, kind: str | None = None) -> int:
        """Cancel the session's running long jobs (of `kind`, or all): each stops at its next slice. How many."""
        with self._changed:
            jobs = [job for job in self._jobs
                    if job.session == session and kind in (None, job.kind) and not job.cancelled]
            for job in jobs:
                job.cancelled = True
            now = time.monotonic()
            for each in LONG_JOBS if kind is None else (kind,):
                self._cancelled_at[(session, each)] = now
                self._cancelled_at.move_to_end((session, each))
            while len(self._cancelled_at) > KEPT_CANCELS:
                self._cancelled_at.popitem(last=False)
            self._changed.notify_all()
        return len(jobs)

    def stop(self, job: Job) -> None:
        """Cancel one long job: it stops at its next slice."""
        with self._changed:
            job.cancelled = True
            self._changed.notify_all()

    def running(self, session: str | None = None) -> list[Job]:
        with self._changed:
            return [job for job in self._jobs if session in (None, job.session)]

    @contextmanager
    def long_job(self, session: str, kind: str, question: Hashable = None, model: str | None = None) -> Iterator[Job]:
        """Run the model work inside as a long job (`start`, in its slices, `finish`d on the way out)."""
        job = self.start(session, kind, question, model)
        try:
            with self.sliced(job):
                yield job
        finally:
            self.finish(job)

    def steps(self, job: Job, work: Generator[Step, None, Result]) -> Generator[Step, None, Result]:
        """`work`'s steps, each computed in `job`'s slices; the job ends with it (done, cancelled or dropped)."""
        try:
            while True:
                if job.cancelled:  # between steps too: work that runs no module here (a server's) stops as well
                    raise Cancelled(f"the {job.kind} was cancelled")
                with self.sliced(job):
                    try:
                        step = next(work)
                    except StopIteration as done:
                        return done.value
                yield step
        finally:
            self.finish(job)

    @contextmanager
    def sliced(self, job: Job) -> Iterator[None]:
        """Run the model work inside in `job`'s slices (this thread only): each module call first waits
        while interactive work runs, and raises `Cancelled` once the job is cancelled."""
        try:
            with before_every_module_call(lambda: self._slice(job)):
                yield
        finally:
            release_workers()

    def _slice(self, job: Job) -> None:
        if self._interactive or job.cancelled:  # the common case, no interactive work, takes no lock
            with self._changed:
                while self._interactive and not job.cancelled and not self._in_turn():  # the balance counted up to now
                    release_workers()  # the interactive work runs unthrottled meanwhile (lookahead/cpu_threads.py)
                    job.waits += 1
                    self._blocked += 1
                    try:
                        self._changed.wait(self._until_owed())
                    finally:
                        self._count_owed()
                        self._blocked -= 1
            if job.cancelled:
                raise Cancelled(f"the {job.kind} was cancelled")
        job.slices += 1


@contextmanager
def before_every_module_call(check: Callable[[], None]) -> Iterator[None]:
    """Call `check` before every torch module's forward in this thread (other threads are untouched), and, where
    gradients flow, again as the backward pass reaches that module's input: a backward is sliced as finely."""
    thread = threading.get_ident()

    def hook(module: torch.nn.Module, args: tuple) -> None:
        if threading.get_ident() == thread:
            check()
            if torch.is_grad_enabled():
                for arg in args:
                    if isinstance(arg, torch.Tensor) and arg.requires_grad:
                        arg.register_hook(lambda grad: check())

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


scheduler = Scheduler()
