"""A vLLM server as the engine: every public function answered through its OpenAI-compatible API.

vLLM batches many writers' requests on GPUs (continuous batching), keeps their prefixes' KV cache
(automatic prefix caching), and spreads a model over GPUs and nodes: what one process can't.
This module is a thin adapter; the answers are built by `lookahead/results.py`, as in-process.

Exact by construction:
- Text is tokenized here, by the model's own tokenizer (and chat template), and sent as token ids;
  ids come back as ids (`return_token_ids`, `return_tokens_as_token_ids`): nothing is re-tokenized.
- Every sampling field is sent, since the server's defaults (from the model's generation_config)
  would replace omitted ones.
- The next-token distribution is the server's top-N log-probabilities, N = LOGPROBS (vLLM's default
  `--max-logprobs`; the server's own cap if lower): "raw", before any penalty or temperature, so p_base
  is the model's softmax. The k branches are one batched request of k prompts (text + first token,
  `max_tokens=depth-1`, greedy), stopped here at the model's end-of-sequence token as in-process.
  Per-token scores come from `prompt_logprobs`.

What the server does not return is the rest of the vocabulary, and p_final needs it unless the
kept tokens all came back (`next_token_logprobs` says which settings are exact). See docs/deploy-vllm.md.

One server serves every visitor, and its prefix cache would let one learn what another wrote: a guess
at someone's text comes back with more cached tokens (and sooner) when it is right. So every request
carries a `cache_salt` derived from the session and a secret only this app holds (`session_salt`):
the server reuses cached blocks only between requests with the same salt, so a session reuses its own
text and nobody else's, and `reused_tokens` counts only what the session itself wrote.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import torch
from transformers import PreTrainedTokenizerBase

from lookahead.backends.base import BackendError, Capabilities
from lookahead.chat import as_dicts
from lookahead.constraints import Guide, MatcherStore
from lookahead.context import follow_ids, read_prompt, read_scored_text
from lookahead.models import load_tokenizer
from lookahead.requests import (
    AttributionRequest,
    DistributionRequest,
    GenerateRequest,
    LookaheadRequest,
    ScoresRequest,
)
from lookahead.results import (
    DISTRIBUTION_ROWS,
    Continuation,
    branch_entries,
    context_info,
    distribution_entries,
    forced_entry,
    scores_result,
    stop_tokens,
)
from lookahead.sampling import PLAIN, Sampling
from lookahead.scheduler import scheduler
from lookahead.scoring import Scores, unscored

# Log-probabilities per position asked of the server: vLLM's default --max-logprobs. More (a server
# started with --max-logprobs N, and LOOKAHEAD_SERVER_LOGPROBS=N here) narrows what is approximate.
LOGPROBS = int(os.environ.get("LOOKAHEAD_SERVER_LOGPROBS") or 20)
# How long one request may wait for the server (a continuation: between two of its tokens). A GPU
# server answers in well under a second; past this it is down, hung, or overloaded, and the writer
# should hear so (LOOKAHEAD_SERVER_TIMEOUT overrides).
TIMEOUT_SECONDS = float(os.environ.get("LOOKAHEAD_SERVER_TIMEOUT") or 60)
PROBE_TEXT = "Probe: the tokenizer's ids for this text, ünïcödé and 12345, must match the server's."
# The key of every session's cache salt. Several app processes in front of one server may share it
# (LOOKAHEAD_CACHE_SALT_SECRET); else each process draws its own, and a restart starts every session cold.
SALT_SECRET = os.environ.get("LOOKAHEAD_CACHE_SALT_SECRET", "").encode() or secrets.token_bytes(32)
APPROXIMATE = (
    "p_final is approximate here: the vLLM server returns its top {n} tokens only, and these settings "
    "need the rest of the distribution (see docs/deploy-vllm.md)."
)


@dataclass(frozen=True)
class Served:
    """A model the server serves, as it describes it."""

    name: str
    max_model_len: int


@dataclass(frozen=True)
class Context:
    """What the model sees for one request, tokenized here."""

    tokenizer: PreTrainedTokenizerBase
    ids: list[int]
    dropped: int  # leading tokens left out of the server's context window
    healed: str  # trailing whitespace backed up by token healing
    model: str
    salt: str  # the session's cache salt
    allowed: torch.Tensor | None = None  # healing's mask over the first token
    guide: Guide | None = None  # a constraint's state after the text
    forced: tuple[int, ...] = ()  # the last of `ids`: the only tokens the constraint allowed after the text


def session_salt(model: str, session: str, secret: bytes = SALT_SECRET) -> str:
    """The server's cache salt for one session's requests: unguessable without the secret, the same for every
    request of that session (and model), so the session's own follow-ups still reuse its prefix."""
    return hmac.new(secret, f"{model}\0{session}".encode(), hashlib.sha256).hexdigest()


