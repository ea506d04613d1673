"""Public inference API: next-token distribution and cached lookahead branches for a text.

Everything here takes and returns plain, JSON- and pickle-safe data, so the same functions
serve the Gradio UI, `gradio_client` callers and ZeroGPU workers (`@spaces.GPU`).
The tensor-level pieces live in the `lookahead` package:
  lookahead/models.py        which model, loaded how (embedded offline default)
  lookahead/branches.py      top-k branches over one shared KV cache (tree attention)
  lookahead/prefix_cache.py  per-session KV caches, so edits only recompute what changed
  lookahead/kv_cache.py      a KV cache that grows without copying itself every forward
  lookahead/healing.py       text ending in whitespace
  lookahead/sampling.py      p_base -> p_final with transformers' logits processors; presets
  lookahead/decoding.py      greedy and lossless lookahead decoding for `generate`
"""

from __future__ import annotations

import spaces  # must come before torch: on ZeroGPU it patches CUDA initialisation

import os
import time
from collections.abc import Iterator
from typing import NamedTuple

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lookahead.branches import Lookahead, get_lookahead_sequences
from lookahead.decoding import greedy_passes, lookahead_passes
from lookahead.healing import allowed_first_tokens, split_for_healing
from lookahead.models import default_model_name, load_model
from lookahead.prefix_cache import PrefixCacheStore
from lookahead.sampling import BRANCH_MODES, PLAIN, PRESETS, Sampling, ranked

__all__ = [
    "MAX_BRANCHES",
    "MAX_DEPTH",
    "MAX_NEW_TOKENS",
    "MAX_TEXT_CHARS",
    "MAX_TOP_K",
    "PRESETS",
    "default_model_name",
    "generate",
    "generate_stream",
    "get_lookahead_sequences",
    "load_model",
    "lookahead",
    "next_token_distribution",
    "prefix_caches",
]

MAX_BRANCHES = 20
MAX_DEPTH = 16
MAX_TOP_K = 200
MAX_NEW_TOKENS = 1024
MAX_TEXT_CHARS = 1_000_000  # far past any model's context; keeps tokenizing a pasted book bounded
GENERATION_METHODS = {"greedy": greedy_passes, "lookahead": lookahead_passes}

prefix_caches = PrefixCacheStore()

if os.environ.get("SPACE_ID"):
    # ZeroGPU wants the model loaded (and moved to CUDA) at import time, outside GPU functions.
    load_model()


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return int(value)


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    if not text:
        raise ValueError("text is empty: type something to see what could come next")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"text is too long: {len(text):,} characters, the limit is {MAX_TEXT_CHARS:,}")
    return text


