"""Lookahead decoding is lossless: exactly transformers' greedy tokens, on every test model."""

import inspect
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice

import pytest
import torch

import custom_llm_inference as inference
from lookahead import decoding
from lookahead.cpu_linear import ROWS, TRANSPOSED_ROWS, MeasuredLinear, PassCosts, use_linear_path
from lookahead.decoding import (
    NGRAM,
    RECYCLED,
    RETRY_SHARE,
    SOURCES,
    STEP,
    DraftTrie,
    NGramPool,
    Pass,
    _Planner,
    _RunningCosts,
    greedy_passes,
    lookahead_passes,
    tree_mask,
)
from lookahead.models import eos_ids

PROMPTS = {
    "code": textwrap.dedent(inspect.getsource(textwrap.indent)),
    "prose": "The history of the lighthouse begins in ancient times, when fires were lit on hilltops to",
    "repetition": "one two three four, one two three four, one two three four, one two",
    "list": "Shopping list:\n1. apples\n2. bread\n3. milk\n4.",
    "qa": "Question: What is the capital of France?\nAnswer:",
}


# A result's fields that depend on how long its passes took, on the machine's load: how many there were, what each gave.
TIMED = {"seconds", "forward_passes", "tokens_per_pass", "accepted_per_pass", "draft_source_per_token"}


def transformers_greedy(model, tokenizer, text, n, **kwargs) -> list[int]:
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    return model.generate(ids, do_sample=False, max_new_tokens=n, **kwargs)[0, ids.shape[1] :].tolist()


def tokens(passes: list[Pass]) -> list[int]:
    return [token for p in passes for token in p.tokens]


@dataclass
class PassClock:
    """Time that moves only while the model runs: a pass of n tokens takes `seconds(n)` (a test may change it), so
    that what lookahead decoding measures is the test's, whatever else the machine runs."""

    seconds: Callable[[int], float]
    now: float = 0.0
    widths: list[int] = field(default_factory=list)  # tokens fed by each pass so far

    def __call__(self) -> float:
        return self.now

    def _tick(self, module: torch.nn.Module, args: tuple) -> None:
        self.widths.append(args[0].shape[1])  # the decoders pass the input ids first
        self.now += self.seconds(self.widths[-1])

    @contextmanager
    def driving(self, model: torch.nn.Module) -> Iterator["PassClock"]:
        hook = model.register_forward_pre_hook(self._tick)
        try:
            yield self
        finally:
            hook.remove()


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("method", ["lookahead", "greedy"])
def test_tokens_equal_transformers_greedy_generate(model_name, prompt, method):
    model, tokenizer = inference.load_model(model_name)
    n = 12 if model_name.startswith("/") else 40  # tiny models have a 64-token context
    text = PROMPTS[prompt][-150:] if model_name.startswith("/") else PROMPTS[prompt]
    expected = transformers_greedy(model, tokenizer, text, n)
    result = inference.generate(text, n, method, model_name=model_name)
    assert result["token_ids"] == expected
    assert sum(result["accepted_per_pass"]) == len(result["token_ids"]) == len(result["draft_source_per_token"])
    assert result["forward_passes"] == len(result["accepted_per_pass"])
    assert set(result["draft_source_per_token"]) <= {STEP, *SOURCES}
    assert result["text"] == tokenizer.decode(expected, skip_special_tokens=True) == "".join(result["token_texts"])


def test_repetitive_text_takes_fewer_passes_than_tokens(embedded):
    model, tokenizer = embedded
    ids = tokenizer(PROMPTS["repetition"])["input_ids"]
    passes = passes_by_the_curve(model, ids, 30, eos_ids(model.generation_config), costs(lambda n: 1.0))
    assert tokens(passes) == transformers_greedy(model, tokenizer, PROMPTS["repetition"], 30)
    assert len(passes) < 30 and max(len(p.tokens) for p in passes) > 1
    assert {source for p in passes for source in p.sources} & set(SOURCES)
    greedy = inference.generate(PROMPTS["repetition"], 30, "greedy")
    assert greedy["forward_passes"] == len(greedy["token_ids"]) and set(greedy["draft_source_per_token"]) == {STEP}


