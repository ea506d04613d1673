"""The map of futures through a real vLLM server (tests/test_vllm.py's, started for this module): the in-process map,
grown from the server's top N after each node.

With a cutoff above 1/(N+1) and plain settings no child can be missing: a token outside a node's top N is less likely
than 1/(N+1).
"""

import pytest

import custom_llm_inference as inference
from server_process import in_process
from test_vllm import TOLERANCE, proxy, server_port, vllm  # noqa: F401 (fixtures)

CUTOFF = 0.05  # above 1/21: the server's top 20 after each node hold every child
CLEAR = 1.1  # a node this many times the cutoff is listed by both, whatever either's rounding
TEXT = "She opened the door and saw"
WRITER = " zebras danced"  # after TEXT: far outside the server's top 20 at each of its tokens


def by_path(futures: dict) -> dict[tuple[int, ...], dict]:
    """A map's nodes by their paths' token ids (a parent is listed before its children)."""
    paths: dict[int, tuple[int, ...]] = {}
    for node in futures["nodes"]:
        paths[node["id"]] = () if node["parent"] is None else (*paths[node["parent"]], node["token_id"])
    return {paths[node["id"]]: node for node in futures["nodes"]}


def assert_same_map(ours: dict, theirs: dict, tolerance: float) -> None:
    """`ours` through a server, `theirs` in-process: the same keys; every node clearly above the cutoff listed by both,
    and every node both list the same, its probabilities within `tolerance`; no entropy through the server."""
    assert set(ours) == set(theirs) and theirs["top_n"] is None
    mine, model = by_path(ours), by_path(theirs)
    clear = CLEAR * ours["cutoff"]
    assert {p for p, n in model.items() if n["mass"] >= clear} <= set(mine)
    assert {p for p, n in mine.items() if n["mass"] >= clear} <= set(model)
    for path in set(mine) & set(model):
        a, b = mine[path], model[path]
        assert (a["token"], a["text"], a["depth"], a["on_text"], a["ends"]) == (
            b["token"], b["text"], b["depth"], b["on_text"], b["ends"])
        assert a["mass"] == pytest.approx(b["mass"], abs=tolerance) and a["prob"] == pytest.approx(b["prob"],
                                                                                                   abs=tolerance)
        assert a["p_base"] == pytest.approx(b["p_base"], abs=tolerance) and a["entropy"] is None
    assert "top 20 tokens only" in ours["notice"]


@pytest.mark.usefixtures("vllm")
def test_the_map_of_futures_is_the_in_process_one_from_the_servers_top_n():
    """At the text's end and at a caret, where the writer's own tokens, far outside the top 20, are each made the
    server's choice so that their own probabilities come back."""
    caret = {"text": TEXT + WRITER, "caret": len(TEXT)}
    with in_process():
        expected = (inference.multiverse(TEXT, 3, CUTOFF), inference.multiverse(**caret, depth=3, cutoff=CUTOFF))
    ours = (inference.multiverse(TEXT, 3, CUTOFF, session="m"),
            inference.multiverse(**caret, depth=3, cutoff=CUTOFF, session="m"))
    for mine, theirs in zip(ours, expected):
        assert_same_map(mine, theirs, TOLERANCE)
        assert mine["top_n"] == 20 and mine["device"] == f"vllm {inference.backend().url}" and len(mine["nodes"]) > 3
        assert mine["passes"] == 2, "a request per level after the text's own, the last level's not needed"
    writer = [n for n in ours[1]["nodes"] if n["on_text"]]
    assert [n["text"] for n in writer] == ["", " ze", " zebras", WRITER] and writer[1]["prob"] < 0.01
