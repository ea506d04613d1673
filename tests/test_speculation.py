"""Answers computed while the writer reads: a click on a shown branch gets exactly what a fresh call gives."""

import dataclasses
import threading

import pytest
import torch

import custom_llm_inference as inference
from fakes import Guess, fake_entry
from lookahead.constraints import Constraint, check_constraint
from lookahead.prefix_cache import PrefixCacheStore
from lookahead.requests import REQUEST_TYPES
from lookahead.sampling import Sampling
from lookahead.speculation import Speculator
from reference import assert_matches_reference, reference_lookahead

TEXT = "Once upon a time, in a village by the sea, there lived"


def test_taking_a_shown_branch_is_answered_from_the_precomputed_result_exactly(model_name):
    speculator = inference.backend().speculator
    model, tokenizer = inference.load_model(model_name)
    k, depth = 3, 3
    shown = inference.lookahead(TEXT, k, depth, session="plain", model_name=model_name)
    for i in range(k):
        taken = TEXT + shown["branches"][i]["text"]
        inference.lookahead(TEXT, k, depth, session=f"ahead {i}", model_name=model_name, precompute=True)
        speculator.wait()
        served = speculator.served
        ahead = inference.lookahead(taken, k, depth, session=f"ahead {i}", model_name=model_name)
        assert speculator.served == served + 1, "answered from the precomputed result"
        inference.lookahead(TEXT, k, depth, session=f"fresh {i}", model_name=model_name)
        fresh = inference.lookahead(taken, k, depth, session=f"fresh {i}", model_name=model_name)
        assert ahead == fresh, "bit for bit what the same click computes without precomputation"
        assert_matches_reference(ahead, reference_lookahead(model, tokenizer, taken, k, depth), k)
        # The session's cache now holds the taken text, exactly: the next step is warm and right.
        further = taken + ahead["branches"][0]["text"]
        after = inference.lookahead(further, k, depth, session=f"ahead {i}", model_name=model_name)
        assert after["reused_tokens"] >= ahead["context_tokens"]
        assert after == inference.lookahead(further, k, depth, session=f"fresh {i}", model_name=model_name)


def test_with_two_models_shown_a_click_on_either_ones_branch_is_precomputed_for_both(embedded, tiny_model_dirs):
    speculator = inference.backend().speculator
    models = [inference.default_model_name(), tiny_model_dirs["llama"]]
    shown = [inference.lookahead(TEXT, 2, 2, session="two", model_name=name, precompute=True) for name in models]
    speculator.wait()
    for name in models:  # the caches as they were before the click, for the fresh answers
        inference.lookahead(TEXT, 2, 2, session="two fresh", model_name=name)
    taken = TEXT + shown[1]["branches"][0]["text"]  # the second model's branch
    served = speculator.served
    ahead = [inference.lookahead(taken, 2, 2, session="two", model_name=name) for name in models]
    assert speculator.served == served + 2, "both panels' answers were ready"
    assert ahead == [inference.lookahead(taken, 2, 2, session="two fresh", model_name=name) for name in models]


def test_other_settings_or_an_edit_are_computed_afresh(embedded):
    speculator = inference.backend().speculator
    inference.lookahead(TEXT, 3, 3, session="s", precompute=True)
    speculator.wait()
    served = speculator.served
    shown = inference.lookahead(TEXT, 3, 3, session="s", precompute=True)
    speculator.wait()
    taken = TEXT + shown["branches"][0]["text"]
    inference.lookahead(taken, 3, 3, temperature=0.5, session="s")  # not what was precomputed
    inference.lookahead(taken + " and", 3, 3, session="s")
    assert speculator.served == served


