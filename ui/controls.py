"""The page's controls as the panels' handlers take them: by name, related controls grouped into one value.

A handler names what it takes (`text`, `history`, `settings` ...), and the wiring says which of the page's
components holds each (`by_name`): one component, or a group of them (`Controls`) read as one of the frozen
dataclasses below (a group may hold groups: `Settings`). So a handler has a few named parameters however many
controls the page has, and a new control is a field of its group, bound to its component where its panel (or
app.py, for groups across panels) builds the group.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Generic, TypeVar

from gradio.components import Component

from history import History
from lookahead.sampling import Sampling
from ui.chat import messages_for
from ui.constrain import in_force, stop_strings
from ui.handlers import answers_of, shaped_like
from ui.heatmap import Shown

MAX_BUTTONS = 10  # the n_branches slider's maximum: a suggestions panel has this many branch buttons

@dataclass(frozen=True)
class Draft:
    """The text box as an event found it: its text, its caret, and `base`: the history node whose text the session
    last put there ("N"), or, once the writer has edited since, that node marked so ("~N"; keyboard.js marks it)."""

    text: str
    caret: str | None  # a character offset, as Python counts them; "" at the end (ui/insertion.caret_in reads it)
    base: str | None

    def newest(self, history: History) -> str:
        """The text the event acts on: the box's, unless the box still shows a text the session has moved past (the
        event left the page before the answers to the ones ahead of it arrived): then the session's newest, as if
        the event had waited for the one before.

        The box is behind when it still shows the node the session last put there, or, after the writer's own
        edit, a text that the session recorded after that node and then went on from by its own insertions alone
        (clicks in quick succession after a paste). A text the page had already moved past when the writer
        edited (they deleted a branch they took) is the writer's."""
        base = self.base or ""
        edited, node = base.startswith("~"), base.removeprefix("~")
        if not node.isdigit() or int(node) >= len(history.nodes):
            return self.text  # no node of this tree (an event from before an import): the box's text
        received = int(node)
        if not edited and history.nodes[received].text == self.text:
            return history.text
        for node_id in reversed(history.path()):
            if node_id <= received:
                break
            if history.nodes[node_id].text == self.text:
                return history.text
            if history.nodes[node_id].kind == "type":  # the writer's own edit: the box may have gone on from it
                break
        return self.text


@dataclass(frozen=True)
class BranchShape:
    """How many branches, how many tokens each, and how they continue (greedily, or drawn with a seed)."""

    n_branches: int
    depth: int
    branch_mode: str = "greedy"
    seed: float | None = 0
    by_fit: bool = False  # order them by how well they lead into the text after the caret


@dataclass(frozen=True)
class Context:
    """What the text follows: plain text, or a chat's system prompt and turns; and the model that reads it."""

    chat_mode: str
    system_prompt: str | None
    conversation: list[dict] | None
    model_name: str

    @property
    def messages(self) -> list[dict] | None:
        """The API's `messages` (ui/chat.py)."""
        return messages_for(self.chat_mode, self.system_prompt, self.conversation)


@dataclass(frozen=True)
class Constraints:
    """What branches and continuations keep to: the constraint set in the Constrain panel, and the stop strings."""

    constraint: dict | None  # as the API takes it (ui/constrain.py)
    stops: str | None  # the box's lines

    def for_text(self, text: str) -> dict | None:
        """The constraint for `text` (one that began past its end applies from the end)."""
        return in_force(self.constraint, text)

    @property
    def stop_strings(self) -> list[str] | None:
        return stop_strings(self.stops)


@dataclass(frozen=True)
class HeatmapView:
    """The heatmap's controls, what the page's heatmap shows now (ui/heatmap.py), and the text's history."""

    on: bool
    colour_by: str
    threshold: float
    shown: Shown | None
    compare_with: str | None = None  # the second model, for the colourings that compare two (ui/heatmap.py)
    history: History | None = None  # the session's tree: which of the text's tokens were accepted from the model


