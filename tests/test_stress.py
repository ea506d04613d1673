"""Shared objects under threads: several at once, bounded in time, seeded.

Each test fails on any exception in any thread, on a deadlock (a join that times out), or on an
answer that differs from one computed alone. They are short (a few seconds each), so a race that
shows once in thousands of interleavings may pass one run: they run in every CI run, on every machine.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

import custom_llm_inference as inference
from fakes import Guess, fake_entry
from lookahead.prefix_cache import PrefixCacheStore
from lookahead.speculation import Speculator
from reference import assert_matches_reference, ranks_agree, reference_lookahead
from threads import JOIN_SECONDS, SECONDS, run_threads, until
from ui.ordering import SessionOrder


def test_the_speculator_starts_waits_and_clears_from_many_threads():
    """The race CI once hit: wait()/clear() joining a job not yet started, two start()s leaving a job unwaited."""
    store = PrefixCacheStore(max_bytes=10**9)
    speculator = Speculator(store)
    running = {"now": 0, "most": 0}
    count = threading.Lock()

    def compute(request, scratch):
        with count:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        try:
            torch.nn.Identity()(torch.zeros(1))  # a module call: where a real request pre-empts the job
            return {"n": request.n}
        finally:
            with count:
                running["now"] -= 1

    def starter(rng):
        going = until(SECONDS)
        while going():
            key = f"writer {rng.randrange(3)}"
            fake_entry(store, key, rng.randrange(2, 6))
            speculator.start([(key, Guess(i)) for i in range(rng.randrange(1, 4))], compute)
            time.sleep(rng.random() * 0.01)

    def waiter(rng):
        going = until(SECONDS)
        while going():
            (speculator.clear if rng.random() < 0.5 else speculator.wait)()

    def visitor(rng):
        going = until(SECONDS)
        while going():
            speculator.arrived(f"writer {rng.randrange(3)}", Guess(rng.randrange(3)))
            time.sleep(rng.random() * 0.002)
            speculator.finished()
            time.sleep(rng.random() * 0.02)

    run_threads([starter, starter, waiter, waiter, visitor])
    assert speculator.wait(JOIN_SECONDS), "the last job ended"
    assert running["most"] <= 1, "never two jobs at once"


def test_a_wait_right_after_start_waits_for_that_job():
    """Published under the lock: a wait() right after start() never returns before the job has run."""
    store = PrefixCacheStore(max_bytes=10**9)
    speculator, done = Speculator(store), []
    for n in range(20):
        fake_entry(store, "writer", 4)
        speculator.start([("writer", Guess(n))], lambda request, scratch: done.append(request.n) or {})
        assert speculator.wait(JOIN_SECONDS)
        assert done[-1:] == [n]


def test_the_prefix_cache_store_under_threads_keeps_each_sessions_entry_whole():
    """take/put/copy/install/scores from several threads: an entry is never served half-cropped or torn."""
    store = PrefixCacheStore(max_bytes=4 * 1024 * 100)  # small: evictions happen too

    def entry_tokens(n: int) -> list[int]:
        return list(range(n))

    def check(cache, n: int) -> None:
        keys = cache.layers[0].keys
        assert keys.shape[-2] == n and bool((keys[0, 0, :, 0] == torch.arange(n, dtype=keys.dtype)).all())

    def session_cache(n: int):
        cache = DynamicCache()
        positions = torch.arange(n, dtype=torch.float)[None, None, :, None].expand(1, 1, n, 4).clone()
        cache.update(positions, positions.clone(), 0)
        return cache

    def writer(rng):
        going = until(SECONDS)
        while going():
            key, n = f"s{rng.randrange(4)}", rng.randrange(2, 40)
            taken = store.take(key, entry_tokens(n))
            if taken.reused:
                check(taken.cache, taken.reused)
            store.put(key, entry_tokens(n), session_cache(n))

    def reader(rng):
        going = until(SECONDS)
        while going():
            key = f"s{rng.randrange(4)}"
            copy = store.copy(key)
            if copy is not None:
                check(copy.cache, len(copy.ids))
            store.scores(key, entry_tokens(rng.randrange(2, 40)))
            store.bytes()
            len(store)

    def installer(rng):
        going = until(SECONDS)
        while going():
            key = f"s{rng.randrange(4)}"
            copy = store.copy(key)
            if copy is None:
                continue
            n = len(copy.ids)
            new = torch.tensor([float(n)])[None, None, :, None].expand(1, 1, 1, 4).clone()
            store.install(key, copy.ids, entry_tokens(n + 1), [(new, new.clone())], [], None)

    run_threads([writer, writer, reader, installer])
    for key in list(store._entries):
        entry = store.copy(key)
        check(entry.cache, len(entry.ids))


def test_session_order_keeps_each_sessions_events_in_order_and_apart_under_a_crowd():
    """Many coroutines of several sessions: within a session one at a time, in arrival order; nothing kept after."""
    order, rng = SessionOrder(), random.Random(0)
    inside: dict[str, int] = {}
    started: dict[str, list[int]] = {}

    async def event(session: str, n: int) -> None:
        async with order.turn(session):
            inside[session] = inside.get(session, 0) + 1
            assert inside[session] == 1, "two events of one session at once"
            started.setdefault(session, []).append(n)
            await asyncio.sleep(rng.random() * 0.002)
            inside[session] -= 1

    async def main() -> None:
        tasks = []
        for n in range(600):
            tasks.append(asyncio.create_task(event(f"visitor {rng.randrange(8)}", n)))
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks), JOIN_SECONDS)

    asyncio.run(main())
    assert all(ns == sorted(ns) for ns in started.values()), "first come, first served"
    assert sum(map(len, started.values())) == 600
    assert len(order) == 0


def test_interactive_work_never_takes_more_than_its_slots_under_a_crowd():
    """Clicks that skip gradio's queue and queued events, of many visitors, in worker threads: never more interactive
    work at once than the slots, each visitor's events in arrival order, long work beside it, nothing kept after."""
    from gradio.context import LocalContext

    order, rng = SessionOrder(at_once=lambda: 2), random.Random(2)
    running = {"interactive": 0, "most": 0, "long": 0}
    count = threading.Lock()
    started: dict[str, list[int]] = {}

    def work(session: str, n: int, interactive: bool) -> None:
        kind = "interactive" if interactive else "long"
        with count:
            running[kind] += 1
            running["most"] = max(running["most"], running["interactive"])
            assert running["interactive"] <= 2, "more interactive work at once than the slots"
            started.setdefault(session, []).append(n)
        time.sleep(rng.random() * 0.002)
        with count:
            running[kind] -= 1

    async def event(session: str, n: int, interactive: bool) -> None:
        LocalContext.request.set(SimpleNamespace(session_hash=session))
        await order.wrap(work, interactive=interactive)(session, n, interactive)

    async def main() -> None:
        tasks = []
        for n in range(400):
            tasks.append(asyncio.create_task(event(f"visitor {rng.randrange(8)}", n, rng.random() < 0.8)))
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks), JOIN_SECONDS)
        assert order.interactive_slots().borrowed_tokens == 0

    asyncio.run(main())
    assert running["most"] == 2, "the slots were all used"
    assert all(ns == sorted(ns) for ns in started.values()), "each visitor's events in arrival order"
    assert sum(map(len, started.values())) == 400 and len(order) == 0


