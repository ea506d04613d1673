"""The app's API through gradio_client, against the app served on 127.0.0.1."""

import concurrent.futures

import pytest

import custom_llm_inference as inference
from api_client import Client
from lookahead.models import EMBEDDED_MODEL_BF16
from reference import reference_scores


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_endpoints_are_named_and_listed(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/lookahead", "/next_token_distribution", "/generate"} <= set(endpoints)
    sampling = ["temperature", "top_k", "top_p", "repetition_penalty"]
    assert [p["parameter_name"] for p in endpoints["/lookahead"]["parameters"]] == [
        "text", "n_branches", "depth", *sampling, "branch_mode", "seed", "messages", "model_name",
        "presence_penalty", "frequency_penalty", "constraint", "stop", "fit_tokens", "caret", "min_p",
    ]
    assert [p["parameter_name"] for p in endpoints["/next_token_distribution"]["parameters"]] == [
        "text", "k", *sampling, "messages", "model_name", "presence_penalty", "frequency_penalty", "constraint",
        "caret", "min_p",
    ]
    assert [p["parameter_name"] for p in endpoints["/generate"]["parameters"]][-3:] == ["constraint", "stop", "caret"]
    assert [p["parameter_name"] for p in endpoints["/attribution"]["parameters"]] == [
        "text", "target_token_id", "method", "steps", "window", "messages", "model_name", "at_token"]


def test_min_p_reaches_the_engine_positional_callers_unchanged(client):
    text = "The old lighthouse keeper climbed the stairs and"
    remote = client.predict(text, 10, min_p=0.5, api_name="/next_token_distribution")
    local = inference.next_token_distribution(text, 10, min_p=0.5, session="local min_p")
    assert [(e["token_id"], e["kept"]) for e in remote] == [(e["token_id"], e["kept"]) for e in local]
    assert any(not e["kept"] for e in remote), "min_p cut the tail"
    positional = client.predict(text, 2, 2, 0.7, 40, 0.9, api_name="/lookahead")
    assert positional["sampling"] == {**inference.Sampling(temperature=0.7, top_k=40, top_p=0.9).as_dict()}


def test_compare_answers_as_the_engine(client, tiny_model_dirs):
    text = "The keeper lit the lamp and"
    models = ["", tiny_model_dirs["llama"]]  # empty: the default
    remote = client.predict(text, models, 5, 2, 2, min_p=0.05, api_name="/compare")
    local = inference.compare(text, [inference.default_model_name(), tiny_model_dirs["llama"]], 5, 2, 2, min_p=0.05,
                        session="local compare")
    assert remote["models"] == local["models"] and remote["per"] == "token"
    assert [t["js"] for t in remote["tokens"]] == pytest.approx([t["js"] for t in local["tokens"]], abs=1e-6)
    assert [[b["token_ids"] for b in side] for side in remote["branches"]] == [
        [b["token_ids"] for b in side] for side in local["branches"]]
    with pytest.raises(Exception, match="models"):
        client.predict(text, ["not a model the app offers", ""], api_name="/compare")


def test_constraints_penalties_and_stops_reach_the_engine(client):
    text = "Is the sea blue? Answer: "
    constraint = {"type": "choice", "value": ["yes", "no", "maybe"], "start": None}
    remote = client.predict(text, 3, 3, presence_penalty=0.5, frequency_penalty=0.2, constraint=constraint,
                            api_name="/lookahead")
    local = inference.lookahead(text, 3, 3, presence_penalty=0.5, frequency_penalty=0.2, constraint=constraint,
                          session="local")
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    assert {b["text"] for b in remote["branches"]} <= {"yes", "no", "maybe"}
    dist = client.predict(text, 20, constraint=constraint, api_name="/next_token_distribution")
    assert [d["valid"] for d in dist] == [
        d["valid"] for d in inference.next_token_distribution(text, 20, constraint=constraint)]
    out = client.predict("Once upon a time", 30, "greedy", stop=[","], api_name="/generate")
    assert out["stop"] == "," and "," not in out["text"]
    with pytest.raises(Exception, match="stops matching at character"):
        client.predict("abc def", constraint={"type": "regex", "value": "[0-9]+", "start": 3}, api_name="/lookahead")


def test_results_equal_the_engine(client):
    text = "The old lighthouse keeper climbed the stairs and"
    remote = client.predict(text, 4, 2, api_name="/lookahead")
    local = inference.lookahead(text, 4, 2, session="local")
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    assert [b["text"] for b in remote["branches"]] == [b["text"] for b in local["branches"]]
    dist = client.predict(text, 5, api_name="/next_token_distribution")
    assert [d["token_id"] for d in dist] == [d["token_id"] for d in local["distribution"][:5]]
    assert dist[0]["prob"] == pytest.approx(local["distribution"][0]["prob"], abs=1e-5)


def test_sampling_parameters_reach_the_engine(client):
    text = "The old lighthouse keeper climbed the stairs and"
    settings = {"temperature": 0.8, "top_k": 3, "top_p": 0.95, "repetition_penalty": 1.2}
    remote = client.predict(text, 4, 3, **settings, branch_mode="sample", seed=7, api_name="/lookahead")
    local = inference.lookahead(text, 4, 3, **settings, branch_mode="sample", seed=7, session="local")
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    assert remote["sampling"] == local["sampling"] and remote["seed"] == 7
    dist = client.predict(text, 6, 1.0, 3, api_name="/next_token_distribution")
    assert [d["kept"] for d in dist] == [True] * 3 + [False] * 3
    with pytest.raises(Exception, match="top_p"):
        client.predict(text, 6, 1.0, 0, 0.0, api_name="/next_token_distribution")


def test_defaults_apply_when_parameters_are_left_out(client):
    result = client.predict(text="Defaults please", api_name="/lookahead")
    assert len(result["branches"]) == 5 and all(len(b["token_ids"]) == 3 for b in result["branches"])
    assert len(client.predict(text="Defaults please", api_name="/next_token_distribution")) == 10


@pytest.mark.parametrize(
    "args, message",
    [
        (("", 5, 3), "empty"),
        (("hello", 100000, 3), "n_branches"),
        (("hello", 5, 0), "depth"),
        (("hello", -1, 3), "n_branches"),
    ],
)
def test_bad_input_gets_a_clear_error_and_the_server_keeps_serving(client, args, message):
    with pytest.raises(Exception, match=message):
        client.predict(*args, api_name="/lookahead")
    assert client.predict("Still serving", 2, 1, api_name="/lookahead")["branches"]


def test_huge_and_odd_text_gets_an_answer(client):
    huge = "All work and no play makes Jack a dull boy. " * 2000  # ~22k tokens, past the 8k context
    result = client.predict(huge, 2, 2, api_name="/lookahead")
    assert result["truncated_tokens"] > 0 and result["notice"]
    odd = client.predict("bell\x07 null\x00 escape\x1b[0m 🦜", 3, 2, api_name="/lookahead")
    assert len(odd["branches"]) == 3
    with pytest.raises(Exception, match="k must"):
        client.predict("hello", 0, api_name="/next_token_distribution")


def test_concurrent_clients_each_get_their_own_results(client):
    texts = [f"Client number {i} writes about {topic} and" for i, topic in enumerate(
        ["cats", "rockets", "bread", "rivers", "chess", "snow", "music", "glass"])]
    expected = {
        t: [b["token_ids"] for b in inference.lookahead(t, 3, 2, session="expected")["branches"]] for t in texts
    }

    def ask(text):
        own = Client(client.src, verbose=False)
        first = own.predict(text, 3, 2, api_name="/lookahead")
        again = own.predict(text, 3, 2, api_name="/lookahead")
        return text, first, again

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for text, first, again in pool.map(ask, texts):
            assert [b["token_ids"] for b in first["branches"]] == expected[text]
            assert [b["token_ids"] for b in again["branches"]] == expected[text]
            assert again["reused_tokens"] == first["context_tokens"] - 1, "a client's session cache is its own"


def test_generate_endpoint_equals_the_engine_and_rejects_bad_methods(client):
    text = "Monday, Tuesday, Wednesday,"
    remote = client.predict(text, 8, "lookahead", api_name="/generate")
    assert remote["token_ids"] == inference.generate(text, 8, "greedy")["token_ids"]
    assert remote["forward_passes"] == len(remote["accepted_per_pass"])
    with pytest.raises(Exception, match="method"):
        client.predict(text, 8, "beam", api_name="/generate")
    with pytest.raises(Exception, match="max_new_tokens"):
        client.predict(text, 100000, "greedy", api_name="/generate")


def test_token_probabilities_endpoint_equals_the_engine_and_refuses_bad_k(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert [p["parameter_name"] for p in endpoints["/token_probabilities"]["parameters"]] == [
        "text", "k", "messages", "model_name"]
    text = "The capital of France is Paris."
    remote = client.predict(text, 3, api_name="/token_probabilities")
    local = inference.token_probabilities(text, 3, session="local heatmap")
    assert [t["token_id"] for t in remote["tokens"]] == [t["token_id"] for t in local["tokens"]]
    assert [(t["start"], t["end"]) for t in remote["tokens"]] == [(t["start"], t["end"]) for t in local["tokens"]]
    rows = reference_scores(*inference.load_model(), text, 3)
    assert all(theirs["rank"] in row["ranks"] and ours["rank"] in row["ranks"]
               for theirs, ours, row in zip(remote["tokens"][1:], local["tokens"][1:], rows[1:]))
    assert remote["tokens"][0]["prob"] is None
    assert remote["tokens"][-1]["prob"] == pytest.approx(local["tokens"][-1]["prob"], abs=1e-5)
    with pytest.raises(Exception, match="k must be between 1 and 20"):
        client.predict(text, 50, api_name="/token_probabilities")



def test_chat_mode_through_the_endpoints_equals_the_engine(client):
    conversation = [{"role": "user", "content": "What is 2+2?"}]
    remote = client.predict("2+2 equals", 3, 2, messages=conversation, api_name="/lookahead")
    local = inference.lookahead("2+2 equals", 3, 2, session="local chat", messages=conversation)
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    heat = client.predict("2+2 equals", 3, conversation, api_name="/token_probabilities")
    assert [t["token"] for t in heat["tokens"]] == ["2", "+", "2", " equals"]
    reply = client.predict("", 16, "greedy", conversation, api_name="/generate")
    assert reply["token_ids"] == inference.generate("", 16, "greedy", messages=conversation)["token_ids"]
    with pytest.raises(Exception, match="role"):
        client.predict("x", 3, 2, messages=[{"role": "robot", "content": "hi"}], api_name="/lookahead")



def test_every_endpoint_takes_an_offered_model_and_refuses_others(client, tiny_model_dirs):
    tiny = tiny_model_dirs["llama"]
    assert inference.available_models() == [inference.default_model_name(), EMBEDDED_MODEL_BF16, tiny]
    text = "The old lighthouse keeper"
    remote = client.predict(text, 3, 2, model_name=tiny, api_name="/lookahead")
    assert remote["model"] == tiny
    local = inference.lookahead(text, 3, 2, session="local tiny", model_name=tiny)
    assert [b["token_ids"] for b in remote["branches"]] == [b["token_ids"] for b in local["branches"]]
    assert client.predict(text, 3, model_name=tiny, api_name="/token_probabilities")["model"] == tiny
    assert client.predict(text, 4, "greedy", model_name=tiny, api_name="/generate")["model"] == tiny
    futures = client.predict(text, 2, 0.05, model_name=tiny, api_name="/multiverse")
    assert futures["model"] == tiny and [n["token_id"] for n in futures["nodes"]] == [
        n["token_id"] for n in inference.multiverse(text, 2, 0.05, session="local tiny map", model_name=tiny)["nodes"]]
    for endpoint in ("/lookahead", "/next_token_distribution", "/token_probabilities", "/generate", "/multiverse"):
        with pytest.raises(Exception, match="model_name must be one of"):
            client.predict(text, model_name="gpt2", api_name=endpoint)


@pytest.mark.parametrize("api_name, kind", [("/attribution", "attribution"), ("/generate", "continuation")])
def test_a_call_its_client_cancels_stops_its_work_at_once_and_the_server_goes_idle(app_url, api_name, kind):
    """gradio_client's cancel() on a long "why?" or continuation: the job's end is signalled within a deadline (the
    scheduler no longer lists it), and the process then spends next to no CPU (it does not work on to the end)."""
    import time

    from lookahead.scheduler import scheduler

    text = "The lighthouse keeper climbed the stairs to light the lamp. " * 150  # ~1,800 tokens
    args = (text, None, "integrated_gradients", 64, 2048) if api_name == "/attribution" else (text, 1024, "greedy")
    job = Client(app_url, verbose=False).submit(*args, api_name=api_name)
    deadline = time.monotonic() + 120
    while not [j for j in scheduler.running() if j.kind == kind]:
        assert time.monotonic() < deadline and not job.done(), f"the job started ({job.done() and job.result()})"
        time.sleep(0.02)
    job.cancel()
    deadline = time.monotonic() + 30
    while [j for j in scheduler.running() if j.kind == kind]:
        assert time.monotonic() < deadline, "a cancelled call's job ends within a slice, not at its end"
        time.sleep(0.02)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(2.0)
    used = (time.process_time() - cpu) / (time.monotonic() - wall)
    assert used < 0.25, f"the server is idle after the cancel: {used:.2f} of a core"


def test_an_idle_app_spends_next_to_no_cpu(app_url):
    """Nothing asked and nothing left running: the process sleeps (gradio's queue looks for new events every
    IDLE_POLL_SECONDS, not every millisecond, which kept 7% of a core busy)."""
    import time

    from lookahead.scheduler import scheduler

    Client(app_url, verbose=False).predict("The idle app.", 2, 2, api_name="/lookahead")
    inference.backend().speculator.wait()
    deadline = time.monotonic() + 60
    while scheduler.running():
        assert time.monotonic() < deadline, f"no long job is left running: {scheduler.running()}"
        time.sleep(0.05)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(3.0)
    used = (time.process_time() - cpu) / (time.monotonic() - wall)
    assert used < 0.05, f"the idle app uses {used:.3f} of a core"