def next_token_logprobs(
    top: dict[int, float], vocab_size: int, context: list[int], sampling: Sampling, allowed: torch.Tensor | None,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(log p_base, log p_final, exact) over the vocabulary, from the server's top-N log-probabilities.

    Tokens that did not come back have -inf. p_base is exact for the tokens that came back. With
    healing it is renormalised over the allowed tokens among them (in-process: over all allowed
    tokens), so it is an upper bound. p_final applies transformers' processors as in-process, with
    the mass beyond the top N as one more token ("the rest"). That is exact when the plain settings
    need no processors, or with no repetition penalty and no healing when either top_k keeps at most
    N tokens or, at temperature 1 and no presence or frequency penalty, top_p cuts the rest. Under a
    constraint (`valid`), p_final is renormalised over the valid tokens that came back: approximate.
    Otherwise: the repetition penalty is applied to log-probabilities, not logits (it needs the
    logit's sign), a temperature scales the rest as one token, and top_p and the normalisation see
    the rest as one token.
    """
    logprobs = torch.full((vocab_size,), float("-inf"))
    known = {i: lp for i, lp in top.items() if i < vocab_size}
    logprobs[list(known)] = torch.tensor(list(known.values()))
    exact = allowed is None
    if allowed is not None:
        logprobs = logprobs.masked_fill(~allowed, float("-inf"))
        logprobs = logprobs - logprobs.logsumexp(0)
    if not sampling.processors() and valid is None:
        return logprobs, logprobs, exact
    rest_mass = max(0.0, 1.0 - float(logprobs.exp().sum()))
    within_top_k = 1 <= sampling.top_k <= len(known)
    scores = logprobs if within_top_k else torch.cat([logprobs, torch.tensor([math.log(rest_mass or 1e-45)])])
    if valid is not None:
        exact = False
        valid = (valid if within_top_k else torch.cat([valid, torch.tensor([False])]))[None]  # the rest: unknown
    final = torch.log_softmax(sampling.final_scores(torch.tensor([context]), scores[None], valid)[0], -1)
    rest_cut = within_top_k or not torch.isfinite(final[vocab_size]) or rest_mass == 0.0
    # the rest holds counted tokens too
    penalised = sampling.presence_penalty != 0.0 or sampling.frequency_penalty != 0.0
    exact = exact and sampling.repetition_penalty == 1.0 and (
        within_top_k or (sampling.temperature == 1.0 and rest_cut and not penalised))
    return logprobs, final[:vocab_size], exact


def score_rows(ids: list[int], prompt_logprobs: list[dict | None], width: int) -> Scores:
    """`Scores` rows from vLLM's prompt_logprobs: each position's own token (with its rank) and the top `width`.

    The entropy is a lower bound: the top tokens' terms, plus the rest of the mass as one outcome.
    """
    rows = unscored(torch.tensor(ids[:1]))
    logprob, rank, entropy = [], [], []
    top_ids = torch.full((len(ids) - 1, width), -1, dtype=torch.long)
    top_logprobs = torch.full((len(ids) - 1, width), float("nan"))
    for row, (token, position) in enumerate(zip(ids[1:], prompt_logprobs[1:])):
        entries = {int(i): entry for i, entry in position.items()}
        logprob.append(entries[token]["logprob"])
        rank.append(entries[token]["rank"])
        top = sorted((e["rank"], i, e["logprob"]) for i, e in entries.items() if e["rank"] <= width)
        for column, (_, i, lp) in enumerate(top):
            top_ids[row, column], top_logprobs[row, column] = i, lp
        p = torch.tensor([lp for _, _, lp in top]).exp()
        rest = max(0.0, 1.0 - float(p.sum()))
        entropy.append(float(-(p * p.log()).sum() - (rest * math.log(rest) if rest > 0 else 0.0)) / math.log(2))
    later = Scores(torch.tensor(ids[1:], dtype=torch.long), torch.tensor(logprob, dtype=torch.float),
                   torch.tensor(rank, dtype=torch.long), torch.tensor(entropy, dtype=torch.float), top_ids,
                   top_logprobs)
    return rows.then(later)


class VLLMBackend:
    """Answers the public functions' checked requests through a vLLM server at `url` (…/v1)."""

    # The server keeps each session's text in its prefix cache and batches the calls that arrive together; it
    # returns log-probabilities only, so no "why?".
    capabilities = Capabilities(precomputation=False, partial_reads=False, cheap_fit=True, attribution=False,
                                prompt_scores=True, batching=True)

    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.device = f"vllm {self.url}"
        self.timeout = timeout
        self.client = httpx.Client(base_url=self.url, timeout=timeout)
        self.logprobs = LOGPROBS  # lowered to the server's --max-logprobs if that is smaller
        self._served: dict[str, Served] = {}  # checked models; forgotten when the server drops out
        self.matchers = MatcherStore()  # each session's constraint matchers, as in-process

    def lookahead(self, request: LookaheadRequest, precompute: bool = False, partial: bool = True,
                  yielding: bool = False) -> dict:
        """The branches; `precompute`, `partial` and `yielding` are not needed here (the server's prefix cache keeps
        the text, and the server schedules its requests, a long text's read among them)."""
        context = self._context(request, room=request.depth)
        sampling, n_branches = request.sampling, request.n_branches
        rows = max(DISTRIBUTION_ROWS, n_branches)
        top, reused = self._next_tokens(context, rows)
        valid = None if context.guide is None else context.guide.valid()
        logprobs, final, exact = next_token_logprobs(top, len(context.tokenizer), context.ids, sampling,
                                                     context.allowed, valid)
        distribution = distribution_entries(logprobs, final, rows, context.tokenizer, valid=valid)
        firsts = distribution[:n_branches]  # the branches start from the best tokens by p_final
        if valid is not None:
            firsts = [f for f in firsts if f["valid"]] or [self._constrained_first(context, sampling)]
        if context.guide is None:
            sequences = self._continue_branches(context, [f["token_id"] for f in firsts], request)
        else:
            sequences = [self._continue_constrained(context, f["token_id"], request) for f in firsts]
        stops = stop_tokens(context.model)
        fits = self._fits(context, sequences, request)
        return {
            **self._info(context, reused, exact),
            "partial": None,  # the server reads a long text itself, scheduling it among its other requests
            "sampling": sampling.as_dict(),
            "branch_mode": request.branch_mode,
            "seed": request.seed,
            "distribution": distribution,
            "forced": forced_entry(list(context.forced), context.healed, context.tokenizer),
            "branches": branch_entries([[*context.forced, *seq] for seq in sequences], stops, firsts, context.healed,
                                       context.tokenizer, request.stop, fits),
        }

    def distribution(self, request: DistributionRequest) -> list[dict]:
        context = self._context(request, room=1)
        top, _ = self._next_tokens(context, request.k)
        valid = None if context.guide is None else context.guide.valid()
        logprobs, final, _ = next_token_logprobs(top, len(context.tokenizer), context.ids, request.sampling,
                                                 context.allowed, valid)
        return distribution_entries(logprobs, final, request.k, context.tokenizer, valid=valid)

    def scores(self, request: ScoresRequest) -> dict:
        tokenizer = load_tokenizer(request.model)
        scored = read_scored_text(request, tokenizer, self._model(request.model).max_model_len)
        width = max(request.k, self.logprobs)
        body = {**self._fields(request.model, scored.ids, 1, session_salt(*request.key)), "prompt_logprobs": width}
        answer = self._complete(body, needed=request.k, field="prompt_logprobs")
        rows = score_rows(scored.ids, answer["choices"][0]["prompt_logprobs"], width)
        return scores_result(request.model, scored, rows, _cached_tokens(answer), request.k, tokenizer,
                             len(request.text))

    def generate(self, request: GenerateRequest) -> Iterator[dict]:
        """The server's greedy continuation, streamed (one server step per token: the method has no say here).

        Under a constraint, one request per token, each allowing only the tokens the constraint allows next."""
        model = request.model
        limit = self._model(model).max_model_len
        tokenizer = load_tokenizer(model)
        stops = stop_tokens(model)
        ids, guide = self.matchers.context_and_guide(request.key, request.constraint, tokenizer, request.text,
                                                     request.text, as_dicts(request.messages), stops, len(tokenizer),
                                                     torch.device("cpu"))
        max_new_tokens = min(request.max_new_tokens, limit - 1)  # keep a token of the text to continue
        dropped = max(0, len(ids) - (limit - max_new_tokens))
        salt = session_salt(*request.key)
        if guide is None:
            body = {**self._fields(model, ids[dropped:], max_new_tokens, salt), "stream": True,
                    "ignore_eos": False, "stop_token_ids": sorted(stops)}
            chunks = ([t for c in chunk.get("choices", []) for t in c.get("token_ids") or []]
                      for chunk in self._stream(body))
            passes = ((tokens, ["step"] * len(tokens)) for tokens in chunks if tokens)
        else:
            passes = (([token], ["step"]) for token in self._constrained_tokens(model, ids[dropped:], guide, stops,
                                                                             max_new_tokens, salt))
        # the server schedules its work; here the continuation can be cancelled between tokens
        job = scheduler.start(request.session, "continuation", request)
        passes = scheduler.steps(job, passes)
        yield from Continuation(tokenizer, "greedy", model, dropped, request.stop).follow(passes, request.time_limit)

    def attribution(self, request: AttributionRequest) -> Iterator[dict]:
        raise ValueError("attribution needs the model's weights and gradients in this process; the vLLM server "
                         "returns log-probabilities only: ask it of the in-process backend (use_backend())")

    def warm_up(self) -> Iterator[str]:
        """Nothing to prepare here: the server holds the model."""
        return iter(())

    def forget(self, session: str) -> None:
        """Stop the session's continuation and drop its constraint matchers (the server's cache is salted per
        session: nobody else reuses it)."""
        scheduler.cancel(session)
        self.matchers.forget(session)

    def _constrained_tokens(
        self, model: str, ids: list[int], guide: Guide, stops: Collection[int], n: int, salt: str,
        sampling: Sampling = PLAIN, sample: bool = False, seed: int = 0, first_allowed: torch.Tensor | None = None,
    ) -> Iterator[int]:
        """Up to `n` tokens, each the server's choice among those `guide` allows (the first also among
        `first_allowed`): greedy after the penalties, or drawn by the server (`sample`); stops after an end token."""
        ids = list(ids)
        for _ in range(n):
            valid = guide.valid()
            if first_allowed is not None:
                valid, first_allowed = valid & first_allowed, None
            if not valid.any():
                raise ValueError("no token can continue the text under the constraint")
            body = {**self._fields(model, ids, 1, salt, seed=seed, **_server_sampling(sampling, sample)),
                    "allowed_token_ids": torch.nonzero(valid)[:, 0].tolist()}
            token = self._complete(body)["choices"][0]["token_ids"][0]
            guide.advance(token)
            ids.append(token)
            yield token
            if token in stops:
                return

    # What the tasks share

    def _context(self, request: LookaheadRequest | DistributionRequest, room: int) -> Context:
        """What the model reads, tokenized here exactly as in-process (lookahead/context.py)."""
        model = request.model
        tokenizer = load_tokenizer(model)
        prompt = read_prompt(request, tokenizer, self.matchers, self._model(model).max_model_len, room, len(tokenizer),
                             torch.device("cpu"), force=isinstance(request, LookaheadRequest))
        return Context(tokenizer, prompt.ids, prompt.dropped, prompt.healed, model, session_salt(*request.key),
                       prompt.allowed, prompt.guide, tuple(prompt.forced))

    def _info(self, context: Context, reused: int, exact: bool) -> dict:
        info = context_info(context.model, self.device, len(context.ids), reused, context.dropped, context.healed)
        if not exact:
            info["notice"] = " ".join(filter(None, [info["notice"], APPROXIMATE.format(n=self.logprobs)]))
        return info

    def _next_tokens(self, context: Context, needed: int) -> tuple[dict[int, float], int]:
        """The server's top log-probabilities after the context (at least `needed` of them), and its cached tokens."""
        body = {**self._fields(context.model, context.ids, 1, context.salt), "logprobs": max(needed, self.logprobs)}
        answer = self._complete(body, needed=needed, field="logprobs")
        top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
        return {int(token.removeprefix("token_id:")): lp for token, lp in top.items()}, _cached_tokens(answer)

    def _constrained_first(self, context: Context, sampling: Sampling) -> dict:
        """The best valid token when none came back among the top log-probabilities (as the server chooses it)."""
        token = next(self._constrained_tokens(context.model, context.ids, context.guide.fork(), set(), 1, context.salt,
                                              sampling, first_allowed=context.allowed))
        return {"token_id": token, "token": context.tokenizer.decode([token]), "prob": 0.0, "logprob": float("-inf"),
                "p_final": 1.0, "kept": True, "valid": True}

    def _fits(self, context: Context, sequences: list[list[int]], request: LookaheadRequest) -> list[float] | None:
        """Each branch's fit with the text after the caret (lookahead/branches.py), from the server's log-probabilities
        of that text's first tokens in one request: a prompt per branch (the context, the branch, then those
        tokens) and one without a branch."""
        # room for the branch, and for the one token a completion request generates
        room = self._model(context.model).max_model_len - len(context.ids) - request.depth - 1
        follow = follow_ids(request, context.tokenizer, room)
        if not follow:
            return None
        unforced = list(context.ids[: len(context.ids) - len(context.forced)])
        prompts = [[*context.ids, *seq, *follow] for seq in sequences] + [[*unforced, *follow]]
        body = {**self._fields(context.model, prompts, 1, context.salt), "prompt_logprobs": 1}
        choices = sorted(self._complete(body)["choices"], key=lambda c: c["index"])
        totals = []
        for prompt, choice in zip(prompts, choices):
            positions = choice["prompt_logprobs"][len(prompt) - len(follow):]
            totals.append(sum({int(i): e for i, e in position.items()}[token]["logprob"]
                              for token, position in zip(follow, positions)))
        return [(total - totals[-1]) / len(follow) for total in totals[:-1]]

    def _continue_constrained(self, context: Context, first: int, request: LookaheadRequest) -> list[int]:
        """A branch from `first` under the constraint: one request per token, each with its own allowed tokens."""
        guide = context.guide.fork()
        guide.advance(first)
        stops = stop_tokens(context.model)
        depth = request.depth
        rest = list(self._constrained_tokens(context.model, [*context.ids, first], guide, stops, depth - 1,
                                             context.salt, request.sampling, request.branch_mode == "sample",
                                             request.seed))
        return [first, *rest, *[rest[-1] if rest else first] * (depth - 1 - len(rest))]

    def _continue_branches(self, context: Context, firsts: list[int], request: LookaheadRequest) -> list[list[int]]:
        """Each first token continued to `depth` tokens: one request, a prompt per branch."""
        if request.depth == 1:
            return [[first] for first in firsts]
        prompts = [[*context.ids, first] for first in firsts]
        body = self._fields(context.model, prompts, request.depth - 1, context.salt, seed=request.seed,
                            **_server_sampling(request.sampling, request.branch_mode == "sample"))
        choices = sorted(self._complete(body)["choices"], key=lambda c: c["index"])
        return [[first, *choice["token_ids"]] for first, choice in zip(firsts, choices)]

    @staticmethod
    def _fields(
        model: str, prompt: list, max_tokens: int, salt: str, temperature: float = 0.0, top_k: int = 0,
        top_p: float = 1.0, repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0, seed: int = 0,
    ) -> dict:
        """Every field of a completion request, explicit (the server's defaults would replace omitted ones); greedy
        unless given a temperature. `salt`: the session's (`session_salt`), so its cache is its own."""
        return {
            "model": model,
            "cache_salt": salt,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "n": 1,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "min_p": 0.0,
            "repetition_penalty": repetition_penalty,
            # the server counts the branch's own tokens only (docs/deploy-vllm.md)
            "presence_penalty": presence_penalty,
            "frequency_penalty": frequency_penalty,
            "seed": seed,
            "ignore_eos": True,
            "skip_special_tokens": False,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "stream": False,
        }

    # The server

    def _model(self, name: str) -> Served:
        """The server's description of `name`, checked once per connection: it must serve that model,
        tokenized as here."""
        known = self._served.get(name)  # one read: another thread may clear the dict at any time
        if known is None:
            models = self._get("/models")["data"]
            served = {m["id"]: m for m in models}
            if name not in served:
                raise BackendError(
                    f"The vLLM server at {self.url} serves {sorted(served)}, not {name!r}: start it with "
                    f"--served-model-name {name!r}, or choose one of its models."
                )
            probe = load_tokenizer(name)(PROBE_TEXT, add_special_tokens=False)["input_ids"]
            theirs = self._post("/tokenize", {"model": name, "prompt": PROBE_TEXT, "add_special_tokens": False},
                                root=True)["tokens"]
            if theirs != probe:
                raise BackendError(
                    f"The vLLM server at {self.url} serves a model named {name!r} whose tokenizer is not {name!r}'s "
                    "here: a different model is behind that URL."
                )
            known = self._served[name] = Served(name, int(served[name]["max_model_len"]))
        return known

    def _complete(self, body: dict, needed: int = 0, field: str = "") -> dict:
        """POST /completions; if the server allows fewer log-probabilities than asked (but `needed`), ask for those."""
        try:
            return self._post("/completions", body)
        except _TooManyLogprobs as refusal:
            if refusal.allowed < max(needed, 1):
                raise BackendError(
                    f"The vLLM server at {self.url} returns at most {refusal.allowed} log-probabilities per token "
                    f"(its --max-logprobs), and this needs {needed}: ask for at most {refusal.allowed}, or restart "
                    f"the server with --max-logprobs {max(needed, LOGPROBS)}."
                ) from None
            self.logprobs = refusal.allowed
            return self._post("/completions", {**body, field: max(needed, refusal.allowed)})

    def _get(self, path: str) -> dict:
        return self._request("GET", path)

    def _post(self, path: str, body: dict, root: bool = False) -> dict:
        """`root`: the path is the server's own (/tokenize), not under /v1."""
        return self._request("POST", path, body, root)

    def _request(self, method: str, path: str, body: dict | None = None, root: bool = False) -> dict:
        url = self.url.removesuffix("/v1") + path if root else path
        with self._reaching():
            response = self.client.request(method, url, json=body)
        if response.status_code != 200:
            raise self._refusal(response, body)
        return response.json()

    def _stream(self, body: dict) -> Iterator[dict]:
        with self._reaching(), self.client.stream("POST", "/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise self._refusal(response, body)
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    yield json.loads(line.removeprefix("data: "))

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        """A failed connection as a BackendError that says what happened; the models are checked again after."""
        try:
            yield
        except httpx.TimeoutException:
            self._served.clear()
            raise BackendError(
                f"The vLLM server at {self.url} did not answer within {self.timeout:g} s (overloaded, or still "
                "starting); your text is kept: try again."
            ) from None
        except httpx.HTTPError as error:
            self._served.clear()  # it may come back serving another model
            raise BackendError(
                f"The vLLM server at {self.url} cannot be reached ({type(error).__name__}): it may be down or "
                "restarting; your text is kept: try again when it is back."
            ) from None

    def _refusal(self, response: httpx.Response, body: dict | None) -> Exception:
        """The server's error as an exception that says what to do."""
        try:
            error = response.json()
            message = str(error.get("error", {}).get("message") if isinstance(error.get("error"), dict)
                          else error.get("message"))
        except ValueError:
            message = response.text[:300]
        if "max allowed:" in message and "logprobs" in message:
            return _TooManyLogprobs(int(message.rsplit("max allowed:", 1)[1].split()[0].strip(".,")))
        if response.status_code == 404 and body and "model" in body:
            self._served.clear()
            return BackendError(
                f"The vLLM server at {self.url} no longer serves {body['model']!r} (it says: {message}); "
                "a different model is behind that URL."
            )
        return BackendError(f"The vLLM server at {self.url} refused the request ({response.status_code}): {message}")


def _server_sampling(sampling: Sampling, sample: bool) -> dict:
    """The completion fields that carry `sampling`: the penalties always, and the draw's settings when the server
    samples (`sample`); greedy by p_final is the best token after the penalties, which the other settings keep."""
    fields = dict(repetition_penalty=sampling.repetition_penalty, presence_penalty=sampling.presence_penalty,
                  frequency_penalty=sampling.frequency_penalty)
    if sample:
        fields.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    return fields


class _TooManyLogprobs(Exception):
    def __init__(self, allowed: int) -> None:
        self.allowed = allowed


def _cached_tokens(answer: dict) -> int:
    """Prompt tokens the server found in its prefix cache (reported with --enable-prompt-tokens-details)."""
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)
