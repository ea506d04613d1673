"""The completions servers a backend asks: which one serves each model, each request sent to it, its failures read.

A server may serve one model only (vLLM does): a backend then takes several servers' URLs, and asks each model of the
server that lists it, checked once per connection: the server must tokenize a probe text as the model's tokenizer here
does. A server's failure says what to do; a refusal of too many log-probabilities says how many it allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus

from lookahead.backends.base import BackendError
from lookahead.backends.server.client import TIMEOUT_SECONDS, Client, Refused, Unreachable
from lookahead.backends.server.server import Server
from lookahead.backends.server.wire import COMPLETIONS, AskLogprobs, TooManyLogprobs, by_index
from lookahead.models import load_tokenizer

PROBE_TEXT = "Probe: the tokenizer's ids for this text, ünïcödé and 12345, must match the server's."


@dataclass(frozen=True)
class Served:
    """A model a server serves, as it describes it, and that server."""

    name: str
    max_model_len: int
    client: Client


def server_urls(urls: str) -> list[str]:
    """The URLs in `urls`, comma-separated; ValueError for none."""
    listed = [url.strip() for url in urls.split(",") if url.strip()]
    if not listed:
        raise ValueError(f"no server URL in {urls!r}: give one, or several comma-separated")
    return listed


class Connections:
    """The completions servers at `url` (…/v1; several comma-separated, each asked of the models it lists) that
    `server` describes, and the requests sent to them."""

    server: Server

    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.clients = [Client(each, self.server.name, timeout) for each in server_urls(url)]
        self.url = ",".join(client.url for client in self.clients)
        self.logprobs = self.server.logprobs  # lowered to the smallest cap of the servers that refuse more
        self._served: dict[str, Served] = {}  # checked models; forgotten when a server drops out

    def _model(self, name: str) -> Served:
        """The description of `name` by the server that serves it, found and checked once per connection."""
        known = self._served.get(name)  # one read: another thread may clear the dict at any time
        if known is None:
            known = self._served[name] = self._find(name)
        return known

    def _find(self, name: str) -> Served:
        """`name` as the first server that lists it describes it: that server must tokenize it as here."""
        listed = {}
        for client in self.clients:
            with self._answering(client, None):
                served = client.models()
            if name in served:
                break
            listed[client.url] = sorted(served)
        else:
            raise BackendError(self._unserved(name, listed))
        probe = load_tokenizer(name)(PROBE_TEXT, add_special_tokens=False)["input_ids"]
        if self.server.tokenize(partial(self._send, client), name, PROBE_TEXT) != probe:
            raise BackendError(
                f"{client.name} serves a model named {name!r} whose tokenizer is not {name!r}'s here: a "
                "different model is behind that URL."
            )
        return Served(name, self.server.context_window(served[name]), client)

    def _unserved(self, name: str, listed: dict[str, list[str]]) -> str:
        """Which models each server serves (`listed`, by URL), none of them `name`, and what to do."""
        option = self.server.model_name_option
        if len(listed) == 1:
            (url, models), = listed.items()
            return (f"The {self.server.name} server at {url} serves {models}, not {name!r}: start it with "
                    f"{option} {name!r}, or choose one of its models.")
        servers = "; ".join(f"the one at {url} serves {models}" for url, models in listed.items())
        return (f"No {self.server.name} server serves {name!r} ({servers}): start one with {option} {name!r}, or "
                "choose one of their models.")

    def _with_logprobs(self, body: dict, ask: AskLogprobs, width: int, needed: int) -> dict:
        """POST /completions asking `width` log-probabilities per position (`ask` names the fields); a server that
        allows fewer, but at least `needed`, is asked for what it allows, and that cap is kept."""
        try:
            return self._complete({**body, **ask(width)})
        except TooManyLogprobs as refusal:
            if refusal.allowed < max(needed, 1):
                option = self.server.logprobs_option
                raise BackendError(
                    f"{self._model(body['model']).client.name} returns at most {refusal.allowed} log-probabilities "
                    f"per token (its {option}), and this needs {needed}: ask for at most {refusal.allowed}, or restart "
                    f"the server with {option} {max(needed, self.server.logprobs)}."
                ) from None
            self.logprobs = refusal.allowed
            return self._complete({**body, **ask(max(needed, refusal.allowed))})

    def _complete(self, body: dict) -> dict:
        tokenizer = load_tokenizer(body["model"])
        return self.server.answer(body, self._post(COMPLETIONS, self.server.request(body, tokenizer)), tokenizer)

    def _complete_each(self, body: dict) -> list[dict]:
        """The choice for each of the body's prompts, in their order: in one request where the server takes several."""
        if self.server.batches:
            return by_index(self._complete(body))
        return [self._complete({**body, "prompt": prompt})["choices"][0] for prompt in body["prompt"]]

    def _post(self, path: str, body: dict, root: bool = False) -> dict:
        """POST to the server of the body's model; `root`: the path is the server's own (not under /v1)."""
        return self._send(self._model(body["model"]).client, path, body, root)

    def _send(self, client: Client, path: str, body: dict, root: bool = False) -> dict:
        with self._answering(client, body):
            return client.post(path, body, root)

    def _stream(self, body: dict) -> Iterator[dict]:
        client = self._model(body["model"]).client
        tokenizer = load_tokenizer(body["model"])
        with self._answering(client, body):
            for chunk in client.stream(COMPLETIONS, self.server.request(body, tokenizer)):
                yield self.server.answer(body, chunk, tokenizer)

    @contextmanager
    def _answering(self, client: Client, body: dict | None) -> Iterator[None]:
        """The client's failures as this backend reads them: the models are checked again after any (a server may
        come back serving another), and a refusal of too many log-probabilities or of the model says so."""
        try:
            yield
        except Unreachable:
            self._served.clear()
            raise
        except Refused as refusal:
            allowed = self.server.logprobs_cap(refusal.message)
            if allowed is not None:
                raise TooManyLogprobs(allowed) from None
            if refusal.status == HTTPStatus.NOT_FOUND and body and "model" in body:
                self._served.clear()
                raise BackendError(
                    f"{client.name} no longer serves {body['model']!r} (it says: {refusal.message}); a "
                    "different model is behind that URL."
                ) from None
            raise
