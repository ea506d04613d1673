"""The pass-cost measurement (lookahead/cpu_linear.py): quick at a first start and refined in the background, checked
at load, marked when the machine was busy; the model's linear paths never change under a running pass.

The passes' timings are stand-ins (`Clock`): each test sets what a pass costs on each path, so every assertion is
about what the code does with the figures, none about how long anything took.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from lookahead import cpu_linear, models
from lookahead.cpu_linear import (
    CHECK_ROWS,
    MAX_ROWS,
    QUICK_ROUNDS,
    QUICK_ROWS,
    ROUNDS,
    ROWS,
    TRANSPOSED_ROWS,
    MeasuredLinear,
    PassCosts,
    machine_key,
    measure_pass_costs,
    pass_costs,
    refine_in_background,
)


class Clock:
    """Stands in for timing a pass: `curve(path, n)` seconds, by the linear path the model's layers take for n rows,
    times `scale`; records every pass timed as (path, n)."""

    def __init__(self, curve: Callable[[str, int], float]) -> None:
        self.curve, self.scale, self.passes = curve, 1.0, []

    def __call__(self, model: torch.nn.Module, feed: torch.Tensor, cache) -> float:
        n = feed.shape[1]
        linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        path = "transposed" if n in getattr(linear, "transposed_rows", ()) else "linear"
        self.passes.append((path, n))
        return self.scale * self.curve(path, n)


def transposed_wins_up_to(k: int) -> Callable[[str, int], float]:
    """The transposed path 2.5 times as fast as F.linear up to k rows, 3 times slower past them."""
    return lambda path, n: 0.010 if path == "linear" else (0.004 if n <= k else 0.030)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    for _, refinement in list(cpu_linear._background):  # a model loaded by another test may still be refined: its
        refinement.join()  # passes would be timed by this stand-in (and its curve stored) if it ran on meanwhile
    clock = Clock(transposed_wins_up_to(4))
    monkeypatch.setattr(cpu_linear, "_timed_pass", clock)
    return clock


def others_take(monkeypatch, share: float) -> None:
    """Other processes take `share` of the machine from now on."""
    monkeypatch.setattr(cpu_linear, "_others_machine_seconds", lambda: share * time.perf_counter())


@pytest.fixture
def quiet(monkeypatch) -> None:
    others_take(monkeypatch, 0.0)


def tiny_model(vocab_size: int = 256) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    return AutoModelForCausalLM.from_config(config).eval()


def stored(directory) -> dict:
    (file,) = directory.glob("*.json")
    return json.loads(file.read_text())


def test_the_quick_measurement_covers_the_widths_the_path_choice_needs():
    assert QUICK_ROWS[0] == 1, "one row: the transposed path feeds it as two, a case of its own"
    assert QUICK_ROWS[-1] == MAX_ROWS == TRANSPOSED_ROWS[-1], "the widest row count a path is chosen for"
    assert set(CHECK_ROWS) <= set(QUICK_ROWS) <= set(ROWS), "a cached quick curve can be checked, and refined"
    assert len(QUICK_ROWS) < len(ROWS) and QUICK_ROUNDS < ROUNDS


def test_a_quick_measurement_times_each_quick_width_on_both_paths_and_a_losing_path_once(clock, quiet):
    model = tiny_model()
    costs = measure_pass_costs(model, "test", quick=True)
    assert costs.quick and not costs.busy and not costs.final and costs.rows == QUICK_ROWS
    assert costs.transposed_rows() == [1, 2, 3, 4], "chosen at every row count, between the widths too"
    for n in QUICK_ROWS:
        faster = "transposed" if n <= 4 else "linear"
        losing = "linear" if n <= 4 else "transposed"
        assert clock.passes.count((faster, n)) == QUICK_ROUNDS
        assert clock.passes.count((losing, n)) == 1, "more than twice the other's time: timed once"
    full = measure_pass_costs(model, "test")
    assert full.rows == ROWS and not full.quick and full.transposed_rows() == [1, 2, 3, 4]


def test_a_cached_curve_is_kept_within_twice_its_figures_and_measured_again_past_them(tmp_path, clock, quiet):
    model = tiny_model()
    first = pass_costs(model, "tiny", tmp_path, quick=False)
    assert first.final and stored(tmp_path)["quick"] is False
    for scale in (1.5, 1 / 1.5):
        clock.scale, clock.passes = scale, []
        assert pass_costs(model, "tiny", tmp_path) == first, "within twice: kept"
        assert sorted(n for _, n in clock.passes) == sorted(CHECK_ROWS * QUICK_ROUNDS), "a check, no measurement"
    for scale in (10, 0.1):
        clock.scale, clock.passes = scale, []
        again = pass_costs(model, "tiny", tmp_path)
        assert again.quick and again.seconds["linear"][0] == pytest.approx(scale * 0.010), "measured again"
        assert {n for _, n in clock.passes} == set(QUICK_ROWS)
        assert stored(tmp_path)["quick"] is False, "a quick curve never replaces a full quiet one on disk"


def test_an_unreadable_or_corrupted_cache_file_is_measured_again(tmp_path, clock, quiet):
    model = tiny_model()
    pass_costs(model, "tiny", tmp_path)
    (file,) = tmp_path.glob("*.json")
    for text in ("{", json.dumps({**json.loads(file.read_text()), "seconds": {"linear": [5.0] * len(QUICK_ROWS)}})):
        file.write_text(text)
        clock.passes = []
        assert pass_costs(model, "tiny", tmp_path).seconds["linear"][0] == pytest.approx(0.010)
        assert {n for _, n in clock.passes} == set(QUICK_ROWS)


def test_where_nothing_may_run_in_the_background_a_curve_that_is_not_final_is_measured_again_in_full(
        tmp_path, clock, monkeypatch):
    """On a GPU (ZeroGPU: nothing runs after a call returns) the curve is measured whole, at once."""
    model = tiny_model()
    others_take(monkeypatch, 0.5)
    assert pass_costs(model, "tiny", tmp_path, quick=False).busy
    others_take(monkeypatch, 0.0)
    clock.passes = []
    again = pass_costs(model, "tiny", tmp_path, quick=False)
    assert again.final and again.rows == ROWS and {n for _, n in clock.passes} == set(ROWS)
    assert pass_costs(model, "tiny", tmp_path, quick=False) == again, "final: kept"


def test_a_measurement_is_busy_when_other_processes_take_a_quarter_of_the_machine(clock, monkeypatch):
    model = tiny_model()
    others_take(monkeypatch, 0.5)
    assert measure_pass_costs(model, "test", quick=True).busy
    assert len(clock.passes) == 2 * len(QUICK_ROWS), "busy: the quick measurement stops after one round"
    others_take(monkeypatch, 0.05)
    assert not measure_pass_costs(model, "test", quick=True).busy


def test_a_pass_the_serving_model_ran_beside_is_timed_again_and_its_paths_never_change(clock, quiet):
    model = tiny_model()
    cpu_linear.use_linear_path(model, [2])
    published = []
    undisturbed = clock.curve

    def request() -> None:
        with torch.inference_mode():
            model(torch.tensor([[1, 2, 3]]))

    def disturbed(path: str, n: int) -> float:
        if len(clock.passes) == 1:  # a request runs in another thread during the first pass timed
            thread = threading.Thread(target=request)
            thread.start()
            thread.join()
            return 100.0
        return undisturbed(path, n)

    clock.curve = disturbed
    quick = PassCosts(QUICK_ROWS, {path: (1.0,) * len(QUICK_ROWS) for path in ("linear", "transposed")},
                      machine_key(model, "tiny"), quick=True, pinned=frozenset([2]))
    refine_in_background(model, quick, None, published.append).join()
    (full,) = published
    assert full.rows == ROWS and not full.quick and 100.0 not in full.seconds["linear"] + full.seconds["transposed"]
    assert all(m.transposed_rows == frozenset([2]) for m in model.modules() if isinstance(m, MeasuredLinear)), \
        "the model's paths stay as they were: only a twin sharing its weights switched"
    assert full.transposed_rows() == [2] and full.path(3) == "linear", "priced along the paths the model takes"
    assert not model._forward_pre_hooks and not model._forward_hooks, "the refinement's hooks are gone"


@pytest.fixture
def tiny_dir(tmp_path, monkeypatch) -> str:
    """A tiny model's folder, loaded through `models.load_model` with its pass costs cached under tmp_path."""
    tokenizer = models.load_tokenizer()  # the embedded model's, from the usual cache
    monkeypatch.setenv("LOOKAHEAD_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "tiny"
    tiny_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def start(monkeypatch, name: str) -> torch.nn.Module:
    """Load `name` as a fresh process would (nothing loaded or measured in memory)."""
    for loaded in ("_loaded", "_pass_costs", "_refinements"):
        monkeypatch.setattr(models, loaded, {})
    model, _ = models.load_model(name)
    return model


def test_a_first_start_answers_on_the_quick_curve_and_the_background_publishes_the_full_one(
        tiny_dir, tmp_path, clock, monkeypatch, quiet):
    clock.curve = lambda path, n: 0.010 if path == "linear" else (0.005 if n == 3 else 0.030)  # between quick widths
    model = start(monkeypatch, tiny_dir)
    full = models.model_pass_costs(tiny_dir, complete=True)
    assert not full.quick and full.rows == ROWS, "the full curve, published"
    assert full.transposed_rows() == [] and all(m.transposed_rows == frozenset() for m in model.modules()
                                                if isinstance(m, MeasuredLinear)), "the quick choice, kept"
    assert stored(tmp_path / "pass-costs")["quick"] is False
    model = start(monkeypatch, tiny_dir)
    assert tiny_dir not in models._refinements, "a full quiet curve: nothing to refine"
    assert models.model_pass_costs(tiny_dir).transposed_rows() == [3], "the next start chooses by the full curve"


def test_a_busy_curve_is_refined_on_a_later_start_and_replaced_by_a_quiet_one(tiny_dir, tmp_path, clock, monkeypatch):
    others_take(monkeypatch, 0.5)
    start(monkeypatch, tiny_dir)
    assert models.model_pass_costs(tiny_dir, complete=True).busy
    assert stored(tmp_path / "pass-costs")["busy"] is True, "written, marked busy"
    others_take(monkeypatch, 0.0)
    start(monkeypatch, tiny_dir)
    assert models.model_pass_costs(tiny_dir).busy, "the cached curve answers first"
    assert not models.model_pass_costs(tiny_dir, complete=True).busy, "then the quiet one, measured in the background"
    assert stored(tmp_path / "pass-costs")["busy"] is False
    others_take(monkeypatch, 0.5)
    start(monkeypatch, tiny_dir)
    assert tiny_dir not in models._refinements and not models.model_pass_costs(tiny_dir).busy
