"""The history tree: undo/redo/fork never lose a path, and JSON export/import is lossless."""

import json

import pytest

from history import SYNC_VERSION, History


def written(monkeypatch, clock: list[float]) -> History:
    monkeypatch.setattr("history.time.time", lambda: clock[0])
    return History.start("Once", "model-a")


def test_undo_then_a_new_choice_forks_and_redo_follows_the_last_visited_child(monkeypatch):
    h = written(monkeypatch, [100.0])
    h.add("Once upon", "branch", [1, 2], {"top_k": 0})
    h.add("Once upon a time", "token", [3])
    assert h.undo() and h.text == "Once upon"
    h.add("Once upon a hill", "append")
    assert [n.text for n in h.nodes] == ["Once", "Once upon", "Once upon a time", "Once upon a hill"]
    assert h.children(1) == [2, 3], "the old path stays as a sibling"
    assert h.undo() and h.redo() and h.text == "Once upon a hill", "redo goes where we last were"
    h.select(2)
    assert h.path() == [0, 1, 2]
    assert h.undo() and h.undo() and h.redo() and h.redo() and h.text == "Once upon a time"
    assert not h.redo(), "nothing below a leaf"
    h.select(0)
    assert not h.undo(), "nothing above the root"


def test_typing_amends_one_node_until_a_pause(monkeypatch):
    clock = [100.0]
    h = written(monkeypatch, clock)
    h.add("Once u", "type")
    clock[0] += 0.5
    h.add("Once up", "type")
    assert len(h.nodes) == 2 and h.text == "Once up"
    clock[0] += 5
    h.add("Once upon", "type")
    assert len(h.nodes) == 3, "after a pause, a new node"
    h.add("Once upon", "type")
    assert len(h.nodes) == 3, "same text: nothing recorded"


def test_rows_indent_only_where_the_tree_forks(monkeypatch):
    h = written(monkeypatch, [0.0])
    h.add("a", "branch")
    h.add("ab", "branch")
    h.undo()
    h.add("ac", "branch")
    h.add("acd", "branch")
    assert [(n.text, indent) for n, indent in h.rows()] == [
        ("Once", 0), ("a", 0), ("ab", 1), ("ac", 1), ("acd", 1),
    ]


def test_json_round_trip_is_lossless(monkeypatch):
    h = written(monkeypatch, [1.5])
    h.add("Once upon", "branch", [11, 12], {"temperature": 0.7, "branch_mode": "sample"})
    h.undo()
    h.add("Once 😀\n\t\"quoted\"", "append")
    h.add("", "clear")
    restored = History.from_json(h.to_json())
    assert restored == h
    assert restored.to_json() == h.to_json()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: "not json", "not a JSON"),
        (lambda d: {**d, "format": "other"}, "format"),
        (lambda d: {**d, "version": 99}, "version"),
        (lambda d: {**d, "nodes": []}, "no nodes"),
        (lambda d: {**d, "current": 7}, "current node"),
        (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "parent": 5}]}, "parent"),
        (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "kind": "magic"}]}, "kind"),
        (lambda d: {**d, "nodes": [d["nodes"][0], {**d["nodes"][1], "token_ids": ["x"]}]}, "token_ids"),
        (lambda d: {**d, "nodes": [{**d["nodes"][0], "last_child": 9}, d["nodes"][1]]}, "last_child"),
        (lambda d: {**d, "nodes": [d["nodes"][0], {"id": 1}]}, "fields"),
    ],
)
def test_bad_history_files_raise_clear_value_errors(monkeypatch, edit, message):
    h = written(monkeypatch, [0.0])
    h.add("Once more", "branch", [5])
    data = edit(json.loads(h.to_json()))
    with pytest.raises(ValueError, match=message):
        History.from_json(data if isinstance(data, str) else json.dumps(data))


def test_a_click_stores_only_its_edit(monkeypatch):
    h = written(monkeypatch, [0.0])
    long = "word " * 3000
    h.add(long, "append")
    before = len(h.to_json())
    h.add(long + " and then", "branch", [7, 8, 9], {"temperature": 1.0, "top_k": 0, "top_p": 1.0})
    h.add(long[:-100] + "edited", "type")
    h.add("", "clear")
    assert len(h.to_json()) - before < 600, "three nodes cost their edits, not three copies of the text"
    assert History.from_json(h.to_json()) == h


def test_an_insertion_inside_the_text_stores_only_what_it_inserts(monkeypatch):
    h = written(monkeypatch, [0.0])
    long = "word " * 3000
    h.add(long, "append")
    before = len(h.to_json())
    middle = len(long) // 2
    h.add(long[:middle] + "inserted " + long[middle:], "branch", [7, 8], {"caret": middle})
    h.add(long[:middle] + "inserted " + long[middle:] + "!", "append")
    h.add("", "clear")
    assert len(h.to_json()) - before < 500, "an insertion costs what it inserts, not the text after it"
    assert History.from_json(h.to_json()) == h
    assert "tail" not in json.loads(h.to_json())["nodes"][3], "an append keeps nothing after what it adds"


