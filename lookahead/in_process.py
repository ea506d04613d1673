"""The in-process backend: the text-level functions behind custom_llm_inference, with the model here.

custom_llm_inference checks every argument and hands the checked request to `InProcess.serve`; the
request then runs in the one `@spaces.GPU` entry point, which calls `answer`. Everything here works
on checked values. Each session's KV cache, precomputed answers and constraint matchers are kept in
this process (`prefix_caches`, `speculator`, `matchers`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lookahead.attribution import attribute_stepwise, passes
from lookahead.branches import Lookahead, get_lookahead_sequences
from lookahead.chat import as_dicts, encode
from lookahead.constraints import Constraint, Guide, MatcherStore
from lookahead.decoding import greedy_passes, lookahead_passes
from lookahead.healing import allowed_first_tokens, split_for_healing
from lookahead.models import (
    default_model_name,
    load_model,
    model_pass_costs,
    on_zero_gpu,
)
from lookahead.prefix_cache import PrefixCacheStore, common_prefix_length, forget_session
from lookahead.results import (
    DISTRIBUTION_ROWS,
    REFUSED_ROWS,
    Continuation,
    attribution_entries,
    branch_entries,
    context_info,
    distribution_entries,
    eos_ids,
    stop_tokens,
    text_token_places,
    token_entries,
    window_start,
)
from lookahead.sampling import PLAIN, Sampling
from lookahead.scoring import extend_and_score, unscored
from lookahead.speculation import ScratchStore, Speculator

Messages = tuple[tuple[str, str], ...]  # chat mode's earlier turns, (role, content)

prefix_caches = PrefixCacheStore()
speculator = Speculator(prefix_caches)
matchers = MatcherStore()


class InProcess:
    """The default backend: the model in this process (on ZeroGPU, in its GPU workers), sessions' caches kept here.

    `on_gpu(task, request)` runs a checked request where the model is (custom_llm_inference's one
    `@spaces.GPU` function, which calls `answer`).
    """

    batches = False  # calls share this process's cores: serving several at once only splits them

    def __init__(self, on_gpu: Callable[[str, dict], Iterator[dict]]) -> None:
        self.on_gpu = on_gpu

    def serve(self, task: str, request: dict, precompute: bool = False) -> Iterator[dict]:
        if task == "scores":
            # Scores the session already holds (the branches' pass scored the new tokens) need no model
            # work: answered here, without pre-empting the precomputation that pass started.
            ready = _token_probabilities(**request, stored_only=True)
            if ready is not None:
                yield ready
                return
        result = None
        for result in self._serve(task, request):
            yield result
        if precompute and task == "lookahead" and not on_zero_gpu():
            taken = [{**request, "text": request["text"] + branch["text"]} for branch in result["branches"]]
            key = (request["model_name"] or default_model_name(), request["session"])
            speculator.start(key, "lookahead", taken, lambda r, scratch: _lookahead(**r, store=scratch))

    def forget(self, session: str) -> None:
        """Drop everything kept for `session`: its KV caches, token listings and constraint matchers.

        On ZeroGPU these live in the GPU workers, out of reach here; there they age out as any cache does.
        """
        prefix_caches.forget(session)
        listings.forget(session)
        matchers.forget(session)

    def _serve(self, task: str, request: dict) -> Iterator[dict]:
        """In-process, every call goes through here: it pre-empts precomputation, and may find its answer ready."""
        key = (request.get("model_name") or default_model_name(), request.get("session"))
        answer = speculator.arrived(key, task, request)
        try:
            ready = speculator.claim(key, answer) if answer else None
            if ready is not None:
                yield ready
            else:
                yield from self.on_gpu(task, request)
        finally:
            speculator.finished()


def answer(task: str, request: dict) -> Iterator[dict]:
    """Run one checked request with the model in this process (inside the GPU entry point)."""
    if task == "generate":
        yield from _generation(**request)
    elif task == "lookahead":
        yield _lookahead(**request)
    elif task == "distribution":
        yield _next_tokens(**request)
    elif task == "scores":
        yield _token_probabilities(**request)
    elif task == "attribution":
        yield from _attribution(**request)
    else:
        raise ValueError(f"unknown task {task!r}")


def _distribution(run: _Run, sampling: Sampling, k: int, ids: list[int] | None = None) -> list[dict]:
    """Entries for the k next tokens ranked by p_final, then p_base (or for the given `ids`).

    With healing, probabilities are over the allowed tokens only.
    """
    logits = run.result.next_token_logits.float()
    if run.allowed is not None:
        logits = logits.masked_fill(~run.allowed, float("-inf"))
    valid = run.result.valid
    final = sampling.final_scores(run.context, logits[None], None if valid is None else valid[None])[0]
    return distribution_entries(torch.log_softmax(logits, -1), torch.log_softmax(final, -1), k, run.tokenizer, ids,
                                valid)


def _refused(run: _Run, sampling: Sampling, listed: list[dict], n: int = REFUSED_ROWS) -> list[dict]:
    """Under a constraint, the n likeliest tokens (by p_base) it refuses that are not `listed` yet:
    what the model wanted instead."""
    if run.result.valid is None:
        return []
    logits = run.result.next_token_logits.float().masked_fill(run.result.valid, float("-inf"))
    logits[[d["token_id"] for d in listed]] = float("-inf")
    if run.allowed is not None:
        logits = logits.masked_fill(~run.allowed, float("-inf"))
    ids = logits.topk(min(n, int(torch.isfinite(logits).sum()))).indices.tolist()
    return _distribution(run, sampling, len(ids), ids)


class _Run(NamedTuple):
    result: Lookahead
    info: dict  # what the caller is told about the context
    allowed: torch.Tensor | None  # healing's mask over the first token
    healed: str  # the whitespace backed up by healing
    tokenizer: PreTrainedTokenizerBase
    context: torch.Tensor  # (1, T) the token ids scored


def _run(
    text: str,
    n_branches: int,
    depth: int,
    session: str,
    model_name: str | None,
    sampling: Sampling = PLAIN,
    branch_mode: str = "greedy",
    seed: int = 0,
    store: PrefixCacheStore | ScratchStore = prefix_caches,
    messages: Messages | None = None,
    constraint: Constraint | None = None,
) -> _Run:
    """Tokenize (healing trailing whitespace), reuse the session's cache from `store`, and compute the branches."""
    model, tokenizer = load_model(model_name)
    prefix, healed = split_for_healing(text, tokenizer)
    key = (model_name or default_model_name(), session)
    ids, guide = _context_and_guide(model, tokenizer, text, prefix, messages, constraint, key)
    dropped = window_start(len(ids), _context_limit(model) - depth, _context_limit(model))
    ids = ids[dropped:]
    cache, reused, known_scores = store.take(key, ids)
    allowed = None
    if healed:
        allowed = allowed_first_tokens(tokenizer, healed, model.config.get_text_config().vocab_size, model.device)
    context = torch.tensor([ids], device=model.device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    result = get_lookahead_sequences(
        model, context, n_branches, depth, cache, allowed, sampling, branch_mode, generator, known_scores, guide
    )
    continuations = [(seq[:-1], kv) for seq, kv in zip(result.sequences.tolist(), result.branch_kv)]
    store.put(key, ids, result.cache, continuations, result.scores)
    info = context_info(key[0], str(model.device), len(ids), reused, dropped, healed)
    return _Run(result, info, allowed, healed, tokenizer, context)


def _context_and_guide(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, text: str, prefix: str, messages: Messages | None,
    constraint: Constraint | None, key: tuple[str, str],
) -> tuple[list[int], Guide | None]:
    """The context's token ids and the constraint's state after them (MatcherStore.context_and_guide)."""
    vocab_size = model.config.get_text_config().vocab_size
    return matchers.context_and_guide(key, constraint, tokenizer, text, prefix, as_dicts(messages), stop_tokens(key[0]),
                                      vocab_size, model.device)


def _context_limit(model: PreTrainedModel) -> int:
    return int(model.config.get_text_config().max_position_embeddings)


def _next_tokens(
    text: str, k: int, sampling: Sampling, session: str, model_name: str | None, messages: Messages | None,
    constraint: Constraint | None,
) -> dict:
    run = _run(text, 1, 1, session, model_name, messages=messages, constraint=constraint)
    return {"distribution": _distribution(run, sampling, k)}


def _token_probabilities(
    text: str, k: int, session: str, model_name: str | None, messages: Messages | None, stored_only: bool = False
) -> dict | None:
    model, tokenizer = load_model(model_name)
    encoding, text_start = encode(
        tokenizer, text, as_dicts(messages), return_offsets_mapping=True, return_special_tokens_mask=True
    )
    all_ids = encoding["input_ids"]
    dropped = window_start(len(all_ids), _context_limit(model) - 1, _context_limit(model))
    ids = all_ids[dropped:]
    key = (model_name or default_model_name(), session)
    rows, reused = prefix_caches.scores(key, ids), len(ids)
    if rows is None and stored_only:
        return None
    if rows is None:
        cache, reused, known = prefix_caches.take(key, ids, scored=True)
        _, rows = extend_and_score(model, torch.tensor([ids], device=model.device), cache, known)
        prefix_caches.put(key, ids, cache, (), rows)
    if dropped:
        rows = unscored(torch.tensor(all_ids[:dropped])).then(rows)
    tokens = token_entries(rows, k, tokenizer, encoding["offset_mapping"], encoding["special_tokens_mask"], text_start,
                           len(text), listings.earlier(key, all_ids, dropped, k))
    listings.keep(key, all_ids, dropped, k, tokens)
    return {"model": key[0], "context_tokens": len(ids), "reused_tokens": reused, "truncated_tokens": dropped,
            "tokens": tokens}


class Listings:
    """Each session's last token listing (the heatmap's), so that the next reuses the entries of the tokens
    the two share: a click adds a few tokens to a long text, and building every entry afresh (~20k dicts at
    3k tokens with 5 alternatives) cost ~10 ms of each click with the heatmap shown."""

    def __init__(self, sessions: int = 64) -> None:
        self.sessions = sessions
        self._last: OrderedDict[tuple[str, str], tuple[list[int], int, int, list[dict]]] = OrderedDict()
        self._lock = threading.Lock()

    def earlier(self, key: tuple[str, str], ids: list[int], dropped: int, k: int) -> tuple[list[dict], int]:
        """The last listing's entries and the leading positions it shares with `ids` (none if windowed otherwise)."""
        with self._lock:
            last = self._last.get(key)
        if last is None or last[1:3] != (dropped, k):
            return [], 0
        old = last[0]
        shared = common_prefix_length(old, ids)
        return last[3], shared

    def clear(self) -> None:
        with self._lock:
            self._last.clear()

    def forget(self, session: str) -> None:
        with self._lock:
            forget_session(self._last, session)

    def keep(self, key: tuple[str, str], ids: list[int], dropped: int, k: int, entries: list[dict]) -> None:
        with self._lock:
            self._last[key] = (ids, dropped, k, entries)
            self._last.move_to_end(key)
            while len(self._last) > self.sessions:
                self._last.popitem(last=False)


listings = Listings()


def _lookahead(
    text: str, n_branches: int, depth: int, sampling: Sampling, branch_mode: str, seed: int, session: str,
    model_name: str | None, messages: Messages | None, constraint: Constraint | None, stop: tuple[str, ...],
    store: PrefixCacheStore | ScratchStore = prefix_caches,
) -> dict:
    run = _run(text, n_branches, depth, session, model_name, sampling, branch_mode, seed, store, messages, constraint)
    sequences = run.result.sequences.tolist()
    firsts = _distribution(run, sampling, len(sequences), [seq[0] for seq in sequences])
    stops = eos_ids(load_model(model_name)[0].generation_config)
    branches = branch_entries(sequences, stops, firsts, run.healed, run.tokenizer, stop)
    listed = _distribution(run, sampling, max(DISTRIBUTION_ROWS, n_branches))
    return {
        **run.info,
        "sampling": sampling.as_dict(),
        "branch_mode": branch_mode,
        "seed": seed,
        "distribution": listed + _refused(run, sampling, listed),
        "branches": branches,
    }


def _generation(
    text: str, max_new_tokens: int, method: str, session: str, model_name: str | None, messages: Messages | None,
    constraint: Constraint | None, stop: tuple[str, ...], time_limit: float | None,
) -> Iterator[dict]:
    """The growing continuation after every pass; stops at EOS, a stop string, `max_new_tokens` or `time_limit` seconds.

    In-process a continuation keeps no KV cache, so `session` only keys the constraint's matchers."""
    model, tokenizer = load_model(model_name)
    key = (model_name or default_model_name(), session)
    ids, guide = _context_and_guide(model, tokenizer, text, text, messages, constraint, key)
    max_new_tokens = min(max_new_tokens, _context_limit(model) - 1)  # keep a token of the text to continue
    dropped = max(0, len(ids) - (_context_limit(model) - max_new_tokens))
    continuation = Continuation(tokenizer, method, key[0], dropped, stop)
    stops = eos_ids(model.generation_config)
    if method == "lookahead":
        steps = lookahead_passes(model, ids[dropped:], max_new_tokens, stops, model_pass_costs(model_name), guide)
    else:
        steps = greedy_passes(model, ids[dropped:], max_new_tokens, stops, guide)
    yield from continuation.follow(((step.tokens, step.sources) for step in steps), time_limit)


def _attribution(
    text: str, target_token_id: int | None, method: str, steps: int, window: int, session: str,
    model_name: str | None, messages: Messages | None, at_token: int | None,
) -> Iterator[dict]:
    """Each token's share in the model's probability of the next token (lookahead/attribution.py), over the
    last `window` tokens of the context (in chat mode the conversation's, the reply's tokens listed); with
    `at_token`, of that token's place in the text instead, from the tokens before it. Yields {"done", "of"}
    after each pass over the window, then the result."""
    model, tokenizer = load_model(model_name)
    encoding, text_start = encode(
        tokenizer, text, as_dicts(messages), return_offsets_mapping=True, return_special_tokens_mask=True
    )
    places = text_token_places(encoding, text_start, len(text))
    cut, chars = (len(encoding["input_ids"]), len(text)) if at_token is None else places[at_token]
    all_ids, offsets, special = (encoding[k][:cut] for k in ("input_ids", "offset_mapping", "special_tokens_mask"))
    dropped = max(0, len(all_ids) - min(window, _context_limit(model)))
    ids = all_ids[dropped:]
    if target_token_id is None:
        with torch.inference_mode():
            logits = model(torch.tensor([ids], device=model.device), use_cache=False, logits_to_keep=1).logits
        target_token_id = int(logits[0, -1].argmax())
    work, of = attribute_stepwise(model, ids, target_token_id, method, steps), passes(method, steps)
    while True:
        try:
            yield {"done": next(work), "of": of}
        except StopIteration as finished:
            scores, prob = finished.value
            break
    yield {
        "target": {"token_id": target_token_id, "token": tokenizer.decode([target_token_id]), "prob": prob},
        "method": method,
        "steps": steps if method == "integrated_gradients" else 1,
        "window_tokens": len(ids),
        "truncated_tokens": dropped,
        "tokens": attribution_entries(all_ids, [None] * dropped + scores.tolist(), tokenizer, offsets, special,
                                      text_start, chars),
    }
