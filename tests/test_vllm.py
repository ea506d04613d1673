"""The vLLM backend against a real vLLM server (the CPU build) serving the embedded model.

Every public function must give the in-process backend's dicts (itself tested against transformers):
the same keys, the same tokens, probabilities within 1e-4; where the server's top-N log-probabilities
can't give p_final exactly, the result says so. And the faults a writer meets (the server down,
restarting, stalled, serving another model, allowing too few log-probabilities) come back as clear
errors, in the API and on the page, after which the app recovers.

vLLM serves one model per process: comparing two models takes a second server, serving the embedded model cut to
its first layers (the same tokenizer, other predictions), started once for the tests that need it.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import custom_llm_inference as inference
from api_client import Client
from conftest import TINY_LLAMA_DIR
from lookahead.backends.server import connections
from lookahead.backends.server import vllm as vllm_backend
from lookahead.models import EMBEDDED_MODEL, embedded_model_dir
from server_process import in_process
from vllm_server import Proxy, VLLMServer

TOLERANCE = 1e-4  # logprobs: vLLM's CPU kernels against transformers' (the issue measured 3e-5)
TEXTS = [
    "The old lighthouse keeper climbed the stairs and",
    "def fibonacci(n):\n    if n < 2:\n        return",
    "Ünïcödé, emoji 🦜 and numbers 12345 make",
]
CONVERSATION = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "What is 2+2?"}]


SHORT_LAYERS = 8  # of the embedded model's 30: the second model, for compare


@contextmanager
def vllm_server(model_dir: str | Path, name: str, *extra: str) -> Iterator[VLLMServer]:
    """A vLLM server serving `model_dir` as `name` (`extra`: its options), started for these tests and stopped after
    them."""
    python = os.environ.get("VLLM_PYTHON")
    if not python:
        pytest.skip("VLLM_PYTHON is not set: scripts/test.sh makes vLLM's venv (requirements-vllm.txt) and sets it")
    started = VLLMServer(python, model_dir, name, *extra)
    try:
        started.wait()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def server_port(embedded):
    """The port of a vLLM server started for these tests (or of one already running: VLLM_TEST_PORT)."""
    if os.environ.get("VLLM_TEST_PORT"):
        yield int(os.environ["VLLM_TEST_PORT"])
        return
    with vllm_server(embedded_model_dir(), EMBEDDED_MODEL) as started:
        yield started.port


@pytest.fixture(scope="module")
def proxy(server_port):
    """The server behind a proxy that the fault tests take down and bring back."""
    in_front = Proxy(server_port)
    yield in_front
    in_front.down()


@pytest.fixture
def vllm(proxy):
    proxy.up()
    backend = inference.use_backend("vllm", proxy.url)
    yield backend
    inference.use_backend()


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> str:
    """The embedded model's first SHORT_LAYERS layers, saved with its tokenizer: a folder both backends load by its
    path, which is also the name the second server serves it by."""
    path = tmp_path_factory.mktemp("short-model")
    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir())
    model.model.layers = model.model.layers[:SHORT_LAYERS]
    model.config.num_hidden_layers = SHORT_LAYERS
    model.save_pretrained(path)
    inference.load_model()[1].save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def second_server(short_model):
    """Uncompiled (--enforce-eager): it starts in half a minute, where compiling takes a minute more."""
    with vllm_server(short_model, short_model, "--enforce-eager") as started:
        yield started


@pytest.fixture
def two_servers(proxy, second_server):
    """The backend over both servers: the embedded model's (behind the proxy) and the short model's."""
    proxy.up()
    backend = inference.use_backend("vllm", f"{proxy.url}, {second_server.url}")
    yield backend
    inference.use_backend()



def assert_same_distribution(ours: list[dict], theirs: list[dict]) -> None:
    assert [set(e) for e in ours] == [set(e) for e in theirs]
    assert [e["token_id"] for e in ours] == [e["token_id"] for e in theirs]
    for a, b in zip(ours, theirs):
        assert a["token"] == b["token"] and a["kept"] == b["kept"]
        assert abs(a["logprob"] - b["logprob"]) < TOLERANCE
        assert abs(a["p_final"] - b["p_final"]) < TOLERANCE


def assert_same_scores(ours: dict, theirs: dict) -> None:
    """`ours` through vLLM, `theirs` in-process."""
    assert set(ours) == set(theirs)
    assert [(t["token_id"], t["start"], t["end"]) for t in ours["tokens"]] == [
        (t["token_id"], t["start"], t["end"]) for t in theirs["tokens"]
    ]
    for a, b in zip(ours["tokens"], theirs["tokens"]):
        if a["prob"] is None:
            assert b["prob"] is None
            continue
        assert abs(a["logprob"] - b["logprob"]) < TOLERANCE and a["rank"] == b["rank"]
        assert [x["token_id"] for x in a["alternatives"]] == [x["token_id"] for x in b["alternatives"]] or all(
            abs(x["prob"] - y["prob"]) < TOLERANCE for x, y in zip(a["alternatives"], b["alternatives"])
        )  # a near-tie may swap
        assert a["entropy"] <= b["entropy"] + TOLERANCE, "the server's top tokens give a lower bound"


@pytest.mark.parametrize("text", TEXTS)
def test_every_function_answers_as_in_process(vllm, text):
    with in_process():
        expected = (inference.lookahead(text, 5, 4, session="reference"), inference.next_token_distribution(text, 10),
                    inference.token_probabilities(text, 5, session="reference"), inference.generate(text, 24, "greedy"))
    branches, distribution, scores, continuation = (
        inference.lookahead(text, 5, 4, session="v"), inference.next_token_distribution(text, 10),
        inference.token_probabilities(text, 5, session="v"), inference.generate(text, 24),
    )
    assert set(branches) == set(expected[0]) and branches["device"] == f"vllm {vllm.url}"
    assert [b["token_ids"] for b in branches["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
    assert [(b["text"], b["ends"]) for b in branches["branches"]] == [
        (b["text"], b["ends"]) for b in expected[0]["branches"]]
    assert branches["notice"] == "" and branches["context_tokens"] == expected[0]["context_tokens"]
    assert_same_distribution(branches["distribution"], expected[0]["distribution"])
    assert_same_distribution(distribution, expected[1])
    assert_same_scores(scores, expected[2])
    assert set(continuation) == set(expected[3])
    assert continuation["token_ids"] == expected[3]["token_ids"] and continuation["text"] == expected[3]["text"]
    assert "".join(continuation["token_texts"]) == continuation["text"]


@pytest.mark.parametrize("reply", ["", "2+2 equals"])
def test_chat_mode_answers_as_in_process(vllm, reply):
    with in_process():
        expected = (inference.lookahead(reply, 5, 3, messages=CONVERSATION),
                    inference.token_probabilities(reply or "4", messages=CONVERSATION))
    ours = (inference.lookahead(reply, 5, 3, messages=CONVERSATION),
            inference.token_probabilities(reply or "4", messages=CONVERSATION))
    assert [b["token_ids"] for b in ours[0]["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
    assert [b["ends"] for b in ours[0]["branches"]] == [b["ends"] for b in expected[0]["branches"]]
    assert_same_distribution(ours[0]["distribution"], expected[0]["distribution"])
    assert_same_scores(ours[1], expected[1])


@pytest.mark.parametrize("settings", [
    dict(temperature=0.7, top_k=10),  # the kept tokens all came back
    dict(temperature=1.5, top_k=20, top_p=0.9),
    dict(top_p=0.6),  # at temperature 1 the top tokens' own mass decides what top_p keeps
])
def test_p_final_is_exact_where_the_servers_top_tokens_decide_it(vllm, settings):
    text = "The capital of France is"
    with in_process():
        expected = inference.lookahead(text, 5, 3, **settings)
    ours = inference.lookahead(text, 5, 3, **settings)
    assert ours["notice"] == ""
    assert_same_distribution(ours["distribution"], expected["distribution"])
    assert [b["token_ids"] for b in ours["branches"]] == [b["token_ids"] for b in expected["branches"]]


@pytest.mark.parametrize("settings", [
    dict(min_p=0.25),
    dict(temperature=0.7, min_p=0.2),
    dict(temperature=1.3, top_k=40, min_p=0.35),
])
def test_min_p_is_exact_where_it_cuts_the_least_likely_of_the_servers_top_tokens(vllm, settings):
    """Every token past the top 20 is less likely than the 20th, so min_p cuts them all where it cuts that one:
    here the top 20 hold under half the mass, the 20th a fifth as likely as the first."""
    text = TEXTS[0]
    with in_process():
        expected = (
            inference.lookahead(text, 5, 3, **settings),
            inference.next_token_distribution(text, 10, **settings),
        )
    ours = inference.lookahead(text, 5, 3, **settings)
    assert ours["notice"] == ""
    assert_same_distribution(ours["distribution"], expected[0]["distribution"])
    assert_same_distribution(inference.next_token_distribution(text, 10, **settings), expected[1])
    assert [b["token_ids"] for b in ours["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
    assert "approximate" in inference.lookahead(text, 5, 3, min_p=0.05)["notice"], "it keeps tokens past the top 20"


def test_the_server_draws_sampled_branches_under_min_p_unless_top_p_comes_first(vllm, monkeypatch):
    """vLLM applies min_p before top_p, transformers (and so p_final) after: with both, its draws are refused."""
    sent = []
    post = vllm._post
    monkeypatch.setattr(vllm, "_post", lambda path, body, root=False: sent.append(body) or post(path, body, root))
    inference.lookahead(TEXTS[0], 4, 5, temperature=1.2, min_p=0.2, branch_mode="sample", seed=7)
    assert any(body["min_p"] == 0.2 and body["temperature"] == 1.2 for body in sent if body.get("max_tokens") == 4)
    with pytest.raises(ValueError, match="min_p before top_p"):
        inference.lookahead(TEXTS[0], 4, 5, top_p=0.9, min_p=0.2, branch_mode="sample", seed=7)


def test_a_repetition_penalty_continues_each_branch_as_in_process_and_says_p_final_is_approximate(vllm):
    """The penalty needs logits and the server returns log-probabilities: p_final, and so which tokens
    start the branches, is approximate; the server applies the same penalty to each continuation."""
    text = "The cat sat on the mat. The cat sat on the mat. The cat"
    with in_process():
        expected = inference.lookahead(text, 10, 6, repetition_penalty=1.5)
    ours = inference.lookahead(text, 10, 6, repetition_penalty=1.5)
    assert "approximate" in ours["notice"]
    by_first = {b["token_ids"][0]: b["token_ids"] for b in expected["branches"]}
    shared = [b["token_ids"] for b in ours["branches"] if b["token_ids"][0] in by_first]
    assert len(shared) >= 5 and all(branch == by_first[branch[0]] for branch in shared)
    in_process_p = {e["token_id"]: e["logprob"] for e in expected["distribution"]}
    assert all(abs(e["logprob"] - in_process_p[e["token_id"]]) < TOLERANCE
               for e in ours["distribution"] if e["token_id"] in in_process_p), "p_base stays exact"


def test_healed_whitespace_ranks_as_in_process_with_probabilities_from_the_top_tokens(vllm):
    text = "The old lighthouse keeper climbed the "
    with in_process():
        expected = inference.lookahead(text, 5, 3)
    ours = inference.lookahead(text, 5, 3)
    assert ours["healed_whitespace"] == " " and "approximate" in ours["notice"]
    assert [b["token_ids"] for b in ours["branches"]] == [b["token_ids"] for b in expected["branches"]]
    assert [b["text"] for b in ours["branches"]] == [b["text"] for b in expected["branches"]]
    ours_p, expected_p = ours["distribution"][0]["prob"], expected["distribution"][0]["prob"]
    assert expected_p - TOLERANCE <= ours_p <= 1, "renormalised over fewer allowed tokens: an upper bound"


def test_sampled_branches_are_drawn_by_the_server_reproducibly(vllm):
    text = "Once upon a time"
    first = inference.lookahead(text, 4, 5, temperature=1.2, top_k=40, branch_mode="sample", seed=7)
    again = inference.lookahead(text, 4, 5, temperature=1.2, top_k=40, branch_mode="sample", seed=7)
    assert [b["token_ids"] for b in first["branches"]] == [b["token_ids"] for b in again["branches"]]
    assert [b["token_ids"][0] for b in first["branches"]] == [e["token_id"] for e in first["distribution"][:4]]


def test_the_servers_prefix_cache_is_reported_as_reused_tokens(vllm):
    text = TEXTS[0] * 30  # ~300 tokens: the CPU build caches whole blocks of 128 tokens
    inference.lookahead(text, 3, 2)
    again = inference.lookahead(text + " then", 3, 2)
    assert 0 < again["reused_tokens"] <= again["context_tokens"]


LETTER = (
    "Dear Dr. Ellison, I am writing to tell you in confidence that I have decided to leave the Harwick project at "
    "the end of March. The reasons are personal, and I would ask you not to share this with the rest of the team "
    "until I have spoken to Margaret myself. I have told no one else, not even my brother, and I would like it to "
    "stay that way for now. My account number for the final payment is 4417 2290 0186, at the Northbridge branch, "
    "and the handover notes are in the grey folder on the second shelf of my office."
)


def test_one_visitors_text_cannot_be_probed_through_the_servers_prefix_cache(vllm):
    """A guess at another session's text reuses nothing, right or wrong; a session still reuses its own."""
    right = LETTER[: 3 * len(LETTER) // 4]  # the letter's first three quarters: two blocks of 32 tokens and more
    wrong = "Hello Dr. Ellison, " + right.split(",", 1)[1]
    assert len(inference.load_model()[1](right)["input_ids"]) > 64
    for task in (lambda text, session: inference.lookahead(text, 3, 2, session=session),
                 lambda text, session: inference.token_probabilities(text, 3, session=session)):
        task(LETTER, "victim")
        assert task(wrong, "attacker")["reused_tokens"] == 0
        assert task(right, "attacker")["reused_tokens"] == 0, "the right guess is not told apart from a wrong one"
    again = inference.lookahead(LETTER + " Yours,", 3, 2, session="victim")
    assert again["reused_tokens"] >= 64, "the session's own follow-up reuses its prefix"
    assert inference.lookahead(LETTER, 3, 2, session="another visitor")["reused_tokens"] == 0


def test_every_request_carries_the_sessions_salt(vllm, monkeypatch):
    sent = []
    post, stream = vllm._post, vllm._stream
    monkeypatch.setattr(vllm, "_post", lambda path, body, root=False: sent.append(body) or post(path, body, root))
    monkeypatch.setattr(vllm, "_stream", lambda body: sent.append(body) or stream(body))
    inference.lookahead(TEXTS[0], 3, 2, session="s")
    inference.next_token_distribution(TEXTS[0], session="s")
    inference.token_probabilities(TEXTS[0], session="s")
    inference.generate(TEXTS[0], 3, session="s")
    completions = [body for body in sent if "max_tokens" in body]
    assert len(completions) >= 4
    assert {body["cache_salt"] for body in completions} == {vllm_backend.session_salt(EMBEDDED_MODEL, "s")}
    assert vllm_backend.session_salt(EMBEDDED_MODEL, "s") != vllm_backend.session_salt(EMBEDDED_MODEL, "t")
    assert vllm_backend.session_salt(EMBEDDED_MODEL, "s", b"another secret") != vllm_backend.session_salt(
        EMBEDDED_MODEL, "s"), "unguessable without the app's secret"


def test_calls_from_several_threads_while_the_adapter_forgets_its_model_check(vllm):
    """The adapter's shared state (the checked models, cleared after any fault) under threads: same answers."""
    import random
    import time

    from threads import SECONDS, run_threads, until

    alone = {text: inference.lookahead(text, 3, 2, session=f"alone {i}") for i, text in enumerate(TEXTS)}

    def caller(rng: random.Random) -> None:
        for _ in range(4):
            text = rng.choice(TEXTS)
            result = inference.lookahead(text, 3, 2, session=f"thread {rng.random()}")
            assert [b["token_ids"] for b in result["branches"]] == [b["token_ids"] for b in alone[text]["branches"]]
            assert_same_distribution(result["distribution"], alone[text]["distribution"])

    def forgetter(rng: random.Random) -> None:
        going = until(SECONDS)
        while going():
            vllm._served.clear()
            time.sleep(rng.random() * 0.02)

    run_threads([caller, caller, caller, forgetter])


def test_text_longer_than_the_servers_context_keeps_its_end(vllm):
    text = "All work and no play makes Jack a dull boy. " * 500  # ~5.5k tokens; the server's window: 4096
    result = inference.lookahead(text, 3, 2)
    assert result["truncated_tokens"] > 0 and result["context_tokens"] <= 4096 - 2
    assert "only its last" in result["notice"]


def test_more_log_probabilities_than_the_server_allows_is_a_clear_error(vllm):
    with pytest.raises(inference.BackendError, match=r"at most 20 log-probabilities.*--max-logprobs 50"):
        inference.next_token_distribution(TEXTS[0], 50)
    vllm.logprobs = 64  # asking for more than the server allows, but more than needed: it learns the cap
    assert len(inference.next_token_distribution(TEXTS[0], 5)) == 5 and vllm.logprobs == 20


def test_a_model_the_server_does_not_serve_is_a_clear_error(vllm, tiny_model_dirs):
    with pytest.raises(inference.BackendError, match=r"serves \['SmolLM2-135M-Instruct \(embedded\)'\], not"):
        inference.lookahead(TEXTS[0], model_name=TINY_LLAMA_DIR)


def test_a_different_tokenizer_behind_the_url_is_a_clear_error(vllm, monkeypatch):
    class OtherTokenizer:
        def __call__(self, text, **options):
            return {"input_ids": [1, 2, 3]}

    monkeypatch.setattr(connections, "load_tokenizer", lambda name: OtherTokenizer())
    with pytest.raises(inference.BackendError, match="a different model is behind that URL"):
        inference.token_probabilities(TEXTS[0])


def test_a_server_down_or_stalled_is_a_clear_error_and_it_recovers(vllm, proxy):
    proxy.down()
    for call in (lambda: inference.lookahead(TEXTS[0]), lambda: inference.generate(TEXTS[0], 4)):
        with pytest.raises(inference.BackendError, match="cannot be reached.*may be down or restarting"):
            call()
    proxy.stall()
    slow = inference.use_backend("vllm", proxy.url)
    slow.clients[0].timeout = 2
    with pytest.raises(inference.BackendError, match="did not answer within 2 s"):
        inference.token_probabilities(TEXTS[0])
    proxy.up()
    assert inference.lookahead(TEXTS[0])["branches"]


def test_the_app_serves_through_vllm_and_shows_faults_as_messages(vllm, proxy, app_url):
    client = Client(app_url, verbose=False)
    result = client.predict(TEXTS[0], 3, 2, api_name="/lookahead")
    assert result["device"] == f"vllm {proxy.url}"
    proxy.down()
    with pytest.raises(Exception, match="cannot be reached"):
        client.predict(TEXTS[0], 3, 2, api_name="/lookahead")
    proxy.up()
    again = client.predict(TEXTS[0], 3, 2, api_name="/lookahead")
    assert again["branches"] == result["branches"] and again["distribution"] == result["distribution"]


def test_the_page_keeps_the_text_while_the_server_is_down_and_recovers(vllm, proxy, app_url):
    from playwright.sync_api import expect, sync_playwright

    from browser import CHROMIUM, CHROMIUM_ARGS, expect_suggestions_for, type_text  # skips without chromium

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(app_url)
        expect(page.locator("#branch-0")).to_be_visible(timeout=60_000)
        expect(page.locator("#status")).to_contain_text(f"vllm {proxy.url}")
        proxy.down()
        text = "The server went down while I wrote"
        type_text(page, text)
        expect(page.get_by_text("cannot be reached").first).to_be_visible(timeout=30_000)
        expect(page.locator("#text textarea")).to_have_value(text)
        proxy.up()
        page.locator("#text textarea").press("Control+Enter")
        expect_suggestions_for(page, text)
        browser.close()


def test_app_py_takes_the_backend_on_its_command_line():
    run = subprocess.run([sys.executable, "app.py", "--backend", "vllm"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert run.returncode == 2 and "needs the server's URL" in run.stderr


def test_constraints_answer_as_in_process(vllm):
    """The valid tokens are computed here with the same grammar and sent as allowed_token_ids: branches and
    continuations are the in-process ones; p_final is renormalised over the valid tokens that came back."""
    text = "Is the sea blue? Answer: "
    choice = {"type": "choice", "value": ["yes", "no", "maybe"]}
    date = {"type": "regex", "value": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}
    with in_process():
        expected = (inference.lookahead(text, 3, 4, constraint=choice, session="reference"),
                    inference.next_token_distribution(text, 10, constraint=choice),
                    inference.generate("The date of the moon landing: ", 12, "greedy", constraint=date),
                    inference.lookahead("The letter was dated ", 3, 3, constraint=date, session="reference"))
    ours = inference.lookahead(text, 3, 4, constraint=choice, session="v")
    assert [b["token_ids"] for b in ours["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
    assert [(b["text"], b["ends"]) for b in ours["branches"]] == [
        (b["text"], b["ends"]) for b in expected[0]["branches"]]
    assert "approximate" in ours["notice"]
    valid = [e["token_id"] for e in inference.next_token_distribution(text, 10, constraint=choice) if e["valid"]]
    assert valid and valid == [e["token_id"] for e in expected[1] if e["valid"]][: len(valid)]
    continued = inference.generate("The date of the moon landing: ", 12, constraint=date)
    assert continued["token_ids"] == expected[2]["token_ids"]
    forced = inference.lookahead(
        "The letter was dated ", 3, 3, constraint=date, session="v"
    )  # only a space may come first
    assert forced["forced"] == expected[3]["forced"] and forced["forced"] is not None
    assert [b["token_ids"] for b in forced["branches"]] == [b["token_ids"] for b in expected[3]["branches"]]


def test_a_caret_answers_as_in_process_with_fit_from_the_servers_prompt_logprobs(vllm):
    """At a caret the server is asked about the text before it (its prefix cache keeps the whole text), and each
    branch's fit comes from the server's log-probabilities of the text after it, with and without the branch."""
    text = "The keeper climbed the stairs and looked out over the sea, where the boats were coming home."
    caret = text.index(" looked")
    with in_process():
        expected = (
            inference.lookahead(text, 4, 3, session="reference", caret=caret),
            inference.next_token_distribution(text, 10, caret=caret),
            inference.generate(text, 12, "greedy", caret=caret),
        )
    ours = inference.lookahead(text, 4, 3, session="v", caret=caret)
    assert [b["token_ids"] for b in ours["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
    assert [b["fit"] for b in ours["branches"]] == pytest.approx([b["fit"] for b in expected[0]["branches"]],
                                                                 abs=TOLERANCE)
    assert all(b["fit"] is not None for b in ours["branches"])
    assert_same_distribution(inference.next_token_distribution(text, 10, caret=caret), expected[1])
    assert inference.generate(text, 12, caret=caret)["token_ids"] == expected[2]["token_ids"]
    assert all(b["fit"] is None for b in inference.lookahead(text, 4, 3, session="v", caret=len(text))["branches"])


def test_each_model_is_asked_of_the_server_that_serves_it(two_servers, proxy, second_server, short_model,
                                                          monkeypatch):
    sent = []
    answering = two_servers._answering
    monkeypatch.setattr(two_servers, "_answering", lambda client, body: sent.append(
        (client.url, (body or {}).get("model"))) or answering(client, body))
    text = TEXTS[1]
    for name, url in ((short_model, second_server.url), (EMBEDDED_MODEL, proxy.url)):
        with in_process():
            expected = (inference.lookahead(text, 5, 4, model_name=name, session="reference"),
                        inference.token_probabilities(text, 5, model_name=name, session="reference"),
                        inference.generate(text, 12, "greedy", model_name=name))
        ours = (
            inference.lookahead(text, 5, 4, model_name=name),
            inference.token_probabilities(text, 5, model_name=name),
            inference.generate(text, 12, model_name=name),
        )
        assert ours[0]["device"] == f"vllm {url}"
        assert [b["token_ids"] for b in ours[0]["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
        assert_same_distribution(ours[0]["distribution"], expected[0]["distribution"])
        assert_same_scores(ours[1], expected[1])
        assert ours[2]["token_ids"] == expected[2]["token_ids"]
        assert {to for to, model in sent if model == name} == {url}
    assert {model for _, model in sent} == {None, EMBEDDED_MODEL, short_model}, "each listed once, then routed"


def test_a_model_neither_server_serves_is_a_clear_error_naming_what_each_serves(two_servers, tiny_model_dirs):
    served = (r"No vLLM server serves .*\(the one at .* serves \['SmolLM2-135M-Instruct \(embedded\)'\]; the one at "
              r".* serves \['.*short-model.*'\]\)")
    with pytest.raises(inference.BackendError, match=served):
        inference.lookahead(TEXTS[0], model_name=TINY_LLAMA_DIR)
    with pytest.raises(inference.BackendError, match=served):
        inference.compare(TEXTS[0], [EMBEDDED_MODEL, TINY_LLAMA_DIR])


def full_logprobs(name: str, text: str) -> np.ndarray:
    """Each position's next-token log-probabilities (tokens, vocab), float64, from one full forward."""
    model, tokenizer = inference.load_model(name)
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([tokenizer(text)["input_ids"]])).logits[0].double(), -1).numpy()


def coarse_js(p: np.ndarray, q: np.ndarray, top_p: set[int], top_q: set[int]) -> float:
    """The divergence in bits of two distributions (log) coarse-grained onto the tokens in both top sets and the
    rest, from its definition."""
    cells = sorted(top_p & top_q)
    a, b = (np.append(np.exp(d[cells]), 1 - np.exp(d[cells]).sum()) for d in (p, q))
    mean = (a + b) / 2
    kl = lambda x: float(np.sum(np.where(x > 0, x * np.log2(np.where(x > 0, x, 1) / mean), 0.0)))  # noqa: E731
    return (kl(a) + kl(b)) / 2


TEXT = "The keeper climbed the stairs and looked out over the sea, where the boats were coming home"


@pytest.mark.parametrize(("caret", "n_branches"),
                         [(None, 3), (TEXT.index(" looked"), 0), (TEXT.index(" looked") - 2, 3)],
                         ids=["end", "between tokens, no branches", "in a word"])
def test_compare_through_two_servers_answers_as_in_process_with_the_divergence_over_the_top_n(
        two_servers, short_model, caret, n_branches):
    """Each token's log-probability and rank under both models, both next-token distributions and both models'
    branches as in-process; the divergence from each model's top 20 only: the whole distributions' (as transformers
    gives them) coarse-grained onto the tokens in both top 20 and the rest, at most the in-process divergence."""
    names = [EMBEDDED_MODEL, short_model]
    with in_process():
        expected = inference.compare(TEXT, names, n_branches=n_branches, depth=3, caret=caret, session="reference")
    ours = inference.compare(TEXT, names, n_branches=n_branches, depth=3, caret=caret, session="v")
    assert set(ours) == set(expected) and ours["per"] == expected["per"] == "token"
    assert ours["js_over"] == 20 and expected["js_over"] is None
    for m in range(2):
        assert_same_distribution(ours["next"]["distributions"][m], expected["next"]["distributions"][m])
        assert [b["token_ids"] for b in ours["branches"][m]] == [b["token_ids"] for b in expected["branches"][m]]
        assert len(ours["branches"][m]) == n_branches
    tokens, reference = ours["tokens"], expected["tokens"]
    assert [(t["token_id"], t["start"], t["end"]) for t in tokens] == [
        (t["token_id"], t["start"], t["end"]) for t in reference]
    assert [t["token_id"] for t in tokens] == inference.load_model()[1](TEXT)["input_ids"]
    full = [full_logprobs(name, TEXT) for name in names]
    tops = [[{e["token_id"] for e in t["alternatives"]} if t["alternatives"] else set()
             for t in inference.token_probabilities(TEXT, 20, model_name=name)["tokens"]] for name in names]
    assert tokens[0]["js"] is None and tokens[0]["top"] is None
    for i, (token, theirs) in enumerate(zip(tokens[1:], reference[1:]), 1):
        # float32's rounding grows with the log-probability: the short model gives some tokens -50
        assert token["logprob"] == pytest.approx(theirs["logprob"], rel=1e-5, abs=TOLERANCE)
        assert token["rank"] == theirs["rank"]
        assert token["top"] == theirs["top"]
        assert token["js"] <= theirs["js"] + 1e-4
        assert token["js"] == pytest.approx(coarse_js(full[0][i - 1], full[1][i - 1], tops[0][i], tops[1][i]),
                                            abs=1e-4)
    before = TEXT if caret is None else TEXT[:caret]
    assert ours["next"]["js"] <= expected["next"]["js"] + 1e-4
    if caret == TEXT.index(" looked"):  # the whole text's divergence before that token
        assert ours["next"]["js"] == next(t["js"] for t in tokens if t["start"] == caret)
    else:
        at_caret = [full_logprobs(name, before)[-1] for name in names]
        top = [
            {e["token_id"] for e in inference.next_token_distribution(before, 20, model_name=name)} for name in names
        ]
        assert ours["next"]["js"] == pytest.approx(coarse_js(*at_caret, *top), abs=1e-4)


def test_compare_reads_both_models_over_the_context_both_hold(two_servers, short_model):
    """Where one server's context holds less of the text (here 64 tokens), the divergence is over the window both
    hold (as in-process over the smaller of the two contexts); each model's log-probabilities stay its own."""
    names = [EMBEDDED_MODEL, short_model]
    whole = inference.compare(LETTER, names, n_branches=0)
    two_servers._served[short_model] = replace(two_servers._model(short_model), max_model_len=64)
    short = inference.compare(LETTER, names, n_branches=0)
    compared = [t["js"] is not None for t in short["tokens"]]
    assert compared == [t["logprob"][1] is not None for t in short["tokens"]], "where the short context scores"
    assert 0 < sum(compared) < 64 and compared == sorted(compared), "the text's last tokens"
    assert [t["logprob"][0] for t in short["tokens"]] == pytest.approx([t["logprob"][0] for t in whole["tokens"]],
                                                                       abs=TOLERANCE)