def test_lookaheads_with_precomputation_from_several_threads_equal_the_reference(embedded):
    """Writers clicking at once, each click pre-empting another's precomputation: every answer is the reference's."""
    model, tokenizer = embedded
    k, depth, clicks = 3, 2, 4
    answers: list[tuple[str, dict]] = []

    def writer(rng):
        text = rng.choice(["The harbour at dawn was", "Her first letter began", "def parse(line):\n    return"])
        session = f"stress {rng.random()}"
        for _ in range(clicks):
            shown = inference.lookahead(text, k, depth, session=session, precompute=True)
            answers.append((text, shown))
            time.sleep(rng.random() * 0.3)  # reading: the precomputation runs, or is cut short
            text += shown["branches"][rng.randrange(k)]["text"]

    run_threads([writer, writer, writer], seed=7)
    assert inference.backend().speculator.wait(JOIN_SECONDS)
    assert len(answers) == 3 * clicks
    for text, answer in answers:
        assert_matches_reference(answer, reference_lookahead(model, tokenizer, text, k, depth), k)


def test_clicks_while_the_page_asks_maps_equal_the_reference_and_each_map_stops_or_is_right(embedded):
    """Writers clicking while, as the page does, a map of futures is asked after each answer (yielding, over a copy
    of the session's cache, stopped by the next click's text): every click's answer is the reference's, and every map
    either stopped or equals the same map asked alone."""
    model, tokenizer = embedded
    k, depth, clicks = 3, 2, 4
    answers: list[tuple[str, dict]] = []
    maps: list[tuple[str, object]] = []

    def writer(rng):
        text = rng.choice(["The harbour at dawn was", "Her first letter began", "def parse(line):\n    return"])
        session = f"mapped {rng.random()}"
        mappers = []
        for _ in range(clicks):
            shown = inference.lookahead(text, k, depth, session=session, precompute=True)
            answers.append((text, shown))

            def mapping(text: str = text) -> None:
                try:
                    maps.append((text, inference.multiverse(text, 2, 0.1, session=session, yielding=True)))
                except inference.Cancelled:
                    maps.append((text, None))
                except BaseException as error:  # noqa: BLE001 - asserted below, in the test's thread
                    maps.append((text, error))

            mappers.append(threading.Thread(target=mapping))
            mappers[-1].start()
            time.sleep(rng.random() * 0.3)  # reading: the precomputation and the map run, or are cut short
            text += shown["branches"][rng.randrange(k)]["text"]
        for mapper in mappers:
            mapper.join(JOIN_SECONDS)
            assert not mapper.is_alive(), "a map is still running: deadlocked"

    run_threads([writer, writer], seed=11)
    assert inference.backend().speculator.wait(JOIN_SECONDS)
    assert len(answers) == 2 * clicks and len(maps) == 2 * clicks
    for text, answer in answers:
        assert_matches_reference(answer, reference_lookahead(model, tokenizer, text, k, depth), k)
    for text, answer in maps:
        assert not isinstance(answer, BaseException), answer
        if answer is not None:
            alone = inference.multiverse(text, 2, 0.1, session=f"map alone {text}")
            assert [n["token_id"] for n in answer["nodes"]] == [n["token_id"] for n in alone["nodes"]]
            assert [n["mass"] for n in answer["nodes"]] == pytest.approx([n["mass"] for n in alone["nodes"]], abs=1e-4)


