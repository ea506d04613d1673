"""The llama.cpp backend against a real llama-cpp-python server serving the embedded model's GGUF file as it ships
(Q4_1), and against llama-server's documented answers (a fake, answered by transformers: no llama-server runs here).

The reference for what the server said is the server itself, asked directly; the reference for what the model means
is the in-process engine (itself tested against transformers) on the same weights dequantised to float32, which
llama.cpp's Q4_1 kernels (its activations rounded to 8 bits) match to within DEQUANTISED nats. So: the distribution
is the server's top log-probabilities, each branch its greedy continuation, the heatmap each token's own position
(the top choice agreeing with transformers' at almost every position, which a shift by one breaks), Continue its
greedy text; and one visitor learns nothing of another's text through its prefix cache.
"""

import json
import math
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import torch

import custom_llm_inference as inference
import test_vllm_multiverse as futures
from lookahead.backends.server.llama_cpp import LlamaCppPython, LlamaServer
from lookahead.backends.server.openai import Named, likeliest_first, named_tokens
from lookahead.models import EMBEDDED_MODEL, embedded_gguf_path, stop_tokens
from server_process import free_port, in_process
from ui.server_limits import NO_SCORES, NO_WHY, SHARED_CACHE, server_limits
from vllm_server import Proxy

DEQUANTISED = 0.5  # nats: Q4_1 through llama.cpp's kernels against float32 on the dequantised weights (< 0.4 measured)
SAME_MODEL = 1e-4  # the in-process engine against the same model in one full forward (float32's rounding)
SAME_SERVER = 1e-3  # one server's two readings of a position (the cached prefix read in another batch size)
AGREEING = 0.85  # of the positions scored, where the top choice is transformers' (0.9-1.0 measured; shifted: < 0.15)
TEXTS = [  # none ends in whitespace, which token healing would back up
    "The old lighthouse keeper climbed the stairs and looked out over the sea, where the boats were coming home. He "
    "had seen many storms in his years, but none like the one that was gathering now over the hills",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\n"
    "def factorial(n):\n    if n < 2:\n        return 1\n    return n * factorial(n - 1)",
    "Ünïcödé, emoji 🦜 and numbers 12345 make tokenizers work hard, and the model must still guess what comes "
    "next: «quotes», em dashes — and accents à la française",
]
SPACE = 216  # the lone space; llama-cpp-python writes 37 other tokens (a space and a piece of a character) as " " too
SPACE_BEFORE = [  # texts after which the model likely writes the lone space: the likeliest; the second, with a space
    "Q: What is 2+2?\nA:",  # and a piece of a character below it in the server's top
    "Ünïcödé, emoji 🦜 and numbers:",
]
MID_WORD = "The capital of Fra"  # its branches' first tokens join the word: the server reads " France"
CONVERSATION = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "What is 2+2?"}]
LETTER = (
    "Dear Dr. Ellison, I am writing to tell you in confidence that I have decided to leave the Harwick project at "
    "the end of March. The reasons are personal, and I would ask you not to share this with the rest of the team "
    "until I have spoken to Margaret myself. My account number for the final payment is 4417 2290 0186."
)
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit")
NEUTRAL = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}


@pytest.fixture(scope="module")
def llama_server(embedded):
    """A llama-cpp-python server started for these tests."""
    python = os.environ.get("LLAMA_CPP_PYTHON")
    if not python:
        pytest.skip("LLAMA_CPP_PYTHON is not set: scripts/test.sh makes llama-cpp-python's venv "
                    "(requirements-llama-cpp.txt) and sets it")
    from llama_cpp_server import LlamaCppServer

    started = LlamaCppServer(python, embedded_gguf_path(), EMBEDDED_MODEL, os.cpu_count() or 1)
    try:
        started.wait()
        yield started
    finally:
        started.stop()


@pytest.fixture
def llama(llama_server):
    backend = inference.use_backend("llama-cpp", llama_server.url)
    yield backend
    inference.use_backend()