@pytest.mark.parametrize("method", ["lookahead", "greedy"])
def test_generation_stops_after_eos_like_transformers(embedded, method):
    model, tokenizer = embedded
    text = PROMPTS["repetition"]
    plain = transformers_greedy(model, tokenizer, text, 20)
    eos = plain[6]  # pretend the 7th greedy token is EOS
    original = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = eos
    try:
        expected = transformers_greedy(model, tokenizer, text, 20)
        result = inference.generate(text, 20, method)
    finally:
        model.generation_config.eos_token_id = original
    assert result["token_ids"] == expected and result["token_ids"][-1] == eos
    assert len(result["token_ids"]) == plain.index(eos) + 1


def test_streaming_grows_pass_by_pass_to_the_final_result(embedded):
    steps = list(inference.generate_stream(PROMPTS["list"], 12, "lookahead"))
    assert [len(s["accepted_per_pass"]) for s in steps] == list(range(1, len(steps) + 1))
    assert all(a["token_ids"] == b["token_ids"][: len(a["token_ids"])] for a, b in zip(steps, steps[1:]))
    untimed = [{k: v for k, v in result.items() if k not in TIMED}
               for result in (steps[-1], inference.generate(PROMPTS["list"], 12, "lookahead"))]
    assert untimed[0] == untimed[1]


@pytest.mark.parametrize("n", [1, 2, 7])
def test_max_new_tokens_is_exact(embedded, n):
    result = inference.generate(PROMPTS["repetition"], n, "lookahead")
    assert len(result["token_ids"]) == n


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "empty"),
        ({"text": "x", "max_new_tokens": 0}, "max_new_tokens"),
        ({"text": "x", "max_new_tokens": inference.MAX_NEW_TOKENS + 1}, "max_new_tokens"),
        ({"text": "x", "method": "beam"}, "method"),
    ],
)
def test_bad_generate_arguments_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        inference.generate(**kwargs)


def test_pool_drafts_what_followed_the_longest_recent_match():
    pool = NGramPool([5, 1, 2, 3, 9, 8, 2, 3, 4, 7, 1, 2, 3])
    drafts = pool.drafts(3, 3)
    assert drafts[0] == (9, 8, 2), "1 2 3 matched three tokens: its continuation comes first"
    assert (4, 7, 1) in drafts, "the 2 3 match follows"
    assert NGramPool([1, 2, 3]).drafts(2, 2) == [], "nothing repeats yet"


def test_pool_continues_a_short_repeat_past_the_end_of_the_text():
    pool = NGramPool([7, 1, 2, 1, 2, 1, 2])  # "map_map_map": the latest match is two tokens back
    assert pool.drafts(1, 6)[0] == (1, 2, 1, 2, 1, 2), "the copy continues with its own tokens"


def test_pool_drafts_across_a_changed_slot_in_a_repeated_template():
    pool = NGramPool([5, 1, 2, 3, 9, 8, 2, 3, 4, 7, 1, 2, 3, 6])  # "1 2 3 <slot>" seen before with 9
    assert pool.drafts(2, 2) == [(8, 2), (7, 1)], "what followed the slot, longest context first"


def test_a_draft_trie_shares_the_prefixes_of_its_drafts():
    trie = DraftTrie([7])
    assert trie.add([1, 2, 3], NGRAM, 10) == [1, 2, 3]
    assert trie.add([1, 2, 4, 5], RECYCLED, 10) == [1, 2, 4, 5], "1 2 is shared: only 4 and 5 are new"
    assert trie.tokens == [7, 1, 2, 3, 4, 5] and trie.parents == [-1, 0, 1, 2, 2, 4]
    assert trie.depths == [0, 1, 2, 3, 3, 4] and trie.sources == [STEP, NGRAM, NGRAM, NGRAM, RECYCLED, RECYCLED]
    assert trie.add([9, 9, 9], RECYCLED, 1) == [6], "room for one node only"
    assert trie.add([1, 2, 3], RECYCLED, 0) == [1, 2, 3], "no room needed to find what is there"


def test_tree_mask_lets_each_node_see_the_cache_and_its_ancestors():
    mask = tree_mask(past=2, parents=[-1, 0, 1, 0], dtype=torch.float32, device=torch.device("cpu"))
    visible = (mask[0, 0] == 0).int().tolist()
    assert visible == [
        [1, 1, 1, 0, 0, 0],  # x
        [1, 1, 1, 1, 0, 0],  # x's first child
        [1, 1, 1, 1, 1, 0],  # its child
        [1, 1, 1, 0, 0, 1],  # x's second child
    ]


