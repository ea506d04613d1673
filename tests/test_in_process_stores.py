"""Each in-process backend keeps its sessions' state itself (lookahead/backends/in_process_stores.py): two live side
by side in one process, each answering from its own caches; forgetting a session drops everything kept for it; and
a program ends cleanly whatever background work its backends still have under way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import custom_llm_inference as inference
from lookahead import reading
from lookahead.backends import make_backend
from lookahead.backends.in_process import InProcess
from lookahead.requests import LookaheadRequest, ScoresRequest
from lookahead.scheduler import scheduler
from threads import JOIN_SECONDS

TEXT = "The lighthouse keeper climbed the stairs and"
LONG_TEXT = ("The lighthouse keeper counted the ships that passed the rocks at night, and wrote each name in a "
             "book with a green cover. ") * 100  # ~2.5k tokens: read in the background, in several chunks
READ_WINDOW, READ_CHUNK = 96, 128  # tokens a partial answer reads, and a chunk of the read
SESSION = "writer"


def held(backend: InProcess) -> dict[str, set[str]]:
    """The sessions each of `backend`'s stores holds something for (looked up in the stores' own entries)."""
    keys = {
        "caches": backend.prefix_caches._entries,
        "ready answers": backend.speculator._ready,
        "reads": backend.reader._reads,
        "matchers": [*backend.matchers._sessions, *backend.matchers._compiled],
        "listings": backend.listings._last,
        "comparisons": backend.comparisons,
        "last suggestions": backend.last_shown,
    }
    return {store: {session for _, session in entries} for store, entries in keys.items()}


def test_two_backends_on_different_models_answer_side_by_side_each_from_its_own_caches(embedded, tiny_model_dirs):
    names = [inference.default_model_name(), tiny_model_dirs["llama"]]
    backends = [make_backend("in-process") for _ in names]
    lookaheads = [LookaheadRequest(text=TEXT, session=SESSION, model_name=name, n_branches=2, depth=2)
                  for name in names]
    for backend, name, request in zip(backends, names, lookaheads):
        assert backend.lookahead(request) == inference.lookahead.typed(TEXT, 2, 2, session="alone", model_name=name)
        scores = ScoresRequest(text=TEXT, session=SESSION, model_name=name, k=3)
        assert backend.scores(scores) == inference.token_probabilities.typed(TEXT, 3, session="alone",
                                                                             model_name=name)
    for backend, name in zip(backends, names):
        assert list(backend.prefix_caches._entries) == list(backend.listings._last) == [(name, SESSION)]

    first, second = backends
    first.forget(SESSION)
    assert not any(held(first).values())
    assert list(second.prefix_caches._entries) == list(second.listings._last) == [(names[1], SESSION)]
    again = inference.lookahead.typed(TEXT, 2, 2, session="alone", model_name=names[1])  # warm, as the second is
    assert second.lookahead(lookaheads[1]) == again


def test_forgetting_a_session_drops_everything_kept_for_it(embedded, tiny_model_dirs, monkeypatch):
    """A session with something in every store, its long text being read: after `end_session` nothing is kept for
    it, nor does anything of it run on."""
    backend, default, tiny = inference.backend(), inference.default_model_name(), tiny_model_dirs["llama"]
    inference.compare(TEXT, [default, tiny], 3, 2, 2, session=SESSION)
    inference.token_probabilities(TEXT, 3, session=SESSION)
    inference.lookahead(TEXT, 2, 2, session=SESSION, constraint={"type": "choice", "value": [" up", " down"],
                                                           "start": None})
    inference.lookahead(TEXT, 2, 2, session=SESSION, model_name=tiny, precompute=True)
    assert backend.speculator.wait(JOIN_SECONDS)
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 1.0)
    monkeypatch.setattr(reading, "READ_CHUNK_TOKENS", READ_CHUNK)
    monkeypatch.setitem(backend.reader._windows, default, READ_WINDOW)
    inference.lookahead(LONG_TEXT, 2, 2, session=SESSION)  # answered from its last tokens while it is read
    assert {store for store, sessions in held(backend).items() if SESSION not in sessions} == set()

    inference.end_session(SESSION)
    assert {store for store, sessions in held(backend).items() if SESSION in sessions} == set()
    assert scheduler.running(SESSION) == [] and backend.speculator.wait(JOIN_SECONDS)


# A program with two in-process backends that drops one while both read a long text in the background, then ends at
# once: the interpreter shuts down with both reads under way. Its first exit handler runs last: by then no thread of
# the engine's may be left (the interpreter would kill it wherever it is).
EXITING_PROGRAM = """
import atexit, threading
atexit.register(lambda: print(sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())))
import gc
import custom_llm_inference as inference
from lookahead.backends import make_backend
from lookahead.requests import ScoresRequest
text = " ".join(["The harbour town woke slowly, and the keeper climbed the stairs of the old lighthouse."] * 300)
dropped = make_backend("in-process")
inference.token_probabilities(text, k=3)
dropped.scores(ScoresRequest(text=text, k=3))
print(len(inference.backend().reader._reads), len(dropped.reader._reads))
del dropped
gc.collect()
"""


def test_a_program_ends_cleanly_while_each_of_its_backends_reads_in_the_background(embedded):
    root = Path(__file__).resolve().parents[1]
    env = {name: value for name, value in os.environ.items() if name != "LOOKAHEAD_FIRST_ANSWER_SECONDS"}  # partial
    ended = subprocess.run([sys.executable, "-c", EXITING_PROGRAM], cwd=root, capture_output=True, text=True,
                           env={**env, "PYTHONPATH": str(root)}, timeout=600)
    reads, threads_left = ended.stdout.strip().splitlines()
    assert reads == "1 1", f"each backend's read under way as the program ends: {ended.stderr[-2000:]}"
    assert threads_left == "[]", "every background thread ended before the interpreter shut down"
    assert ended.returncode == 0 and "terminate called" not in ended.stderr, ended.stderr[-2000:]
