"""p_final from a server's top-N log-probabilities (lookahead/backends/server/top_n.py) against the whole vocabulary's.

No server: random logits stand for the model's, their top N for what a server returns (as `completions.py` passes
them to `next_token_logprobs`), and `Sampling.final_scores` over all the logits, as in-process, is the reference.
Wherever p_final is said to be exact it must match the reference, and keep matching when the tokens past the top
N are rearranged (their mass moved, the top N unchanged): it may not depend on what did not come back.
"""

import math
import random

import pytest
import torch

from lookahead.backends.server.top_n import Returned, next_token_logprobs, score_rows, top_n_js_bits
from lookahead.comparison import js_bits
from lookahead.sampling import PresenceFrequencyPenalty, Sampling
from lookahead.scoring import MAX_ALTERNATIVES

VOCAB = 2000
N = 20  # the server's default top N
TOLERANCE = 1e-5
TRIALS = 3000


def server_top(logits: torch.Tensor, n: int = N) -> dict[int, float]:
    """The top n log-probabilities by token id, as a server returns them (float32)."""
    values, ids = torch.log_softmax(logits.float(), -1).topk(n)
    return dict(zip(ids.tolist(), values.tolist()))


def reference(logits: torch.Tensor, context: list[int], sampling: Sampling) -> torch.Tensor:
    """log p_final over the whole vocabulary, as in-process."""
    return torch.log_softmax(sampling.final_scores(torch.tensor([context]), logits.float()[None])[0], -1)


def ours(logits: torch.Tensor, context: list[int], sampling: Sampling) -> tuple[torch.Tensor, bool]:
    _, final, exact = next_token_logprobs(server_top(logits), VOCAB, context, sampling, None)
    return final, exact


def error(final: torch.Tensor, logits: torch.Tensor, context: list[int], sampling: Sampling) -> float:
    """The largest difference of p_final over the returned tokens (the distribution shows those)."""
    ids = list(server_top(logits))
    return float((final[ids].exp() - reference(logits, context, sampling)[ids].exp()).abs().max())


def rearranged(logits: torch.Tensor, context: list[int], sampling: Sampling) -> list[torch.Tensor]:
    """Vocabularies with the same top N log-probabilities, the rest's mass placed otherwise: as much as fits on the
    tokens the penalties favour most (each a little under the N-th, or under the rest's whole mass), for a few
    counts of them; or spread evenly. Each is checked to return the same top N."""
    logprobs = torch.log_softmax(logits.double(), -1)
    top = torch.tensor(list(server_top(logits)))
    rest = torch.ones(VOCAB, dtype=torch.bool)
    rest[top] = False
    p = logprobs.exp()
    mass = float(p[rest].sum())
    lift = PresenceFrequencyPenalty(sampling.presence_penalty, sampling.frequency_penalty)(
        torch.tensor([context]), torch.zeros(1, VOCAB, dtype=torch.double))[0]
    rest_ids = rest.nonzero()[:, 0]
    favoured = rest_ids[lift[rest_ids].argsort(descending=True, stable=True)]
    cap = min(float(p[top].min()), mass) * (1 - 1e-3)
    layouts = []
    for count in sorted({1, 2, max(1, sampling.top_k - N), max(1, sampling.top_k), int(mass / cap), 500}):
        count = min(count, int(mass / cap), len(favoured) - 1)
        if count >= 1:
            q = p.clone()
            q[favoured[:count]] = cap
            q[favoured[count:]] = (mass - cap * count) / (len(favoured) - count)
            layouts.append(q)
    even = p.clone()
    even[rest] = mass / len(rest_ids)
    layouts.append(even)
    same = []
    for q in layouts:
        candidate = q.log().float()
        if server_top(candidate).keys() == server_top(logits).keys() and all(
                abs(a - b) < 1e-5 for a, b in zip(server_top(candidate).values(), server_top(logits).values())):
            same.append(candidate)
    return same


