"""The Space path: app.py served under ZeroGPU emulation (tests/zerogpu_space.py), driven as visitors do.

Everything but the device manager is real: `spaces` in ZeroGPU mode forks GPU workers and
pickles what crosses, and gradio applies its ZeroGPU defaults. Answers must equal the plain
CPU engine's in this process.
"""

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import custom_llm_inference as inference
from api_client import Client
from lookahead.backends import zerogpu
from lookahead.requests import GenerateRequest
from mcp_client import answer, call
from reference import reference_scores

ROOT = Path(__file__).resolve().parents[1]
DURATION_FACTOR = 1.5  # ZeroGPU's current hardware, as the emulation reports it
CROWD = 24
SCENARIO_SECONDS = 600  # the longest the emulated Space may take over a scenario, starting included


@pytest.fixture(scope="module")
def space(tmp_path_factory, embedded):
    """(url, log path): the emulated Space, and the file where its scheduler logs every GPU request."""
    log = tmp_path_factory.mktemp("zerogpu") / "schedule.jsonl"
    log.touch()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("LOOKAHEAD_MODEL", "SPACE_ID")}
    env["GRADIO_MCP_SERVER"] = "true"  # the Space's owner may turn MCP on: its tools run on the GPU workers too
    env["LOOKAHEAD_FIRST_ANSWER_SECONDS"] = "1"  # as deployed: long texts answer partially, except on ZeroGPU
    with offload_dir(env):
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "zerogpu_space.py"), str(port), str(log)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
        )
        output = []
        for line in server.stdout:
            output.append(line)
            if line.startswith("SERVING "):
                break
        else:
            os.killpg(server.pid, signal.SIGKILL)
            pytest.fail("the emulated Space did not start:\n" + "".join(output))
        threading.Thread(target=server.stdout.read, daemon=True).start()  # keep its pipe drained
        yield line.split()[1], log
        os.killpg(server.pid, signal.SIGKILL)  # the server and its forked GPU workers
        server.wait()


