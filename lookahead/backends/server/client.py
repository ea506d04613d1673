"""An OpenAI-compatible server over HTTP: JSON requests, server-sent events, and every failure as a
`BackendError` that names the server and says what to do (the writer's text is kept; retrying is safe).

Nothing here knows which server it is or what the requests mean: that is the completions backend (`completions.py`,
`connections.py`, `wire.py`) and the server's own module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus

import httpx

from lookahead.backends.base import BackendError

# How long one request may wait for the server (a continuation: between two of its tokens). A GPU
# server answers in well under a second; past this it is down, hung, or overloaded, and the writer
# should hear so (LOOKAHEAD_SERVER_TIMEOUT overrides).
TIMEOUT_SECONDS = float(os.environ.get("LOOKAHEAD_SERVER_TIMEOUT") or 60)
EVENT = "data: "  # a server-sent event's line
LAST_EVENT = "data: [DONE]"
MESSAGE_CHARACTERS = 300  # of an error answer that is not JSON, quoted in the error


class Unreachable(BackendError):
    """The server did not answer: down, restarting, or too slow."""


class Refused(BackendError):
    """The server answered with an error: its status and its own message, kept for the caller to read."""

    def __init__(self, server: str, status: int, message: str) -> None:
        super().__init__(f"{server} refused the request ({status}): {message}")
        self.status, self.message = status, message


class Client:
    """JSON over HTTP to the server at `url` (…/v1), which messages call "The `kind` server at `url`"."""

    def __init__(self, url: str, kind: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.name = f"The {kind} server at {self.url}"
        self.http = httpx.Client(base_url=self.url, timeout=timeout)

    @property
    def timeout(self) -> float:
        """Seconds one request may wait for the server; setting it applies to the next request."""
        return self.http.timeout.read

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self.http.timeout = httpx.Timeout(seconds)

    def models(self) -> dict[str, dict]:
        """The server's description of each model it serves (GET /models), by the name requests give it."""
        return {model["id"]: model for model in self._request("GET", "/models")["data"]}

    def post(self, path: str, body: dict, root: bool = False) -> dict:
        """POST `body` to `path` under …/v1, or under the server's root (`root`: the server's own endpoints)."""
        return self._request("POST", self._path(path, root), body)

    def get(self, path: str, root: bool = False) -> dict:
        """GET `path` under …/v1, or under the server's root (`root`): what a server says of itself."""
        return self._request("GET", self._path(path, root))

    def stream(self, path: str, body: dict) -> Iterator[dict]:
        """POST `body` to `path` and yield each server-sent event's JSON as it comes, up to the last."""
        with self._reaching(), self.http.stream("POST", path, json=body) as response:
            if response.status_code != HTTPStatus.OK:
                response.read()
                raise self._refused(response)
            for line in response.iter_lines():
                if line.startswith(EVENT) and line != LAST_EVENT:
                    yield json.loads(line.removeprefix(EVENT))

    def _path(self, path: str, root: bool) -> str:
        return self.url.removesuffix("/v1") + path if root else path

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        with self._reaching():
            response = self.http.request(method, path, json=body)
        if response.status_code != HTTPStatus.OK:
            raise self._refused(response)
        return response.json()

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        """A failed connection as an `Unreachable` that says what happened and what to do."""
        try:
            yield
        except httpx.TimeoutException:
            raise Unreachable(
                f"{self.name} did not answer within {self.timeout:g} s (overloaded, or still starting); your text "
                "is kept: try again."
            ) from None
        except httpx.HTTPError as error:
            raise Unreachable(
                f"{self.name} cannot be reached ({type(error).__name__}): it may be down or restarting; your text "
                "is kept: try again when it is back."
            ) from None

    def _refused(self, response: httpx.Response) -> Refused:
        """The server's error answer, with its message as the server words it (OpenAI's error object, or not)."""
        try:
            error = response.json()
            message = str(error.get("error", {}).get("message") if isinstance(error.get("error"), dict)
                          else error.get("message"))
        except ValueError:
            message = response.text[:MESSAGE_CHARACTERS]
        return Refused(self.name, response.status_code, message)
