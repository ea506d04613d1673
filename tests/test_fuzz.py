"""Fuzzing the public functions and the API: every argument either works or gets a clear ValueError.

"Works" means a result that is strict JSON (no NaN or infinity) with probabilities in [0, 1];
"clear" means a ValueError naming the argument at fault, raised before any model work.
"""

import json
import math
import random

import pytest
from gradio_client import Client

import custom_llm_inference as cli

ODD_VALUES = [None, True, "", "3", "x", [], {}, -1, 0, 1, 2, 2.5, 3, 1e-45, 1e-3, 0.5, 1.0, 1.7, 7, 1e9, 1e308,
              -1e-45, 2**63, math.nan, math.inf, -math.inf, "greedy", "sample", "lookahead"]
ODD_MESSAGES = [None, [], [{"role": "user", "content": "hi"}], [{"role": "bot", "content": "hi"}], [{"role": "user"}],
                [{"role": "user", "content": None}], "hi", [["user", "hi"]]]
ODD_TEXTS = ["ok", "", " ", "ok\ud800", "\udfff", "tab\tand\x00nul", "🦜🦜", "a" * 3000, None, 7, ["ok"]]
PARAMETERS = {
    "lookahead": ["n_branches", "depth", "temperature", "top_k", "top_p", "repetition_penalty", "branch_mode", "seed"],
    "next_token_distribution": ["k", "temperature", "top_k", "top_p", "repetition_penalty"],
    "generate": ["max_new_tokens", "method"],
    "token_probabilities": ["k", "messages"],
}
# keep valid calls cheap
SMALL = {"n_branches": [1, 2, 3], "depth": [1, 2, 3], "k": [1, 5], "max_new_tokens": [1, 2, 3]}


def strict_json(value) -> None:
    json.dumps(value, allow_nan=False)


def check_result(name: str, result) -> None:
    strict_json(result)
    if name == "token_probabilities":
        for token in result["tokens"]:
            assert token["prob"] is None or 0 <= token["prob"] <= 1
        return
    entries = result if name == "next_token_distribution" else result.get("distribution", [])
    for entry in entries:
        assert 0 <= entry["prob"] <= 1 and 0 <= entry["p_final"] <= 1


def random_call(rng: random.Random, name: str) -> tuple[str, dict]:
    text = rng.choice(ODD_TEXTS + ["ok"] * 10)
    kwargs = {}
    for parameter in PARAMETERS[name]:
        if rng.random() < 0.25:  # change a few arguments per call, so valid ones stay common
            kwargs[parameter] = rng.choice(ODD_MESSAGES if parameter == "messages" else
                                           ODD_VALUES + SMALL.get(parameter, []) * 3)
    for parameter, values in SMALL.items():
        if parameter in PARAMETERS[name]:
            kwargs.setdefault(parameter, values[0])
    return text, kwargs


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_fuzzed_arguments_work_or_name_the_argument(name, embedded):
    rng = random.Random(f"fuzz {name}")
    fn = getattr(cli, name)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(120):
        text, kwargs = random_call(rng, name)
        try:
            result = fn(text, **kwargs, session="fuzz") if name != "generate" else fn(text, **kwargs)
        except ValueError as error:
            message = str(error)
            assert any(p in message for p in ["text", *kwargs]), f"{message!r} names no argument of {kwargs}"
            outcomes["refused"] += 1
        else:
            check_result(name, result)
            outcomes["ok"] += 1
    assert outcomes["ok"] >= 10 and outcomes["refused"] >= 10, outcomes


def test_fuzzed_api_calls_get_an_answer_or_a_message(app_url):
    """Through the server: JSON-representable odd values only (gradio_client sends JSON)."""
    rng = random.Random("fuzz api")
    client = Client(app_url, verbose=False)
    sendable = [v for v in ODD_VALUES if not (isinstance(v, float) and not math.isfinite(v))]
    for _ in range(40):
        name = rng.choice(sorted(PARAMETERS))
        text = rng.choice([t for t in ODD_TEXTS if not (isinstance(t, str) and "\ud800" in t or t == "\udfff")])
        kwargs = {p: rng.choice(sendable) for p in PARAMETERS[name] if rng.random() < 0.3}
        for parameter, values in SMALL.items():
            if parameter in PARAMETERS[name]:
                kwargs.setdefault(parameter, values[0])
        try:
            result = client.predict(text, **kwargs, api_name=f"/{name}")
        except Exception as error:  # gradio_client's AppError carries the server's message
            assert "must" in str(error) or "text" in str(error), str(error)
        else:
            check_result(name, result)
    assert client.predict("Still serving", 2, 1, api_name="/lookahead")["branches"]