def test_a_real_request_stops_the_job_before_its_next_guess():
    store = PrefixCacheStore(max_bytes=10**9)
    fake_entry(store, "writer", 4)
    speculator, started, release, computed = Speculator(store), threading.Event(), threading.Event(), []

    def compute(request, scratch):
        computed.append(request.n)
        started.set()
        release.wait(5)
        torch.nn.Identity()(torch.zeros(1))  # any module's forward: raises once a real request came
        return {"n": request.n}

    speculator.start([("writer", Guess(n)) for n in (1, 2, 3)], compute)
    started.wait(5)
    speculator.arrived("other visitor", Guess(9))  # somebody's real request
    release.set()
    speculator.wait(5)
    assert computed == [1], "no further guesses once a real request came"
    assert speculator.arrived("writer", Guess(1)) is None, "the interrupted guess was not kept"
    speculator.finished()
    speculator.finished()


def test_no_job_starts_while_a_real_request_is_running():
    store = PrefixCacheStore(max_bytes=10**9)
    fake_entry(store, "writer", 4)
    speculator, computed = Speculator(store), []
    speculator.arrived("other visitor", Guess(-1))
    speculator.start([("writer", Guess(1))], lambda request, scratch: computed.append(1) or {})
    speculator.wait(5)
    assert computed == []
    speculator.finished()


def test_a_session_showing_the_heatmap_is_precomputed_exactly_too(embedded):
    speculator = inference.backend().speculator
    for session in ("heat ahead", "heat fresh"):
        inference.token_probabilities(TEXT, 5, session=session)
    shown = inference.lookahead(TEXT, 3, 3, session="heat ahead", precompute=True)
    inference.token_probabilities(
        TEXT, 5, session="heat ahead"
    )  # as the page does next: held already, pre-empts nothing
    speculator.wait()
    taken = TEXT + shown["branches"][1]["text"]
    served = speculator.served
    ahead = inference.lookahead(taken, 3, 3, session="heat ahead")
    assert speculator.served == served + 1, "answered from the precomputed result"
    inference.lookahead(TEXT, 3, 3, session="heat fresh")
    assert ahead == inference.lookahead(taken, 3, 3, session="heat fresh")
    heat = inference.token_probabilities(taken, 5, session="heat ahead")
    assert heat["reused_tokens"] == heat["context_tokens"], "the precomputed pass scored the branch's tokens"
    assert heat["tokens"] == inference.token_probabilities(taken, 5, session="heat fresh")["tokens"]


def different(field: dataclasses.Field, value: object) -> object:
    """A value of `field` other than `value` (a request field without a rule here fails the test below)."""
    if isinstance(value, bool) or value is None or isinstance(value, (Sampling, Constraint)):
        return {
            "model_name": "another model", "messages": (("user", "Hi"),), "time_limit": 1.0, "target_token_id": 7,
            "at_token": 1, "sampling": Sampling(temperature=0.5), "after": " and the rest",
            "constraint": check_constraint({"type": "choice", "value": ["yes"], "start": None}, ""),
        }[field.name]
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + " more"
    if isinstance(value, tuple):
        return (*value, "and")
    raise AssertionError(f"no rule for {field.name}")


@pytest.mark.parametrize("request_type", REQUEST_TYPES, ids=lambda t: t.__name__)
def test_every_field_of_a_request_takes_part_in_the_key_of_its_precomputed_answer(request_type):
    """A ready answer is found only for an equal request: one field changed, it is not served."""
    store = PrefixCacheStore(max_bytes=10**9)
    speculator = Speculator(store)
    base = request_type(text="The cat sat")

    def ready_for(asked) -> bool:
        fake_entry(store, "writer", 4)
        speculator.start([("writer", base)], lambda request, scratch: {"answer": request.text})
        assert speculator.wait(5)
        found = speculator.arrived("writer", asked)
        speculator.finished()
        return found is not None

    assert ready_for(request_type(text="The cat sat")), "an equal request finds the answer"
    for field in dataclasses.fields(request_type):
        changed = dataclasses.replace(base, **{field.name: different(field, getattr(base, field.name))})
        assert changed != base
        assert not ready_for(changed), f"a request with another {field.name} found the answer"
