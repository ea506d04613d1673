"""Fuzzing the public functions and the API: every argument either works or gets a clear ValueError.

"Works" means a result that is strict JSON (no NaN or infinity) with probabilities in [0, 1];
"clear" means a ValueError naming the argument at fault, raised before any model work. The arguments fuzzed are
the parameters each function declares (its signature) and each endpoint declares (the served app's API info), so
a parameter is fuzzed from the day it is added; the odd values are drawn by the parameter's type.
"""

import inspect
import json
import math
import random

import pytest

import custom_llm_inference as inference
from api_client import Client

FUNCTIONS = ["lookahead", "next_token_distribution", "generate", "token_probabilities", "compare"]
# Not fuzzed: the text (each call draws an odd one of its own), the session (any value names one), and what only
# chooses the machinery that computes the same answer: precompute (background work a fuzz run would only leave
# behind), partial and yielding (how a long text is read, and whether the call waits for others), and sampling (the
# same settings as the flat keywords, which are fuzzed one by one).
NOT_FUZZED = {"text", "session", "precompute", "partial", "yielding", "sampling"}

ODD_SCALARS = [None, True, "", "3", "x", [], {}, -1, 0, 1, 2, 2.5, 3, 1e-45, 1e-3, 0.5, 1.0, 1.7, 7, 1e9, 1e308,
               -1e-45, 2**63, math.nan, math.inf, -math.inf, "greedy", "sample", "lookahead"]
ODD_MESSAGES = [None, [], [{"role": "user", "content": "hi"}], [{"role": "bot", "content": "hi"}], [{"role": "user"}],
                [{"role": "user", "content": None}], "hi", [["user", "hi"]]]
# No other model's name: the Python functions load any model they are given.
ODD_MODEL_NAMES = [None, "", 7, [], True, inference.default_model_name()]
ODD_CONSTRAINTS = [None, {}, "regex", 7, {"type": "regex"}, {"type": "shape", "value": "x"},
                   {"type": "regex", "value": "[a-z ]+"}, {"type": "regex", "value": "(("},
                   {"type": "regex", "value": "[0-9]+", "start": 0}, {"type": "regex", "value": "x", "start": 99},
                   {"type": "choice", "value": ["yes", "no"]}, {"type": "choice", "value": []},
                   {"type": "grammar", "value": 'start: "a"+'}, {"type": "json_schema", "value": {"type": "object"}},
                   {"type": "json_schema", "value": "{"}, {"type": "json_schema", "value": 7}]
ODD_STOPS = [None, "", ".", [","], [""], [7], ["a"] * 9, "x" * 201, {}, 7]
PAIR = [inference.default_model_name()] * 2  # compare's models: the one model the app offers, twice
ODD_MODELS = [None, [], "ab", 7, [PAIR[0]], [PAIR[0], ""], [PAIR[0], 7], PAIR * 2, {"a": 1}, PAIR]
# By type, as a signature or the API info spells it once normalised (`kind`).
ODD_VALUES = {"int": ODD_SCALARS, "float": ODD_SCALARS, "str": ODD_SCALARS, "None | int": ODD_SCALARS,
              "None | str": ODD_MODEL_NAMES, "None | list[dict]": ODD_MESSAGES, "None | dict": ODD_CONSTRAINTS,
              "None | list[str]": ODD_STOPS, "list[str]": ODD_MODELS}
ODD_TEXTS = ["ok", "", " ", "ok\ud800", "\udfff", "tab\tand\x00nul", "🦜🦜", "a" * 3000, None, 7, ["ok"]]
# keep valid calls cheap
SMALL = {"n_branches": [1, 2, 3], "depth": [1, 2, 3], "k": [1, 5], "max_new_tokens": [1, 2, 3], "models": [PAIR]}
CHANGED_PER_CALL = 1.5  # arguments changed per call, on average, so valid calls stay common


def kind(type_name: str) -> str:
    """A type in one spelling: "int | None" (a signature's) and "None | int" (the API info's) alike, and a dict
    whose keys the API info names ("dict(str, Any)") as plain "dict"."""
    return " | ".join(sorted(part.replace("dict(str, Any)", "dict") for part in type_name.split(" | ")))


def signature_types(name: str) -> dict[str, str]:
    """The parameters of the public function `name` that are fuzzed, each with its type."""
    parameters = inspect.signature(getattr(inference, name)).parameters.values()
    return {p.name: kind(p.annotation) for p in parameters if p.name not in NOT_FUZZED}