def costs(seconds) -> PassCosts:
    return PassCosts(ROWS, {"linear": tuple(seconds(n) for n in ROWS)}, "test")


def passes_by_the_curve(model, ids: list[int], n: int, eos: set[int], curve: PassCosts) -> list[Pass]:
    """Lookahead decoding's passes where each takes what `curve` says: planned by the curve alone."""
    with PassClock(curve).driving(model) as clock:
        return list(lookahead_passes(model, ids, n, eos, curve, clock=clock))


def test_the_planner_guesses_as_far_as_the_measured_curve_and_the_acceptance_pay():
    flat, steep = costs(lambda n: 1.0), costs(lambda n: float(n))
    planner = _Planner(flat)
    assert planner.width(8) == 8, "passes cost the same at any width: guess all the draft has"
    assert _Planner(steep).width(8) == 0, "a pass costs as much per token as plain steps: guessing never pays"
    planner.accept = [0.9, 0.9, 0.1] + [0.1] * 5
    kneed = costs(lambda n: 1.0 if n <= 3 else 1.0 + 0.1 * (n - 3))
    assert _Planner(kneed, accept=planner.accept).width(8) == 2, "past the knee, unlikely guesses do not pay"


def test_positions_the_planner_has_not_seen_follow_the_deepest_it_has():
    kneed = costs(lambda n: 1.0 if n <= 4 else 1.0 + 0.1 * (n - 4))
    seen = [0.95] * 3 + [None] * 5  # three guesses per pass, each right: position 4 and on never shown
    assert _Planner(kneed, accept=seen).width(8) == 8, "a draft right as deep as it was fed is fed deeper"
    assert _Planner(kneed, accept=[0.95] * 3 + [0.5] * 5).width(8) == 4, "the prior alone would hold it near 3"


def test_the_planner_learns_from_drafts_it_did_not_feed():
    planner = _Planner(costs(lambda n: float(n)))
    for _ in range(20):
        planner.learn([([5, 6], NGRAM), ([9], RECYCLED)], produced=[5], fed=[4], logits=torch.zeros(1, 10))
    assert planner.accept[0] > 0.99 and planner.gains[NGRAM] > planner.gains[RECYCLED]
    assert planner.successors[4] == torch.zeros(10).topk(3).indices.tolist(), "the fed token's successors recorded"


def test_plain_steps_when_guessing_cannot_pay_and_the_same_tokens_either_way(embedded):
    model, tokenizer = embedded
    ids = tokenizer(PROMPTS["repetition"])["input_ids"]
    stops = eos_ids(model.generation_config)
    steep = passes_by_the_curve(model, ids, 24, stops, costs(lambda n: float(n)))
    flat = passes_by_the_curve(model, ids, 24, stops, costs(lambda n: 1.0))
    assert tokens(steep) == tokens(flat) == transformers_greedy(model, tokenizer, PROMPTS["repetition"], 24)
    assert all(len(p.tokens) == 1 for p in steep), "one token per pass, as greedy"
    assert len(flat) < len(steep) / 2, "where wide passes cost nothing, guesses are taken"


def test_passes_are_planned_by_how_much_slower_than_the_curve_they_ran_lately():
    running = _RunningCosts(costs(lambda n: 1.0 + n / 10))
    assert running(1) == 1.1 and running(8) == 1.8, "nothing timed: the curve"
    running.observe(1, 2.2)
    assert running(1) == pytest.approx(1.65), "half the way to twice the curve's time"
    assert running(8) == pytest.approx(1.8 * 1.5), "passes with guesses not timed: slowed as plain steps are"
    running.observe(8, 1.8 * 1.5)
    assert running.retry_after == 0.0 and running(8) == pytest.approx(1.8 * 1.5), "as planned: nothing to retry"
    running.observe(8, 1.8 * 1.5 + 3.0)  # 3 s dearer than planned
    dear = 1.5 + 3.0 / 1.8 / 2  # half the way there
    assert running(4) == pytest.approx(1.4 * dear), "every width with guesses slowed alike"
    assert running.retry_after == pytest.approx(3.0 / RETRY_SHARE) and running(1) == pytest.approx(1.65)
    while running.retry_after > 1.65:
        running.observe(1, 1.65)
    assert running(8) == pytest.approx(1.8 * dear), "until plain steps have taken 1/RETRY_SHARE times what it lost"
    running.observe(1, 1.65)
    assert running(8) == pytest.approx(1.8 * 1.5), "then guessing is planned by the curve's shape again"