def test_version_2_files_still_read(monkeypatch):
    h = written(monkeypatch, [2.0])
    h.add("Once upon a time", "branch", [1, 2])
    h.add("Once upon a long time", "branch", [3])
    data = json.loads(h.to_json())
    assert data["version"] == 3 and data["nodes"][2]["tail"] == len("time")
    v2 = {**data, "version": 2, "nodes": [{k: v for k, v in n.items() if k != "tail"} for n in data["nodes"]]}
    v2["nodes"][2]["add"] = "long time"  # version 2 wrote what follows the change, to the end
    assert History.from_json(json.dumps(v2)) == h


def test_version_1_files_still_read(monkeypatch):
    h = written(monkeypatch, [2.0])
    h.add("Once upon", "branch", [1, 2])
    h.undo()
    h.add("Once more", "append")
    v1 = {"format": "interactive-lookahead-history", "version": 1, "model": h.model, "current": h.current,
          "nodes": [{"id": n.id, "parent": n.parent, "text": n.text, "kind": n.kind, "token_ids": n.token_ids,
                     "settings": n.settings, "time": n.time, "last_child": n.last_child} for n in h.nodes]}
    assert History.from_json(json.dumps(v1)) == h


def test_an_edit_that_keeps_more_than_its_parent_has_is_refused(monkeypatch):
    h = written(monkeypatch, [0.0])
    h.add("Once more", "branch", [5])
    data = json.loads(h.to_json())
    data["nodes"][1]["keep"] = 99
    with pytest.raises(ValueError, match="keep"):
        History.from_json(json.dumps(data))
    for keep, tail in [(0, len("Once") + 1), (4, 1), (0, -1), (0, True), (0, 1.5)]:
        data["nodes"][1].update(keep=keep, tail=tail)
        with pytest.raises(ValueError, match="keep and tail must be counts"):
            History.from_json(json.dumps(data))


def apply_changes(copy: dict | None, message: dict) -> dict | None:
    """What ui/static/history_sync.js's save does with a message, in Python; None where it asks for the whole tree."""
    if message["v"] != SYNC_VERSION:
        return copy if "whole" in message else None
    if "whole" in message:
        return {**message["whole"], "sync": message["sync"]}
    if copy is None or copy["sync"] != message["sync"]:
        return None
    for node in message["nodes"]:
        if node["id"] > len(copy["nodes"]):
            return None
        copy["nodes"][node["id"]:node["id"] + 1] = [node]
    return {**copy, "current": message["current"]}


def test_the_browser_copy_kept_by_changes_equals_the_tree_after_any_edits(monkeypatch):
    import random

    clock = [100.0]
    h = written(monkeypatch, clock)
    rng, copy, sizes = random.Random(0), None, []
    for step in range(400):
        action = rng.choice(["branch", "type", "type", "undo", "redo", "select", "clear"])
        clock[0] += rng.choice([0.5, 3.0])
        if action == "undo":
            h.undo()
        elif action == "redo":
            h.redo()
        elif action == "select":
            h.select(rng.randrange(len(h.nodes)))
        elif action == "clear":
            h.add("", "clear")
        else:
            h.add(h.text + rng.choice([" a", " bc", "\n", "é"]) * rng.randint(1, 3), action)
        message = h.changes()
        copy = apply_changes(copy, message)
        assert copy is not None
        assert {k: v for k, v in copy.items() if k != "sync"} == h.as_dict(), f"step {step}: {action}"
        sizes.append(len(json.dumps(message)))
    assert max(sizes[1:]) < 1000, "after the first, a message carries only what changed"
    assert History.from_json(json.dumps(copy)) == h, "the copy reads back as the tree"


def test_a_tree_read_back_or_asked_for_again_is_sent_whole(monkeypatch):
    h = written(monkeypatch, [100.0])
    first = h.changes()
    assert "whole" in first and "whole" not in h.changes()
    assert "whole" in History.from_json(h.to_json()).changes(), "another tab may hold a copy of the same tree"
    again = h.changes(whole=True)
    assert "whole" in again and again["sync"] != first["sync"], "a new copy, so an old one is not updated by mistake"


def test_a_copy_stored_by_an_earlier_page_still_reads(monkeypatch):
    """The browser's copy as the page stored it before its messages carried a version: a reload still reads it,
    and the copy stored now has the same fields."""
    stored = (
        '{"format":"interactive-lookahead-history","version":2,"model":"model-a","current":1,"nodes":['
        '{"id":0,"parent":null,"kind":"start","token_ids":[],"settings":{},"time":1.0,"last_child":1,'
        '"keep":0,"add":"Once"},'
        '{"id":1,"parent":0,"kind":"branch","token_ids":[7],"settings":{},"time":2.0,"last_child":null,'
        '"keep":4,"add":" upon"}],"sync":"0123456789ab"}'
    )
    earlier = History.from_json(stored)
    assert [n.text for n in earlier.nodes] == ["Once", "Once upon"] and earlier.current == 1
    h = written(monkeypatch, [1.0])
    now = apply_changes(None, h.changes())
    assert set(now) == set(json.loads(stored)), "the stored copy's fields are the ones an earlier page wrote"
