"""A completions server as the engine: each request type answered through OpenAI-compatible /v1/completions calls.

A server batches many writers' requests on GPUs, keeps their prefixes' KV cache and spreads a model over
GPUs and nodes: what one process can't. This backend is a thin adapter; the answers are built by
`lookahead/results.py`, as in-process. What differs from one server to another (its own request fields, how
its answers hold token ids and log-probabilities, its model list and tokenizer, its sampling order) is a
`Server` description (`server.py`), one small module per server (`vllm.py`, `llama_cpp.py`, `openai.py`). Beside
this module: `connections.py` finds each model's server and sends it the requests, `wire.py` holds what a request
becomes on the wire and what comes back, `client.py` the HTTP, `top_n.py` p_final from the top log-probabilities.

Exact by construction:
- Text is tokenized here, by the model's own tokenizer (and chat template), and sent as token ids; ids
  come back as ids: nothing is re-tokenized.
- Every sampling field is sent, since the server's defaults (from the model's generation_config) would
  replace omitted ones.
- The next-token distribution is the server's top-N log-probabilities ("raw", before any penalty or
  temperature, so p_base is the model's softmax; `top_n.py` makes p_final of them and says when it is
  exact). The k branches are one batched request of k prompts (text + first token, `max_tokens=depth-1`,
  greedy unless sampled), stopped here at the model's end-of-sequence token as in-process. Per-token
  scores come from the server's log-probabilities of the prompt's own tokens.
- Every request carries the session's fields (`Server.session_fields`), so that the server's prefix cache
  serves a session its own text and nobody else's (docs/deploy-vllm.md).

A server may serve one model only (vLLM does): the backend then takes several servers' URLs, and asks each model of
the server that lists it (`connections.py`). So `compare` can read two models: their divergence comes from each
one's top N log-probabilities, so it is a lower bound, over N (`top_n_js_bits`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import NamedTuple

import torch

from lookahead.backends.base import Capabilities
from lookahead.backends.server.client import TIMEOUT_SECONDS
from lookahead.backends.server.connections import Connections
from lookahead.backends.server.server import UNABLE
from lookahead.backends.server.top_n import (
    first_choice,
    likeliest,
    next_token_logprobs,
    ranked_top,
    score_rows,
    top_n_js_bits,
)
from lookahead.backends.server.wire import Context, NextTokens, Scored, ask_top_logprobs, by_index
from lookahead.chat import as_dicts
from lookahead.comparison import compared_tokens, model_requests, per_token, per_word, read_alike
from lookahead.constraints import Guide, MatcherStore
from lookahead.context import ScoredText, follow_ids, read_prompt, read_scored_text, writer_ids
from lookahead.models import load_tokenizer, stop_tokens
from lookahead.multiverse import Dist, Node, expand
from lookahead.outputs import (
    Attribution,
    ComparedToken,
    Continuation,
    ModelComparison,
    Multiverse,
    NextToken,
    Suggestions,
    TokenScores,
)
from lookahead.requests import (
    AttributionRequest,
    CompareRequest,
    DistributionRequest,
    GenerateRequest,
    LookaheadRequest,
    MultiverseRequest,
    ScoresRequest,
)
from lookahead.results import (
    DISTRIBUTION_ROWS,
    MAX_LEAD_TOKENS,
    GrowingContinuation,
    branch_entries,
    context_info,
    distribution_entries,
    forced_entry,
    future_nodes,
    lead_entry,
    lead_token,
    more_candidates,
    scores_result,
)
from lookahead.sampling import PLAIN, Sampling
from lookahead.scheduler import scheduler

APPROXIMATE = (
    "p_final is approximate here: the {server} server returns its top {n} tokens only, and these settings "
    "need the rest of the distribution (see docs/deploy-vllm.md)."
)
TOP_N_MAP = (
    "Each node lists the {server} server's top {n} tokens only: a child outside them is not in the map (its mass "
    "stays in its parent's rest), and no entropy is known."
)
WRITER_CUT = (
    "The writer's own path stops at its first token outside the {server} server's top {n}: the server cannot be "
    "asked a given token's probability."
)
PROMPTS_PER_REQUEST = 64  # a level's nodes asked in one request, where the server takes several prompts


class NodeDist(NamedTuple):
    """A node of the map as the server's top N give it."""

    dist: Dist  # log p_base and log p_final after its path: -inf for the tokens that did not come back
    exact: bool  # p_final is exact (`next_token_logprobs`)
    reused: int  # prompt tokens the server found in its prefix cache
    writer_listed: bool  # the writer's next token after it is known (or it is not on the writer's path)


