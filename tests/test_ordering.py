"""Per-session ordering of UI events: one visitor's in order, different visitors side by side."""

import asyncio
import threading
from types import SimpleNamespace

from gradio.context import LocalContext

from threads import JOIN_SECONDS
from ui.ordering import SessionOrder


def test_a_sessions_events_wait_their_turn_while_other_sessions_run():
    order, log = SessionOrder(), []

    async def event(session: str, name: str, seconds: float):
        async with order.turn(session):
            log.append(("start", name))
            await asyncio.sleep(seconds)
            log.append(("end", name))

    async def main():
        await asyncio.gather(event("a", "a1", 0.05), event("a", "a2", 0), event("a", "a3", 0), event("b", "b1", 0.01))

    asyncio.run(main())
    assert [name for what, name in log if what == "start" and name.startswith("a")] == ["a1", "a2", "a3"]
    assert log.index(("end", "a1")) < log.index(("start", "a2")), "one at a time within a session"
    assert log.index(("start", "b1")) < log.index(("end", "a1")), "another session does not wait"
    assert len(order) == 0, "no lock is kept once a session has nothing running"


def test_wrapped_functions_and_generators_run_in_a_worker_thread_with_their_arguments():
    order = SessionOrder()
    main_thread = threading.get_ident()

    def add(a, b=0):
        return a + b, threading.get_ident() != main_thread

    def count(n):
        yield from range(n)

    async def main():
        LocalContext.request.set(SimpleNamespace(session_hash="visitor"))
        result = await order.wrap(add)(2, b=3)
        streamed = [item async for item in order.wrap(count)(3)]
        return result, streamed

    (total, in_thread), streamed = asyncio.run(main())
    assert total == 5 and in_thread and streamed == [0, 1, 2]


def test_a_short_event_answers_at_once_while_its_sessions_long_event_holds_the_turn():
    """Waiting would hold the short event's concurrency slot, and everybody's events of its group, behind the long
    one: it answers at once instead; other sessions, and the session after the long event, run as usual."""
    order, log = SessionOrder(), []
    short = order.wrap(lambda: "computed", while_long=lambda: "answered at once")

    async def main():
        release = asyncio.Event()

        async def long_event():
            async with order.turn("writer", long=True):
                log.append("long starts")
                await release.wait()
                log.append("long ends")

        task = asyncio.create_task(long_event())
        await asyncio.sleep(0)  # the long event takes the turn
        LocalContext.request.set(SimpleNamespace(session_hash="writer"))
        log.append(await short())
        LocalContext.request.set(SimpleNamespace(session_hash="another visitor"))
        log.append(await short())
        release.set()
        await task
        LocalContext.request.set(SimpleNamespace(session_hash="writer"))
        log.append(await short())

    asyncio.run(main())
    assert log == ["long starts", "answered at once", "computed", "long ends", "computed"]
    assert len(order) == 0 and not order.busy_with_long("writer")


def test_a_job_the_event_was_about_to_start_when_a_newer_event_of_its_session_arrived_starts_cancelled():
    """The fit's gap: an event has its turn and has decided to start a long job when the session's next event arrives
    and cancels the session's jobs of that kind, none of which has started yet. The job, asked before the cancel,
    starts cancelled, so the newer event does not wait for it; one the newer event starts runs; another session's
    and an API caller's (no event) are untouched."""
    from lookahead.scheduler import Scheduler

    order, jobs, started = SessionOrder(), Scheduler(), {}
    deciding, decided = threading.Event(), threading.Event()

    def fit(name: str):
        deciding.set()
        decided.wait(5)  # the newer event arrives here, between the decision and the start
        started[name] = jobs.start(_session_hash(), "lookahead")

    def start_now(name: str):
        started[name] = jobs.start(_session_hash(), "lookahead")

    arrived = threading.Event()

    def cancel(session: str) -> None:
        jobs.cancel(session, "lookahead")
        arrived.set()

    async def main():
        LocalContext.request.set(SimpleNamespace(session_hash="writer"))
        older = asyncio.create_task(order.wrap(fit)("older"))
        await asyncio.to_thread(deciding.wait, 5)
        newer = asyncio.create_task(order.wrap(start_now, arriving=cancel)("newer"))
        await asyncio.to_thread(arrived.wait, 5)  # it has arrived, and waits for the turn
        decided.set()
        await asyncio.gather(older, newer)
        LocalContext.request.set(SimpleNamespace(session_hash="another visitor"))
        await order.wrap(start_now)("another's")

    asyncio.run(main())
    assert started["older"].cancelled and not started["newer"].cancelled and not started["another's"].cancelled
    assert not jobs.start("writer", "lookahead").cancelled, "a caller that says nothing of when it asked"


def test_interactive_events_of_every_session_share_the_slots_first_come_first_served():
    """A click that skips gradio's queue still waits for one of the interactive slots, as the queue would have made
    it wait: five visitors' clicks on two slots start in the order they came, each as one before it ends; a long
    event's work takes no slot."""
    order, started, release = SessionOrder(at_once=lambda: 2), [], {}

    def work(name: str) -> str:
        started.append(name)
        release[name].wait(JOIN_SECONDS)
        return name

    async def event(name: str, interactive: bool) -> str:
        LocalContext.request.set(SimpleNamespace(session_hash=name))
        return await order.wrap(work, interactive=interactive)(name)

    async def until_started(count: int, waiting: int) -> None:
        slots = order.interactive_slots()
        while len(started) < count or slots.statistics().tasks_waiting != waiting:
            await asyncio.sleep(0.001)

    async def main() -> list[str]:
        clicks = [f"click {i}" for i in range(5)]
        release.update({name: threading.Event() for name in [*clicks, "continue"]})
        tasks = []
        for name in clicks:
            tasks.append(asyncio.create_task(event(name, interactive=True)))
            await asyncio.sleep(0)  # each arrives after the one before
        tasks.append(asyncio.create_task(event("continue", interactive=False)))
        await asyncio.wait_for(until_started(3, waiting=3), JOIN_SECONDS)
        assert sorted(started) == ["click 0", "click 1", "continue"], "two slots, and none for the long event"
        for count, name in enumerate(clicks, start=4):
            release[name].set()
            if count <= 6:
                await asyncio.wait_for(until_started(count, waiting=6 - count), JOIN_SECONDS)
        release["continue"].set()
        return await asyncio.wait_for(asyncio.gather(*tasks), JOIN_SECONDS)

    assert asyncio.run(main()) == [*(f"click {i}" for i in range(5)), "continue"]
    clicks = [name for name in started if name.startswith("click")]
    assert sorted(clicks[:2]) == ["click 0", "click 1"] and clicks[2:] == ["click 2", "click 3", "click 4"], \
        "each waiting click started as a slot came free, in the order they came (the first two, side by side)"
    assert len(order) == 0


def _session_hash() -> str:
    return LocalContext.request.get().session_hash