@contextmanager
def offload_dir(env: dict[str, str]) -> Iterator[None]:
    """A folder for spaces to offload the model to (~770 MB a Space), set in `env` and removed once the emulated
    Space has ended: killed, it cannot remove its own."""
    path = tempfile.mkdtemp(prefix="zerogpu-offload-")
    env["ZEROGPU_OFFLOAD_DIR"] = path
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scheduled(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def branch_ids(result: dict) -> list[list[int]]:
    return [b["token_ids"] for b in result["branches"]]


def test_a_crowd_of_visitors_is_served_with_the_plain_cpu_answers(space):
    url, _ = space
    texts = [f"Visitor {i} writes a story about a {animal} who" for i, animal in enumerate(
        ["fox", "whale", "crow", "mole", "horse", "snail"] * (CROWD // 6))]
    expected = {t: inference.lookahead(t, 3, 3, session="expected") for t in texts}
    start = threading.Barrier(CROWD)

    def visit(text: str) -> tuple[dict, dict]:
        visitor = Client(url, verbose=False)
        start.wait()  # all at the same moment
        first = visitor.predict(text, 3, 3, api_name="/lookahead")
        taken = text + first["branches"][0]["text"]
        return first, visitor.predict(taken, 3, 3, api_name="/lookahead")

    with concurrent.futures.ThreadPoolExecutor(CROWD) as pool:
        answers = list(pool.map(visit, texts))
    assert len(answers) == CROWD, "every visitor answered, none turned away"
    for text, (first, second) in zip(texts, answers):
        assert branch_ids(first) == branch_ids(expected[text])
        for got, want in zip(first["distribution"], expected[text]["distribution"]):
            assert got["token_id"] == want["token_id"] and got["prob"] == pytest.approx(want["prob"], abs=1e-4)
        taken = text + first["branches"][0]["text"]
        assert branch_ids(second) == branch_ids(inference.lookahead(taken, 3, 3, session="expected"))


BAD_REQUESTS = [
    ("/lookahead", ("",), {}),
    ("/lookahead", ("ok", 0), {}),
    ("/lookahead", ("ok", 5, 3), {"temperature": 1e-45}),
    ("/lookahead", ("ok", 5, 3), {"temperature": 1e-45, "branch_mode": "sample"}),
    ("/lookahead", ("ok", 5, 3), {"repetition_penalty": 1e-45}),
    ("/lookahead", ("ok", 5, 3), {"branch_mode": "beam"}),
    ("/lookahead", ("ok", 5, 3), {"seed": -1}),
    ("/next_token_distribution", ("ok", 500), {}),
    ("/next_token_distribution", ("ok", 5), {"top_p": 0}),
    ("/generate", ("ok", 0), {}),
    ("/generate", ("ok", 8, "beam"), {}),
    ("/token_probabilities", ("ok", 50), {}),
    ("/lookahead", ("ok", 5, 3), {"messages": [{"role": "bot", "content": "hi"}]}),
    ("/lookahead", ("ok", 5, 3), {"constraint": {"type": "regex", "value": "[0-9]+", "start": 0}}),
    ("/generate", ("ok", 8), {"constraint": {"type": "regex", "value": "(("}}),
    ("/generate", ("ok", 8), {"stop": [""]}),
    ("/attribution", ("ok",), {"method": "shap"}),
    ("/attribution", ("ok",), {"steps": 0}),
    ("/attribution", ("ok",), {"at_token": 0}),
]
LOCAL = {
    "/lookahead": inference.lookahead,
    "/next_token_distribution": inference.next_token_distribution,
    "/generate": inference.generate,
    "/token_probabilities": inference.token_probabilities,
    "/attribution": inference.attribution,
}


@pytest.mark.parametrize("endpoint, args, kwargs", BAD_REQUESTS)
def test_bad_input_keeps_its_message_and_asks_for_no_gpu(space, endpoint, args, kwargs):
    url, log = space
    with pytest.raises(ValueError) as local:
        LOCAL[endpoint](*args, **kwargs)
    before = len(scheduled(log))
    with pytest.raises(Exception) as remote:
        Client(url, verbose=False).predict(*args, **kwargs, api_name=endpoint)
    assert str(local.value) in str(remote.value)
    assert "ZeroGPU worker error" not in str(remote.value)
    assert len(scheduled(log)) == before, "a refused request schedules no GPU"


def test_a_lone_surrogate_gets_a_clear_message(space):
    """Browsers can send half a character; JSON carries it as an escape gradio_client cannot send."""
    url, log = space
    before = len(scheduled(log))
    parameters = Client(url, verbose=False).view_api(print_info=False, return_format="dict")["named_endpoints"][
        "/lookahead"]["parameters"]
    arguments = ["ok\ud800", 3, 2] + [p["parameter_default"] for p in parameters[3:]]  # the rest as the app lists
    body = json.dumps({"data": arguments}).encode()
    post = urllib.request.Request(f"{url}gradio_api/call/lookahead", body, {"Content-Type": "application/json"})
    event_id = json.load(urllib.request.urlopen(post, timeout=30))["event_id"]
    stream = urllib.request.urlopen(f"{url}gradio_api/call/lookahead/{event_id}", timeout=60).read().decode()
    assert "event: error" in stream and "lone surrogate (U+D800)" in stream
    assert len(scheduled(log)) == before


def test_continue_streams_the_greedy_text_and_asks_for_what_it_needs(space):
    url, log = space
    text = "Monday, Tuesday, Wednesday,"
    before = len(scheduled(log))
    job = Client(url, verbose=False).submit(text, 24, "lookahead", api_name="/generate")
    updates = list(job)
    assert len(updates) > 2, "the continuation streams, pass by pass"
    lengths = [len(u["token_ids"]) for u in updates]
    assert lengths == sorted(lengths) and lengths[0] >= 1
    final = updates[-1]
    greedy = inference.generate(text, 24, "greedy")["token_ids"]
    assert final["token_ids"] == greedy[: len(final["token_ids"])]
    assert final["stopped_for_time"] or final["token_ids"] == greedy
    (request,) = scheduled(log)[before:]
    assert (
        request["seconds"] == int(inference.gpu_seconds(GenerateRequest(text="x", max_new_tokens=24))) * DURATION_FACTOR
    )


def test_requested_durations_fit_an_anonymous_visitors_quota(space):
    url, log = space
    visitor = Client(url, verbose=False)
    before = len(scheduled(log))
    visitor.predict("The capital of France is", 3, api_name="/next_token_distribution")
    visitor.predict("The capital of France is", 3, 2, api_name="/lookahead")
    requests = scheduled(log)[before:]
    assert [r["seconds"] for r in requests] == [zerogpu.INTERACTION_GPU_SECONDS * DURATION_FACTOR] * 2
    assert zerogpu.INTERACTION_GPU_SECONDS <= 10
    largest = inference.gpu_seconds(GenerateRequest(text="x", max_new_tokens=inference.MAX_NEW_TOKENS))
    assert largest * DURATION_FACTOR <= 30


def test_one_gpu_entry_point_so_endpoints_share_the_session_cache(space):
    url, log = space
    visitor = Client(url, verbose=False)
    text = "A lighthouse keeper kept a diary, and on the first page he wrote"
    visitor.predict(text, 3, api_name="/next_token_distribution")
    result = visitor.predict(text + " that", 3, 2, api_name="/lookahead")
    assert result["reused_tokens"] > 0, "the lookahead reused the KV cache the distribution left in the worker"
    assert len({r["task_id"] for r in scheduled(log)}) == 1, "every endpoint enters the same GPU function"


def test_a_long_text_is_read_whole_within_the_call(space):
    """Nothing runs on ZeroGPU after a call returns: a long text has no partial answer, the call reads it all."""
    url, _ = space
    text = "".join(f"{i}. The keeper wrote the names of the ships in his book. " for i in range(120))  # ~1.7k tokens
    result = Client(url, verbose=False).predict(text, 3, 2, api_name="/lookahead")
    expected = inference.lookahead(text, 3, 2, session="zerogpu-long")
    assert result["partial"] is None and result["context_tokens"] == expected["context_tokens"]
    assert branch_ids(result) == branch_ids(expected)


def test_the_page_works_while_a_crowd_calls_the_api(space):
    from playwright.sync_api import sync_playwright

    from browser import CHROMIUM, CHROMIUM_ARGS, expect_suggestions_for, type_text

    url, _ = space
    crowd_done = threading.Event()

    def crowd():
        def visit(i):
            return Client(url, verbose=False).predict(f"Meanwhile visitor {i} asks", 3, 2, api_name="/lookahead")
        with concurrent.futures.ThreadPoolExecutor(CROWD) as pool:
            assert all(r["branches"] for r in pool.map(visit, range(CROWD)))
        crowd_done.set()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        background = threading.Thread(target=crowd)
        background.start()
        text = "The page keeps working under ZeroGPU and"
        type_text(page, text)
        shown = expect_suggestions_for(page, text)
        page.locator("#branch-1").click()
        expect_suggestions_for(page, text + shown["branches"][1]["text"])
        background.join()
        browser.close()
    assert crowd_done.is_set()


def test_the_heatmap_and_chat_mode_answer_as_on_the_cpu(space):
    url, _ = space
    client = Client(url, verbose=False)
    text = "The capital of France is Paris."
    remote = client.predict(text, 3, api_name="/token_probabilities")
    local = inference.token_probabilities(text, 3, session="local zerogpu heatmap")
    assert [t["token_id"] for t in remote["tokens"]] == [t["token_id"] for t in local["tokens"]]
    rows = reference_scores(*inference.load_model(), text, 3)
    assert all(theirs["rank"] in row["ranks"] and ours["rank"] in row["ranks"]
               for theirs, ours, row in zip(remote["tokens"][1:], local["tokens"][1:], rows[1:]))
    conversation = [{"role": "user", "content": "What is 2+2?"}]
    chat = client.predict("2+2 equals", 3, 2, messages=conversation, api_name="/lookahead")
    expected = inference.lookahead("2+2 equals", 3, 2, session="local zerogpu chat", messages=conversation)
    assert [b["token_ids"] for b in chat["branches"]] == [b["token_ids"] for b in expected["branches"]]


def test_constraints_and_stops_answer_as_on_the_cpu(space):
    url, _ = space
    client = Client(url, verbose=False)
    text = "Is the sea blue? Answer: "
    choice = {"type": "choice", "value": ["yes", "no", "maybe"], "start": None}
    remote = client.predict(text, 3, 3, constraint=choice, api_name="/lookahead")
    local = inference.lookahead(text, 3, 3, session="local zerogpu constraint", constraint=choice)
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    out = client.predict("Once upon a time", 24, "lookahead", stop=[","], api_name="/generate")
    assert out["text"] == inference.generate("Once upon a time", 24, stop=[","])["text"]


def test_a_caret_and_fit_answer_as_on_the_cpu(space):
    """A caret inside the text and each branch's fit cross the pickle and equal the plain CPU engine's."""
    url, _ = space
    client = Client(url, verbose=False)
    text = "The keeper climbed the stairs and looked out over the sea, where the boats were coming home."
    caret = text.index(" looked")
    client.predict(text, 3, 2, api_name="/lookahead")
    remote = client.predict(text, 3, 2, caret=caret, api_name="/lookahead")
    local = inference.lookahead(text, 3, 2, session="local zerogpu caret", caret=caret)
    assert branch_ids(remote) == branch_ids(local)
    assert [b["fit"] for b in remote["branches"]] == pytest.approx([b["fit"] for b in local["branches"]], abs=1e-4)
    distribution = client.predict(text, 3, caret=caret, api_name="/next_token_distribution")
    assert [d["token_id"] for d in distribution] == [b["token_ids"][0] for b in local["branches"]]
    out = client.predict(text, 8, "lookahead", caret=caret, api_name="/generate")
    assert out["text"] == inference.generate(text[:caret], 8)["text"]


def test_compare_runs_both_models_in_one_gpu_call_and_answers_as_on_the_cpu(space):
    url, log = space
    text = "The old lighthouse keeper climbed the stairs and"
    before = len(scheduled(log))
    remote = Client(url, verbose=False).predict(text, ["", ""], 5, 2, 2, api_name="/compare")
    requests = scheduled(log)[before:]
    assert [r["seconds"] for r in requests] == [2 * zerogpu.INTERACTION_GPU_SECONDS * DURATION_FACTOR]
    default = inference.default_model_name()
    local = inference.compare(text, [default, default], 5, 2, 2, session="local zerogpu compare")
    # Two processes may take different linear paths (each times them at load: lookahead/cpu_linear.py), so their
    # sums run in another order: equal to float32's rounding over a model's depth, as everywhere in these tests.
    assert [t["logprob"][1] for t in remote["tokens"][1:]] == pytest.approx(
        [t["logprob"][1] for t in local["tokens"][1:]], abs=1e-4)
    assert [t["js"] for t in remote["tokens"][1:]] == pytest.approx([t["js"] for t in local["tokens"][1:]], abs=1e-4)
    assert [[b["token_ids"] for b in side] for side in remote["branches"]] == [
        [b["token_ids"] for b in side] for side in local["branches"]]


def test_a_map_of_futures_is_one_gpu_call_and_answers_as_on_the_cpu(space):
    """The whole tree, every level's pass, in one GPU call of an interaction's duration; branches by mass too."""
    url, log = space
    text = "The keeper climbed the stairs and looked out over the sea."
    caret = text.index(" looked")
    client = Client(url, verbose=False)
    before = len(scheduled(log))
    remote = client.predict(text, 3, 0.02, caret=caret, api_name="/multiverse")
    assert [r["seconds"] for r in scheduled(log)[before:]] == [zerogpu.INTERACTION_GPU_SECONDS * DURATION_FACTOR]
    local = inference.multiverse(text, 3, 0.02, caret=caret, session="local zerogpu map")
    near_cutoff = [n for n in local["nodes"] if abs(n["mass"] - 0.02) < 1e-4]  # may fall either side by rounding
    assert not near_cutoff and [(n["parent"], n["token_id"], n["on_text"]) for n in remote["nodes"]] == [
        (n["parent"], n["token_id"], n["on_text"]) for n in local["nodes"]]
    assert [n["mass"] for n in remote["nodes"]] == pytest.approx([n["mass"] for n in local["nodes"]], abs=1e-4)
    by_mass = client.predict(text[:caret], 3, 3, branch_mode="mass", api_name="/lookahead")
    assert branch_ids(by_mass) == branch_ids(inference.lookahead(text[:caret], 3, 3, branch_mode="mass",
                                                                 session="local zerogpu mass"))


def test_attribution_answers_as_on_the_cpu(space):
    url, _ = space
    remote = Client(url, verbose=False).predict("The capital of France is", None, "saliency", api_name="/attribution")
    local = inference.attribution("The capital of France is", None, "saliency", session="local zerogpu attribution")
    assert remote["target"]["token_id"] == local["target"]["token_id"]
    assert [t["score"] for t in remote["tokens"]] == pytest.approx([t["score"] for t in local["tokens"]], abs=1e-5)
    text = "The keeper slept.\n\nThe storm"  # at a token of the text, by integrated gradients (a stream of passes)
    remote = Client(url, verbose=False).predict(text, None, "integrated_gradients", 8, at_token=6,
                                                api_name="/attribution")
    local = inference.attribution(
        text, None, "integrated_gradients", 8, session="local zerogpu attribution", at_token=6
    )
    assert remote["target"]["token_id"] == local["target"]["token_id"] and len(remote["tokens"]) == 6
    assert [t["score"] for t in remote["tokens"]] == pytest.approx([t["score"] for t in local["tokens"]], abs=1e-5)


def test_mcp_tools_answer_as_on_the_cpu_and_refuse_without_a_gpu(space):
    url, log = space
    text = "The old lighthouse keeper climbed the stairs and"
    remote = answer(url, "lookahead", {"text": text, "n_branches": 3, "depth": 3})
    assert branch_ids(remote) == branch_ids(inference.lookahead(text, 3, 3)) and remote["reused_tokens"] == 0
    assert answer(url, "generate", {"text": "1, 2, 3,", "max_new_tokens": 6})["token_ids"] == inference.generate(
        "1, 2, 3,", 6)["token_ids"]
    before = len(scheduled(log))
    refused = call(url, "lookahead", {"text": "Hi", "depth": 99})
    assert refused.isError and refused.content[0].text == "depth must be between 1 and 16, got 99"
    assert len(scheduled(log)) == before, "a refused request schedules no GPU"


def scenario(name: str, tmp_path: Path) -> list[dict]:
    """The events of a scenario tests/zerogpu_space.py runs in the emulated Space's own process."""
    log = tmp_path / "schedule.jsonl"
    log.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("LOOKAHEAD_MODEL", "SPACE_ID")}
    with offload_dir(env):
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "zerogpu_space.py"), name, str(log)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=SCENARIO_SECONDS)
        finally:
            with contextlib.suppress(ProcessLookupError):  # its forked GPU workers, whatever became of it
                os.killpg(process.pid, signal.SIGKILL)
    events = [line.removeprefix("EVENTS ") for line in output.splitlines() if line.startswith("EVENTS ")]
    assert events, f"the scenario {name} gave no events:\n{output}"
    return json.loads(events[0])


def test_stop_reaches_the_explanation_in_its_gpu_worker(tmp_path):
    """Stop on a Space, in its process: the session's explanation stops in its GPU worker within the pass under way,
    and the GPU call returns, giving its GPU back, while another session's explanation runs on to its answer. One
    stopped after it was asked and before it started asks for no GPU."""
    events = scenario("stop", tmp_path)
    stopped = [event for event in events if event["session"] == "stopped"]
    question, *reported, result = [event for event in events if event["session"] == "running"]
    (cancel,) = [event for event in stopped if "cancelled" in event]
    assert cancel["cancelled"] == 1 and len(cancel["busy"]) == 2, "the cancel found the job, both GPUs at work"
    passes = [event["done"] for event in stopped if "done" in event]
    after_cancel = [event for event in stopped[stopped.index(cancel):] if "done" in event]
    of = next(event["of"] for event in stopped if "of" in event)
    assert passes == list(range(1, len(passes) + 1)) and len(after_cancel) <= 1, "at most the pass under way ended"
    assert passes[-1] <= 2 < of // 2, "the job ended far before the passes it was asked for"
    end = stopped[-1]
    assert end["raised"] == "Cancelled", "the caller gets Cancelled, as off ZeroGPU, not a worker error"
    assert end["busy"] == reported[0]["busy"], "as the call returned its GPU was given back; the other's still works"

    assert events.index(end) < events.index(result), "the other explanation ran on after the cancel"
    assert [event["done"] for event in reported] == list(range(1, reported[0]["of"] + 1))
    local = inference.attribution(
        question["text"], None, "integrated_gradients", question["steps"], session="local stop"
    )
    assert result["target"] == local["target"]["token_id"]
    assert result["scores"] == pytest.approx([token["score"] for token in local["tokens"]], abs=1e-5)

    assert [event.get("raised") for event in events if event["session"] == "late"] == [None, "Cancelled"]
    assert len(scheduled(tmp_path / "schedule.jsonl")) == 2, "the late one asked for no GPU"