def tokenizer():
    return inference.load_model()[1]


def ask(url: str, prompt: str, **fields) -> dict:
    """The server's own answer to `prompt` (text), greedy, asked directly."""
    body = {"model": EMBEDDED_MODEL, "prompt": prompt, "max_tokens": 1, **NEUTRAL, **fields}
    return httpx.post(f"{url}/completions", json=body, timeout=300).json()["choices"][0]


def token_text(token_id: int) -> str:
    return named_tokens(tokenizer()).texts[token_id]


def own_logprob(url: str, text: str, token: int) -> float:
    """The server's log-probability of `token` after `text`, asked directly: its answer gives its choice's own, and
    `token` is made its choice."""
    return ask(url, text, logprobs=0, logit_bias={str(token): 100.0})["logprobs"]["token_logprobs"][0]


@pytest.mark.parametrize("text", TEXTS)
def test_the_distribution_is_the_servers_top_logprobs_and_the_models(llama, llama_server, text):
    """Its top tokens but those it names by a text several tokens share, where none of them writes it whole (a lone
    space is the space, at its own log-probability; a space and a piece of a character are not told apart)."""
    ours = inference.next_token_distribution(text, 10, session="d")
    theirs = ask(llama_server.url, text, logprobs=20)["logprobs"]["top_logprobs"][0]
    named = named_tokens(tokenizer())
    own = {t: own_logprob(llama_server.url, text, named.whole[t]) for t in theirs if t in named.whole}
    listed = {t: own.get(t, logprob) for t, logprob in list(theirs.items())[:20] if t in named.ids or t in own}
    assert [token_text(e["token_id"]) for e in ours] == sorted(listed, key=listed.get, reverse=True)[:10]
    assert all(abs(e["logprob"] - listed[token_text(e["token_id"])]) < SAME_SERVER for e in ours)
    with in_process():
        reference = {e["token_id"]: e["logprob"] for e in inference.next_token_distribution(text, 50)}
    assert ours[0]["token_id"] == next(iter(reference))
    assert all(abs(e["logprob"] - reference[e["token_id"]]) < DEQUANTISED for e in ours[:5])


@pytest.mark.parametrize("text", SPACE_BEFORE)
def test_the_lone_space_is_in_the_distribution_at_its_own_log_probability(llama, llama_server, text):
    """The server writes the lone space and a space with a piece of a character alike, " ", and gives that text in
    its top the log-probability of the least likely of them there: the space is asked apart, and stands where the
    model puts it."""
    assert " " in list(ask(llama_server.url, text, logprobs=20)["logprobs"]["top_logprobs"][0])[:5]
    ours = inference.next_token_distribution(text, 5, session="s")
    with in_process():
        reference = inference.next_token_distribution(text, 5)
    mine, model = ({e["token_id"]: e["logprob"] for e in entries} for entries in (ours, reference))
    assert abs(mine[SPACE] - model[SPACE]) < DEQUANTISED
    assert abs(mine[SPACE] - own_logprob(llama_server.url, text, SPACE)) < SAME_SERVER
    assert ours[0]["token_id"] == reference[0]["token_id"]


@pytest.mark.parametrize("text", [TEXTS[0], TEXTS[1], MID_WORD])
def test_each_branch_is_the_servers_greedy_continuation_of_its_first_token(llama, llama_server, text):
    """Sent as text: the server continues the text with the first token appended, as it reads it (" Fra" + "nce" as
    " France"). The model's own greedy continuation of that text parts from it only at a near tie."""
    result = inference.lookahead(text, 5, 4, session="b")
    firsts = [e["token_id"] for e in result["distribution"][:5]]
    assert [b["token_ids"][0] for b in result["branches"]] == firsts
    ids = tokenizer()(text)["input_ids"]
    for branch, first in zip(result["branches"], firsts):
        prompt = tokenizer().decode([*ids, first])
        theirs = ask(llama_server.url, prompt, max_tokens=3)["text"]
        assert branch["text"] == tokenizer().decode([first]) + theirs
        assert_parts_at_a_near_tie(prompt, theirs)