class CompletionsBackend(Connections):
    """Answers the public functions' checked requests through the completions servers at `url` (…/v1; several
    comma-separated, each asked of the models it lists) that `server` describes. A server's backend subclasses this
    with its `server` and `capabilities`."""

    capabilities: Capabilities

    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        super().__init__(url, timeout)
        self.matchers = MatcherStore()  # each session's constraint matchers, as in-process

    def lookahead(self, request: LookaheadRequest, precompute: bool = False, partial: bool = True,
                  yielding: bool = False) -> Suggestions:
        """The branches; `precompute`, `partial` and `yielding` are not needed here (the server's prefix cache keeps
        the text, and the server schedules its requests, a long text's read among them)."""
        self._constrainable(request)
        self._able(
            'branch_mode "mass"',
            "every path's mass, to find the likeliest exactly",
            request.branch_mode != "mass",
            "lists its top tokens only, and a likelier path may run through a token outside them",
        )
        refusal = self.server.draw_refusal(request.sampling) if request.branch_mode == "sample" else None
        if refusal:
            raise ValueError(refusal)
        return self._lookahead(request)

    def _lookahead(
        self, request: LookaheadRequest, lead_probs: tuple[float, ...] = (), shown: int | None = None
    ) -> Suggestions:
        """The branches, each a real choice, as in-process: a token the model all but certainly writes next leads
        them all (`lead_probs`: the probabilities of those in `request.lead`); where branches write the same text,
        more candidates are continued until `shown` (default: the branches asked for) differ."""
        sampling, n_branches = request.sampling, request.n_branches
        shown = shown or n_branches
        context = self._context(request, room=request.depth + MAX_LEAD_TOKENS - len(request.lead))
        rows = max(DISTRIBUTION_ROWS, n_branches)
        top, reused, ceiling = self._next_tokens(context, rows)
        valid = None if context.guide is None else context.guide.valid()
        logprobs, final, exact = next_token_logprobs(
            top, len(context.tokenizer), context.ids, sampling, context.allowed, valid, ceiling
        )
        distribution = distribution_entries(logprobs, final, rows, context.tokenizer, valid=valid)
        stops = stop_tokens(context.model)
        lead = lead_token(distribution, stops, request.lead)
        if lead is not None:
            return self._lookahead(
                replace(request, lead=(*request.lead, lead.token_id)), (*lead_probs, lead.prob), shown
            )
        firsts = distribution[:n_branches]  # the branches start from the best tokens by p_final
        if valid is not None:  # the best valid ones, those past the server's top log-probabilities as it ranks them
            firsts = [f for f in firsts if f.valid]
            while len(firsts) < n_branches and (first := self._constrained_first(context, sampling, firsts)):
                firsts.append(first)
        if context.guide is None:
            sequences = self._continue_branches(context, [f.token_id for f in firsts], request)
        else:
            sequences = [self._continue_constrained(context, f.token_id, request) for f in firsts]
        branches = branch_entries(
            [[*context.forced, *seq] for seq in sequences],
            stops,
            firsts,
            context.healed,
            context.tokenizer,
            request.stop,
        )
        wider = more_candidates(n_branches, len(sequences), len(branches), shown)
        if wider is not None:
            return self._lookahead(replace(request, n_branches=wider), lead_probs, shown)
        fits = self._fits(context, [branch.token_ids[len(context.forced) :] for branch in branches[:shown]], request)
        return Suggestions(
            **self._info(context, reused, exact),
            partial=None,  # the server reads a long text itself, scheduling it among its other requests
            sampling=sampling,
            branch_mode=request.branch_mode,
            seed=request.seed,
            distribution=distribution[: max(DISTRIBUTION_ROWS, shown)],
            forced=forced_entry(
                list(context.forced[: len(context.forced) - len(request.lead)]), context.healed, context.tokenizer
            ),
            lead=lead_entry(list(context.forced), request.lead, lead_probs, context.healed, context.tokenizer),
            branches=[
                replace(branch, fit=None if branch.ends or branch.stop or fits is None else fit)
                for branch, fit in zip(branches[:shown], fits or [None] * shown)
            ],
        )

    def distribution(self, request: DistributionRequest) -> list[NextToken]:
        self._constrainable(request)
        context = self._context(request, room=1)
        top, _, ceiling = self._next_tokens(context, request.k)
        valid = None if context.guide is None else context.guide.valid()
        logprobs, final, _ = next_token_logprobs(
            top, len(context.tokenizer), context.ids, request.sampling, context.allowed, valid, ceiling
        )
        return distribution_entries(logprobs, final, request.k, context.tokenizer, valid=valid)

    def scores(self, request: ScoresRequest) -> TokenScores:
        return self._scores(request).result

    def generate(self, request: GenerateRequest) -> Iterator[Continuation]:
        """The server's greedy continuation, streamed (one server step per token: the method has no say here).

        Under a constraint, one request per token, each allowing only the tokens the constraint allows next."""
        self._constrainable(request)
        model = request.model
        limit = self._model(model).max_model_len
        tokenizer = load_tokenizer(model)
        stops = stop_tokens(model)
        ids, guide = self.matchers.context_and_guide(
            request.key,
            request.constraint,
            tokenizer,
            request.text,
            request.text,
            as_dicts(request.messages),
            stops,
            len(tokenizer),
            torch.device("cpu"),
        )
        max_new_tokens = min(request.max_new_tokens, limit - 1)  # keep a token of the text to continue
        dropped = max(0, len(ids) - (limit - max_new_tokens))
        if guide is None:
            body = {
                **self._body(model, ids[dropped:], max_new_tokens, request.session),
                "stream": True,
                **self.server.stop_fields(stops),
            }
            chunks = (
                [t for c in chunk.get("choices", []) for t in self.server.token_ids(c)] for chunk in self._stream(body)
            )
            passes = ((tokens, ["step"] * len(tokens)) for tokens in chunks if tokens)
        else:
            passes = (
                ([token], ["step"])
                for token in self._constrained_tokens(
                    model, ids[dropped:], guide, stops, max_new_tokens, request.session
                )
            )
        # the server schedules its work; here the continuation can be cancelled between tokens
        job = scheduler.start(request.session, "continuation", request)
        passes = scheduler.steps(job, passes)
        continuation = GrowingContinuation(tokenizer, "greedy", model, dropped, request.stop)
        yield from continuation.follow(passes, request.time_limit)

    def attribution(self, request: AttributionRequest) -> Iterator[Attribution]:
        raise ValueError(
            f"attribution needs the model's weights and gradients in this process; the "
            f"{self.server.name} server returns log-probabilities only: ask it of the in-process "
            "backend (use_backend())"
        )

    def compare(self, request: CompareRequest) -> ModelComparison:
        """Each model asked of its own server. Where both read the text as the same token ids, the divergences come
        from their top N log-probabilities (`js_over`: N), a lower bound of the whole distributions'."""
        asked = [model_requests(request, name) for name in request.models]
        scored = [self._scores(scores) for scores, _, _ in asked]
        distributions = [self.distribution(distribution) for _, distribution, _ in asked]
        branches = [self.lookahead(lookahead).branches if request.n_branches else [] for _, _, lookahead in asked]
        tokenizers = (load_tokenizer(request.models[0]), load_tokenizer(request.models[1]))
        if not read_alike(tokenizers, request):
            listings = (scored[0].result.tokens, scored[1].result.tokens)
            return per_word(request, listings, distributions, branches, self.logprobs)
        tokens, at_caret = self._compared(request, [scores for scores, _, _ in asked], scored)
        return per_token(request, tokens, at_caret, distributions, branches, self.logprobs)

    def multiverse(self, request: MultiverseRequest, yielding: bool = False) -> Multiverse:
        """The map of futures, grown as in-process (`lookahead/multiverse.py`'s `expand`) from the server's top N
        after each node, a level at a time. The last level is not asked: no entropy is known here. `yielding` is not
        needed: the server schedules its own work."""
        self._constrainable(request)
        context = self._context(request, room=request.depth)  # a probing backend knows its server from here on
        self._able(
            "the map of futures (multiverse)",
            "each path sent as token ids",
            self.server.takes_ids,
            "takes text, which it tokenizes again (joining a path's tokens)",
        )
        writer = writer_ids(request, context.tokenizer, context.healed)
        stops = frozenset(stop_tokens(context.model))
        nodes = [Node(None, None, 0, 1.0, 1.0, 1.0, (), context.guide, on_text=True)]
        level, answered = [0], {}
        while level:
            asked = [i for i in level if nodes[i].depth < request.depth]  # the last level's children are not listed
            found = self._node_dists(context, [nodes[i] for i in asked], writer, request.sampling)
            answered.update((i, got) for i, got in zip(asked, found) if got is not None)
            level = []
            for i, got in zip(asked, found):
                known = writer if got is None or got.writer_listed else writer[: nodes[i].depth]
                level += [] if got is None else expand(nodes, i, got.dist, request.depth, request.cutoff, known, stops)
        info = self._info(context, answered[0].reused if answered else 0, all(a.exact for a in answered.values()))
        said = [TOP_N_MAP] + [WRITER_CUT] * (not all(a.writer_listed for a in answered.values()))
        info["notice"] = " ".join(
            filter(None, [info["notice"], *(line.format(server=self.server.name, n=self.logprobs) for line in said)])
        )
        return Multiverse(
            **info,
            sampling=request.sampling,
            depth=request.depth,
            cutoff=request.cutoff,
            top_n=self.logprobs,
            passes=max((nodes[i].depth for i in answered), default=0),
            nodes=future_nodes(nodes, context.tokenizer, context.healed, stops),
        )

    def warm_up(self) -> Iterator[str]:
        """Nothing to prepare here: the server holds the model."""
        return iter(())

    def forget(self, session: str) -> None:
        """Stop the session's continuation and drop its constraint matchers (the server's cache is kept per
        session: nobody else reuses it)."""
        scheduler.cancel(session)
        self.matchers.forget(session)

    def _constrained_tokens(
        self,
        model: str,
        ids: list[int],
        guide: Guide,
        stops: Collection[int],
        n: int,
        session: str,
        sampling: Sampling = PLAIN,
        sample: bool = False,
        seed: int = 0,
        first_allowed: torch.Tensor | None = None,
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
            body = {
                **self._body(model, ids, 1, session, sampling, sample, seed),
                **self.server.allowed_tokens(torch.nonzero(valid)[:, 0].tolist()),
            }
            token = self.server.token_ids(self._complete(body)["choices"][0])[0]
            guide.advance(token)
            ids.append(token)
            yield token
            if token in stops:
                return

    # What the tasks share

    def _scores(self, request: ScoresRequest, limit: int | None = None) -> Scored:
        """token_probabilities' answer, the text as scored, and the server's prompt log-probabilities over it (the top
        N at each position); `limit`: a context shorter than the model's."""
        self._able(
            "token_probabilities (the heatmap)",
            "each token of the text scored",
            self.capabilities.prompt_scores,
            "does not score the text you wrote",
        )
        tokenizer = load_tokenizer(request.model)
        scored = read_scored_text(request, tokenizer, limit or self._model(request.model).max_model_len)
        width = max(request.k, self.logprobs)
        body = self._body(request.model, scored.ids, 1, request.session)
        answer = self._with_logprobs(body, self.server.prompt_logprobs, width, request.k)
        positions = self.server.prompt_positions(answer["choices"][0])
        rows = score_rows(scored.ids, positions, width)
        return Scored(
            scores_result(
                request.model, scored, rows, self.server.cached_tokens(answer), request.k, tokenizer, len(request.text)
            ),
            scored,
            positions,
            rows,
        )

    def _compared(
        self, request: CompareRequest, scores: list[ScoresRequest], scored: list[Scored]
    ) -> tuple[list[ComparedToken], float]:
        """Over the context both models hold (a model whose own holds more of the text is asked again over the
        shorter one): each token under both, the divergence before it and each model's first choice there, and the
        divergence at the caret, from each one's top N log-probabilities."""
        limit = min(self._model(name).max_model_len for name in request.models)
        shared = [
            read if self._model(ask.model).max_model_len == limit else self._scores(ask, limit)
            for ask, read in zip(scores, scored)
        ]
        window, a, b = shared[0].text, shared[0].positions, shared[1].positions
        n = self.logprobs
        js = torch.cat(
            [
                torch.tensor([math.nan]),  # the first token has nothing before it
                top_n_js_bits([(ranked_top(p, n), ranked_top(q, n)) for p, q in zip(a[1:], b[1:])]),
            ]
        )
        top = torch.tensor([[0, *map(first_choice, positions[1:])] for positions in (a, b)])
        tokenizer = load_tokenizer(request.models[0])
        own = [(read.text, read.rows) for read in scored]
        return (
            compared_tokens(window, js, top, own, tokenizer, len(request.whole)),
            self._js_at_caret(request, window, js, limit),
        )

    def _js_at_caret(self, request: CompareRequest, window: ScoredText, js: torch.Tensor, limit: int) -> float:
        """The divergence before the caret's next token: the whole text's, where the text before the caret is a run
        of its tokens, else from both servers' top N after that text alone."""
        caret = ScoresRequest(text=request.text, session=request.session, messages=request.messages)
        before = read_scored_text(caret, load_tokenizer(request.models[0]), limit).ids
        if len(before) < len(window.ids) and window.ids[: len(before)] == before:
            return float(js[len(before)])
        tops = [
            self._next_tokens(Context(load_tokenizer(name), before, 0, "", name, request.session), 1)[0]
            for name in request.models
        ]
        return float(top_n_js_bits([(likeliest(tops[0], self.logprobs), likeliest(tops[1], self.logprobs))])[0])

    def _context(self, request: LookaheadRequest | DistributionRequest | MultiverseRequest, room: int) -> Context:
        """What the model reads, tokenized here exactly as in-process (lookahead/context.py)."""
        model = request.model
        tokenizer = load_tokenizer(model)
        prompt = read_prompt(
            request,
            tokenizer,
            self.matchers,
            self._model(model).max_model_len,
            room,
            len(tokenizer),
            torch.device("cpu"),
            force=isinstance(request, LookaheadRequest),
        )
        return Context(
            tokenizer,
            prompt.ids,
            prompt.dropped,
            prompt.healed,
            model,
            request.session,
            prompt.allowed,
            prompt.guide,
            tuple(prompt.forced),
        )

    def _info(self, context: Context, reused: int, exact: bool) -> dict:
        device = f"{self.server.device} {self._model(context.model).client.url}"
        info = context_info(context.model, device, len(context.ids), reused, context.dropped, context.healed)
        if not exact:
            approximate = APPROXIMATE.format(server=self.server.name, n=self.logprobs)
            info["notice"] = " ".join(filter(None, [info["notice"], approximate]))
        return info

    def _next_tokens(self, context: Context, needed: int) -> NextTokens:
        """The server's top log-probabilities after the context (at least `needed` of them), and its cached tokens."""
        body = self._body(context.model, context.ids, 1, context.session)
        answer = self._with_logprobs(body, ask_top_logprobs, max(needed, self.logprobs), needed)
        choice = answer["choices"][0]
        return NextTokens(
            self.server.top_logprobs(choice), self.server.cached_tokens(answer), self.server.ceiling(choice)
        )

    def _node_dists(
        self, context: Context, nodes: list[Node], writer: list[int], sampling: Sampling
    ) -> list[NodeDist | None]:
        """Each node's next-token distribution from the server's top N after the text and its path (which the
        server's prefix cache holds); None where the constraint allows nothing after it (the node then ends, as
        in-process). The writer's next token after a node on the writer's path is made the server's choice, alone in
        its request, so that its own log-probability comes back whatever its rank (where the server takes a list of
        allowed tokens: else it is known only among the top N)."""
        valid = [None if node.guide is None else node.guide.valid() for node in nodes]
        for node, allowed in zip(nodes, valid):
            node.ends |= allowed is not None and not bool(allowed.any())
        wanted = [k for k, node in enumerate(nodes) if not node.ends]
        on_path = {k: writer[nodes[k].depth] for k in wanted if nodes[k].on_text and nodes[k].depth < len(writer)}
        forced = on_path if self.capabilities.constraints else {}
        free = [k for k in wanted if k not in forced]
        size = PROMPTS_PER_REQUEST if self.server.batches else 1
        requests = [(free[at : at + size], None) for at in range(0, len(free), size)]
        requests += [([k], token) for k, token in forced.items()]
        tops = {
            k: top
            for ks, token in requests
            for k, top in zip(ks, self._tops_after(context, [[*context.ids, *nodes[k].path] for k in ks], token))
        }
        dists: list[NodeDist | None] = [None] * len(nodes)
        for k in wanted:
            top, path = tops[k], list(nodes[k].path)
            base, final, exact = next_token_logprobs(
                top.top,
                len(context.tokenizer),
                [*context.ids, *path],
                sampling,
                None if path else context.allowed,
                valid[k],
                top.ceiling,
            )
            dist = Dist(*(t.masked_fill(t.isnan(), float("-inf")) for t in (base, final)))  # no valid token came back
            listed = k not in on_path or math.isfinite(float(base[on_path[k]]))
            dists[k] = NodeDist(dist, exact, top.reused, listed)
        return dists

    def _tops_after(self, context: Context, prompts: list[list[int]], forced: int | None) -> list[NextTokens]:
        """The server's top N log-probabilities after each of `prompts`, in one request (several prompts only to a
        server that takes them), and its cached tokens. `forced`: the only token it may choose, whose own
        log-probability comes back beside them, every token left out being at most the N-th's."""
        body = self._body(context.model, prompts if len(prompts) > 1 else prompts[0], 1, context.session)
        if forced is not None:
            body.update(self.server.allowed_tokens([forced]))
        answer = self._with_logprobs(body, ask_top_logprobs, self.logprobs, 1)
        reused = self.server.cached_tokens(answer)
        tops = []
        for choice in by_index(answer):
            top, ceiling = self.server.top_logprobs(choice), self.server.ceiling(choice)
            if forced is not None:
                ceiling = min(likeliest(top, self.logprobs).values()) if ceiling is None else ceiling
                top = {**top, forced: self.server.chosen_logprob(choice)}
            tops.append(NextTokens(top, reused, ceiling))
        return tops

    def _constrained_first(self, context: Context, sampling: Sampling, taken: list[NextToken]) -> NextToken | None:
        """The best valid token but those `taken`, where it did not come back among the top log-probabilities (as the
        server chooses it); None where the constraint allows no other."""
        allowed = context.guide.valid() if context.allowed is None else context.guide.valid() & context.allowed
        allowed = allowed.clone()
        allowed[[first.token_id for first in taken]] = False
        if not allowed.any():
            return None
        token = next(
            self._constrained_tokens(
                context.model,
                context.ids,
                context.guide.fork(),
                set(),
                1,
                context.session,
                sampling,
                first_allowed=allowed,
            )
        )
        return NextToken(token, context.tokenizer.decode([token]), 0.0, float("-inf"), 1.0)

    def _fits(self, context: Context, sequences: list[list[int]], request: LookaheadRequest) -> list[float] | None:
        """Each branch's fit with the text after the caret (lookahead/branches.py), from the server's log-probabilities
        of that text's first tokens in one request: a prompt per branch (the context, the branch, then those
        tokens) and one without a branch. None where the server cannot score them at a click's cost."""
        if not self.capabilities.fit:
            return None
        # room for the branch, and for the one token a completion request generates
        room = self._model(context.model).max_model_len - len(context.ids) - request.depth - 1
        follow = follow_ids(request, context.tokenizer, room)
        if not follow:
            return None
        unforced = list(context.ids[: len(context.ids) - len(context.forced)])
        prompts = [[*context.ids, *seq, *follow] for seq in sequences] + [[*unforced, *follow]]
        body = self._body(context.model, prompts, 1, context.session)
        choices = self._complete_each({**body, **self.server.prompt_logprobs(1)})
        totals = []
        for prompt, choice in zip(prompts, choices):
            positions = self.server.prompt_positions(choice)[len(prompt) - len(follow) :]
            totals.append(sum(position[token].logprob for token, position in zip(follow, positions)))
        return [(total - totals[-1]) / len(follow) for total in totals[:-1]]

    def _continue_constrained(self, context: Context, first: int, request: LookaheadRequest) -> list[int]:
        """A branch from `first` under the constraint: one request per token, each with its own allowed tokens."""
        guide = context.guide.fork()
        guide.advance(first)
        stops = stop_tokens(context.model)
        depth = request.depth
        rest = list(
            self._constrained_tokens(
                context.model,
                [*context.ids, first],
                guide,
                stops,
                depth - 1,
                context.session,
                request.sampling,
                request.branch_mode == "sample",
                request.seed,
            )
        )
        return [first, *rest, *[rest[-1] if rest else first] * (depth - 1 - len(rest))]

    def _continue_branches(self, context: Context, firsts: list[int], request: LookaheadRequest) -> list[list[int]]:
        """Each first token continued to `depth` tokens: one request, a prompt per branch."""
        if request.depth == 1:
            return [[first] for first in firsts]
        prompts = [[*context.ids, first] for first in firsts]
        body = self._body(
            context.model,
            prompts,
            request.depth - 1,
            context.session,
            request.sampling,
            request.branch_mode == "sample",
            request.seed,
        )
        choices = self._complete_each(body)
        return [[first, *self.server.token_ids(choice)] for first, choice in zip(firsts, choices)]

    def _body(
        self,
        model: str,
        prompt: list,
        max_tokens: int,
        session: str,
        sampling: Sampling = PLAIN,
        sample: bool = False,
        seed: int = 0,
    ) -> dict:
        """Every field of a completion request, explicit (the server's defaults would replace omitted ones): the
        server's own, the session's (so its cache is its own) and `sampling`'s, greedy unless `sample`."""
        return {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "n": 1,
            "seed": seed,
            "stream": False,
            **self.server.fields,
            **self.server.session_fields(model, session),
            **self.server.sampling_fields(sampling, sample),
        }

    def _able(self, task: str, need: str, able: bool, lacks: str) -> None:
        """ValueError saying that this server cannot give what `task` needs, unless `able`."""
        if not able:
            raise ValueError(
                UNABLE.format(task=task, need=need, server=self.server.name, lacks=lacks, backend=self.server.device)
            )

    def _constrainable(
        self, request: LookaheadRequest | DistributionRequest | GenerateRequest | MultiverseRequest
    ) -> None:
        self._able(
            "a constraint",
            "the server to take the tokens each step allows",
            request.constraint is None or self.capabilities.constraints,
            "takes none",
        )
