"""The in-process backend: the model in this process, and each session's caches kept here.

custom_llm_inference checks every argument and hands a typed request (lookahead/requests.py) to one of
`InProcess`'s methods; the request then runs in the one `@spaces.GPU` entry point (`on_gpu`,
lookahead/backends/zerogpu.py), which calls `answer` with the backend's number.
Each session's KV cache, precomputed answers, constraint matchers and token listing are kept by the backend that
answered it, in this process (its `Stores`, lookahead/backends/in_process_stores.py).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import NamedTuple

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lookahead import reading
from lookahead.attribution import attribute_stepwise, passes
from lookahead.backends.base import Capabilities
from lookahead.backends.in_process_stores import Stores, Unkept, registered
from lookahead.branches import Lead, Lookahead, get_lookahead_sequences
from lookahead.chat import as_dicts, encode
from lookahead.comparison import (
    Comparison,
    at_tokens,
    compare_models,
    comparison_result,
    model_requests,
    read_alike,
)
from lookahead.constraints import MatcherStore
from lookahead.context import Prompt, follow_ids, read_prompt, read_scored_text
from lookahead.decoding import greedy_passes, lookahead_passes
from lookahead.models import (
    context_limit,
    converted,
    default_model_name,
    device,
    eos_ids,
    load_model,
    model_pass_costs,
    on_zero_gpu,
    stop_tokens,
)
from lookahead.prefix_cache import PrefixCacheStore
from lookahead.reading import Read
from lookahead.requests import (
    AttributionRequest,
    CompareRequest,
    DistributionRequest,
    GenerateRequest,
    LookaheadRequest,
    Request,
    ScoresRequest,
)
from lookahead.results import (
    DISTRIBUTION_ROWS,
    LEAD_PROB,
    MAX_LEAD_TOKENS,
    REFUSED_ROWS,
    Continuation,
    attribution_entries,
    branch_entries,
    context_info,
    distribution_entries,
    forced_entry,
    last,
    lead_entry,
    more_candidates,
    scores_result,
    text_token_places,
)
from lookahead.sampling import Sampling
from lookahead.scheduler import Cancelled, scheduler
from lookahead.scoring import extend_and_score, unscored
from lookahead.sessions import SessionStore
from lookahead.speculation import ScratchStore

# Where a lookahead's caches are taken from and put back: the session's, a precomputation's copy, or none.
CacheStore = PrefixCacheStore | ScratchStore | Unkept
CANCEL_POLL_SECONDS = 0.05  # how often a yielding call that waits for precomputation looks whether it was cancelled


class InProcess(Stores):
    """The default backend: the model in this process (on ZeroGPU, in its GPU workers), sessions' caches kept in
    its own stores.

    `on_gpu(number, request)` runs a checked request where the model is (the one `@spaces.GPU` function,
    lookahead/backends/zerogpu.py, which calls `answer`), against the stores of the backend numbered `number`. Every
    call but a yielding one goes through `_serve`: it pre-empts precomputation, and may find its answer ready.
    """

    @property
    def capabilities(self) -> Capabilities:
        """Off ZeroGPU the process outlives a request: it precomputes and reads in the background. On a GPU a
        caret's fit costs little beside the branches; calls share this process's cores or GPU, never batched."""
        local = not on_zero_gpu()
        return Capabilities(precomputation=local, partial_reads=local, cheap_fit=not local or device().type != "cpu",
                            attribution=True, prompt_scores=True, batching=False)

    def __init__(self, on_gpu: Callable[[int, Request], Iterator[dict]]) -> None:
        super().__init__()
        self.on_gpu = on_gpu

    def lookahead(self, request: LookaheadRequest, precompute: bool = False, partial: bool = True,
                  yielding: bool = False) -> dict:
        if yielding:
            # After what is being precomputed for the session (it makes the next click instant; as one more real
            # request this call would stop it and drop the ready answers); then every module call waits while
            # interactive work runs. Cancelled, it stops at once, waiting or not.
            job = scheduler.start(request.session, "lookahead", request, request.model)
            try:
                while not self.speculator.wait(CANCEL_POLL_SECONDS, request.key):
                    if job.cancelled:
                        raise Cancelled("the lookahead was cancelled")
                with scheduler.sliced(job):
                    return last(self._on_gpu(request))
            finally:
                scheduler.finish(job)
        read = _read_first(self, request) if partial else None
        with scheduler.interactive():
            if read is None:
                result = last(self._serve(request))
            else:  # a long text: answered at once from its last tokens, while it is read (lookahead/reading.py)
                result = last(self._serve(request, lambda: iter([_partial_lookahead(self, request, read)])))
        if precompute and read is None and not on_zero_gpu():
            self.last_shown.put(request.key, (request, result))
            self.speculator.start(clicks_ahead(self.last_shown, request, result),
                                  lambda taken, scratch: _lookahead(self, taken, store=scratch))
        return result

    def distribution(self, request: DistributionRequest) -> list[dict]:
        _wait_for_read(self, request)
        with scheduler.interactive():
            return last(self._serve(request))["distribution"]

    def scores(self, request: ScoresRequest) -> dict:
        # Scores the session already holds (the branches' pass scored the new tokens) need no model
        # work: answered here, without pre-empting the precomputation that pass started.
        ready = _token_probabilities(self, request, stored_only=True)
        if ready is not None:
            return ready
        read = _read_first(self, request)
        if read is not None:  # a long text: the tokens its read has scored so far, at once (lookahead/reading.py)
            return _partial_scores(request, read)
        # The few tokens left (at most READ_IN_CALL_WINDOWS windows), as a long job rather than interactive work: a
        # newer read of the session, Stop or its departure stops them within a slice, and other visitors' clicks
        # come first.
        job = scheduler.start(request.session, "read", request, request.model)
        try:
            with scheduler.sliced(job):
                return last(self._serve(request))
        finally:
            scheduler.finish(job)

    def generate(self, request: GenerateRequest) -> Iterator[dict]:
        yield from self._serve(request)

    def attribution(self, request: AttributionRequest) -> Iterator[dict]:
        yield from self._serve(request)

    def compare(self, request: CompareRequest) -> dict:
        with scheduler.interactive():
            return last(self._serve(request))

    def warm_up(self) -> Iterator[str]:
        """Load the default model, and time what a first answer to a long text may read, while the machine is
        idle (a crowd arriving at once would make the timing, and every first answer after it, too short).
        Before each step, what it does, for the page and the terminal: a first start converts the embedded model
        and measures this CPU."""
        name = default_model_name()
        first = not converted(name)
        if first:
            yield "Preparing the embedded model (once, about a minute)…"
        yield "Loading the model and measuring this CPU (once)…" if first else "Loading the model…"
        model, _ = load_model(name)
        if not on_zero_gpu() and reading.FIRST_ANSWER_SECONDS > 0:
            yield "Timing how much of a long text this CPU reads in a second (once a start)…"
            self.reader.window(name, model)

    def forget(self, session: str) -> None:
        """Stop the session's long jobs and drop everything kept for it (`Stores.forget`).

        On ZeroGPU the stores the requests used live in the GPU workers, out of reach here; there they age out as
        any cache does.
        """
        scheduler.cancel(session)
        super().forget(session)

    def _serve(self, request: Request, compute: Callable[[], Iterator[dict]] | None = None) -> Iterator[dict]:
        """`request`'s answers: a precomputed one if ready, else `compute`'s (by default the GPU entry point's)."""
        ready = self.speculator.arrived(request.key, request)
        try:
            result = self.speculator.claim(request.key, ready) if ready else None
            if result is not None:
                yield result
            else:
                yield from (compute or (lambda: self._on_gpu(request)))()
        finally:
            self.speculator.finished()

    def _on_gpu(self, request: Request) -> Iterator[dict]:
        """`request`'s answers from the GPU entry point, run against this backend's stores."""
        return self.on_gpu(self.number, request)


def clicks_ahead(last_shown: SessionStore[tuple[str, str], tuple[LookaheadRequest, dict]], request: LookaheadRequest,
                 result: dict) -> list[tuple[tuple[str, str], LookaheadRequest]]:
    """The requests a click on a shown branch sends, keyed by the cache each reads: each branch taken, asked of this
    model and of every other model whose suggestions the session was `last_shown` for the same text (a second
    model's panel refreshes after each click too), the likeliest branches of each first."""
    beside = [last_shown.get(key) for key in last_shown if key[1] == request.session and key != request.key]
    asked = [(request, result), *((other, answer) for other, answer in filter(None, beside)
                                  if (other.text, other.after, other.messages) == (request.text, request.after,
                                                                                   request.messages))]
    ranks = max(len(answer["branches"]) for _, answer in asked)
    return [(model.key, replace(model, text=request.text + answer["branches"][rank]["text"]))
            for rank in range(ranks) for _, answer in asked if rank < len(answer["branches"])
            for model, _ in asked]


def answer(backend: int, request: Request) -> Iterator[dict]:
    """Run one checked request with the model in this process, against the stores of the backend numbered `backend`
    (inside the GPU entry point)."""
    stores = registered(backend)
    match request:
        case LookaheadRequest():
            yield _lookahead(stores, request)
        case DistributionRequest():
            yield _next_tokens(stores, request)
        case ScoresRequest():
            yield _token_probabilities(stores, request)
        case GenerateRequest():
            yield from _generation(stores, request)
        case AttributionRequest():
            yield from _attribution(request)
        case CompareRequest():
            yield _comparison(stores, request)
        case _:
            raise TypeError(f"not a request: {request!r}")


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
    context: torch.Tensor  # (1, T) the token ids scored, then the lead's (Lookahead.lead)
    forced: list[int]  # the last of them: the only tokens a constraint allowed after the text


def _run(request: LookaheadRequest, store: CacheStore, matchers: MatcherStore, window: int | None = None,
         force: bool = True) -> _Run:
    """Tokenize (healing trailing whitespace), reuse the session's cache from `store`, and compute the branches
    (from the text's last `window` tokens only, if given: a partial answer; after the tokens a constraint
    forces and those the model all but certainly writes, with `force`)."""
    model, tokenizer = load_model(request.model_name)
    prompt = _prompt(request, model, tokenizer, matchers, force)
    partial = None
    if window is not None and len(prompt.ids) > window:
        partial = {"window_tokens": window, "context_tokens": len(prompt.ids)}
        prompt = prompt._replace(ids=prompt.ids[-window:])
    if request.after is None:
        (cache, reused, known_scores), kept = store.take(request.key, prompt.ids), None
    else:  # at a caret: the text after it may stay in the cache, masked out
        (cache, reused, known_scores), kept = store.take_before(request.key, prompt.ids)
    context = torch.tensor([prompt.ids], device=model.device)
    generator = torch.Generator(device=model.device).manual_seed(request.seed)
    follow = follow_ids(request, tokenizer, context_limit(model) - len(prompt.ids) - request.depth)
    try:
        result = get_lookahead_sequences(
            model, context, request.n_branches, request.depth, cache, prompt.allowed, request.sampling,
            request.branch_mode, generator, known_scores, prompt.guide,
            hidden=0 if kept is None else len(kept.ids) - reused, follow=follow,
            unforced=len(prompt.ids) - len(prompt.forced), lead=_lead(model) if force else None,
        )
    except BaseException:  # cancelled (a yielding call): the whole text's cache goes back as it was
        if kept is not None:
            cache.keep(len(kept.ids), [])  # each layer cut on its own: one cancelled mid-pass holds fewer entries
            store.put(request.key, *kept)
        raise
    if kept is None:
        continuations = [(result.lead + seq[:-1], kv) for seq, kv in zip(result.sequences.tolist(), result.branch_kv)]
        store.put(request.key, prompt.ids, result.cache, continuations, result.scores)
    else:
        store.put(request.key, *kept)
    info = {**context_info(request.model, str(model.device), len(prompt.ids), reused, prompt.dropped, prompt.healed),
            "partial": partial}
    context = torch.cat([context, context.new_tensor([result.lead])], dim=1)
    return _Run(result, info, prompt.allowed if not result.lead else None, prompt.healed, tokenizer, context,
                prompt.forced)


def _lead(model: PreTrainedModel) -> Lead:
    """What leads a lookahead's branches: the tokens the model all but certainly writes, but its end tokens."""
    return Lead(LEAD_PROB, MAX_LEAD_TOKENS, frozenset(eos_ids(model.generation_config)))


def _prompt(request: LookaheadRequest | DistributionRequest, model: PreTrainedModel,
            tokenizer: PreTrainedTokenizerBase, matchers: MatcherStore, force: bool) -> Prompt:
    """What the model reads for a lookahead (room for a lead and its branches; after the tokens a constraint
    forces, with `force`) or a distribution (room for one token)."""
    room = request.depth + MAX_LEAD_TOKENS if isinstance(request, LookaheadRequest) else 1
    vocab_size = model.config.get_text_config().vocab_size
    return read_prompt(request, tokenizer, matchers, context_limit(model), room, vocab_size, model.device, force)


def _read_first(stores: Stores, request: LookaheadRequest | DistributionRequest | ScoresRequest) -> Read | None:
    """The background read that the request's text needs first (lookahead/reading.py), started if need be;
    None when the call reads what it needs itself. On ZeroGPU nothing runs after a call returns: a call reads
    its whole text."""
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
        ids = _prompt(request, model, tokenizer, stores.matchers, force=isinstance(request, LookaheadRequest)).ids
    return stores.reader.plan(request.key, ids, request.model, model,
                              scored or stores.prefix_caches.scoring(request.key))


def _wait_for_read(stores: Stores, request: DistributionRequest) -> None:
    """Let a long text be read as a long job first, its slices yielding to everyone's clicks, rather than in
    one pass that holds them all up (a distribution has no partial answer)."""
    read = _read_first(stores, request)
    if read is not None:
        read.finished.wait()


def _partial_lookahead(stores: Stores, request: LookaheadRequest, read: Read) -> dict:
    """The answer from the text's last tokens while `read` reads it all, and how far the read got.
    Asked again, the same answer (computed once) with the progress."""
    result = read.answers.get(request)
    if result is None:
        model, _ = load_model(request.model_name)
        start = time.perf_counter()
        result = _lookahead(stores, request, store=Unkept(), window=stores.reader.window(request.model, model))
        result = {**result, "partial": {**result["partial"], "seconds": time.perf_counter() - start}}
        read.answers = {request: result}
    partial = {**result["partial"], "read_tokens": read.read_tokens}
    notice = (f"Partial: from the text's last {partial['window_tokens']} tokens, while all "
              f"{partial['context_tokens']} are read ({partial['read_tokens']} so far); asked again once the "
              "text is read, the answer is exact.")
    return {**result, "partial": partial, "notice": notice}


def _partial_scores(request: ScoresRequest, read: Read) -> dict:
    """The tokens `read` has scored so far, listed while it reads on (the rest left out), and how far it got. Its
    rows are taken once: the reader replaces them whole after each chunk, so they are whole chunks' rows, the
    same bits as the whole text's first rows once it is read."""
    model, tokenizer = load_model(request.model_name)
    scored = read_scored_text(request, tokenizer, context_limit(model))
    rows = read.rows
    if rows is None:  # queued behind other reads: nothing scored yet
        rows = unscored(torch.tensor(scored.ids[:0], dtype=torch.long))
    result = scores_result(request.model, scored, rows, len(rows), request.k, tokenizer, len(request.text))
    partial = {"read_tokens": len(rows), "context_tokens": len(scored.ids)}
    notice = (f"Partial: the first {partial['read_tokens']} of {partial['context_tokens']} tokens, scored while the "
              "text is read; asked again, more of them, and once it is read, all.")
    return {**result, "partial": partial, "notice": notice}


def _comparison(stores: Stores, request: CompareRequest) -> dict:
    """Both models on the text: each one's listing of its tokens, the divergence before each token and at the
    caret where they read the same token ids (else per word), and each one's suggestions at the caret."""
    asked = [model_requests(request, name) for name in request.models]
    listings = tuple(_token_probabilities(stores, scores)["tokens"] for scores, _, _ in asked)
    distributions = [_next_tokens(stores, next_tokens)["distribution"] for _, next_tokens, _ in asked]
    branches = [_lookahead(stores, branches)["branches"] if request.n_branches else [] for _, _, branches in asked]
    (model_a, tokenizer), (model_b, tokenizer_b) = (load_model(name) for name in request.models)
    compared = None
    if read_alike((tokenizer, tokenizer_b), request):  # else the models cut the text into other tokens: per word
        models, limit = (model_a, model_b), min(context_limit(model_a), context_limit(model_b))
        scored = read_scored_text(asked[0][0], tokenizer, limit)
        key = (request.models, request.session)
        kept = compare_models(models, torch.tensor([scored.ids]), len(tokenizer), stores.comparisons.pop(key))
        stores.comparisons.put(key, kept)
        js, tops = at_tokens(scored, len(request.whole), kept.js, kept.top, functools.partial(_spelled, tokenizer))
        compared = js, tops, _js_at_caret(request, kept, models, tokenizer, limit)
    return comparison_result(request, listings, distributions, branches, None, compared)


def _js_at_caret(request: CompareRequest, compared: Comparison, models: tuple[PreTrainedModel, PreTrainedModel],
                 tokenizer: PreTrainedTokenizerBase, limit: int) -> float:
    """The divergence before the caret's next token: the whole text's, where the text before the caret is a run of
    its tokens (the caret between two of them), else from a reading of that text alone."""
    if request.after is None:
        return compared.next_js
    before = read_scored_text(ScoresRequest(text=request.text, session=request.session, messages=request.messages),
                              tokenizer, limit).ids
    if compared.ids[: len(before)] == before:
        return float(compared.js[len(before)])
    return compare_models(models, torch.tensor([before]), len(tokenizer)).next_js


@functools.cache
def _spelled(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    return tokenizer.decode([token_id])


def _next_tokens(stores: Stores, request: DistributionRequest) -> dict:
    """The distribution: the branches' pass with one branch of one token (the sampling shapes p_final only)."""
    one_token = LookaheadRequest(text=request.text, session=request.session, model_name=request.model_name,
                                 messages=request.messages, constraint=request.constraint, n_branches=1, depth=1,
                                 after=request.after, fit_tokens=0)
    run = _run(one_token, stores.prefix_caches, stores.matchers, force=False)
    return {"distribution": _distribution(run, request.sampling, request.k)}


def _token_probabilities(stores: Stores, request: ScoresRequest, stored_only: bool = False) -> dict | None:
    model, tokenizer = load_model(request.model_name)
    scored = read_scored_text(request, tokenizer, context_limit(model))
    key, ids = request.key, scored.ids
    prefix_caches, listings = stores.prefix_caches, stores.listings
    rows, reused = prefix_caches.scores(key, ids), len(ids)
    if rows is None and stored_only:
        return None
    if rows is None:
        cache, reused, known = prefix_caches.take(key, ids, scored=True)
        try:
            _, rows = extend_and_score(model, torch.tensor([ids], device=model.device), cache, known)
        except Cancelled:  # the session's cache goes back as it was taken, nothing of the cut pass kept
            if reused:
                cache.keep(reused, [])  # each layer cut on its own: one cancelled mid-pass holds more entries
                prefix_caches.put(key, ids[:reused], cache, (), known.head(reused))
            raise
        prefix_caches.put(key, ids, cache, (), rows)
    all_ids = scored.encoding["input_ids"]
    result = scores_result(request.model, scored, rows, reused, request.k, tokenizer, len(request.text),
                           listings.earlier(key, all_ids, scored.dropped, request.k))
    listings.keep(key, all_ids, scored.dropped, request.k, result["tokens"])
    return result


def _lookahead(stores: Stores, request: LookaheadRequest, store: CacheStore | None = None, window: int | None = None,
               shown: int | None = None) -> dict:
    """The branches, each a real choice: they fork after the tokens the model all but certainly writes next (the
    tree reads those first: Lookahead.lead); where branches write the same text, more candidates are continued
    until `shown` (default: the branches asked for) differ. Their caches are taken from and put back in `store`
    (default: the session's, in `stores`)."""
    shown = shown or request.n_branches
    run = _run(request, stores.prefix_caches if store is None else store, stores.matchers, window)
    sampling = request.sampling
    stops = eos_ids(load_model(request.model_name)[0].generation_config)
    listed = _distribution(run, sampling, max(DISTRIBUTION_ROWS, shown))
    sequences = run.result.sequences.tolist()
    firsts = _distribution(run, sampling, len(sequences), [seq[0] for seq in sequences])
    fits = None if run.result.fit is None else run.result.fit.tolist()
    led = run.forced + run.result.lead
    branches = branch_entries([led + seq for seq in sequences], stops, firsts, run.healed, run.tokenizer,
                              request.stop, fits)
    wider = more_candidates(request.n_branches, len(sequences), len(branches), shown)
    if wider is not None:
        return _lookahead(stores, replace(request, n_branches=wider), store, window, shown)
    return {
        **run.info,
        "sampling": sampling.as_dict(),
        "branch_mode": request.branch_mode,
        "seed": request.seed,
        "distribution": listed + _refused(run, sampling, listed),
        "forced": forced_entry(run.forced, run.healed, run.tokenizer),
        "lead": lead_entry(led, tuple(run.result.lead), tuple(run.result.lead_probs), run.healed, run.tokenizer),
        "branches": branches[:shown],
    }


def _generation(stores: Stores, request: GenerateRequest) -> Iterator[dict]:
    """The growing continuation after every pass; stops at EOS, a stop string, `max_new_tokens` or `time_limit` seconds.

    In-process a continuation keeps no KV cache, so the session only keys the constraint's matchers."""
    model, tokenizer = load_model(request.model_name)
    vocab_size = model.config.get_text_config().vocab_size
    ids, guide = stores.matchers.context_and_guide(request.key, request.constraint, tokenizer, request.text,
                                                   request.text, as_dicts(request.messages), stop_tokens(request.model),
                                                   vocab_size, model.device)
    max_new_tokens = min(request.max_new_tokens, context_limit(model) - 1)  # keep a token of the text to continue
    dropped = max(0, len(ids) - (context_limit(model) - max_new_tokens))
    continuation = Continuation(tokenizer, request.method, request.model, dropped, request.stop)
    stops = eos_ids(model.generation_config)
    if request.method == "lookahead":
        costs = model_pass_costs(request.model_name)
        steps = lookahead_passes(model, ids[dropped:], max_new_tokens, stops, costs, guide)
    else:
        steps = greedy_passes(model, ids[dropped:], max_new_tokens, stops, guide)
    # interactive work first; a newer continuation of the session cancels this one
    steps = scheduler.steps(scheduler.start(request.session, "continuation", request), steps)
    yield from continuation.follow(((step.tokens, step.sources) for step in steps), request.time_limit)


def _attribution(request: AttributionRequest) -> Iterator[dict]:
    """Each token's share in the model's probability of the next token (lookahead/attribution.py), over the
    last `window` tokens of the context (in chat mode the conversation's, the reply's tokens listed); with
    `at_token`, of that token's place in the text instead, from the tokens before it. Yields {"done", "of"}
    after each pass over the window, then the result."""
    model, tokenizer = load_model(request.model_name)
    text, method, steps = request.text, request.method, request.steps
    encoding, text_start = encode(
        tokenizer, text, as_dicts(request.messages), return_offsets_mapping=True, return_special_tokens_mask=True
    )
    places = text_token_places(encoding, text_start, len(text))
    cut, chars = (len(encoding["input_ids"]), len(text)) if request.at_token is None else places[request.at_token]
    all_ids, offsets, special = (encoding[k][:cut] for k in ("input_ids", "offset_mapping", "special_tokens_mask"))
    dropped = max(0, len(all_ids) - min(request.window, context_limit(model)))
    ids = all_ids[dropped:]
    # interactive work first; a newer question of the session cancels this one
    job = scheduler.start(request.session, "attribution", request)
    work = scheduler.steps(job, _explained(model, ids, request.target_token_id, method, steps))
    of = passes(method, steps)
    while True:
        try:
            yield {"done": next(work), "of": of}
        except StopIteration as finished:
            target_token_id, (scores, prob) = finished.value
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


def _explained(
    model: PreTrainedModel, ids: list[int], target: int | None, method: str, steps: int
) -> Generator[int, None, tuple[int, tuple[torch.Tensor, float]]]:
    """attribute_stepwise's passes for `target`, or for the model's first choice after `ids` (one forward more)."""
    if target is None:
        with torch.inference_mode():
            logits = model(torch.tensor([ids], device=model.device), use_cache=False, logits_to_keep=1).logits
        target = int(logits[0, -1].argmax())
    return target, (yield from attribute_stepwise(model, ids, target, method, steps))
