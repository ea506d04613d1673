"""Other loom-style tools' trees: each sample reads with its texts, current node and what the model wrote;
this app's tree written as loom or OpenLoom reads back the same; broken files say what is wrong."""

import json
from pathlib import Path

import pytest

from history import History
from history.foreign import MARKER_KEY
from history.formats import EXPORTS, export_notice, export_tree, file_name, import_tree, read_tree
from history.openloom import APPLE_EPOCH

FIXTURES = Path(__file__).parent / "fixtures" / "history"


def texts(history: History) -> list[str]:
    return [n.text for n in history.nodes]


def shape(history: History) -> list[tuple[str, str | None, str]]:
    """Each node as (text, its parent's text, kind), in order: the tree without ids or times."""
    return [(n.text, None if n.parent is None else history.nodes[n.parent].text, n.kind) for n in history.nodes]


def written_tree(monkeypatch, root: str = "Once") -> History:
    """A tree with branches, a token, an edit inside the text, a clear and a chat turn; its current node a leaf."""
    clock = [1_700_000_000.0]
    monkeypatch.setattr("history.time.time", lambda: clock[0])
    h = History.start(root, "tiny-model")
    for text, kind, ids in [(f"{root} upon", "branch", [5, 6]), (f"{root} upon a time", "token", [7]),
                            (f"{root} upon a hill", "append", []), (f"{root}, upon a hill", "type", [])]:
        clock[0] += 10
        h.add(text, kind, ids, {"temperature": 0.7} if ids else None)
    h.select(1)
    h.add(f"{root} upon the sea", "continue", [8, 9], {"top_k": 5})
    h.add("", "clear")
    h.add("", "turn", [], {"messages": [{"role": "user", "content": "hi"}]})
    h.select(2)
    h.add(f"{root} upon a time!", "type")  # numbered after nodes that come later depth first
    h.select(3)
    return h


def test_a_loom_file_reads_as_its_tree_with_the_selected_node_current():
    imported = read_tree((FIXTURES / "sample.loom.json").read_bytes())
    h = imported.history
    assert imported.format == "loom" and "5 nodes, 2 of them written by a model" in imported.notice
    assert h.text == ("The lighthouse keeper climbed the stairs two at a time, the storm already at the glass."
                      " She lit the lamp.")
    assert texts(h)[:2] == ["", "The lighthouse keeper climbed the stairs"], "an empty root is fine"
    assert [n.kind for n in h.nodes] == ["start", "type", "continue", "type", "continue"]
    generated = h.nodes[2].settings
    assert generated["model"] == "davinci" and generated["imported_from"] == "loom"
    assert generated["tokens"] == [{"text": " two", "logprob": -2.31}, {"text": " at", "logprob": -0.12}]
    assert h.nodes[1].time > 1.6e9, "loom's creation timestamp is read"
    assert h.model == "davinci"


def test_an_openloom_file_reads_as_its_tree_with_the_current_node_current():
    imported = read_tree((FIXTURES / "sample.openloom.json").read_text())
    h = imported.history
    assert imported.format == "openloom"
    assert h.text == "Tell me about the lighthouse. It stands on the last rock before the open sea. Who lit it last?"
    assert [n.kind for n in h.nodes] == ["start", "continue", "type", "continue"]
    assert h.nodes[1].settings == {"imported_from": "openloom", "model": "claude-3-5-sonnet-20241022"}
    assert h.nodes[3].settings["model"] == "claude-3-opus-20240229"
    assert h.nodes[0].time == pytest.approx(755732640.360085 + APPLE_EPOCH), "Swift's dates count from 2001"


def test_a_logitloom_file_reads_as_a_tree_of_tokens_below_the_prompt():
    imported = read_tree((FIXTURES / "sample.ll.json").read_text())
    h = imported.history
    assert imported.format == "logitloom" and "4 tokens" in imported.notice
    assert texts(h) == ["The lighthouse keeper climbed", "The lighthouse keeper climbed the",
                        "The lighthouse keeper climbed the stairs", "The lighthouse keeper climbed the ladder",
                        "The lighthouse keeper climbed up"]
    assert [n.kind for n in h.nodes] == ["start", "token", "token", "token", "token"]
    assert h.nodes[2].settings == {"imported_from": "logitloom", "model": "meta-llama/llama-3.1-405b",
                                   "tokens": [{"text": " stairs", "logprob": -0.357, "prob": 0.7}]}
    assert h.current == 0 and h.model == "meta-llama/llama-3.1-405b"