@dataclass(frozen=True)
class Settings:
    """Everything a panel's suggestions are asked with, besides the text: one value, so a handler takes it whole."""

    shape: BranchShape
    sampling: Sampling  # lookahead/sampling.py: the page's sliders build it, checked, once per event
    context: Context
    constraints: Constraints
    view: HeatmapView | None  # None: a panel without the heatmap


Group = TypeVar("Group")


class Controls(Generic[Group]):
    """A group's fields, each bound to the page's component that holds it."""

    def __init__(self, group: type[Group], **components: Component | Controls | None) -> None:
        names = [field.name for field in fields(group)]
        if sorted(components) != sorted(names):
            raise TypeError(f"{group.__name__} has the fields {names}; components were given for {list(components)}")
        self.group = group
        self.components = components
        self.hints = typing.get_type_hints(group)  # each field's type, read once: every event reads the group

    def __iter__(self) -> Iterator[Component]:
        """Every component behind the group, a nested group's each (None stands for no component)."""
        for source in self.components.values():
            yield from source if isinstance(source, Controls) else [] if source is None else [source]

    def read(self, page: Mapping[Component, Any]) -> Group:
        """The group's value from the page's values, by component (a nested group read as its own value, a JSON
        box holding a group's fields as that group)."""
        return self.group(**{name: source.read(page) if isinstance(source, Controls)
                             else None if source is None else as_group(page[source], self.hints[name])
                             for name, source in self.components.items()})

    def update(self, values: Mapping[str, Any]) -> dict[Component, Any]:
        """A handler's answer setting these fields (by name) to these values; the other fields stay as they are."""
        return {self.components[name]: value for name, value in values.items()}


def as_group(value: Any, kind: Any) -> Any:
    """`value` as `kind` where `kind` is one of these groups and `value` its fields by name (a JSON box's: the
    sampling panel's values, which the browser mirrors into such boxes); else `value`."""
    return kind(**value) if isinstance(value, dict) and isinstance(kind, type) and is_dataclass(kind) else value


def by_name(fn: Callable, inputs: Mapping[str, Component | Controls]) -> tuple[Callable, list[Component]]:
    """`fn` as a gradio handler of `inputs`' components, and those components, in the order the handler takes them.

    `fn` is called by name: each of its parameters in `inputs` gets its component's value, or its group's read as
    one. Its other positional parameters are those gradio fills in itself (gr.Request, gr.EventData, gr.Progress),
    which it finds by the handler's signature: so the handler shows gradio one parameter per component and then
    `fn`'s own. The components stay in the order given, which an event's `js=` relies on (gradio's own set-style
    inputs would hand over one dict, in the order the components were made).
    """
    signature = inspect.signature(fn)
    signature.bind_partial(**inputs)  # a name `fn` does not take fails here, as the page is built
    components = [component for source in inputs.values()
                  for component in (source if isinstance(source, Controls) else [source])]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    filled_by_gradio = [parameter for name, parameter in signature.parameters.items()
                        if name not in inputs and parameter.kind in positional]
    hints = typing.get_type_hints(fn)

    def arguments(values: tuple) -> dict[str, Any]:
        page = dict(zip(components, values))
        named = {name: source.read(page) if isinstance(source, Controls) else as_group(page[source], hints.get(name))
                 for name, source in inputs.items()}
        filled = dict(zip((parameter.name for parameter in filled_by_gradio), values[len(components):]))
        return named | filled

    handler = shaped_like(fn, lambda *values: answers_of(fn, **arguments(values)))
    handler.__signature__ = inspect.Signature([
        *(inspect.Parameter(f"value_{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(len(components))),
        *filled_by_gradio,
    ])
    handler.__annotations__ = {parameter.name: hints[parameter.name] for parameter in filled_by_gradio
                               if parameter.name in hints}
    return handler, components
