"""What a completions server is: the fields it takes beyond the OpenAI API's, where its answers hold what the backend
reads, and what it cannot do as transformers does.

The completions backend (`completions.py`) is the same for every server; a `Server` description is what differs from
one to another, one small module per server (`vllm.py`, `llama_cpp.py`, `openai.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping

from transformers import PreTrainedTokenizerBase

from lookahead.backends.server.top_n import Position
from lookahead.sampling import Sampling

GREEDY_TEMPERATURE = 0.0  # asks a server for its likeliest token
UNABLE = "{task} needs {need}; the {server} server {lacks} (the {backend} backend): ask it of the in-process backend"
Post = Callable[[str, dict, bool], dict]  # POST (path, body, root): the answer's JSON


class Server(ABC):
    """One kind of completions server: what it calls the fields the OpenAI API lacks, where its answers hold what
    this backend reads, and what it cannot do as transformers does. A second server is one subclass of this."""

    name: str  # as messages name it: "The {name} server at URL"
    device: str  # the results' `device`: "{device} URL"
    logprobs: int  # log-probabilities asked per position: the most the server allows by default
    logprobs_option: str  # the server's option raising that cap, for the error when it is too low
    model_name_option: str  # the server's option naming the model as the app knows it
    fields: Mapping[str, object]  # sent with every completion: token ids back, end-of-sequence ignored
    renamed: Mapping[str, str] = {}  # a `Sampling` field's name -> the server's, where they differ
    batches: bool = True  # one request may hold several prompts (else: a request per prompt)
    takes_ids: bool = True  # prompts go as token ids (else as text, which the server tokenizes again)

    def request(self, body: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        """`body` (its prompts token ids) as this server takes it."""
        return body

    def answer(self, body: dict, answer: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
        """The server's `answer` to `body` (or one streamed chunk of it) as this description's readers take it."""
        return answer

    def sampling_fields(self, sampling: Sampling, sample: bool) -> dict:
        """One request field per `Sampling` field, every one (the server's defaults would replace an omitted one);
        greedy unless `sample`: the best token by p_final is the best after the penalties, which temperature and
        the filters keep."""
        settings = sampling.as_dict() if sample else {**sampling.as_dict(), "temperature": GREEDY_TEMPERATURE}
        return {self.renamed.get(name, name): value for name, value in settings.items()}

    def draw_refusal(self, sampling: Sampling) -> str | None:
        """Why the server cannot draw tokens from p_final under `sampling` (its filters in another order), if so."""
        return None

    def cached_tokens(self, answer: dict) -> int:
        """Prompt tokens the server found in its prefix cache (OpenAI's usage.prompt_tokens_details)."""
        details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
        return int(details.get("cached_tokens") or 0)

    @abstractmethod
    def session_fields(self, model: str, session: str) -> dict:
        """The fields that make the server's prefix cache reuse only `session`'s own requests."""

    @abstractmethod
    def token_ids(self, choice: dict) -> list[int]:
        """The ids of the tokens a choice (or a streamed chunk's choice) generated."""

    @abstractmethod
    def top_logprobs(self, choice: dict) -> dict[int, float]:
        """The first generated position's top log-probabilities, by token id: raw (the model's softmax, before any
        penalty or temperature), as p_base is."""

    def chosen_logprob(self, choice: dict) -> float:
        """The first generated token's own log-probability, raw, whatever its rank (OpenAI's `token_logprobs`)."""
        return choice["logprobs"]["token_logprobs"][0]

    def ceiling(self, choice: dict) -> float | None:
        """The log-probability no token left out of `top_logprobs` exceeds, where the server left out some of its
        likeliest (it named them by texts several tokens share); None: the least likely returned token's."""
        return None

    @abstractmethod
    def prompt_logprobs(self, n: int) -> dict:
        """The request fields asking the top `n` log-probabilities of every prompt position (and its own token's)."""

    @abstractmethod
    def prompt_positions(self, choice: dict) -> list[Position | None]:
        """Those log-probabilities, one position per prompt token (None: the first, with nothing before it)."""

    @abstractmethod
    def allowed_tokens(self, ids: list[int]) -> dict:
        """The request fields restricting the next token to `ids`."""

    @abstractmethod
    def stop_fields(self, stops: Collection[int]) -> dict:
        """The request fields that end a generation at any of `stops`."""

    @abstractmethod
    def logprobs_cap(self, message: str) -> int | None:
        """The most log-probabilities the server allows, if its error `message` refuses more."""

    @abstractmethod
    def context_window(self, model: dict) -> int:
        """The model's context window in tokens, from the server's /models entry for it."""

    @abstractmethod
    def tokenize(self, post: Post, model: str, text: str) -> list[int]:
        """The server's token ids for `text` (no special tokens), asked through `post`."""
