"""Interactive work first: long jobs (an explanation, a continuation) yield the model to clicks between slices,
stop within a slice once cancelled, and give exactly what they give alone. Orders are asserted, never times."""

from __future__ import annotations

import os
import threading
import time
from contextlib import AbstractContextManager

import pytest
import torch

import custom_llm_inference as inference
from api_client import Client
from lookahead.scheduler import MAX_CREDIT_SECONDS, Cancelled, Job, Scheduler, scheduler
from threads import JOIN_SECONDS, SECONDS, exit_code, run_threads, until

LONG_TEXT = "The lighthouse keeper counted the ships that passed the rocks at night. " * 60  # ~900 tokens
SHORT_TEXT = "Once upon a time"


def long_explanation(session: str, finished: list, steps: int = 64) -> threading.Thread:
    """Integrated gradients over ~900 tokens in a thread (long by its size), recording how it ended."""

    def explain() -> None:
        try:
            inference.attribution(LONG_TEXT, None, "integrated_gradients", steps, 1024, session=session)
            finished.append((session, "done"))
        except Cancelled:
            finished.append((session, "cancelled"))

    thread = threading.Thread(target=explain, daemon=True)
    thread.start()
    return thread


def running_job(session: str | None):
    """The session's long job (None: anybody's), once it has run a slice of model work."""
    deadline = time.monotonic() + JOIN_SECONDS
    while time.monotonic() < deadline:
        jobs = [job for job in scheduler.running(session) if job.slices]
        if jobs:
            return jobs[0]
        time.sleep(0.01)
    raise AssertionError(f"no long job of {session or 'anybody'} started")


def test_a_click_of_another_session_finishes_before_a_running_explanation_which_then_stops(embedded):
    finished: list = []
    thread = long_explanation("A", finished)
    job = running_job("A")
    inference.lookahead(SHORT_TEXT, 3, 3, session="B")
    finished.append(("B", "done"))
    assert inference.cancel("A", "attribution") == 1
    thread.join(JOIN_SECONDS)
    assert finished == [("B", "done"), ("A", "cancelled")]
    assert not thread.is_alive() and job.cancelled, "a cancelled job ends: it runs no more model work"
    assert scheduler.running("A") == []
    assert inference.lookahead(SHORT_TEXT, 3, 3, session="A")["branches"], "its session is answered next"


def test_a_long_job_runs_no_slice_while_interactive_work_runs_and_resumes_after():
    """Clicks first (with no share owed to long work: a share would give it turns while interactive work runs)."""
    jobs = Scheduler(share=0)
    job, stop, log = jobs.start("s", "continuation"), threading.Event(), []
    thread = slicing(jobs, job, log, stop)
    wait_until(lambda: job.slices > 0)
    with jobs.interactive():
        waited = job.waits
        wait_until(lambda: job.waits > waited)  # it reached its next slice, and waits there: a slice that ran
        log.append("interactive work ends")  # instead would have been logged before this
    wait_until(lambda: log[-1] == "slice")  # and on once it ends
    stop.set()
    thread.join(JOIN_SECONDS)
    ended = log.index("interactive work ends")
    assert log[ended - 1] == "slice" and log[ended + 1] == "slice", "it ran before and after"


class Slow(torch.nn.Module):
    """A module call that takes a while without the model's arithmetic: a slice of simulated work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.001)
        return x


def slicing(jobs: Scheduler, job: Job, log: list, stop: threading.Event) -> threading.Thread:
    """`job` running in a thread: slice after slice of simulated work, each logged once run, until `stop`."""

    def work() -> None:
        slow = Slow()
        with jobs.sliced(job):
            while not stop.is_set():
                slow(torch.ones(1))
                log.append("slice")

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


class FakeClock:
    """Seconds that pass only when the test says: what the scheduler counts long work's balance by."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def one_after_another(jobs: Scheduler, job: Job, running: AbstractContextManager) -> AbstractContextManager:
    """The next interactive request, started before `running` ends (no gap between them); returned once the job, woken
    by that end, has looked at the clock as it is now: it waited again, or ran slices beside the new request (two: the
    first may have been let through by a look before)."""
    following = jobs.interactive()
    following.__enter__()  # a look under way (it holds the lock) ends before this gets in: later ones see the clock now
    waits, slices = job.waits, job.slices
    running.__exit__(None, None, None)
    wait_until(lambda: job.waits > waits or job.slices > slices + 1)
    return following