def _distribution(run: _Run, sampling: Sampling, k: int, ids: list[int] | None = None) -> list[dict]:
    """Entries for the k next tokens ranked by p_final, then p_base (or for the given `ids`).

    With healing, probabilities are over the allowed tokens only.
    """
    logits = run.result.next_token_logits.float()
    if run.allowed is not None:
        logits = logits.masked_fill(~run.allowed, float("-inf"))
    final = sampling.final_scores(run.context, logits[None])[0]
    ids = ranked(logits, final, k).tolist() if ids is None else ids
    logprobs = torch.log_softmax(logits, dim=-1)[ids]
    p_final = torch.softmax(final, dim=-1)[ids]
    texts = run.tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
    return [
        {"token_id": i, "token": t, "prob": float(lp.exp()), "logprob": float(lp), "p_final": float(pf), "kept": bool(pf > 0)}
        for i, t, lp, pf in zip(ids, texts, logprobs, p_final)
    ]


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
) -> _Run:
    """Tokenize (healing trailing whitespace), reuse the session's cache, and compute the branches."""
    model, tokenizer = load_model(model_name)
    prefix, healed = split_for_healing(text, tokenizer)
    ids = tokenizer(prefix)["input_ids"]
    max_prompt = _context_limit(model) - depth
    dropped = max(0, len(ids) - max_prompt)
    ids = ids[dropped:]
    key = (model_name or default_model_name(), session)
    cache, reused = prefix_caches.take(key, ids)
    allowed = None
    if healed:
        allowed = allowed_first_tokens(tokenizer, healed, model.config.get_text_config().vocab_size, model.device)
    context = torch.tensor([ids], device=model.device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    result = get_lookahead_sequences(
        model, context, n_branches, depth, cache, allowed, sampling, branch_mode, generator
    )
    continuations = [(seq[:-1], kv) for seq, kv in zip(result.sequences.tolist(), result.branch_kv)]
    prefix_caches.put(key, ids, result.cache, continuations)
    info = {
        "model": key[0],
        "device": str(model.device),
        "context_tokens": len(ids),
        "reused_tokens": reused,
        "truncated_tokens": dropped,
        "healed_whitespace": healed,
        "notice": (
            f"The text is longer than the model's context: only its last {len(ids)} tokens were used "
            f"({dropped} earlier tokens were left out)."
            if dropped
            else ""
        ),
    }
    return _Run(result, info, allowed, healed, tokenizer, context)


def _context_limit(model: PreTrainedModel) -> int:
    return int(model.config.get_text_config().max_position_embeddings)


def _sampling(temperature: float, top_k: int, top_p: float, repetition_penalty: float) -> Sampling:
    return Sampling(temperature, _check_int("top_k", top_k, 0, MAX_TOP_K), top_p, repetition_penalty)


@spaces.GPU(duration=30)
def next_token_distribution(
    text: str,
    k: int = 10,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    *,
    session: str = "default",
    model_name: str | None = None,
) -> list[dict]:
    """The k next tokens after `text`, ranked by p_final, then p_base.

    Each entry: {"token_id", "token", "prob" (p_base: the plain softmax), "logprob",
    "p_final" (after transformers' processors for the sampling settings; 0 where a
    filter cut the token), "kept"}. `k` is how many entries come back; `top_k` is the
    filter (0 = off). Text ending in whitespace is token-healed (lookahead/healing.py):
    the whitespace is backed up and only tokens starting with it are allowed, renormalised.
    """
    text = _check_text(text)
    k = _check_int("k", k, 1, MAX_TOP_K)
    sampling = _sampling(temperature, top_k, top_p, repetition_penalty)
    return _distribution(_run(text, 1, 1, session, model_name), sampling, k)


@spaces.GPU(duration=60)
def lookahead(
    text: str,
    n_branches: int = 5,
    depth: int = 3,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    branch_mode: str = "greedy",
    seed: int = 0,
    *,
    session: str = "default",
    model_name: str | None = None,
) -> dict:
    """The `n_branches` best next tokens after `text` (by p_final), each continued to `depth` tokens.

    Branches continue greedily (`branch_mode="greedy"`: the best token by p_final) or by
    sampling from p_final (`"sample"`, reproducible with `seed`). Returns {"model",
    "device", "context_tokens", "reused_tokens", "truncated_tokens", "healed_whitespace",
    "notice", "sampling", "branch_mode", "seed", "distribution": [...] (as from
    next_token_distribution), "branches": [{"token_ids", "text", "prob", "p_final"}]}.
    A branch's "text" is exactly what to append to `text` (with healing, the backed-up
    whitespace is already part of `text`). `session` keys the KV cache that later calls
    of the same writer reuse.
    """
    text = _check_text(text)
    n_branches = _check_int("n_branches", n_branches, 1, MAX_BRANCHES)
    depth = _check_int("depth", depth, 1, MAX_DEPTH)
    sampling = _sampling(temperature, top_k, top_p, repetition_penalty)
    if branch_mode not in BRANCH_MODES:
        raise ValueError(f"branch_mode must be one of {list(BRANCH_MODES)}, got {branch_mode!r}")
    seed = _check_int("seed", seed, 0, 2**63 - 1)
    run = _run(text, n_branches, depth, session, model_name, sampling, branch_mode, seed)
    sequences = run.result.sequences.tolist()
    texts = run.tokenizer.batch_decode(sequences, clean_up_tokenization_spaces=False)
    firsts = _distribution(run, sampling, len(sequences), [seq[0] for seq in sequences])
    branches = [
        {"token_ids": seq, "text": t[len(run.healed) :], "prob": first["prob"], "p_final": first["p_final"]}
        for seq, t, first in zip(sequences, texts, firsts)
    ]
    return {
        **run.info,
        "sampling": sampling.as_dict(),
        "branch_mode": branch_mode,
        "seed": seed,
        "distribution": _distribution(run, sampling, max(10, n_branches)),
        "branches": branches,
    }


def _eos_ids(model: PreTrainedModel) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set() if eos is None else {eos} if isinstance(eos, int) else set(eos)


def _generation(text: str, max_new_tokens: int, method: str, model_name: str | None) -> Iterator[dict]:
    text = _check_text(text)
    max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS)
    if method not in GENERATION_METHODS:
        raise ValueError(f"method must be one of {sorted(GENERATION_METHODS)}, got {method!r}")
    model, tokenizer = load_model(model_name)
    ids = tokenizer(text)["input_ids"]
    dropped = max(0, len(ids) - (_context_limit(model) - max_new_tokens))
    ids = ids[dropped:]
    new_ids: list[int] = []
    pieces: list[str] = []  # each token's share of the decoded text (multi-byte characters stay whole)
    sources: list[str] = []
    accepted: list[int] = []
    start = time.perf_counter()
    for step in GENERATION_METHODS[method](model, ids, max_new_tokens, _eos_ids(model)):
        decoded = tokenizer.decode(new_ids, skip_special_tokens=True)
        for token in step.tokens:
            new_ids.append(token)
            longer = tokenizer.decode(new_ids, skip_special_tokens=True)
            pieces.append(longer[len(decoded) :] if longer.startswith(decoded) else longer)
            decoded = longer
        sources += step.sources
        accepted.append(len(step.tokens))
        yield {
            "text": decoded,
            "token_ids": list(new_ids),
            "token_texts": list(pieces),
            "forward_passes": len(accepted),
            "tokens_per_pass": len(new_ids) / len(accepted),
            "seconds": time.perf_counter() - start,
            "accepted_per_pass": list(accepted),
            "draft_source_per_token": list(sources),
            "method": method,
            "model": model_name or default_model_name(),
            "truncated_tokens": dropped,
        }


@spaces.GPU(duration=120)
def generate_stream(
    text: str, max_new_tokens: int = 64, method: str = "lookahead", *, model_name: str | None = None
) -> Iterator[dict]:
    """`generate`'s result after every forward pass, growing, for streaming into the UI."""
    yield from _generation(text, max_new_tokens, method, model_name)


@spaces.GPU(duration=120)
def generate(
    text: str, max_new_tokens: int = 64, method: str = "lookahead", *, model_name: str | None = None
) -> dict:
    """Continue `text` greedily by up to `max_new_tokens` tokens (stopping after EOS).

    method "greedy" is the plain cached loop; "lookahead" returns exactly the same tokens
    in fewer forward passes (lookahead/decoding.py). Returns {"text", "token_ids",
    "token_texts" (each token's piece of "text"), "forward_passes" (the prompt's pass
    included, which gives the first token), "tokens_per_pass", "seconds", "accepted_per_pass",
    "draft_source_per_token" ("step", "jacobi" or "ngram"), "method", "model",
    "truncated_tokens"}.
    """
    result: dict = {}
    for result in _generation(text, max_new_tokens, method, model_name):
        pass
    return result