def test_constrained_lookaheads_from_several_threads_equal_the_same_calls_made_alone(embedded):
    """Writers under a constraint at once, sharing sessions (so the matcher store is read and written from
    every thread, precomputation included): every answer equals the same call made alone, afresh."""
    constraint = {"type": "json_schema", "value": {"type": "object", "properties": {"name": {"type": "string"},
                  "age": {"type": "integer"}}, "required": ["name", "age"]}, "start": 7}
    answers: list[tuple[str, dict]] = []

    def writer(rng):
        text = "Person:" + rng.choice(['{"name": "', '{"name": "Al', '{'])
        session = f"constrained {rng.randrange(2)}"  # two sessions between three writers
        end = until(SECONDS)
        while end():
            shown = inference.lookahead(text, 3, 2, session=session, precompute=True, constraint=constraint)
            answers.append((text, shown))
            time.sleep(rng.random() * 0.2)
            branch = shown["branches"][rng.randrange(len(shown["branches"]))]
            text = text + branch["text"] if not branch["ends"] else "Person:{"

    run_threads([writer, writer, writer], seed=11)
    assert inference.backend().speculator.wait(JOIN_SECONDS)
    assert answers
    for text, answer in answers:
        inference.backend().matchers.clear()
        alone = inference.lookahead(text, 3, 2, session="alone", constraint=constraint)
        assert [b["token_ids"] for b in answer["branches"]] == [b["token_ids"] for b in alone["branches"]], text
        assert [d["valid"] for d in answer["distribution"]] == [d["valid"] for d in alone["distribution"]]