def test_a_mikupad_session_reads_as_one_path_without_its_api_key():
    raw = (FIXTURES / "sample-mikupad-session.json").read_text()
    key = json.loads(json.loads(raw)["endpointAPIKey"])
    imported = read_tree(raw)
    h = imported.history
    assert texts(h) == ["The lighthouse keeper", "The lighthouse keeper climbed the",
                        "The lighthouse keeper climbed the narrow stairs",
                        "The lighthouse keeper climbed the narrow stairs."]
    assert [n.kind for n in h.nodes] == ["start", "continue", "type", "token"]
    assert h.nodes[1].settings["tokens"] == [{"text": " climbed", "prob": 0.62}, {"text": " the", "prob": 0.91}]
    assert h.current == 3 and h.model == "llama-3.1-8b"
    assert key not in h.to_json() and "endpointAPIKey" not in h.to_json()
    assert "API key" in imported.notice and "dropped" in imported.notice


@pytest.mark.parametrize("as_given", [str, str.encode, json.loads])
def test_this_apps_json_reads_as_text_bytes_or_parsed(monkeypatch, as_given):
    h = written_tree(monkeypatch)
    imported = read_tree(as_given(h.to_json()))
    assert imported.history == h and imported.format == "interactive-lookahead" and imported.notice == ""
    assert import_tree(h.to_json()) == h
    assert export_tree(h, "interactive-lookahead") == h.to_json()
    assert export_notice(h, "interactive-lookahead") == ""


@pytest.mark.parametrize("format", ["loom", "openloom"])
@pytest.mark.parametrize("root", ["Once", ""])
def test_a_tree_written_as_loom_or_openloom_reads_back_the_same(monkeypatch, format, root):
    h = written_tree(monkeypatch, root)
    back = import_tree(export_tree(h, format))
    assert shape(back) == shape(h), "the same texts, tree and kinds"
    assert back.current == h.current and back.path() == h.path() and back.model == h.model


def whole_texts_in_loom(node: dict, above: str = "") -> list[str]:
    """What loom shows at each node: the texts along its ancestry, joined (its `ancestry_plaintext`)."""
    text = above + node["text"]
    return [text] + [t for child in node["children"] for t in whole_texts_in_loom(child, text)]


def test_a_loom_file_holds_what_loom_reads(monkeypatch):
    h = written_tree(monkeypatch)
    data = json.loads(export_tree(h, "loom"))
    assert set(data) >= {"root", "chapters", "selected_node_id"}, "the fields loom and Tapestry's migration read"
    nodes, stack = {}, [data["root"]]
    while stack:
        node = stack.pop()
        assert isinstance(node["id"], str) and isinstance(node["text"], str) and "mutable" in node
        assert all(child["parent_id"] == node["id"] for child in node["children"])
        nodes[node["id"]] = node
        stack += node["children"]
    assert data["selected_node_id"] in nodes
    assert sorted(whole_texts_in_loom(data["root"])) == sorted(["", *texts(h)]), "an empty root above ours"
    by_model = [n for n in nodes.values() if n.get("meta", {}).get("source") == "AI"]
    assert len(by_model) == sum(n.kind in ("branch", "token", "continue") for n in h.nodes)


def test_an_openloom_file_holds_what_openloom_reads(monkeypatch):
    h = written_tree(monkeypatch, "")
    data = json.loads(export_tree(h, "openloom"))
    nodes = data["nodes"]
    assert {"id", "title", "rootNodeId", "currentNodeId", "nodes", "bookmarkedNodes", "lastModified"} <= set(data)
    assert data["rootNodeId"] in nodes and data["currentNodeId"] in nodes and len(nodes) == len(h.nodes)
    for key, node in nodes.items():
        assert node["id"] == key == key.upper() and node["author"] in ("user", "assistant")
        assert isinstance(node["createdTime"], float) and node["createdTime"] < 1e9, "seconds since 2001"
        assert all(nodes[child]["parentId"] == key for child in node["childrenIds"])
        assert node["rememberedChildId"] is None or node["rememberedChildId"] in node["childrenIds"]
    assert nodes[data["rootNodeId"]]["parentId"] is None


@pytest.mark.parametrize("format", ["loom", "openloom"])
def test_the_export_notice_says_what_the_format_leaves_out(monkeypatch, format):
    notice = export_notice(written_tree(monkeypatch), format)
    assert "token ids (3 nodes)" in notice and "settings" in notice
    assert "3 nodes changing text" in notice, "the edit, the clear and the turn hang elsewhere"