def random_case(rng: random.Random) -> tuple[torch.Tensor, list[int], Sampling]:
    """Logits of many shapes (flat, peaked, with a flat tail), a context drawing often on the likeliest tokens
    (so that the penalties reorder them), and settings mixing every processor but the repetition penalty."""
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    logits = torch.randn(VOCAB, generator=generator) * rng.uniform(0.3, 6)
    shape = rng.random()
    if shape < 0.2:
        logits *= rng.uniform(3, 8)
    elif shape < 0.35:
        tail = logits.argsort()[: VOCAB - 30]
        logits[tail] = rng.uniform(-3, 0) + torch.randn(len(tail), generator=generator) * 0.01
    likeliest = logits.argsort(descending=True).tolist()[:60]
    context = [rng.choice(likeliest) if rng.random() < 0.6 else rng.randrange(VOCAB) for _ in range(rng.randint(1, 40))]

    def either(*options):
        return rng.choice(options)

    sampling = Sampling(
        temperature=either(1.0, 1.0, round(rng.uniform(0.3, 1.0), 2), round(rng.uniform(1.0, 2.5), 2)),
        top_k=either(0, rng.randint(1, N), rng.randint(N + 1, 200)),
        top_p=either(1.0, round(rng.uniform(0.2, 0.99), 2)),
        min_p=either(0.0, 0.0, round(rng.uniform(0.01, 0.5), 2)),
        presence_penalty=either(0.0, 0.0, round(rng.uniform(-2, 2), 1)),
        frequency_penalty=either(0.0, 0.0, round(rng.uniform(-2, 2), 1)),
    )
    return logits, context, sampling


def test_p_final_matches_the_whole_vocabulary_wherever_it_is_said_to_be_exact():
    rng = random.Random(20261123)
    exact_cases, wrong = [], []
    for _ in range(TRIALS):
        logits, context, sampling = random_case(rng)
        final, exact = ours(logits, context, sampling)
        if not exact:
            continue
        exact_cases.append(sampling)
        for vocabulary in [logits, *rearranged(logits, context, sampling)]:
            if error(final, vocabulary, context, sampling) > TOLERANCE:
                wrong.append(sampling)
                break
    assert not wrong, f"{len(wrong)} of {len(exact_cases)} said exact are not: {wrong[:3]}"
    penalised = [s for s in exact_cases if s.presence_penalty or s.frequency_penalty]
    past_n_with_top_p = [s for s in exact_cases if s.top_k > N and s.top_p < 1]
    assert len(exact_cases) > TRIALS // 3 and len(penalised) > 100 and len(past_n_with_top_p) > 40, "exact often"


def ranked_logits(top: list[float], tail: float, seed: int = 0) -> torch.Tensor:
    """Logits: tokens 0.. N-1 at `top`, the rest around `tail`, all distinct."""
    logits = tail + torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * 0.01
    logits[: len(top)] = torch.tensor(top)
    return logits


def test_a_penalty_can_lift_a_token_from_past_the_top_n_into_the_top_k():
    """The top 20 are all in the context: a presence penalty lowers each of them, so the 21st, just under the 20th
    and not penalised, outranks the penalised 20th: top_k = 20 keeps it, and the top N cannot know."""
    logits = ranked_logits([10.0 - 0.1 * i for i in range(N)], -5.0)
    logits[N] = logits[N - 1] - 0.05  # the 21st, not in the context
    context = list(range(N))
    sampling = Sampling(top_k=N, presence_penalty=0.5)
    final, exact = ours(logits, context, sampling)
    assert not exact
    assert torch.isfinite(reference(logits, context, sampling)[N]), "the 21st is kept in truth"
    # where the penalty cannot reach the k-th token, it stays exact
    sampling = Sampling(top_k=5, presence_penalty=0.5, temperature=0.7, top_p=0.9)
    final, exact = ours(logits, context, sampling)
    assert exact and error(final, logits, context, sampling) < TOLERANCE


def test_top_p_after_a_top_k_past_the_top_n_renormalises_over_tokens_that_did_not_come_back():
    """top_k = 40 keeps 20 tokens past the top 20, of unknown mass: top_p's probabilities are renormalised over
    the 40, which the top 20 cannot say. The likeliest holds 0.41, the next 19 about 0.03 each, the rest 0.022
    spread thin: counting the rest's whole mass, top_p = 0.475 keeps 4 tokens (the 4th has 0.47 before it);
    the truth, renormalised over 0.979, keeps 3."""
    probs = torch.tensor([0.41] + [0.03 - 1e-5 * i for i in range(N - 1)])
    logits = ranked_logits(probs.log().tolist(), 0.0)
    noise = torch.randn(VOCAB - N, generator=torch.Generator().manual_seed(1)) * 0.01
    logits[N:] = torch.log((1 - probs.sum()) / (VOCAB - N)) + noise
    sampling = Sampling(top_k=40, top_p=0.475)
    final, exact = ours(logits, [1], sampling)
    assert not exact
    assert int(torch.isfinite(final).sum()) == 4 and int(torch.isfinite(reference(logits, [1], sampling)).sum()) == 3
    # where the cut is the same with none of the rest's mass and with all of it, it stays exact
    sampling = Sampling(top_k=40, top_p=0.3)
    final, exact = ours(logits, [1], sampling)
    assert exact and error(final, logits, [1], sampling) < TOLERANCE