@pytest.mark.parametrize("run", range(5))
def test_a_long_job_that_ran_alone_takes_no_turn_beside_a_click_and_its_next_slice_waits_until_the_click_ends(run):
    """A click at reading pace: the long job ran alone in the pause before it, which counts as its share of the click
    (up to MAX_CREDIT_SECONDS of it: a click of up to 2 s alone). So it takes no turn beside the click, even once the
    click's time is up and the click's second request wakes it to look: the click has the cores to itself."""
    clock = FakeClock()
    jobs = Scheduler(clock=clock)
    job, stop, log = jobs.start("a", "read"), threading.Event(), []
    thread = slicing(jobs, job, log, stop)
    wait_until(lambda: job.slices > 0)
    clock.advance(MAX_CREDIT_SECONDS)  # the pause: the job runs alone
    click = jobs.interactive()
    click.__enter__()
    wait_until(lambda: job.waits > 0)
    log.append("click starts")  # every slice run before is logged: the job waits at the next
    clock.advance(MAX_CREDIT_SECONDS * (1 - jobs.share) / jobs.share)  # the longest click that credit is its share of
    click = one_after_another(jobs, job, click)  # the click's refresh
    log.append("click ends")
    click.__exit__(None, None, None)
    wait_until(lambda: log[-1] == "slice")
    stop.set()
    thread.join(JOIN_SECONDS)
    started = log.index("click starts")
    assert log[started + 1] == "click ends", "it took a turn beside the click"
    assert log[started + 2] == "slice", "and runs once the click ends"


def test_a_long_job_that_starts_beside_a_click_takes_no_turn_beside_it_and_runs_once_it_ends():
    """A paste's read that starts while another visitor's click runs: long work that starts afresh has not been starved
    yet, so its credit (MAX_CREDIT_SECONDS, as if it had run alone) pays its share of the click: the click has the
    cores to itself, its second request too, and the job runs once the click ends."""
    clock = FakeClock()
    jobs = Scheduler(clock=clock)
    click = jobs.interactive()
    click.__enter__()
    job, stop, log = jobs.start("a", "read"), threading.Event(), []
    thread = slicing(jobs, job, log, stop)
    wait_until(lambda: job.waits > 0)
    clock.advance(MAX_CREDIT_SECONDS * (1 - jobs.share) / jobs.share)  # the longest click that credit is its share of
    click = one_after_another(jobs, job, click)  # the click's refresh
    log.append("click ends")
    click.__exit__(None, None, None)
    wait_until(lambda: log[-1] == "slice")
    stop.set()
    thread.join(JOIN_SECONDS)
    assert log[0] == "click ends" and log[1] == "slice", "no turn beside the click; on once it ends"


def test_a_long_job_that_ran_alone_gets_turns_beside_interactive_work_that_goes_on_without_a_gap():
    """Two visitors' requests one after another with no gap, each a second by the clock, so interactive work never
    stops: the job that ran alone for long waits beside the first (what it ran is its share of it, up to
    MAX_CREDIT_SECONDS), then runs beside later ones in turns, and progresses while the interactive work goes on."""
    clock = FakeClock()
    jobs = Scheduler(clock=clock)
    job, stop, log = jobs.start("a", "attribution"), threading.Event(), []
    thread = slicing(jobs, job, log, stop)
    wait_until(lambda: job.slices > 0)
    clock.advance(10 * MAX_CREDIT_SECONDS)  # it ran alone for long: its credit is full, and no more
    request = jobs.interactive()
    request.__enter__()
    wait_until(lambda: job.waits > 0)
    log.append("interactive work starts")  # every slice run before is logged: the job waits at the next
    for _ in range(12):
        clock.advance(1.0)
        request = one_after_another(jobs, job, request)
        log.append("a request ends")
    request.__exit__(None, None, None)
    stop.set()
    thread.join(JOIN_SECONDS)
    started = log.index("interactive work starts")
    beside = " ".join(log[started + 1:]).split("a request ends")[:-1]  # the slices run beside each request
    assert "slice" not in beside[0], "it took a turn beside the first request, which its credit paid for"
    assert sum("slice" in slices for slices in beside) >= 2, "it progressed in turns while interactive work went on"