def assert_parts_at_a_near_tie(prompt: str, theirs: str) -> None:
    """Where transformers' greedy continuation of `prompt` parts from `theirs`, the server's token is within
    2 x DEQUANTISED of transformers' choice there."""
    model, tokens = inference.load_model()
    ids = tokens(prompt)["input_ids"]
    server = tokens(theirs, add_special_tokens=False)["input_ids"]
    for token in server:
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)
        if int(logprobs.argmax()) != token:
            assert float(logprobs.max() - logprobs[token]) < 2 * DEQUANTISED
            return
        ids.append(token)


def scored_against_the_model(text: str, messages: list[dict] | None = None) -> tuple[int, int, int]:
    """(positions scored, of them where the top choice is the in-process engine's, positions) of `text`'s heatmap;
    each scored token's log-probability within DEQUANTISED of the engine's, and each unscored one either named by no
    one token's text or outside the model's top 5, and then said to be outside the N the server returned, less likely
    than each of them."""
    ours = inference.token_probabilities(text, 5, session="h", messages=messages)["tokens"]
    with in_process():
        reference = inference.token_probabilities(text, 20, session="h", messages=messages)["tokens"]
    named = named_tokens(tokenizer())
    scored = agreeing = 0
    for mine, model in zip(ours[1:], reference[1:]):
        assert mine["token_id"] == model["token_id"]
        if mine["logprob"] is None:
            nameable = named.texts[model["token_id"]] in named.ids
            assert not nameable or model["rank"] > 5 or mine is ours[1], (mine, model)
            if nameable and mine is not ours[1]:
                least = min(math.log(a["prob"]) for a in mine["alternatives"])
                assert mine.get("rank_above", 0) >= 1 and model["logprob"] < least + DEQUANTISED, (mine, model)
            continue
        scored += 1
        assert abs(mine["logprob"] - model["logprob"]) < DEQUANTISED, (mine, model)
        agreeing += mine["alternatives"][0]["token_id"] == model["alternatives"][0]["token_id"]
    return scored, agreeing, len(ours) - 1


@pytest.mark.parametrize("text", TEXTS)
def test_the_heatmap_scores_each_token_at_its_own_position(llama, llama_server, text):
    """llama-cpp-python's echo gives, at each token, the distribution that predicts the next one: read one along,
    the top choice is the model's at almost every position; read as it comes, at almost none."""
    scored, agreeing, positions = scored_against_the_model(text)
    assert agreeing >= AGREEING * scored and scored >= positions / 3
    ids = tokenizer()(text)["input_ids"]
    echoed = ask(llama_server.url, text, echo=True, logprobs=1)["logprobs"]["top_logprobs"][: len(ids)]
    with in_process():
        firsts = [t["alternatives"][0]["token"] for t in inference.token_probabilities(text, 1)["tokens"][1:]]
    as_it_comes = sum(top is not None and next(iter(top)) == first for top, first in zip(echoed[1:], firsts))
    assert as_it_comes < (1 - AGREEING) * positions


def test_the_heatmap_of_a_chat_reply_is_aligned_after_its_leading_bos(llama):
    """A chat prompt starts with the BOS token, which the echo leaves out: then each token's entry is its own."""
    scored, agreeing, _ = scored_against_the_model("Two plus two is four, and four plus four is eight.", CONVERSATION)
    assert scored >= 6 and agreeing >= AGREEING * scored


def test_continue_streams_the_servers_greedy_continuation(llama, llama_server):
    text = TEXTS[0]
    steps = list(inference.generate_stream(text, 24))
    assert len(steps) > 1 and steps[-1]["text"].startswith(steps[0]["text"])
    theirs = ask(llama_server.url, text, max_tokens=24)["text"]
    assert steps[-1]["text"] == theirs