def test_guessing_stops_while_its_passes_run_dear_and_comes_back_once_they_pay(embedded, monkeypatch):
    monkeypatch.setattr(decoding, "RETRY_SHARE", 1.0)  # tried again after the time lost, not 20 times it: a short test
    model, tokenizer = embedded
    ids = tokenizer(PROMPTS["repetition"])["input_ids"]
    clock = PassClock(lambda n: 1.0 if n == 1 else 20.0)  # other processes make passes with guesses cost 20 steps
    with clock.driving(model):
        passes = lookahead_passes(model, ids, 48, eos_ids(model.generation_config), costs(lambda n: 1.0), clock=clock)
        dear = list(islice(passes, 16))
        clock.seconds, load_gone = (lambda n: 1.0), len(clock.widths)
        cheap = list(passes)
    assert tokens(dear + cheap) == transformers_greedy(model, tokenizer, PROMPTS["repetition"], 48)
    fed = clock.widths[1:]  # after the prompt's pass
    assert fed[0] > 1, "the curve says guessing pays: it is tried"
    assert set(fed[1 : load_gone - 1]) == {1}, "timed 20 steps dear, it stops: plain steps, as greedy"
    assert max(fed[load_gone - 1 :]) > 1 and len(cheap) < len(tokens(cheap)), "timed cheap again, guessing is back"


def test_guesses_stop_where_the_tokens_wanted_and_the_context_end(tiny_model_dirs):
    """GPT-2's positions end at its context: a guess past the last token wanted would index past them."""
    model, tokenizer = inference.load_model(tiny_model_dirs["gpt2"])
    context = model.config.n_positions
    prompt = tokenizer(" a b" * context)["input_ids"][: context // 2]
    wanted = context - len(prompt)  # up to the context's last position
    flat = passes_by_the_curve(model, prompt, wanted, set(), costs(lambda n: 1.0))  # every guess pays
    greedy = list(greedy_passes(model, prompt, wanted, set()))
    assert tokens(flat) == tokens(greedy)
    assert len(tokens(flat)) == wanted and len(flat) < len(greedy)


def test_pass_costs_interpolate_and_choose_the_faster_path_per_width():
    measured = PassCosts((1, 2, 4), {"linear": (1.0, 2.0, 2.0), "transposed": (1.5, 1.5, 3.0)}, "test")
    assert measured(3) == 2.0 and measured(1) == 1.0 and measured(8) == 4.0, "past the widest: linear in n"
    assert measured.faster_path(2) == "transposed" and measured.faster_path(4) == "linear"
    assert measured.transposed_rows() == [2]
    one_row_faster = PassCosts((1, 2), {"linear": (2.0, 2.0), "transposed": (1.0, 1.5)}, "test")
    assert one_row_faster.transposed_rows() == [1, 2], "a single row takes the transposed path where it wins"
    assert "| 2 | 2.0 | 1.5 | transposed |" in measured.table().replace("2000.0", "2.0").replace("1500.0", "1.5")


def test_measured_linears_match_nn_linear_for_any_number_of_rows():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8, bias=False))
    inputs = [torch.randn(shape) for shape in [(1, 1, 64), (1, 5, 64), (2, 3, 64), (7, 64), (1, 100, 64)]]
    expected = [model(x) for x in inputs]
    use_linear_path(model, TRANSPOSED_ROWS)  # one row included: it is fed as two
    assert isinstance(model[0], MeasuredLinear) and model[2].transposed_rows == frozenset(TRANSPOSED_ROWS)
    for x, want in zip(inputs, expected):
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)


def test_the_loaded_model_uses_the_path_measured_faster_for_each_width(embedded):
    from lookahead.models import model_pass_costs

    model, _ = embedded
    measured = model_pass_costs()
    assert set(measured.seconds) == {"linear", "transposed"} and all(s > 0 for s in measured.seconds["linear"])
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.transposed_rows == frozenset(measured.transposed_rows()) for m in linears)
