"""How a panel's event becomes a gradio listener: by name in, by slot out, and one rule for a session's order.

A handler is a plain function of named, typed values (ui/controls.py) that answers an `Update`: values by slot, a
slot being one of the page's components (or a row of them, such as the branch buttons) by the name its panel gives
it. A panel builds its components, names them as slots (`Wiring.adding`), and wires its own events with
`Wiring.handler`, which turns the handler's answer into {component: value} for gradio. So handlers are tested as
plain functions, and a panel built twice wires the same handlers to its own components.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import gradio as gr
from gradio.blocks import Block
from gradio.components import Component
from gradio.data_classes import GradioModel, GradioRootModel

import custom_llm_inference as inference
from ui.controls import Controls, by_name
from ui.errors import handled, refuse
from ui.handlers import answers_of, shaped_like
from ui.ordering import SessionOrder

if TYPE_CHECKING:
    from history import History
    from lookahead.sampling import Sampling
    from ui.heatmap import Shown
    from ui.on_screen import OnScreen
    from ui.panels.futures import Drawn


class Update(TypedDict, total=False):
    """A handler's answer: a value for each slot it changes (gr.update(...) where more than the value changes;
    gr.skip() in place of the whole answer leaves every output as it is). The page's slots, by panel:"""

    # the writer's text (ui/panels/writer.py)
    text_box: str | dict
    caret_sync: str
    text_base: str
    extra_box: str
    # one model's suggestions (ui/panels/suggestions.py)
    shown_state: OnScreen | None
    follow_up: int
    answered: int
    answer_sync: str
    marker: str
    heading: str
    branches: list[dict]  # a gr.update per branch shown; the buttons past them are hidden
    status: str
    read_timer: gr.Timer
    plot: str
    # the second model's panel beside the first (ui/panels/compare.py): its columns, and both plots' headings
    beside: list[dict]
    headings: list[str]
    # history (ui/panels/history.py)
    history_state: History
    tree: str
    history_sync: str
    history_file: str  # an export: {"name", "text"} as JSON
    kept_settings: list[dict]  # a gr.update per setting a reload keeps (ui/panels/history.py's KeptSettings)
    # chat (ui/panels/chat.py)
    chat_mode: str
    chat_panel: dict
    conversation_state: list[dict]
    conversation_view: list[dict]
    user_message: str
    # continuation (ui/panels/continuation.py)
    continuation: dict
    continuation_status: str
    # heatmap (ui/panels/heatmap.py)
    heatmap: str
    heatmap_state: Shown | None
    heatmap_on: bool
    heatmap_mode: str
    # who wrote what (ui/panels/ledger.py)
    ledger: str
    analysis_json: str
    # why (ui/panels/why.py)
    why: str
    why_state: dict | None
    # futures (ui/panels/futures.py)
    futures: str
    futures_state: Drawn | None
    # sampling (ui/panels/sampling.py)
    preset: str
    sampling: Sampling | dict  # every slider (a dict: those it names)
    branch_mode: str
    # constrain (ui/panels/constrain.py)
    constraint_state: dict | None
    constraint_status: str
    constraint_type: str
    constraint_value: str | dict
    constraint_kept: str  # the constraint in force as JSON, for this browser to keep across a reload


SLOTS = frozenset(Update.__annotations__)
Slot = Component | list[Component] | Controls  # one component, a row of them, or a group read as one value

# What a session's events write for its later events to read: the history, the suggestions and the heatmap on
# screen, the question "why?" answered.
SESSION_STATE = frozenset({"history_state", "shown_state", "heatmap_state", "why_state"})
WHY_VIEW = frozenset({"why", "why_state"})
# Explanations (and a caret's fit) running at once, each paused while suggestions are computed: room for a
# visitor's newer question to start (and cancel their older one) while another visitor's explanation runs.
EXPLANATIONS_AT_ONCE = 4


def concurrency() -> int:
    """Events of each group running at once (LOOKAHEAD_CONCURRENCY overrides).

    On ZeroGPU each runs in its own GPU worker, scheduled by ZeroGPU; a server batches what
    arrives together, so many; on one CPU more would only share its cores.
    """
    default = 8 if inference.on_zero_gpu() else 64 if inference.backend().capabilities.batching else 1
    return int(os.environ.get("LOOKAHEAD_CONCURRENCY") or default)