def test_under_back_to_back_clicks_from_two_visitors_a_long_job_keeps_progressing_and_finishes():
    """Two visitors' requests overlap without a pause, so interactive work never stops on its own: the long job gets
    turns between them, its slices growing while the clicks go on, and it finishes; the clicks are all answered."""
    jobs, slow = Scheduler(), Slow()
    job, slices, clicks = jobs.start("a", "attribution"), 300, 20_000
    seen: list[tuple[int, bool]] = []  # (the job's slices when a click ended, whether it had finished)
    done = threading.Event()

    def explain() -> None:
        with jobs.sliced(job):
            for _ in range(slices):
                slow(torch.ones(1))
        jobs.finish(job)
        done.set()

    def click(_rng) -> None:
        for _ in range(clicks):
            if done.is_set():
                return
            with jobs.interactive():
                slow(torch.ones(1))
                slow(torch.ones(1))
            seen.append((job.slices, done.is_set()))

    explaining = threading.Thread(target=explain, daemon=True)
    explaining.start()
    wait_until(lambda: job.slices > 0)
    run_threads([click, click])
    assert done.is_set(), f"the long job starved: {job.slices} of {slices} slices after {len(seen)} clicks"
    explaining.join(JOIN_SECONDS)
    while_clicking = sorted({n for n, finished in seen if not finished})
    assert len(while_clicking) >= 3 and job.waits > 0, "it progressed in turns between clicks, not only after them"


def test_a_long_interactive_request_holds_up_no_other_and_long_work_gets_its_turn_beside_it():
    """A long interactive request (a comparison's first read of a long text) while a long job waits: the job's turn
    comes beside the request, and another interactive request starts and ends meanwhile, owed turn or not."""
    jobs, slow = Scheduler(), Slow()
    job, stop = jobs.start("a", "attribution"), threading.Event()

    def explain() -> None:
        with jobs.sliced(job):
            while not stop.is_set():
                slow(torch.ones(1))

    explaining = threading.Thread(target=explain, daemon=True)
    explaining.start()
    wait_until(lambda: job.slices > 0)
    with jobs.interactive():
        wait_until(lambda: job.waits > 0)
        held = job.slices
        wait_until(lambda: job.slices > held)  # its turn, beside the request
        clicked = threading.Event()

        def click() -> None:
            with jobs.interactive():
                slow(torch.ones(1))
            clicked.set()

        other = threading.Thread(target=click, daemon=True)
        other.start()
        assert clicked.wait(JOIN_SECONDS), "another request waited for this one"
    stop.set()
    explaining.join(JOIN_SECONDS)


def wait_until(condition) -> None:
    deadline = time.monotonic() + JOIN_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.001)


def test_a_newer_question_of_the_session_cancels_the_older_and_the_same_question_does_not():
    jobs = Scheduler()
    first = jobs.start("s", "attribution", "why this?")
    again = jobs.start("s", "attribution", "why this?")
    assert not first.cancelled
    other_kind = jobs.start("s", "continuation", "go on")
    other_session = jobs.start("t", "attribution", "why that?")
    newer = jobs.start("s", "attribution", "why that?")
    assert first.cancelled and again.cancelled and not newer.cancelled
    assert not other_kind.cancelled and not other_session.cancelled
    assert jobs.cancel("s") == 2 and other_kind.cancelled and not other_session.cancelled



def test_two_models_of_a_session_each_keep_their_question_where_the_model_is_named():
    """Two models compared side by side read the text and fit the caret each: neither cancels the other's."""
    jobs = Scheduler()
    on_a = jobs.start("s", "read", "the text in A's tokens", "model A")
    on_b = jobs.start("s", "read", "the text in B's tokens", "model B")
    assert not on_a.cancelled and not on_b.cancelled
    newer_on_a = jobs.start("s", "read", "the edited text in A's tokens", "model A")
    assert on_a.cancelled and not on_b.cancelled and not newer_on_a.cancelled
    unnamed = jobs.start("s", "read", "a question to no model in particular")
    assert not on_b.cancelled and not newer_on_a.cancelled, "an unnamed model is a line of its own"
    assert jobs.cancel("s", "read") == 3 and on_b.cancelled and newer_on_a.cancelled and unnamed.cancelled

def test_a_job_cancelled_during_a_backward_pass_stops_there():
    """The slices reach into the backward pass: a check fails there too, and stops the gradient."""
    jobs = Scheduler()
    job = jobs.start("s", "attribution")
    layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    x = torch.ones(1, 4, requires_grad=True)
    with jobs.sliced(job):
        y = layers(x).sum()
        forward = job.slices
        job.cancelled = True
        with pytest.raises(Cancelled):
            torch.autograd.grad(y, x)
    assert job.slices == forward


def test_an_explanation_sliced_between_clicks_equals_the_same_explanation_alone(embedded):
    text = "The harbour town woke slowly, and the fishing boats went out one by one."
    alone = inference.attribution(text, None, "integrated_gradients", 8, session="alone")
    answers: list = []
    clicks = threading.Thread(target=lambda: [inference.lookahead(SHORT_TEXT + f" {i}", 3, 2, session="clicker")
                                              for i in range(8)], daemon=True)
    clicks.start()
    answers.append(inference.attribution(text, None, "integrated_gradients", 8, session="sliced"))
    clicks.join(JOIN_SECONDS)
    assert answers[0] == alone