def test_export_names_its_file_by_format_and_refuses_others(monkeypatch):
    assert [file_name(f) for f in EXPORTS] == ["history.interactive-lookahead.json", "history.loom.json",
                                                "history.openloom.json"]
    with pytest.raises(ValueError, match="cannot write the format 'mikupad'"):
        export_tree(written_tree(monkeypatch), "mikupad")


def loom_file(**root) -> str:
    return json.dumps({"root": {"id": "r", "text": "", "children": [], **root}, "chapters": {},
                       "selected_node_id": "r"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe\x00garbage", "not a text file"),
        ("{not json", "not a JSON file"),
        ("[1, 2]", "not an object"),
        ('{"title": "x", "pages": []}', "not a history this app reads.*pages, title"),
        ('{"format": "interactive-lookahead-history", "version": 99}', "version 99"),
        (loom_file(children=["text"]), "node 1 is not an object"),
        (loom_file(children=[{"id": "r", "text": "x", "children": []}]), "'r' appears twice"),
        (loom_file(text=7), "id and text must be strings"),
        (json.dumps({"root": {"id": "r", "text": "", "children": []}, "selected_node_id": "gone"}),
         "selected node 'gone'"),
        (loom_file(children=[{"id": "a", "text": "x", "children": [], MARKER_KEY: {"kind": "magic"}}]),
         "kind 'magic'"),
        (loom_file(children=[{"id": "a", "text": "x", "children": [], MARKER_KEY: {"parent": "nowhere"}}]),
         "parent 'nowhere' is not in the tree"),
        ('{"rootNodeId": "a", "nodes": {}}', "must be an object holding the node"),
        ('{"rootNodeId": "a", "nodes": {"a": {"text": "", "childrenIds": ["b"]}}}', "childrenIds must list nodes"),
        ('{"rootNodeId": "a", "nodes": {"a": {"text": "", "childrenIds": ["a"]}}}', "reached twice"),
        ('{"rootNodeId": "a", "nodes": {"a": {"text": 3}}}', "must be an object with a text"),
        ('{"rootNodeId": "a", "currentNodeId": "b", "nodes": {"a": {"text": ""}}}', "current node 'b'"),
        ('{"isLogitLoomTreeVersion": "logit-loom-tree-v9", "roots": []}', "logit-loom-tree-v9.*not supported"),
        ('{"isLogitLoomTreeVersion": "logit-loom-tree-v1", "roots": [{"text": 1}]}', "token 1 must be"),
        ('{"prompt": "[{\\"type\\": \\"user\\"}]"}', "prompt chunk 0 must be"),
    ],
)
def test_unreadable_files_raise_value_errors_saying_what_is_wrong(data, message):
    with pytest.raises(ValueError, match=message):
        read_tree(data)


def generated_loom_tree(depth: int, width: int) -> tuple[dict, int, str]:
    """A loom tree `depth` levels deep whose first path forks `width` ways at every level, each other branch going
    straight down (width 4: 651 nodes), selected at the first path's end; its node count and that node's text."""
    count = 0

    def node(level: int, index: int, on_first_path: bool) -> dict:
        nonlocal count
        count += 1
        key = f"n{count}"
        fanout = (width if on_first_path else 1) if level < depth else 0
        children = [node(level + 1, i, on_first_path and i == 0) for i in range(fanout)]
        return {"id": key, "text": f" {level}.{index}", "children": children,
                "meta": {"source": "AI" if level % 2 else "prompt"}}

    root = node(0, 0, True)
    deepest, text = root, root["text"]
    while deepest["children"]:
        deepest = deepest["children"][0]
        text += deepest["text"]
    return {"root": root, "chapters": {}, "selected_node_id": deepest["id"]}, count, text


def test_a_large_generated_loom_tree_imports_whole():
    data, count, text = generated_loom_tree(depth=20, width=4)
    h = import_tree(json.dumps(data))
    assert len(h.nodes) == count == 651
    assert h.text == text and len(h.path()) == 21
    assert History.from_json(h.to_json()) == h, "a valid tree of this app's"


def test_a_tree_deeper_than_pythons_json_reader_goes_exports_and_says_so(monkeypatch):
    h = History.start("", "m")
    for i in range(600):
        h.add(h.text + f" {i}", "token", [i])
    loom_file = export_tree(h, "loom")
    assert "601 nodes deep" in export_notice(h, "loom") and "deep" not in export_notice(h, "openloom")
    with pytest.raises(ValueError, match="too deep"):
        import_tree(loom_file)
    assert shape(import_tree(export_tree(h, "openloom"))) == shape(h), "OpenLoom's file is flat"
