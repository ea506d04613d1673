"""A vLLM server as the engine: vLLM's own request fields and answers, for the completions backend.

vLLM batches many writers' requests on GPUs (continuous batching), keeps their prefixes' KV cache
(automatic prefix caching), and spreads a model over GPUs and nodes. `completions.py` maps every request
onto its OpenAI-compatible API; this module says what is vLLM's own:
- ids back as ids (`return_token_ids`, `return_tokens_as_token_ids`: "token_id:N" keys), the prompt's
  log-probabilities (`prompt_logprobs`), the tokens a constraint allows (`allowed_token_ids`), the end of a
  continuation (`stop_token_ids`), and the model's window (`max_model_len`) and tokenizer (/tokenize);
- the top N asked: vLLM's default `--max-logprobs`, its error when asked more, and that it returns them
  "raw" (before any penalty or temperature: p_base);
- that it counts presence and frequency penalties over the tokens it generated only (docs/deploy-vllm.md),
  and applies min_p before top_p, where transformers applies it after.

One server serves every visitor, and its prefix cache would let one learn what another wrote: a guess
at someone's text comes back with more cached tokens (and sooner) when it is right. So every request
carries a `cache_salt` derived from the session and a secret only this app holds (`session_salt`):
the server reuses cached blocks only between requests with the same salt, so a session reuses its own
text and nobody else's, and `reused_tokens` counts only what the session itself wrote.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Collection

from lookahead.backends.base import Capabilities
from lookahead.backends.server.completions import CompletionsBackend
from lookahead.backends.server.server import Post, Server
from lookahead.backends.server.top_n import Position, Returned
from lookahead.sampling import Sampling

# Log-probabilities per position asked of the server: vLLM's default --max-logprobs. More (a server
# started with --max-logprobs N, and LOOKAHEAD_SERVER_LOGPROBS=N here) narrows what is approximate.
LOGPROBS = int(os.environ.get("LOOKAHEAD_SERVER_LOGPROBS") or 20)
# The key of every session's cache salt. Several app processes in front of one server may share it
# (LOOKAHEAD_CACHE_SALT_SECRET); else each process draws its own, and a restart starts every session cold.
SALT_SECRET = os.environ.get("LOOKAHEAD_CACHE_SALT_SECRET", "").encode() or secrets.token_bytes(32)
TOKEN_ID = "token_id:"  # how `return_tokens_as_token_ids` writes a top log-probability's token
CAP = "max allowed:"  # in vLLM's refusal of more log-probabilities than its --max-logprobs
MIN_P_BEFORE_TOP_P = (
    "sampled branches with both min_p and top_p: the vLLM server applies min_p before top_p, and p_final "
    "applies it after (as transformers does), so its draws would not follow p_final: turn one of them off, "
    "take greedy branches, or use the in-process backend"
)


def session_salt(model: str, session: str, secret: bytes = SALT_SECRET) -> str:
    """The server's cache salt for one session's requests: unguessable without the secret, the same for every
    request of that session (and model), so the session's own follow-ups still reuse its prefix."""
    return hmac.new(secret, f"{model}\0{session}".encode(), hashlib.sha256).hexdigest()


class VLLM(Server):
    """vLLM's OpenAI-compatible server (`vllm serve`, or the CPU build's api_server module)."""

    name = "vLLM"
    device = "vllm"
    logprobs = LOGPROBS
    logprobs_option = "--max-logprobs"
    model_name_option = "--served-model-name"
    fields = {"ignore_eos": True, "skip_special_tokens": False, "return_token_ids": True,
              "return_tokens_as_token_ids": True}

    def draw_refusal(self, sampling: Sampling) -> str | None:
        return MIN_P_BEFORE_TOP_P if sampling.min_p > 0.0 and sampling.top_p < 1.0 else None

    def session_fields(self, model: str, session: str) -> dict:
        return {"cache_salt": session_salt(model, session)}

    def token_ids(self, choice: dict) -> list[int]:
        return choice.get("token_ids") or []

    def top_logprobs(self, choice: dict) -> dict[int, float]:
        top = choice["logprobs"]["top_logprobs"][0]
        return {int(token.removeprefix(TOKEN_ID)): logprob for token, logprob in top.items()}

    def prompt_logprobs(self, n: int) -> dict:
        return {"prompt_logprobs": n}

    def prompt_positions(self, choice: dict) -> list[Position | None]:
        return [None if position is None else {int(i): Returned(e["logprob"], e["rank"]) for i, e in position.items()}
                for position in choice["prompt_logprobs"]]

    def allowed_tokens(self, ids: list[int]) -> dict:
        return {"allowed_token_ids": ids}

    def stop_fields(self, stops: Collection[int]) -> dict:
        return {"ignore_eos": False, "stop_token_ids": sorted(stops)}

    def logprobs_cap(self, message: str) -> int | None:
        if CAP not in message or "logprobs" not in message:
            return None
        return int(message.rsplit(CAP, 1)[1].split()[0].strip(".,"))

    def context_window(self, model: dict) -> int:
        return int(model["max_model_len"])

    def tokenize(self, post: Post, model: str, text: str) -> list[int]:
        return post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False}, True)["tokens"]


class VLLMBackend(CompletionsBackend):
    """Answers the public functions' checked requests through a vLLM server at `url` (…/v1), or several (one per
    model, as vLLM serves one: their URLs comma-separated)."""

    server = VLLM()
    # The server keeps each session's text in its prefix cache and batches the calls that arrive together; it
    # returns log-probabilities only, so no "why?".
    capabilities = Capabilities(precomputation=False, partial_reads=False, cheap_fit=True, attribution=False,
                                prompt_scores=True, batching=True)