def test_heatmap_listings_from_several_threads_equal_the_same_calls_made_alone(embedded):
    """Writers taking branches with the heatmap shown, sharing sessions (so each session's last listing is read
    and replaced from every thread, precomputation running; a newer text's scores cancel the session's older ones):
    every listing given equals the same call made afresh."""
    answers: list[tuple[str, dict]] = []

    def writer(rng):
        text = rng.choice(["The harbour town woke slowly.", "Gulls argued over scraps and", "Once upon a time"])
        session = f"heatmap {rng.randrange(2)}"  # two sessions between three writers
        end = until(SECONDS)
        while end():
            shown = inference.lookahead(text, 3, 2, session=session, precompute=True)
            try:
                answers.append((text, inference.token_probabilities(text, 3, session=session)))
            except inference.Cancelled:  # another writer of the session asked for a newer text's scores
                pass
            time.sleep(rng.random() * 0.1)
            text += shown["branches"][rng.randrange(len(shown["branches"]))]["text"]

    run_threads([writer, writer, writer], seed=12)
    assert inference.backend().speculator.wait(JOIN_SECONDS)
    assert answers
    for text, answer in answers:
        inference.backend().listings.clear()
        alone = inference.token_probabilities(text, 3, session="alone")
        assert [(t["token_id"], t["start"], t["end"]) for t in answer["tokens"]] == [
            (t["token_id"], t["start"], t["end"]) for t in alone["tokens"]], text
        for got, want in zip(answer["tokens"], alone["tokens"]):
            assert got["rank"] is want["rank"] is None or ranks_agree(got["rank"], want["rank"]), text
            assert got["prob"] == want["prob"] or abs(got["prob"] - want["prob"]) < 1e-5


def test_ordered_events_each_see_the_state_the_one_before_them_wrote():
    """Gradio reads an event's gr.State inputs before its handler waits for the session's turn, and stores its outputs
    after the turn has passed on. Wrapped events of several sessions, each adding one to a state it reads and
    answers (in a worker thread, like every handler): none is lost, so each saw what the one before it wrote."""
    import gradio as gr
    from gradio.context import LocalContext

    counter = gr.State(0)
    sessions = {f"visitor {i}": {counter._id: 0} for i in range(4)}
    blocks = SimpleNamespace(state_holder=_StateHolder(sessions))
    order, rng = SessionOrder(), random.Random(1)

    def add_one(count: int) -> dict:
        time.sleep(rng.random() * 0.002)
        return {counter: count + 1}

    handler = order.wrap(add_one, inputs=[counter])

    async def event(session: str) -> None:
        LocalContext.blocks.set(blocks)
        LocalContext.request.set(SimpleNamespace(session_hash=session))
        stale = sessions[session][counter._id]  # what gradio read before the handler waited
        await asyncio.sleep(0)
        answer = await handler(stale)
        sessions[session][counter._id] = answer[counter]  # gradio's own write, after the turn

    async def main() -> None:
        tasks = [asyncio.create_task(event(rng.choice(list(sessions)))) for _ in range(300)]
        await asyncio.wait_for(asyncio.gather(*tasks), JOIN_SECONDS)

    asyncio.run(main())
    assert sum(state[counter._id] for state in sessions.values()) == 300, "every event counted once"
    assert len(order) == 0


class _StateHolder(dict):
    """gradio's StateHolder as SessionOrder reads it: each session's states by block id."""


def test_a_stop_reaches_its_own_continue_whenever_it_arrives_and_never_another():
    """Writers' Stops arrive from other threads before their Continues begin, while they write and after they end: a
    Stop reaches the run it names (one asked before the run began included), never the next one, and nothing is
    left behind."""
    from ui.panels.continuation import StopRequests

    stops = StopRequests()
    sessions = [f"writer {n}" for n in range(3)]

    def writer(session: str):
        def work(rng: random.Random) -> None:
            end = until(SECONDS)
            runs = 0
            while end():
                runs += 1
                run, early = f"run {runs}", rng.random() < 0.5
                if early:
                    stops.ask(session, run)  # before its run began (it waited its turn): it still counts
                assert stops.asked(session, run) == early
                assert not stops.asked(session, f"run {runs + 1}"), "a Stop never reaches the next run"
                stops.start(session, run)
                stopped = threading.Event()
                running = []
                threading.Thread(target=lambda: (running.append(stops.ask(session, run)), stopped.set())).start()
                assert stopped.wait(JOIN_SECONDS) and running == [True], "a Stop during the run finds it under way"
                assert stops.asked(session, run), "a Stop during the run ends it"
                stops.end(session, run)
                assert not stops.asked(session, run)
                assert not stops.ask(session, run), "a Stop after its run ended finds nothing under way"
                stops.end(session, run)
        return work

    run_threads([writer(session) for session in sessions], seed=47)
    assert not any(stops.asked(session, run) for session in sessions for run in ("run 1", "run 2"))
