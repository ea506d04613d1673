"""A long text's answers while it is read in the background (lookahead/reading.py): the branches from its last
tokens, and the tokens scored so far. Off ZeroGPU only: there nothing runs after a call returns."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from lookahead.backends.in_process_stores import Stores, Unkept
from lookahead.backends.runners.branches import prompt_of, run_lookahead
from lookahead.context import read_scored_text
from lookahead.models import context_limit, load_model, on_zero_gpu
from lookahead.outputs import PartialScores, Suggestions, TokenScores
from lookahead.reading import Read
from lookahead.requests import DistributionRequest, LookaheadRequest, MultiverseRequest, ScoresRequest
from lookahead.results import scores_result
from lookahead.scoring import unscored


def read_first(stores: Stores, request: LookaheadRequest | DistributionRequest | MultiverseRequest | ScoresRequest,
               begin: bool = True) -> Read | None:
    """The background read that the request's text needs first (lookahead/reading.py), started if need be (planned
    only where `begin` is False: `Reader.begin` starts it); None when the call reads what it needs itself. On ZeroGPU
    nothing runs after a call returns: a call reads its whole text."""
    if on_zero_gpu():
        return None
    model, tokenizer = load_model(request.model_name)
    following = stores.reader.following(request.key, request)
    if following is not None:  # asked again while its read goes on: no need to tokenize the text again
        return following
    scored = isinstance(request, ScoresRequest)
    if scored:
        ids = read_scored_text(request, tokenizer, context_limit(model)).ids
    else:
        ids = prompt_of(request, model, tokenizer, stores.matchers, force=isinstance(request, LookaheadRequest)).ids
    return stores.reader.plan(request.key, ids, request.model, model,
                              scored or stores.prefix_caches.scoring(request.key), begin)


def wait_for_read(stores: Stores, request: DistributionRequest | MultiverseRequest) -> None:
    """Let a long text be read as a long job first, its slices yielding to everyone's clicks, rather than in
    one pass that holds them all up (a distribution or a map has no partial answer)."""
    read = read_first(stores, request)
    if read is not None:
        read.finished.wait()


def partial_lookahead(stores: Stores, request: LookaheadRequest, read: Read) -> Suggestions:
    """The answer from the text's last tokens while `read` reads it all, and how far the read got.
    Asked again, the same answer (computed once) with the progress."""
    result = read.answers.get(request)
    if result is None:
        model, _ = load_model(request.model_name)
        start = time.perf_counter()
        result = run_lookahead(stores, request, store=Unkept(), window=stores.reader.window(request.model, model))
        result = replace(result, partial=replace(result.partial, seconds=time.perf_counter() - start))
        read.answers = {request: result}
    partial = replace(result.partial, read_tokens=read.read_tokens)
    notice = (f"Partial: from the text's last {partial.window_tokens} tokens, while all "
              f"{partial.context_tokens} are read ({partial.read_tokens} so far); asked again once the "
              "text is read, the answer is exact.")
    return replace(result, partial=partial, notice=notice)


def partial_scores(request: ScoresRequest, read: Read) -> TokenScores:
    """The tokens `read` has scored so far, listed while it reads on (the rest left out), and how far it got. Its
    rows are taken once: the reader replaces them whole after each chunk, so they are whole chunks' rows, the
    same bits as the whole text's first rows once it is read."""
    model, tokenizer = load_model(request.model_name)
    scored = read_scored_text(request, tokenizer, context_limit(model))
    rows = read.rows
    if rows is None:  # queued behind other reads: nothing scored yet
        rows = unscored(torch.tensor(scored.ids[:0], dtype=torch.long))
    result = scores_result(request.model, scored, rows, len(rows), request.k, tokenizer, len(request.text))
    notice = (f"Partial: the first {len(rows)} of {len(scored.ids)} tokens, scored while the text is read; asked "
              "again, more of them, and once it is read, all.")
    return replace(result, partial=PartialScores(len(rows), len(scored.ids)), notice=notice)