def test_a_continuation_yields_to_a_click_and_gives_the_same_tokens(embedded):
    alone = inference.generate(LONG_TEXT[:600], 48, "greedy", session="alone")
    finished: list = []

    def go_on() -> None:
        finished.append(("A", inference.generate(LONG_TEXT[:600], 48, "greedy", session="A")))

    thread = threading.Thread(target=go_on, daemon=True)
    thread.start()
    running_job("A")
    inference.lookahead(SHORT_TEXT, 3, 3, session="B")
    finished.append(("B", None))
    thread.join(JOIN_SECONDS)
    assert [who for who, _ in finished] == ["B", "A"]
    assert finished[1][1]["token_ids"] == alone["token_ids"]


def choices(result: dict) -> tuple:
    """What a lookahead chose: its branches' tokens and the distribution's order (a warm cache's probabilities
    differ from a cold one's in the last bits)."""
    return [b["token_ids"] for b in result["branches"]], [d["token_id"] for d in result["distribution"]]


def test_long_and_short_work_of_several_visitors_with_cancellations(embedded):
    """Threads explain, continue, click and cancel at random: no exception but Cancelled, no deadlock, and every
    answer that completes equals the same call made alone."""
    texts = ["The harbour town woke slowly.", "Gulls argued over scraps and", "Once upon a time, a keeper"]
    done: list[tuple[str, tuple, object]] = []

    def explainer(rng) -> None:
        going = until(SECONDS)
        while going():
            session, text = f"visitor {rng.randrange(3)}", rng.choice(texts)
            try:
                done.append(("attribution", (text,), inference.attribution(text, None, "saliency", session=session)))
            except Cancelled:
                pass

    def continuer(rng) -> None:
        going = until(SECONDS)
        while going():
            session, text = f"visitor {rng.randrange(3)}", rng.choice(texts)
            try:
                done.append(("generate", (text,), inference.generate(text, 6, "greedy", session=session)["token_ids"]))
            except Cancelled:
                pass

    def clicker(rng) -> None:
        going = until(SECONDS)
        while going():
            text = rng.choice(texts)
            answer = inference.lookahead(text, 2, 2, session=f"clicker {rng.randrange(2)}")
            done.append(("lookahead", (text,), choices(answer)))

    def canceller(rng) -> None:
        going = until(SECONDS)
        while going():
            inference.cancel(f"visitor {rng.randrange(3)}")
            time.sleep(rng.random() * 0.05)

    run_threads([explainer, explainer, continuer, clicker, canceller], seed=3)
    assert scheduler.running() == []
    fresh = {
        "attribution": lambda text: inference.attribution(text, None, "saliency", session="fresh"),
        "generate": lambda text: inference.generate(text, 6, "greedy", session="fresh")["token_ids"],
        "lookahead": lambda text: choices(inference.lookahead(text, 2, 2, session=f"fresh {text}")),
    }
    assert {kind for kind, _, _ in done} == set(fresh), "every kind of work completed at least once"
    for kind, (text,), answer in done:
        assert answer == fresh[kind](text), (kind, text)


def test_through_the_app_a_click_is_answered_while_another_visitors_explanation_runs(app_url):
    explainer, writer = Client(app_url, verbose=False), Client(app_url, verbose=False)
    long = explainer.submit(LONG_TEXT, None, "integrated_gradients", 64, 1024, api_name="/attribution")
    job = running_job(None)
    assert writer.predict(SHORT_TEXT, 3, 3, api_name="/lookahead")["branches"]
    assert not long.done(), "the click did not wait for the explanation"
    assert not job.cancelled
    # the explainer's newer question replaces the long one, which ends as cancelled
    short = explainer.predict("The cat sat on the", None, "saliency", 1, 16, api_name="/attribution")
    assert short["tokens"]
    with pytest.raises(Exception, match="cancelled"):
        long.result(timeout=JOIN_SECONDS)


def test_a_forked_process_starts_with_none_of_the_parents_work():
    """A ZeroGPU worker is forked while the parent serves a click: its own long jobs must not wait for that."""
    jobs, layer = Scheduler(), torch.nn.Linear(8, 8)
    with jobs.interactive():
        jobs.start("s", "attribution")
        child = os.fork()
        if child == 0:  # the worker: a long job of its own runs, and nothing is running or cancelled here
            job = jobs.start("s", "continuation")
            with jobs.sliced(job), torch.inference_mode():
                layer(torch.ones(1, 8))
            os._exit(0 if jobs.running() == [job] and job.slices == 1 else 1)
        assert exit_code(child, "the forked process's long job waited for the parent's click") == 0
