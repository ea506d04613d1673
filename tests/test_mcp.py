"""The endpoints as MCP tools: `python app.py --mcp` served on loopback, used by a real MCP client (the `mcp`
SDK over streamable HTTP), with the engine called here as the reference."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

import custom_llm_inference as inference
from api_client import Client
from lookahead.sampling import knobs
from mcp_client import answer, call, list_tools

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"lookahead", "next_token_distribution", "token_probabilities", "attribution", "generate", "compare",
         "multiverse"}
PRIVATE_TEXT = "Dear Ada, the spare key to the blue cottage is under the third flowerpot from the left, as"
START_SECONDS = 300  # a cold start on a busy 2-core machine: import, load the model, measure its pass costs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(embedded, tmp_path_factory):
    """`python app.py --mcp` in its own process; yields its URL."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1"}
    env.pop("LOOKAHEAD_MODELS", None)  # the embedded model only
    log = tmp_path_factory.mktemp("mcp") / "app.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "app.py", "--mcp"], cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert process.poll() is None, f"app.py --mcp exited:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(url + "/gradio_api/mcp/schema", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"app.py --mcp did not start:\n{log.read_text()[-3000:]}"
            time.sleep(1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_every_tool_and_parameter_is_described(server):
    listed = list_tools(server)
    assert {tool.name for tool in listed} == TOOLS
    for tool in listed:
        assert len(tool.description) > 40, tool.name
        for name, schema in tool.inputSchema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    lookahead = next(tool for tool in listed if tool.name == "lookahead")
    assert "1-20" in lookahead.inputSchema["properties"]["n_branches"]["description"]
    for name, setting in knobs().items():  # each sampling setting described as its knob says, on both tools
        for tool in listed:
            if name in tool.inputSchema["properties"]:
                assert tool.inputSchema["properties"][name]["description"] == setting.description, (tool.name, name)
    assert "min_p" in lookahead.inputSchema["properties"]


def test_a_lookahead_is_json_equal_to_the_engines(server):
    text = "The old lighthouse keeper climbed the stairs and"
    remote = answer(server, "lookahead", {"text": text, "n_branches": 4, "depth": 3})
    local = inference.lookahead(text, 4, 3, session="reference")
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    assert [b["text"] for b in remote["branches"]] == [b["text"] for b in local["branches"]]
    for got, want in zip(remote["distribution"], local["distribution"]):
        assert got["token_id"] == want["token_id"] and got["prob"] == pytest.approx(want["prob"], abs=1e-5)


def test_every_other_tool_answers_json(server):
    text = "The capital of France is Paris."
    distribution = answer(server, "next_token_distribution", {"text": "The capital of France is", "k": 3})
    assert [e["token_id"] for e in distribution] == [
        e["token_id"] for e in inference.next_token_distribution("The capital of France is", 3)]
    tokens = answer(server, "token_probabilities", {"text": text, "k": 2})["tokens"]
    assert "".join(text[t["start"]:t["end"]] for t in tokens) == text
    why = answer(server, "attribution", {"text": text, "window": 16})
    assert sum(t["score"] for t in why["tokens"] if t["score"] is not None) == pytest.approx(1, abs=1e-4)
    continued = answer(server, "generate", {"text": "1, 2, 3,", "max_new_tokens": 8})  # a streamed endpoint
    assert continued["token_ids"] == inference.generate("1, 2, 3,", 8, "greedy")["token_ids"]
    default = inference.default_model_name()
    compared = answer(server, "compare", {"text": text, "models": [default, default], "n_branches": 2, "depth": 2})
    assert [t["js"] for t in compared["tokens"]] == pytest.approx(
        [t["js"] for t in inference.compare(text, [default, default], n_branches=2, depth=2)["tokens"]], abs=1e-6)
    futures = answer(server, "multiverse", {"text": text, "depth": 2, "cutoff": 0.05, "caret": 9})
    local = inference.multiverse(text, 2, 0.05, caret=9, session="reference map")
    assert [(n["parent"], n["token_id"], n["on_text"]) for n in futures["nodes"]] == [
        (n["parent"], n["token_id"], n["on_text"]) for n in local["nodes"]]
    assert [n["mass"] for n in futures["nodes"]] == pytest.approx([n["mass"] for n in local["nodes"]], abs=1e-5)


@pytest.mark.parametrize("tool, arguments, reference", [
    ("lookahead", {"text": ""}, lambda: inference.lookahead("")),
    ("lookahead", {"text": "Hi", "n_branches": 99}, lambda: inference.lookahead("Hi", 99)),
    ("token_probabilities", {"text": "Hi", "k": 21}, lambda: inference.token_probabilities("Hi", 21)),
    ("generate", {"text": "Hi", "method": "beam"}, lambda: inference.generate("Hi", 8, "beam")),
    ("multiverse", {"text": "Hi", "depth": 8, "cutoff": 0.001}, lambda: inference.multiverse("Hi", 8, 0.001)),
])
def test_bad_input_is_a_tool_error_with_the_apis_message(server, tool, arguments, reference):
    with pytest.raises(ValueError) as refused:
        reference()
    result = call(server, tool, arguments)
    assert result.isError
    assert result.content[0].text == str(refused.value)


def test_mcp_callers_share_nothing_while_a_gradio_client_keeps_its_cache(server):
    first = answer(server, "lookahead", {"text": PRIVATE_TEXT, "n_branches": 2, "depth": 2})
    second = answer(server, "lookahead", {"text": PRIVATE_TEXT, "n_branches": 2, "depth": 2})  # another client
    assert first["context_tokens"] == second["context_tokens"] > 20
    assert first["reused_tokens"] == second["reused_tokens"] == 0
    # The same check sees a cache where there is one: a gradio_client session reuses its own text, as a dict.
    client = Client(server, verbose=False)
    client.predict(PRIVATE_TEXT, 2, 2, api_name="/lookahead")
    again = client.predict(PRIVATE_TEXT + " if", 2, 2, api_name="/lookahead")
    assert isinstance(again, dict) and again["reused_tokens"] >= first["context_tokens"] - 1


def test_an_mcp_call_gets_json_and_leaves_no_session_behind(embedded):
    """In-process: the endpoint function itself, called as gradio's MCP client and as anyone else calls it."""
    from ui import endpoints as app

    mcp_caller = SimpleNamespace(headers={"x-gradio-user": "mcp"}, session_hash="the-mcp-servers-one-session")
    browser = SimpleNamespace(headers={}, session_hash="a-writer")
    prefix_caches, matchers = inference.backend().prefix_caches, inference.backend().matchers
    constraint = {"type": "choice", "value": ["yes", "no"], "start": None}
    text = "Is the sea blue? Answer: "
    as_json = app.api_lookahead(text, 2, 2, constraint=constraint, request=mcp_caller)
    assert isinstance(as_json, str) and prefix_caches.bytes() == 0 and len(prefix_caches) == 0
    assert len(matchers) == 0
    as_dict = app.api_lookahead(text, 2, 2, constraint=constraint, request=browser)
    assert json.loads(as_json)["branches"] == as_dict["branches"]
    assert len(prefix_caches) == 1 and len(matchers) == 1


def test_mcp_json_is_strict_json():
    """A token the vLLM server did not rank has logprob -inf; an MCP client gets null, as JSON has no infinity."""
    from ui import endpoints as app

    mcp_caller = SimpleNamespace(headers={"x-gradio-user": "mcp"}, session_hash="the-mcp-servers-one-session")
    text = app.reply({"logprob": float("-inf"), "scores": [float("nan"), 0.5], "token": "é"}, mcp_caller)
    assert json.loads(text) == {"logprob": None, "scores": [None, 0.5], "token": "é"}


def test_an_mcp_call_reads_a_long_text_whole_since_its_session_ends_with_it(embedded, monkeypatch):
    """A partial answer is followed by asking again in the same session; an MCP call's session ends with the call."""
    from lookahead import reading
    from ui import endpoints as app

    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 1.0)
    monkeypatch.setitem(inference.backend().reader._windows, inference.default_model_name(), 128)
    text = "".join(f"{i}. The keeper wrote the names of the ships in his book. " for i in range(60))  # ~900 tokens
    mcp_caller = SimpleNamespace(headers={"x-gradio-user": "mcp"}, session_hash="the-mcp-servers-one-session")
    assert json.loads(app.api_lookahead(text, 2, 2, request=mcp_caller))["partial"] is None
    browser = SimpleNamespace(headers={}, session_hash="a-writer")
    assert app.api_lookahead(text, 2, 2, request=browser)["partial"]["window_tokens"] == 128
