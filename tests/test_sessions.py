"""The per-session store every session cache is kept in: which entries it keeps, and nothing lost under threads."""

from __future__ import annotations

import threading

from lookahead.sessions import SessionStore
from threads import run_threads

THREADS, PUTS = 8, 400


def test_the_least_recently_put_session_goes_first_and_reading_leaves_the_order():
    store: SessionStore[tuple[str, str], int] = SessionStore(max_sessions=2)
    store.put(("m", "a"), 1)
    store.put(("m", "b"), 2)
    store.put(("m", "a"), 3)  # a is now the most recent
    store.put(("m", "c"), 4)
    assert list(store) == [("m", "a"), ("m", "c")], "b, put least recently, went first"
    assert store.get(("m", "a")) == 3
    store.put(("m", "d"), 5)
    assert list(store) == [("m", "c"), ("m", "d")], "a get is no use: a went before c"
    assert store.values() == [4, 5]


def test_a_full_store_drops_its_oldest_entries_but_always_keeps_the_newest():
    store: SessionStore[tuple[str, str], int] = SessionStore(full=lambda: sum(store.values()) > 10)
    for session, size in [("a", 4), ("b", 4), ("c", 4)]:
        store.put(("m", session), size)
    assert list(store) == [("m", "b"), ("m", "c")]
    store.put(("m", "huge"), 50)
    assert list(store) == [("m", "huge")], "alone over the budget, it still serves its session"


def test_forget_drops_a_sessions_entries_whatever_the_model_and_pop_takes_one_out():
    store: SessionStore[tuple[str, str], str] = SessionStore()
    for key in [("m1", "s"), ("m2", "s"), ("m1", "t"), ("m2", "t")]:
        store.put(key, "/".join(key))
    store.forget("s")
    assert list(store) == [("m1", "t"), ("m2", "t")]
    assert store.pop(("m1", "t")) == "m1/t" and store.pop(("m1", "t")) is None
    assert len(store) == 1 and store.get(("m1", "s")) is None
    store.clear()
    assert len(store) == 0


def test_entries_put_and_taken_by_many_threads_are_neither_lost_nor_duplicated():
    """Each thread puts its own entries while the others put, take, read, list and forget theirs: each one it
    takes is the one it put, once, and what stays is exactly what was left. A read and a write made as one step
    under the lock (as a store keeping a list per session makes them) lose no update."""
    store: SessionStore[tuple[str, str], tuple[int, int]] = SessionStore()
    counts: SessionStore[tuple[str, str], int] = SessionStore()
    left: list[set[tuple[str, str]]] = [set() for _ in range(THREADS)]

    def worker(number: int):
        def work(rng):
            for i in range(PUTS):
                key = ("m", f"{number}-{i}")
                store.put(key, (number, i))
                assert store.get(key) == (number, i)
                if rng.random() < 0.2:
                    left[number].add(key)
                else:
                    assert store.pop(key) == (number, i) and store.pop(key) is None
                store.forget(f"nobody-{number}")
                keys = list(store)
                assert len(keys) == len(set(keys))
                with counts.lock:
                    counts.put(("m", "all"), (counts.get(("m", "all")) or 0) + 1)
        return work

    run_threads([worker(n) for n in range(THREADS)])
    expected = set().union(*left)
    assert set(store) == expected and len(store) == len(expected)
    for model, session in expected:
        number, i = session.split("-")
        assert store.get((model, session)) == (int(number), int(i))
    assert counts.get(("m", "all")) == THREADS * PUTS, "no update lost"


def test_puts_of_many_threads_past_the_bound_keep_exactly_the_bound():
    store: SessionStore[tuple[str, str], str] = SessionStore(max_sessions=16)
    start = threading.Barrier(THREADS)

    def worker(number: int):
        def work(rng):
            start.wait()
            for i in range(PUTS):
                store.put(("m", f"{number}-{i}"), f"{number}-{i}")
        return work

    run_threads([worker(n) for n in range(THREADS)])
    kept = list(store)
    assert len(kept) == 16 == len(set(kept))
    assert all(store.get(key) == key[1] for key in kept)
