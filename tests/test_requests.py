"""The typed requests: each public function builds one, checked, and the backend gets it through the method for
its type; both backends implement the one interface."""

import inspect

import pytest

import custom_llm_inference as inference
from lookahead.backends import BACKENDS, make_backend, zerogpu
from lookahead.backends.base import Backend, Capabilities
from lookahead.backends.in_process import InProcess
from lookahead.backends.server.vllm import VLLMBackend
from lookahead.requests import (
    AttributionRequest,
    DistributionRequest,
    GenerateRequest,
    LookaheadRequest,
    ScoresRequest,
)
from lookahead.sampling import Sampling

PROTOCOL_METHODS = ["lookahead", "distribution", "scores", "generate", "attribution", "warm_up", "forget"]


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_registered_backend_implements_every_method_of_the_interface_with_its_parameters(name):
    made = make_backend(name, "http://localhost:1/v1")
    for method in PROTOCOL_METHODS:
        theirs = inspect.signature(getattr(type(made), method)).parameters
        ours = inspect.signature(getattr(Backend, method)).parameters
        assert list(theirs) == list(ours), method
    assert isinstance(made.capabilities, Capabilities)


def test_a_backend_is_chosen_by_its_registered_name_and_a_server_one_needs_its_url():
    assert isinstance(make_backend("in-process"), InProcess)
    assert isinstance(make_backend("vllm", "http://localhost:1/v1"), VLLMBackend)
    with pytest.raises(ValueError, match=r"backend must be one of \['in-process', 'vllm'.*\], got 'nowhere'"):
        make_backend("nowhere")
    for name, entry in BACKENDS.items():
        if entry.needs_server:
            with pytest.raises(ValueError, match=f"the {name} backend needs the server's URL, e.g. http"):
                make_backend(name)


class Recording:
    """A backend that records the request each method receives."""

    capabilities = InProcess(None).capabilities

    def __init__(self) -> None:
        self.received: list[tuple[str, object]] = []

    def lookahead(self, request, precompute=False, partial=True, yielding=False):
        self.received.append(("lookahead", request))
        return {}

    def distribution(self, request):
        self.received.append(("distribution", request))
        return []

    def scores(self, request):
        self.received.append(("scores", request))
        return {}

    def generate(self, request):
        self.received.append(("generate", request))
        yield {}

    def attribution(self, request):
        self.received.append(("attribution", request))
        yield {}

    def forget(self, session):
        self.received.append(("forget", session))


@pytest.fixture
def recording(monkeypatch, embedded):
    backend = Recording()
    monkeypatch.setattr(inference, "_backend", backend)
    return backend


def test_each_public_function_sends_one_checked_request_of_its_type(recording):
    inference.lookahead("Once upon", 3, 2, 0.5, session="s", stop=".")
    inference.next_token_distribution("Once upon", 4, top_k=7, session="s")
    inference.token_probabilities("Once upon", 2, session="s")
    inference.generate("Once upon", 5, "greedy", session="s")
    inference.attribution("Once upon a time", None, "saliency", window=3, session="s")
    assert recording.received == [
        ("lookahead", LookaheadRequest(text="Once upon", session="s", n_branches=3, depth=2,
                                       sampling=Sampling(temperature=0.5), stop=(".",))),
        ("distribution", DistributionRequest(text="Once upon", session="s", k=4, sampling=Sampling(top_k=7))),
        ("scores", ScoresRequest(text="Once upon", session="s", k=2)),
        ("generate", GenerateRequest(text="Once upon", session="s", max_new_tokens=5, method="greedy")),
        ("attribution", AttributionRequest(text="Once upon a time", session="s", method="saliency", window=3)),
    ]


def test_a_refused_argument_never_reaches_the_backend(recording):
    with pytest.raises(ValueError, match="depth must be between"):
        inference.lookahead("Once upon", 3, 99)
    with pytest.raises(ValueError, match="model_name must be"):
        inference.token_probabilities("Once upon", model_name="")
    assert recording.received == []


def test_the_gpu_time_asked_follows_the_requests_type():
    interaction = [LookaheadRequest(text="x"), DistributionRequest(text="x"), ScoresRequest(text="x")]
    assert {inference.gpu_seconds(r) for r in interaction} == {zerogpu.INTERACTION_GPU_SECONDS}
    assert inference.gpu_seconds(GenerateRequest(text="x", max_new_tokens=1000)) > inference.gpu_seconds(
        GenerateRequest(text="x", max_new_tokens=10))


def test_the_web_endpoints_offer_only_the_apps_models():
    assert inference.offered_model_name("") is None and inference.offered_model_name(None) is None
    assert inference.offered_model_name(inference.available_models()[0]) == inference.available_models()[0]
    with pytest.raises(ValueError, match="model_name must be one of"):
        inference.offered_model_name("gpt2-xl")
