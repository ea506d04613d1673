"""llama.cpp as the engine: llama.cpp's own `llama-server`, or llama-cpp-python's server, for the completions backend.

Both serve a GGUF file (a quantised model) on OpenAI-compatible routes; which one answers is asked at start (only
llama-server has GET /props). What each gives, and so what the app offers through it:

| | llama-server | llama-cpp-python's server |
|---|---|---|
| prompts | token ids | text, tokenized again by the server |
| top log-probabilities | `n_probs`, by token id | `logprobs`, by token text (read as in `openai.py`) |
| the prompt's own (heatmap) | none | `echo`, at the token before each token (`echo_offset` 1; 0 after a leading BOS) |
| constraints | the allowed tokens, as `logit_bias` | the same |
| sampling | in transformers' order (`samplers`) | top-k, top-p, min-p, then temperature |
| its window | /props | its refusal of a longer prompt |

llama-cpp-python lists a text several tokens write once (a lone space, and a space with a piece of a character), where
the likeliest of them ranks but with the least likely one's log-probability: the token that writes it whole is named
by it, at its own log-probability, asked apart (a request more, that token made the server's choice).

Both return raw log-probabilities (the model's softmax: p_base). llama-cpp-python sorts the whole vocabulary in
Python for each position it returns log-probabilities of (~30 ms a position on 2 cores): a heatmap of 1,000 tokens
takes half a minute, and a caret's fit (the text after it under each branch) is not offered.

Visitors: llama.cpp keeps one prompt's KV cache (per slot) and reuses its longest common prefix with the next
request, with no cache salt, so one visitor's guess at another's text would be read sooner, and by llama-server
reported as cached, when right. So the requests to one server take turns here (`Turn`), and the first request of
a session after another session's starts from nothing: llama-server's is sent with `cache_prompt: false` (on slot
0, which every request of the app uses), llama-cpp-python's follows a one-token request that shares no prefix
with any text. A session's own follow-ups still reuse its text. One app process per server: requests from
elsewhere take no turns here. (llama-cpp-python's `--cache` keeps earlier prompts' states apart from that one
cache, and would give them back: leave it off.)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial

from transformers import PreTrainedTokenizerBase

from lookahead.backends.base import BackendError, Capabilities
from lookahead.backends.server.client import TIMEOUT_SECONDS, Client, Refused
from lookahead.backends.server.connections import Served
from lookahead.backends.server.openai import (
    LOGPROBS,
    STOPPED,
    Named,
    OpenAICompatible,
    ProbingBackend,
    context_window,
    named_tokens,
)
from lookahead.backends.server.server import UNABLE, Post, Server
from lookahead.backends.server.top_n import Position
from lookahead.backends.server.vllm import session_salt
from lookahead.backends.server.wire import COMPLETIONS
from lookahead.models import load_tokenizer, stop_tokens
from lookahead.requests import CompareRequest
from lookahead.sampling import Sampling

ALLOWED_BIAS = 100.0  # added to an allowed token's logit (taken from one kept out): more than any gap between two
SESSION = "user"  # the OpenAI API's field naming the end user: the session's salt, to know whose turn it is
WINDOW = re.compile(r"maximum context length is (\d+) tokens")  # llama-cpp-python's refusal of a longer prompt
FILTERS_BEFORE_TEMPERATURE = (
    "sampled branches with a temperature and top_p or min_p: llama-cpp-python's server applies top_p and min_p "
    "before the temperature, and p_final after it (as transformers does), so its draws would not follow p_final: "
    "set the temperature to 1 or turn them off, take greedy branches, or use llama.cpp's llama-server"
)
NO_ECHO = "the {server} server does not score a prompt's tokens"


def allowed_bias(ids: list[int]) -> dict:
    """`logit_bias` lifting the allowed tokens above every other (the log-probabilities returned stay raw)."""
    return {"logit_bias": {str(i): ALLOWED_BIAS for i in ids}}


class LlamaCppPython(OpenAICompatible):
    """llama-cpp-python's server (`python -m llama_cpp.server --model FILE.gguf`)."""

    name = "llama-cpp-python"
    device = "llama-cpp"
    model_name_option = "--model_alias"
    renamed = {"repetition_penalty": "repeat_penalty"}

    def __init__(self) -> None:
        super().__init__(takes_ids=False, echo_offset=1)

    def offset(self, prompt: list[int], tokenizer: PreTrainedTokenizerBase) -> int:
        """It pairs the prompt's tokens with the rows of its logits from the first, a leading BOS left out: each
        token with the row that predicts the next one, or, after a leading BOS, its own."""
        return 0 if prompt[0] == tokenizer.bos_token_id else 1

    def request(self, body: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        """As text; where a generated token's top log-probabilities are asked, with the control tokens kept from being
        chosen: it returns none for a token it ends at (the log-probabilities it returns stay raw)."""
        sent = super().request(body, tokenizer)
        if body.get("logprobs") and not body.get("echo"):
            sent["logit_bias"] = {str(i): -ALLOWED_BIAS for i in named_tokens(tokenizer).controls}
        return sent

    def listed(self, top: Mapping[str, float], n: int) -> list[tuple[str, float]]:
        """As the server lists them, likeliest first: a text several tokens share stands where the likeliest of them
        ranks, with the log-probability of the least likely of them in its top (each is written in turn, the last
        stays), so they are not in the order of their log-probabilities."""
        return list(top.items())[:n]

    def read_top(self, top: Mapping[str, float], n: int, named: Named) -> dict:
        """Also the tokens that write whole a text of the top several tokens share ("shared", a lone space beside a
        space and a piece of a character): their own log-probabilities are asked apart (`own_logprob`)."""
        return {**super().read_top(top, n, named), "shared": named.wholes(self.listed(top, n))}

    def own_logprob(self, post: Post, body: dict, token: int, tokenizer: PreTrainedTokenizerBase) -> float:
        """`token`'s log-probability where `body` asks the next token's top: the server's answer gives the chosen
        token's own (raw), and `token` is made its choice, its logit lifted above every other."""
        forced = {**self.request(body, tokenizer), "max_tokens": 1, "logprobs": 0, **allowed_bias([token])}
        return post(COMPLETIONS, forced, False)["choices"][0]["logprobs"]["token_logprobs"][0]

    def draw_refusal(self, sampling: Sampling) -> str | None:
        filtered = sampling.top_p < 1.0 or sampling.min_p > 0.0
        return FILTERS_BEFORE_TEMPERATURE if sampling.temperature != 1.0 and filtered else None

    def session_fields(self, model: str, session: str) -> dict:
        return {SESSION: session_salt(model, session)}

    def allowed_tokens(self, ids: list[int]) -> dict:
        return allowed_bias(ids)

    def tokenize(self, post: Post, model: str, text: str) -> list[int]:
        return post("/extras/tokenize", {"model": model, "input": text}, True)["tokens"]

    def window(self, client: Client, model: str, most: int) -> int:
        """Its context window: its refusal of a prompt one token longer than the model's own names it (`most` where it
        takes that prompt, reading it)."""
        try:
            client.post(COMPLETIONS, {"model": model, "prompt": " a" * (most + 1), "max_tokens": 1}, False)
        except Refused as refusal:
            found = WINDOW.search(refusal.message)
            if found:
                return int(found.group(1))
            raise
        return most

    def fresh(self, send: Post, model: str) -> dict:
        """Starts the server's cache afresh: a one-token request (the end token) that no text starts with."""
        send(COMPLETIONS, {"model": model, "prompt": load_tokenizer(model).eos_token, "max_tokens": 1,
                           "temperature": 0.0}, False)
        return {}


class LlamaServer(Server):
    """llama.cpp's `llama-server -m FILE.gguf` (tested against its documented answers only: see docs)."""

    name = "llama.cpp"
    device = "llama-cpp"
    logprobs = LOGPROBS
    logprobs_option = "n_probs"
    model_name_option = "--alias"
    # Every request: token ids back (a top log-probability per generated token), transformers' sampling order,
    # penalties over the whole context, past the end token (branches are cut here), on slot 0 (`Turn`).
    fields = {"n_probs": 1, "samplers": ["penalties", "temperature", "top_k", "top_p", "min_p"],
              "repeat_last_n": -1, "ignore_eos": True, "cache_prompt": True, "id_slot": 0}
    renamed = {"repetition_penalty": "repeat_penalty"}
    batches = False

    def request(self, body: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        """The top log-probabilities asked as llama-server's `n_probs`."""
        asked = {key: value for key, value in body.items() if key != "logprobs"}
        return {**asked, "n_probs": body["logprobs"]} if body.get("logprobs") else asked

    def answer(self, body: dict, answer: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        return {**answer, "choices": [self.read_choice(body, choice) for choice in answer.get("choices", [])]}

    def read_choice(self, body: dict, choice: dict) -> dict:
        """Each generated token's id and, for the first, its top log-probabilities, from `logprobs.content`."""
        content = (choice.get("logprobs") or {}).get("content") or []
        ids = [token["id"] for token in content]
        stops = stop_tokens(body["model"])
        if choice.get("finish_reason") == STOPPED and not (ids and ids[-1] in stops):
            ids += stops[:1]  # ended by the model: its end token, whether listed or not
        n = body.get("logprobs") or 0
        top = {t["id"]: t["logprob"] for t in content[0].get("top_logprobs", [])[:n]} if content and n else {}
        return {**choice, "token_ids": ids, "top": top}

    def cached_tokens(self, answer: dict) -> int:
        return super().cached_tokens(answer) or int((answer.get("timings") or {}).get("cache_n") or 0)

    def session_fields(self, model: str, session: str) -> dict:
        return {SESSION: session_salt(model, session)}

    def token_ids(self, choice: dict) -> list[int]:
        return choice["token_ids"]

    def top_logprobs(self, choice: dict) -> dict[int, float]:
        return choice["top"]

    def chosen_logprob(self, choice: dict) -> float:
        return choice["logprobs"]["content"][0]["logprob"]

    def prompt_logprobs(self, n: int) -> dict:
        raise ValueError(NO_ECHO.format(server=self.name))

    def prompt_positions(self, choice: dict) -> list[Position | None]:
        raise ValueError(NO_ECHO.format(server=self.name))

    def allowed_tokens(self, ids: list[int]) -> dict:
        return allowed_bias(ids)

    def stop_fields(self, stops: Collection[int]) -> dict:
        return {"ignore_eos": False}

    def logprobs_cap(self, message: str) -> int | None:
        return None

    def context_window(self, model: dict) -> int:
        return context_window(model, model["id"])

    def tokenize(self, post: Post, model: str, text: str) -> list[int]:
        return post("/tokenize", {"content": text, "add_special": False}, True)["tokens"]

    def window(self, client: Client, model: str, most: int) -> int:
        """Its slots' context (/props), within the model's own."""
        return min(most, int(client.get("/props", root=True)["default_generation_settings"]["n_ctx"]))

    def fresh(self, send: Post, model: str) -> dict:
        """Its next request reuses nothing of slot 0's cache."""
        return {"cache_prompt": False}


@dataclass
class Turn:
    """One server's requests, one at a time, and the session whose text its cache holds."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    session: str | None = None


# What each server offers: neither batches (llama-cpp-python takes one request at a time, and every request goes
# to llama-server's slot 0), nor scores a caret's fit at a click's cost.
PYTHON_CAPABILITIES = Capabilities(precomputation=False, partial_reads=False, cheap_fit=True, attribution=False,
                                   prompt_scores=True, batching=False, fit=False)
SERVER_CAPABILITIES = replace(PYTHON_CAPABILITIES, prompt_scores=False)
Kind = tuple[LlamaCppPython | LlamaServer, Capabilities]


class LlamaCppBackend(ProbingBackend):
    """Answers the public functions' checked requests through llama.cpp servers at `url` (…/v1; several
    comma-separated, one model each), asking which server each is: all must be the same."""

    server: LlamaCppPython | LlamaServer = LlamaCppPython()
    defaults = PYTHON_CAPABILITIES

    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        super().__init__(url, timeout)
        self._turns = {client.url: Turn() for client in self.clients}

    def _probe(self, model: str | None) -> None:
        kinds = {type(kind[0]): kind for kind in map(self._kind, self.clients)}
        if len(kinds) > 1:
            raise BackendError(f"The servers at {self.url} are not all the same kind: "
                               f"{sorted(kind.name for kind, _ in kinds.values())}.")
        (self.server, self._found), = kinds.values()
        for client in self.clients:
            client.name = f"The {self.server.name} server at {client.url}"

    def compare(self, request: CompareRequest) -> dict:
        """Refused: it needs every position's top tokens, which llama-cpp-python's echo leaves out at the second token
        (and llama-server gives at none)."""
        raise ValueError(UNABLE.format(task="compare", need="each model's top tokens at every token of the text",
                                       server=self.server.name, lacks="does not give them at every token",
                                       backend=self.server.device))

    def _kind(self, client: Client) -> Kind:
        """Which server `client` reaches: only llama-server answers GET /props."""
        try:
            with self._answering(client, None):
                client.get("/props", root=True)
        except Refused:
            return LlamaCppPython(), PYTHON_CAPABILITIES
        return LlamaServer(), SERVER_CAPABILITIES

    def _find(self, name: str) -> Served:
        served = super()._find(name)  # which server it is, first
        with self._answering(served.client, None):
            window = self.server.window(served.client, name, served.max_model_len)
        return replace(served, max_model_len=window)

    def _complete(self, body: dict) -> dict:
        with self._turn(body) as fresh:
            sent = {**body, **fresh}
            answer = super()._complete(sent)
            return {**answer, "choices": [self._with_own_logprobs(sent, choice) for choice in answer["choices"]]}

    def _with_own_logprobs(self, body: dict, choice: dict) -> dict:
        """`choice` with the own log-probability of each token its top names by a text it shares ("shared"), which
        the server's top gives as any of theirs."""
        shared = choice.get("shared")
        if not shared:
            return choice
        post = partial(self._send, self._model(body["model"]).client)
        tokenizer = load_tokenizer(body["model"])
        own = {token: self.server.own_logprob(post, body, token, tokenizer) for token in shared}
        return {**choice, "top": {**choice["top"], **own}}

    def _stream(self, body: dict) -> Iterator[dict]:
        with self._turn(body) as fresh:
            yield from super()._stream({**body, **fresh})

    @contextmanager
    def _turn(self, body: dict) -> Iterator[Mapping[str, object]]:
        """The server's turn for this request: its cache started afresh where another session's text is in it."""
        client = self._model(body["model"]).client
        turn = self._turns[client.url]
        with turn.lock:
            fresh: Mapping[str, object] = {}
            if turn.session != body[SESSION]:
                fresh = self.server.fresh(partial(self._send, client), body["model"])
                turn.session = body[SESSION]
            yield fresh