def endpoint_types(client: Client) -> dict[str, dict[str, str]]:
    """Each endpoint of FUNCTIONS, as the served app describes it: its parameters but the text, with their types."""
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    return {name: {p["parameter_name"]: kind(p["python_type"]["type"]) for p in endpoints[f"/{name}"]["parameters"]
                   if p["parameter_name"] != "text"} for name in FUNCTIONS}


def strict_json(value) -> None:
    json.dumps(value, allow_nan=False)


def check_result(name: str, result) -> None:
    strict_json(result)
    if name == "token_probabilities":
        for token in result["tokens"]:
            assert token["prob"] is None or 0 <= token["prob"] <= 1
        return
    if name == "compare":
        for token in result["tokens"] or []:
            assert token["js"] is None or 0 <= token["js"] <= 1
        for entries in result["next"]["distributions"]:
            for entry in entries:
                assert 0 <= entry["prob"] <= 1 and 0 <= entry["p_final"] <= 1
        return
    entries = result if name == "next_token_distribution" else result.get("distribution", [])
    for entry in entries:
        assert 0 <= entry["prob"] <= 1 and 0 <= entry["p_final"] <= 1


def check_refusal(message: str, kwargs: dict) -> None:
    assert any(p in message for p in ["text", *kwargs]), f"{message!r} names no argument of {kwargs}"


def random_arguments(rng: random.Random, types: dict[str, str], sendable=lambda value: True) -> dict:
    """A few parameters (CHANGED_PER_CALL on average) given odd values of their type; the SMALL ones made small."""
    chance = min(0.25, CHANGED_PER_CALL / len(types))
    kwargs = {}
    for parameter, type_name in types.items():
        if rng.random() < chance:
            kwargs[parameter] = rng.choice([v for v in ODD_VALUES[type_name] + SMALL.get(parameter, []) * 3
                                            if sendable(v)])
    for parameter, values in SMALL.items():
        if parameter in types:
            kwargs.setdefault(parameter, values[0])
    return kwargs


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_fuzzed_parameter_has_odd_values_of_its_type(name):
    """A parameter of a type without odd values would not be fuzzed: give its type some in ODD_VALUES."""
    unknown = {p: t for p, t in signature_types(name).items() if t not in ODD_VALUES}
    assert not unknown, f"{name}: no odd values for {unknown} (or add the parameter to NOT_FUZZED, saying why)"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_fuzzed_arguments_work_or_name_the_argument(name, embedded):
    rng = random.Random(f"fuzz {name}")
    fn, types = getattr(inference, name), signature_types(name)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(120):
        text, kwargs = rng.choice(ODD_TEXTS + ["ok"] * 10), random_arguments(rng, types)
        try:
            result = fn(text, **kwargs, session="fuzz")
        except ValueError as error:
            check_refusal(str(error), kwargs)
            outcomes["refused"] += 1
        else:
            check_result(name, result)
            outcomes["ok"] += 1
    assert outcomes["ok"] >= 10 and outcomes["refused"] >= 10, outcomes


def test_fuzzed_api_calls_get_an_answer_or_a_message(app_url):
    """Through the server: JSON-representable odd values only (gradio_client sends JSON)."""
    rng = random.Random("fuzz api")
    client = Client(app_url, verbose=False)
    endpoints = endpoint_types(client)
    unknown = {(name, p): t for name, types in endpoints.items() for p, t in types.items() if t not in ODD_VALUES}
    assert not unknown, f"no odd values for these endpoints' parameters: {unknown}"

    def sendable(value) -> bool:
        return not (isinstance(value, float) and not math.isfinite(value))

    texts = [t for t in ODD_TEXTS if not (isinstance(t, str) and "\ud800" in t or t == "\udfff")]
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(40):
        name = rng.choice(FUNCTIONS)
        text, kwargs = rng.choice(texts), random_arguments(rng, endpoints[name], sendable)
        try:
            result = client.predict(text, **kwargs, api_name=f"/{name}")
        except Exception as error:  # gradio_client's AppError carries the server's message
            check_refusal(str(error), kwargs)
            outcomes["refused"] += 1
        else:
            check_result(name, result)
            outcomes["ok"] += 1
    assert outcomes["ok"] >= 5 and outcomes["refused"] >= 5, outcomes
    assert client.predict("Still serving", 2, 1, api_name="/lookahead")["branches"]