@pytest.mark.parametrize("sampling", [Sampling(temperature=5.0), Sampling(temperature=5.0, top_k=100, min_p=0.001)])
def test_a_high_temperature_raises_a_rest_too_small_for_float32(sampling):
    """The top 20 hold all but 3e-8 of the mass: their float32 total is 1 to within its rounding (here exactly 1,
    which counted as no rest at all). At temperature 5 the 1,980 tokens past them hold much of p_final."""
    logits = ranked_logits([0.0] + [-16.0 - 0.1 * i for i in range(N - 1)], -25.0)
    assert abs(1 - sum(torch.tensor(list(server_top(logits).values())).exp())) < 1e-6
    final, exact = ours(logits, [1], sampling)
    assert not exact
    assert error(final, logits, [1], sampling) > 0.1


def test_the_divergence_from_two_top_n_is_over_their_common_tokens_and_the_rest():
    """a's top 3: tokens 1, 2, 3 at 0.5, 0.3, 0.1; b's: 2, 3, 4 at 0.4, 0.2, 0.3. The cells both know: tokens 2 and
    3, and every other token (a: 0.6, b: 0.4); their mean 0.35, 0.15 and 0.5."""
    a = {1: math.log(0.5), 2: math.log(0.3), 3: math.log(0.1)}
    b = {2: math.log(0.4), 3: math.log(0.2), 4: math.log(0.3)}
    kl_a = 0.3 * math.log2(0.3 / 0.35) + 0.1 * math.log2(0.1 / 0.15) + 0.6 * math.log2(0.6 / 0.5)
    kl_b = 0.4 * math.log2(0.4 / 0.35) + 0.2 * math.log2(0.2 / 0.15) + 0.4 * math.log2(0.4 / 0.5)
    js = top_n_js_bits([(a, b), (b, a), (a, a), ({1: 0.0}, {2: 0.0})])
    assert js.tolist() == pytest.approx([(kl_a + kl_b) / 2, (kl_a + kl_b) / 2, 0.0, 0.0], abs=1e-6)


def test_the_divergence_from_two_top_n_is_at_most_the_whole_vocabularys():
    """b's logits are a's plus noise, more at each of 200 positions: from equal to far apart."""
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(200, VOCAB, generator=generator) * 3
    logits = torch.stack([a, a + torch.randn(200, VOCAB, generator=generator) * torch.linspace(0, 3, 200)[:, None]])
    logprobs = torch.log_softmax(logits.double(), -1)
    tops = [[server_top(row) for row in model] for model in logits]
    ours = top_n_js_bits(list(zip(*tops)))
    whole = js_bits(logprobs[0], logprobs[1])
    assert (ours <= whole + 1e-6).all() and (ours > 0.01).sum() > 100


@pytest.mark.parametrize("width", [5, 20, 50])
def test_score_rows_hold_the_top_twenty_whatever_the_servers_cap(width):
    """A server allowing fewer or more log-probabilities than 20 (--max-logprobs) still gives rows of 20 alternatives,
    as every `Scores` row has (the first token's, and those before a long text's window, are joined to them)."""
    position = {token: Returned(-0.1 * token, token) for token in range(1, width + 1)}
    rows = score_rows([7, 1, 2], [None, position, position], width)
    assert rows.top_ids.shape == (3, MAX_ALTERNATIVES)
    assert rows.top_ids[1].tolist() == [*range(1, min(width, MAX_ALTERNATIVES) + 1), *[-1] * (MAX_ALTERNATIVES - width)]


def test_a_token_the_server_did_not_return_is_ranked_below_those_it_did_never_given_a_number():
    named = {1: Returned(-0.5, 1), 2: Returned(-1.5, 2), 3: Returned(-2.5, 3)}
    rows = score_rows([7, 1, 9, 9], [None, named, named, {}], 20)
    assert rows.logprob[1].item() == -0.5 and rows.rank[1].item() == 1
    assert math.isnan(rows.logprob[2].item()) and rows.rank[2].item() == 4  # rank > 3: the least it can be
    assert math.isnan(rows.logprob[3].item()) and rows.rank[3].item() == 0  # the server named none: nothing known