def session_key(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def still_continuing() -> None:
    """What an event of a session whose Continue is still writing answers, at once."""
    raise refuse("Continue is still writing your text; try again when it has finished.")


def cancel_fit(session: str) -> None:
    """A newer event of the session makes the fit being asked for stale: it stops within a slice."""
    inference.cancel(session, "lookahead")


class Wiring:
    """The page's slots by name, and the one ordering of each session's events, shared by every panel."""

    def __init__(self, slots: Mapping[str, Slot] | None = None, order: SessionOrder | None = None) -> None:
        unknown = set(slots or {}) - SLOTS
        if unknown:
            raise KeyError(f"no slot of the page is called {sorted(unknown)}: name it in Update")
        self.slots: dict[str, Slot] = dict(slots or {})
        self.order = order or SessionOrder(at_once=concurrency)

    def adding(self, **slots: Slot) -> Wiring:
        """This wiring with more slots (a second panel of a kind names its own components as its first did)."""
        return Wiring({**self.slots, **slots}, self.order)

    def handler(self, fn: Callable, inputs: Mapping[str, Any], outputs: Iterable[str],
                while_continuing: Callable[[], object] = still_continuing, cancels_fit: bool = True,
                direct: bool = False, **options) -> dict:
        """An event listener's arguments (`button.click(**wiring.handler(...))`) for `fn`, which takes `inputs` by
        name (a slot's name, a Controls group, or a component) and answers an Update for the slots `outputs`;
        failures reach the visitor as messages, and an event whose work its session cancelled changes nothing.

        One rule decides which events take turns: an event that reads or writes the session's state
        (SESSION_STATE) waits until the events its session started before it have finished (ui/ordering.py),
        so two never work on one history at once (an import and an update still running), while other
        visitors' events run meanwhile. An event between controls alone (a preset, a label, the Constrain
        panel's fields) touches none of it and runs at once. An explanation writes the "why?" view alone
        (WHY_VIEW): it takes no turn either, so typing overtakes it, and it runs in the "explain" group, so
        it never holds up anybody's suggestions (its model work yields to theirs: lookahead/scheduler.py); a
        newer question of the same session cancels it. Continuations pass concurrency_id="generate" and hold
        their session's turn while they write: meanwhile the session's other events answer at once
        (`while_continuing`: a refusal that says so, or a refresh skipped), since waiting would hold their
        "interact" slot, and so everybody's suggestions, for as long as the Continue runs. Every event of a
        session but the fit's own (`cancels_fit`) stops the caret's fit being computed for it.

        `direct`: an interactive event of the session's order skips gradio's queue (a click on a branch: the writer
        waits for its round trip, and the queue's stream of messages was a fifth of it); it still takes its session's
        turn and one of the slots all interactive events' work shares (ui/ordering.py). On ZeroGPU it stays queued:
        there a click waits for a GPU worker, which costs far more than the queue.
        """
        named = {name: self.slots[source] if isinstance(source, str) else source for name, source in inputs.items()}
        fn, components = by_name(_answering(fn, self._resolved(outputs)), named)
        fn = handled(fn, keep_when_cancelled=True)
        outputs = set(outputs)
        state = set(self.components(name for name in SESSION_STATE if name in self.slots))
        if outputs <= WHY_VIEW:
            options = {"concurrency_id": "explain", "concurrency_limit": EXPLANATIONS_AT_ONCE, **options}
        else:  # what is being refreshed shows on the status line alone: the writer's text is never covered
            options = {"show_progress": "minimal", "show_progress_on": [self.slots["status"]], **options}
            if state & {*components, *self.components(outputs)}:
                interactive = options.get("concurrency_id", "interact") == "interact"
                fn = self.order.wrap(fn, long=options.get("concurrency_id") == "generate",
                                     while_long=while_continuing, arriving=cancel_fit if cancels_fit else None,
                                     inputs=components, interactive=interactive)
                if direct and interactive and not inference.on_zero_gpu():
                    options = {**options, "queue": False}
        # preprocess=False: the page's values reach the handler as the browser sent them (text, numbers, choices'
        # values, JSON boxes: what gradio's preprocessing would give, and the handlers check them), without a hop to
        # a worker thread per input (the cost _postprocessed spares the outputs); postprocess=False: _postprocessed.
        return {"fn": fn, "inputs": components, "outputs": self.components(outputs), "api_visibility": "private",
                "concurrency_id": "interact", "preprocess": False, "postprocess": False, **options}

    def components(self, names: Iterable[str]) -> list[Component]:
        """The components behind these slots, a row's each."""
        return [component for name in names for component in _each(self.slots[name])]

    def _resolved(self, names: Iterable[str]) -> dict[str, Slot]:
        return {name: self.slots[name] for name in names}


def _each(slot: Slot) -> list[Component]:
    return list(slot) if isinstance(slot, (list, Controls)) else [slot]


def _answering(fn: Callable, outputs: Mapping[str, Slot]) -> Callable:
    """`fn` answering {component: value} where it answers an Update; a row's slot takes a list, one value a
    component (gr.update(visible=False) for those past the list's end); a group's a value of its type, or a dict
    of the fields it changes."""

    def components(update: object) -> object:
        if not isinstance(update, dict) or "__type__" in update:  # gr.skip() and the like: for every output
            return update
        unknown = set(update) - set(outputs)
        if unknown:
            raise KeyError(f"{fn.__name__} answered slots it was not wired to: {sorted(unknown)}")
        answer = {}
        for name, value in update.items():
            slot = outputs[name]
            if isinstance(slot, list):
                answer |= {c: v for c, v in zip(slot, [*value, *[gr.update(visible=False)] * len(slot)])}
            elif isinstance(slot, Controls):
                answer |= slot.update(asdict(value) if is_dataclass(value) else value)
            else:
                answer[slot] = value
        return {component: _postprocessed(component, value) for component, value in answer.items()}

    return shaped_like(fn, lambda *args, **kwargs: map(components, answers_of(fn, *args, **kwargs)))


def _postprocessed(component: Component, value: object) -> object:
    """`value` as gradio's postprocessing would send it to `component`'s page, done here, in the handler's own thread
    (the events set postprocess=False): gradio would hop to a worker thread per output, each hop waiting its turn on
    the cores beside any model work under way. A state's value stays in the session; an update's other properties are
    gradio's to send."""
    if component.stateful or isinstance(value, Block):
        return value
    if isinstance(value, dict) and "__type__" in value:
        return {**value, "value": _sent(component, value["value"])} if "value" in value else value
    return _sent(component, value)


def _sent(component: Component, value: object) -> object:
    sent = component.postprocess(value)
    return sent.model_dump() if isinstance(sent, (GradioModel, GradioRootModel)) else sent
