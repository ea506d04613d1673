"""Who wrote what: the authorship replayed from the history's path, through insertions at a caret, the writer's
edits of the model's words, undo and redo, a Continue, a rewind, and a round trip through the history's JSON."""

import random

from history import PAUSE_SECONDS, History
from history.authorship import Span, authorship


def by_author(history: History, node_id: int | None = None) -> list[tuple[str, int | None]]:
    """The text at the node as (piece, author) pairs: easier to read in a test than offsets."""
    text = history.nodes[history.current if node_id is None else node_id].text
    return [(text[s.start : s.end], s.node) for s in authorship(history, node_id)]


def test_the_start_and_typing_are_the_writers_and_a_branch_is_the_node_that_took_it():
    h = History.start("Once", "m")
    h.add("Once upon", "branch", [1], {"source": "branch"})
    h.add("Once upon a time", "type")
    assert by_author(h) == [("Once", None), (" upon", 1), (" a time", None)]
    assert authorship(h) == [Span(0, 4, None), Span(4, 9, 1), Span(9, 16, None)]


def test_an_insertion_at_a_caret_moves_what_follows_it():
    h = History.start("The cat sat.", "m")
    h.add("The black cat sat.", "branch", [5])
    h.add("The black cat sat on the mat.", "token", [6])
    assert by_author(h) == [("The ", None), ("black ", 1), ("cat sat", None), (" on the mat", 2), (".", None)]


def test_a_model_word_the_writer_edits_becomes_the_writers(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("history.time.time", lambda: clock[0])
    h = History.start("Dogs", "m")
    h.add("Dogs chase cats", "branch", [1, 2])
    h.add("Dogs chased cats", "type")  # inside the model's "chase": the whole word is the writer's
    assert by_author(h) == [("Dogs", None), (" ", 1), ("chased", None), (" cats", 1)]
    clock[0] += PAUSE_SECONDS  # a new typing node: its own edit
    h.add("Dogs chased cats.", "type")  # "." touches "cats" with no space between
    assert by_author(h) == [("Dogs", None), (" ", 1), ("chased", None), (" ", 1), ("cats.", None)]


def test_the_writers_space_after_a_model_word_leaves_the_word_the_models():
    h = History.start("Dogs", "m")
    h.add("Dogs chase", "branch", [1])
    h.add("Dogs chase and run", "type")
    assert by_author(h) == [("Dogs", None), (" chase", 1), (" and run", None)]
    h.add("Dogs chase", "type")  # deleting the writer's own words, from their space on
    assert by_author(h) == [("Dogs", None), (" chase", 1)]


def test_undo_and_redo_follow_the_path():
    h = History.start("A", "m")
    h.add("A b", "branch")
    h.add("A b c", "word")
    assert by_author(h) == [("A", None), (" b", 1), (" c", 2)]
    h.undo()
    assert by_author(h) == [("A", None), (" b", 1)]
    h.add("A b d", "append")
    assert by_author(h) == [("A", None), (" b", 1), (" d", None)]
    h.undo()
    h.redo()
    assert by_author(h) == [("A", None), (" b", 1), (" d", None)]
    assert by_author(h, 2) == [("A", None), (" b", 1), (" c", 2)], "any node, not only the current one"


def test_a_continue_and_a_rewind_credit_only_what_the_model_wrote():
    h = History.start("It", "m")
    h.add("It was", "type")
    h.add("It was a dark night", "continue", [1, 2, 3])
    rewound_from = h.current
    h.fork("It was a cold", "rewind", [4], {"source": "rewind", "from": rewound_from})
    assert h.nodes[h.current].parent == 1, "the rewind forks from the writer's node before the Continue"
    assert by_author(h) == [("It was", None), (" a ", 2), ("cold", 3)]


def test_authorship_survives_the_jsons_round_trip():
    h = History.start("Once", "m")
    h.add("Once upon", "branch", [1])
    h.add("Once upon a", "type")
    h.add("Once upon a time", "continue", [2])
    assert authorship(History.from_json(h.to_json())) == authorship(h)


def test_clearing_leaves_nothing_to_credit():
    h = History.start("Once", "m")
    h.add("Once upon", "branch")
    h.add("", "clear")
    assert authorship(h) == []


def test_the_spans_cover_the_text_exactly_whatever_the_edits():
    rng = random.Random(7)
    words = ["a", " b", "c ", " dd", "\n", "e.", " "]
    h = History.start("start", "m")
    for _ in range(300):
        text, at = h.text, rng.randint(0, len(h.text))
        step = rng.choice(["type", "branch", "token", "append", "undo", "redo", "rewind", "cut"])
        if step == "undo":
            h.undo()
        elif step == "redo":
            h.redo()
        elif step == "cut":
            h.add(text[:at] + text[rng.randint(at, len(text)):], "type")
        elif step == "rewind":
            h.fork(text[:at] + rng.choice(words), "rewind", [1], {"from": h.current})
        else:
            h.add(text[:at] + rng.choice(words) + text[at:], step)
        spans = authorship(h)
        assert [s.start for s in spans] == [0, *[s.end for s in spans]][: len(spans)]
        assert all(s.start < s.end for s in spans) and (spans[-1].end if spans else 0) == len(h.text)
        assert all(s.node is None or h.nodes[s.node].kind not in ("type", "append", "start") for s in spans)
        assert all(a.node != b.node for a, b in zip(spans, spans[1:])), "neighbours of one author are joined"
