"""Each in-process backend keeps its sessions' state itself (lookahead/backends/in_process_stores.py): forgetting a
session drops everything kept for it."""

from __future__ import annotations

import custom_llm_inference as cli
from lookahead import reading
from lookahead.backends.in_process import InProcess
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


def test_forgetting_a_session_drops_everything_kept_for_it(embedded, tiny_model_dirs, monkeypatch):
    """A session with something in every store, its long text being read: after `end_session` nothing is kept for
    it, nor does anything of it run on."""
    backend, default, tiny = cli.backend(), cli.default_model_name(), tiny_model_dirs["llama"]
    cli.compare(TEXT, [default, tiny], 3, 2, 2, session=SESSION)
    cli.token_probabilities(TEXT, 3, session=SESSION)
    cli.lookahead(TEXT, 2, 2, session=SESSION, constraint={"type": "choice", "value": [" up", " down"],
                                                           "start": None})
    cli.lookahead(TEXT, 2, 2, session=SESSION, model_name=tiny, precompute=True)
    assert backend.speculator.wait(JOIN_SECONDS)
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 1.0)
    monkeypatch.setattr(reading, "READ_CHUNK_TOKENS", READ_CHUNK)
    monkeypatch.setitem(backend.reader._windows, default, READ_WINDOW)
    cli.lookahead(LONG_TEXT, 2, 2, session=SESSION)  # answered from its last tokens while it is read
    assert {store for store, sessions in held(backend).items() if SESSION not in sessions} == set()

    cli.end_session(SESSION)
    assert {store for store, sessions in held(backend).items() if SESSION in sessions} == set()
    assert scheduler.running(SESSION) == [] and backend.speculator.wait(JOIN_SECONDS)