def prefix_hits(server, call) -> list[int]:
    """The prefix-cache hits the server logged while `call` ran."""
    before = len(server.log_text())
    call()
    return [int(n) for n in PREFIX_HIT.findall(server.log_text()[before:])]


def test_one_visitors_text_cannot_be_probed_through_the_servers_prefix_cache(llama, llama_server):
    """A guess at the last visitor's text reuses nothing, right or wrong; a visitor's own follow-up reuses its text.
    Without the app's turns, a right guess would have reused all of it, and a wrong one nothing."""
    right = LETTER[: 3 * len(LETTER) // 4]
    wrong = "Hello Dr. Ellison, " + right.split(",", 1)[1]
    length = len(tokenizer()(right)["input_ids"])

    def distribution(text: str, session: str):
        return lambda: inference.next_token_distribution(text, 5, session=session)

    for guess in (right, wrong):
        inference.next_token_distribution(LETTER, 5, session="victim")
        assert max(prefix_hits(llama_server, distribution(guess, "attacker")), default=0) == 0
    inference.next_token_distribution(LETTER, 5, session="victim")
    assert max(prefix_hits(llama_server, distribution(LETTER + " Yours,", "victim"))) >= length
    raw = {}
    for name, guess in (("right", right), ("wrong", wrong)):
        ask(llama_server.url, LETTER)
        raw[name] = max(prefix_hits(llama_server, lambda: ask(llama_server.url, guess)), default=0)
    assert raw["right"] >= length - 2 and raw["wrong"] == 0


def test_visitors_at_once_take_turns_and_each_gets_its_own_answer(llama, llama_server):
    """Two visitors' calls at once, each on its own text: every answer is the one the server gives that text alone."""
    alone = {text: inference.next_token_distribution(text, 5, session="alone") for text in TEXTS[:2]}
    answers: dict[str, list] = {text: [] for text in alone}

    def visitor(text: str) -> None:
        for _ in range(3):
            answers[text].append(inference.next_token_distribution(text, 5, session=text[:10]))

    threads = [threading.Thread(target=visitor, args=(text,)) for text in alone]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for text, expected in alone.items():
        assert len(answers[text]) == 3
        for answer in answers[text]:
            assert [e["token_id"] for e in answer] == [e["token_id"] for e in expected]
            assert all(abs(a["logprob"] - b["logprob"]) < SAME_SERVER for a, b in zip(answer, expected))


def test_a_server_down_is_a_clear_error_and_it_recovers(llama_server):
    proxy = Proxy(llama_server.port)
    try:
        inference.use_backend("llama-cpp", proxy.url)
        assert inference.next_token_distribution(TEXTS[0], 3)
        proxy.down()
        with pytest.raises(inference.BackendError, match="llama-cpp-python server at .* cannot be reached"):
            inference.lookahead(TEXTS[0], 3, 2)
        proxy.up()
        assert inference.lookahead(TEXTS[0], 3, 2)["branches"]
    finally:
        inference.use_backend()
        proxy.down()


def test_constraints_are_sent_as_the_tokens_they_allow(llama):
    """The valid tokens are computed here, with the in-process grammar, and sent as a logit bias."""
    choice = {"type": "choice", "value": ["yes", "no", "maybe"]}
    branches = inference.lookahead("Is the sea blue? Answer: ", 3, 4, constraint=choice, session="c")["branches"]
    assert branches and all(b["text"] in choice["value"] and b["ends"] for b in branches)
    date = {"type": "regex", "value": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}
    assert re.fullmatch(
        date["value"], inference.generate("The date of the moon landing: ", 12, constraint=date)["text"]
    )


def test_what_the_server_cannot_give_is_refused_naming_the_backend(llama):
    with pytest.raises(ValueError, match=r"llama-cpp-python server .*\(the llama-cpp backend\)"):
        inference.compare(TEXTS[0], [EMBEDDED_MODEL, EMBEDDED_MODEL])
    with pytest.raises(ValueError, match="llama-cpp-python server returns log-probabilities only"):
        inference.attribution(TEXTS[0])
    with pytest.raises(ValueError, match=r"multiverse.*llama-cpp-python server takes text.*\(the llama-cpp backend\)"):
        inference.multiverse(TEXTS[0])
    with pytest.raises(ValueError, match=r'branch_mode "mass" .*top tokens only.*\(the llama-cpp backend\)'):
        inference.lookahead(TEXTS[0], 3, 3, branch_mode="mass")
    with pytest.raises(ValueError, match="before the temperature"):
        inference.lookahead(TEXTS[0], 3, 3, temperature=0.7, top_p=0.9, branch_mode="sample")
    text = "The keeper climbed the stairs and looked out over the sea."
    assert all(b["fit"] is None for b in inference.lookahead(text, 3, 2, caret=text.index(" looked"))["branches"])
    assert not llama.capabilities.fit and llama.capabilities.prompt_scores and llama.capabilities.visitors_apart


def test_the_openai_backend_finds_what_the_server_does(llama_server):
    """Probed, llama-cpp-python's server takes text and echoes each distribution a token early; read so, the generic
    backend gives the llama.cpp backend's answers, and refuses what the OpenAI API has no field for."""
    backend = inference.use_backend("openai", llama_server.url)
    try:
        assert not backend.capabilities.visitors_apart and backend.capabilities.prompt_scores
        assert (backend.server.takes_ids, backend.server.echo_offset) == (False, 1)
        text = TEXTS[0]
        ours = (inference.next_token_distribution(text, 10), inference.token_probabilities(text, 5)["tokens"])
        with pytest.raises(ValueError, match=r"\(the openai backend\)"):
            inference.lookahead(text, constraint={"type": "choice", "value": ["yes", "no"]})
        with pytest.raises(ValueError, match=r"takes text.*\(the openai backend\)"):
            inference.multiverse(text)
        limits = server_limits()
        assert limits.constrain["interactive"] is False and limits.notice == {
            "__type__": "update", "value": SHARED_CACHE, "visible": True}
        inference.use_backend("llama-cpp", llama_server.url)
        theirs = (inference.next_token_distribution(text, 10), inference.token_probabilities(text, 5)["tokens"])
    finally:
        inference.use_backend()
    assert [e["token_id"] for e in ours[0]] == [e["token_id"] for e in theirs[0]]
    assert [t["logprob"] is None for t in ours[1][2:]] == [t["logprob"] is None for t in theirs[1][2:]]


def test_a_text_several_tokens_share_names_none_of_them_and_hides_the_ranks_below_it():
    named = Named.of(("a", "b", "", "", "c", "d", "<|end|>"), frozenset({6}))
    top = {"a": -1.0, "\ufffd": -1.5, "c": -2.0, "b": -0.5}  # a piece of a character, written as U+FFFD
    assert named.ranked(top, 4) == {1: (-0.5, 1), 0: (-1.0, 2)}  # "c" may be outranked by the tokens "" hides
    listed = likeliest_first(top, 4)
    assert named.top(listed) == ({1: -0.5, 0: -1.0, 4: -2.0}, -1.0)  # every other token is at most as likely as "a"
    assert named.ranked({"a": -1.0, "b": -2.0, "d": -9.0}, 2) == {0: (-1.0, 1), 1: (-2.0, 2)}  # "d": added past N
    assert named.top([("", -0.1), ("a", -3.0)]) == ({0: -3.0}, 0.0)  # llama.cpp's end token: a text of many
    assert named.top([("<|end|>", -0.1), ("a", -3.0)]) == ({6: -0.1, 0: -3.0}, None)  # as others write it


def test_llama_cpp_python_lists_a_text_several_tokens_share_where_the_likeliest_of_them_ranks():
    """Its top holds such a text at the rank of the likeliest of its tokens and with the least likely one's
    log-probability: the others are at most as likely as the text listed above it, not the one above that value."""
    named = Named.of(("a", "b", "\ufffd", "\ufffd"))
    listed = LlamaCppPython().listed({"b": -0.5, "": -2.5, "a": -1.0}, 3)
    assert named.top(listed) == ({1: -0.5, 0: -1.0}, -0.5)


class FakeLlamaServer(ThreadingHTTPServer):
    """llama-server's routes as its documentation gives their answers (/props, /tokenize, /v1/models, and
    /v1/completions with `n_probs`, `logit_bias`, `ignore_eos`, streamed or not), answered by the in-process model:
    greedy, raw top log-probabilities. It keeps every completion request's body."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), FakeHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.bodies: list[dict] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def complete(self, body: dict) -> tuple[list[dict], str]:
        """Each generated token's `logprobs.content` entry, and the finish reason."""
        model, tokenizer = inference.load_model()
        ids, entries = list(body["prompt"]), []
        bias = torch.zeros(len(tokenizer))
        for token, value in (body.get("logit_bias") or {}).items():
            bias[int(token)] = value
        for _ in range(body["max_tokens"]):
            with torch.no_grad():
                logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
            chosen = int((logprobs + bias).argmax())
            if chosen in stop_tokens(EMBEDDED_MODEL) and not body.get("ignore_eos"):
                return entries, "stop"
            top = torch.topk(logprobs, body["n_probs"])
            entries.append({"id": chosen, "token": tokenizer.decode([chosen]), "bytes": [],
                            "logprob": float(logprobs[chosen]),
                            "top_logprobs": [{"id": int(i), "token": tokenizer.decode([int(i)]), "bytes": [],
                                              "logprob": float(lp)} for lp, i in zip(top.values, top.indices)]})
            ids.append(chosen)
        return entries, "length"


class FakeHandler(BaseHTTPRequestHandler):
    server: FakeLlamaServer

    def do_GET(self) -> None:
        if self.path == "/props":
            self.reply({"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1, "build_info": "b0-fake"})
        else:
            self.reply({"object": "list", "data": [{"id": EMBEDDED_MODEL, "object": "model", "owned_by": "llamacpp"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self.reply({"tokens": tokenizer()(body["content"], add_special_tokens=False)["input_ids"]})
            return
        self.server.bodies.append(body)
        entries, reason = self.server.complete(body)
        text = tokenizer().decode([e["id"] for e in entries])
        if not body.get("stream"):
            self.reply({"choices": [{"text": text, "index": 0, "logprobs": {"content": entries},
                                     "finish_reason": reason}], "object": "text_completion",
                        "timings": {"cache_n": 0}})
            return
        chunks = [{"choices": [{"text": e["token"], "index": 0, "logprobs": {"content": [e]},
                                "finish_reason": None}]} for e in entries]
        chunks.append({"choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": reason}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def reply(self, answer: dict) -> None:
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def fake_llama_server(embedded):
    server = FakeLlamaServer()
    yield server
    server.shutdown()


def test_llama_server_is_asked_in_its_own_fields_and_answers_as_in_process(fake_llama_server):
    """Token ids both ways, `n_probs`, transformers' sampling order, slot 0; its first request for a session after
    another's reuses none of the cache; no heatmap. Answered by the model itself, the answers are in-process's."""
    backend = inference.use_backend("llama-cpp", fake_llama_server.url)
    try:
        assert not backend.capabilities.prompt_scores and isinstance(backend.server, LlamaServer)
        text = TEXTS[0]
        ours = (inference.lookahead(text, 3, 3, session="one"), inference.generate(text, 8, session="one"),
                inference.lookahead("Is the sea blue? Answer: ", 3, 3, session="two",
                              constraint={"type": "choice", "value": ["yes", "no", "maybe"]}))
        with pytest.raises(ValueError, match=r"llama\.cpp server does not score the text you wrote"):
            inference.token_probabilities(text)
    finally:
        inference.use_backend()
    with in_process():
        expected = (inference.lookahead(text, 3, 3), inference.generate(text, 8, "greedy"),
                    inference.lookahead("Is the sea blue? Answer: ", 3, 3,
                                  constraint={"type": "choice", "value": ["yes", "no", "maybe"]}))
    assert [b["token_ids"] for b in ours[0]["branches"]] == [b["token_ids"] for b in expected[0]["branches"]]
    assert all(abs(a["logprob"] - b["logprob"]) < SAME_MODEL
               for a, b in zip(ours[0]["distribution"], expected[0]["distribution"]))
    assert ours[1]["token_ids"] == expected[1]["token_ids"]
    assert [b["text"] for b in ours[2]["branches"]] == [b["text"] for b in expected[2]["branches"]]
    bodies = fake_llama_server.bodies
    assert all(isinstance(b["prompt"][0], int) and b["id_slot"] == 0 and b["samplers"][:2] == ["penalties",
               "temperature"] for b in bodies)
    assert [b.get("cache_prompt") for b in bodies[:2]] == [False, True], "the first of a session starts afresh"
    switched = next(i for i, b in enumerate(bodies) if b["user"] != bodies[0]["user"])
    assert bodies[switched]["cache_prompt"] is False and bodies[0]["n_probs"] >= 10


def test_llama_server_grows_the_map_of_futures_as_in_process_from_its_top_n(fake_llama_server):
    """Each node asked alone (one token, its top N), its prompt the text's ids and its path; the writer's own tokens
    after a caret, far outside the top N, made the server's choice (`logit_bias`) so their own probabilities come
    back."""
    caret = {"text": futures.TEXT + futures.WRITER, "caret": len(futures.TEXT), "depth": 3, "cutoff": futures.CUTOFF}
    inference.use_backend("llama-cpp", fake_llama_server.url)
    try:
        sent = len(fake_llama_server.bodies)
        ours = (inference.multiverse(futures.TEXT, 3, futures.CUTOFF, session="m"),
                inference.multiverse(**caret, session="m"))
    finally:
        inference.use_backend()
    with in_process():
        expected = (inference.multiverse(futures.TEXT, 3, futures.CUTOFF), inference.multiverse(**caret))
    for mine, theirs in zip(ours, expected):
        futures.assert_same_map(mine, theirs, SAME_MODEL)
        assert mine["top_n"] == 20 and mine["device"] == f"llama-cpp {fake_llama_server.url}"
    assert [n["text"] for n in ours[1]["nodes"] if n["on_text"]] == ["", " ze", " zebras", futures.WRITER]
    text = tokenizer()(futures.TEXT)["input_ids"]
    bodies = fake_llama_server.bodies[sent:]
    assert all(b["prompt"][: len(text)] == text and b["max_tokens"] == 1 for b in bodies)
    assert sum("logit_bias" in b for b in bodies) == 3, "one forced request per token of the writer's"


def test_app_py_takes_the_llama_cpp_backend_on_its_command_line():
    run = subprocess.run([sys.executable, "app.py", "--backend", "llama-cpp"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert run.returncode == 2 and "needs the server's URL, e.g. http://localhost:8080/v1" in run.stderr


def test_a_llama_cpp_python_server_is_told_from_llama_server_by_its_routes(llama):
    assert isinstance(llama.server, LlamaCppPython) and llama.server.takes_ids is False


def test_the_page_greys_out_what_the_server_cannot_give_and_says_why(fake_llama_server):
    """Read when a page loads: in-process everything is offered; llama-server scores no text and explains nothing."""
    offered = server_limits()
    assert [offered.heatmap_on["interactive"], offered.why_method["interactive"], offered.constrain["interactive"],
            offered.notice["visible"]] == [True, True, True, False]
    inference.use_backend("llama-cpp", fake_llama_server.url)
    try:
        limited = server_limits()
    finally:
        inference.use_backend()
    assert (limited.heatmap_on["interactive"], limited.heatmap_on["info"]) == (False, NO_SCORES)
    assert (limited.why_method["interactive"], limited.why_method["info"]) == (False, NO_WHY)
    assert limited.constrain["interactive"] and not limited.notice["visible"]
