"""The futures panel: the map of every continuation of up to `depth` tokens with mass at least `cutoff`, at the
caret, as an icicle (ui/futures.py draws it). Click a block to zoom to it; "insert" puts its path in the text at
the caret as a branch goes in. With a second model chosen, the blocks can be coloured by where the two part.

It follows the suggestions: each of their answers asks for the map again, in a group of its own and without
taking the session's turn (it writes nothing the session's other events read), so it never holds up the writer's
suggestions or the fit that follows them at a caret; a refresh asked while another waits replaces it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

import gradio as gr

import custom_llm_inference as inference
from history import History
from history.authorship import accepted
from lookahead.outputs import FutureNode, Multiverse
from lookahead.sampling import Sampling
from ui.chat import awaiting_user
from ui.constrain import applying
from ui.controls import Constraints, Context, Controls, Draft, Settings
from ui.errors import refuse
from ui.futures import Parting, futures_view, parting, path_ids
from ui.history_updates import EDITED, edited
from ui.insertion import Place, caret_in, continued, inserted
from ui.scripts import FUTURES_JS
from ui.wiring import EXPLANATIONS_AT_ONCE, Update, Wiring, session_key
from ui.working import shows_working

DEPTH, CUTOFF = 3, 0.02  # the controls' defaults
MAX_CUTOFF = 0.2
# The smallest cutoff the deepest map may have: the page cannot ask for more blocks than the API lists.
MIN_CUTOFF = inference.MAX_MAP_DEPTH / inference.MAX_MAP_NODES
CUTOFF_STEP = 0.001
WAITING = "<p>Type something to see the map of where the text could go.</p>"
NO_SECOND = "choose a model to compare with first (“Compare with…”, under Model)."
DRAWN = itertools.count(1)  # numbers each map drawn: a click on a block of a map since replaced is refused


@dataclass(frozen=True)
class FuturesView:
    """The panel's controls, and the second model chosen beside the first (its colouring)."""

    depth: int
    cutoff: float
    colour_by_second: bool
    compare_with: str | None


class Asked(NamedTuple):
    """What a map was asked for: equal asks are not drawn again (every answer of the suggestions asks)."""

    place: Place
    depth: int
    cutoff: float
    sampling: Sampling
    context: Context
    constraints: Constraints
    second: str | None  # the model whose map colours the blocks ("": asked for, but none is chosen)


class Drawn(NamedTuple):
    """The map on screen: what it was asked for, the answer, how the second model parts from it, the block zoomed
    to, and its number."""

    asked: Asked
    result: Multiverse
    parting: Parting | None
    focus: int
    serial: int


def ask_map(asked: Asked, model_name: str | None, request: gr.Request) -> Multiverse:
    """`multiverse` at the asked place, with the suggestions' settings, for one model (without the constraint where
    the text no longer fits it, as the suggestions are)."""
    place, context = asked.place, asked.context
    return applying(lambda constraint: inference.multiverse.typed(
        place.text, asked.depth, asked.cutoff, caret=place.caret, session=session_key(request),
        model_name=model_name, messages=context.messages, constraint=constraint, sampling=asked.sampling,
        yielding=True), asked.constraints.for_text(place.before))[0]


def map_futures(draft: Draft, settings: Settings, view: FuturesView, drawn: Drawn | None,
                request: gr.Request) -> Update:
    """The map at the text's caret, as the suggestions see it; coloured by the second model's where asked."""
    context = settings.context
    if (not draft.text and context.messages is None) or awaiting_user(context.chat_mode, draft.text,
                                                                       context.conversation):
        return {"futures": WAITING, "futures_state": None}
    place = continued(Place(draft.text, caret_in(draft.text, draft.caret)), context.messages is not None)
    second = (view.compare_with or "") if view.colour_by_second else None
    asked = Asked(place, int(view.depth), float(view.cutoff), settings.sampling, context, settings.constraints,
                  second)
    if drawn is not None and drawn.asked == asked:
        return gr.skip()
    result = ask_map(asked, context.model_name, request)
    compared = (parting(result, ask_map(asked, second, request)) if second
                else None if second is None else Parting("", {}, NO_SECOND))
    drawn = Drawn(asked, result, compared, 0, next(DRAWN))
    return {"futures": futures_view(result, 0, compared, drawn.serial), "futures_state": drawn}


def clicked(drawn: Drawn | None, event: gr.EventData) -> FutureNode:
    """The block a click on the map names, if the map it was on is still the one drawn."""
    if drawn is None or int(event.map) != drawn.serial:
        raise refuse("The map has been redrawn since: click a block of the map shown now.")
    node = int(event.node)
    if not 0 <= node < len(drawn.result.nodes):
        raise refuse("That block is no longer shown.")
    return drawn.result.nodes[node]


def zoom(drawn: Drawn | None, event: gr.EventData) -> Update:
    """The map renormalised to the block clicked: it fills the height, its subtree under it."""
    node = clicked(drawn, event)
    drawn = drawn._replace(focus=node.id)
    return {"futures": futures_view(drawn.result, node.id, drawn.parting, drawn.serial), "futures_state": drawn}


def insert_future(draft: Draft, drawn: Drawn | None, history: History, event: gr.EventData) -> Update:
    """The block's path inserted at the caret the map was drawn for, as a branch goes in (ui/insertion.py: a space
    never doubled, the words after it kept apart), recorded in the history with its token ids."""
    node = clicked(drawn, event)
    place = drawn.asked.place
    if draft.newest(history) != place.text:
        raise refuse("The text changed since this map was drawn: take a block of the new map.")
    if node.parent is None:
        raise refuse("That block is your text itself: click one of its futures.")
    if node.ends:
        raise refuse("That block ends the text (an end token): take the block before it.")
    if "\ufffd" in node.text:
        raise refuse("That block ends inside a character written over several tokens: take one after it.")
    text, caret = inserted(place, node.text)
    result = drawn.result
    constraint = drawn.asked.constraints.for_text(place.before)
    history.add(text, "branch", path_ids(result.nodes, node.id),
                {**result.sampling.as_dict(), "model": result.model, "backend": result.device,
                 "map_depth": result.depth, "cutoff": result.cutoff,
                 **({"constraint": constraint} if constraint is not None else {}),
                 **({"caret": place.caret} if place.caret is not None else {}),
                 **accepted("futures", len(result.nodes) - 1, node.mass)})
    return edited(history, caret)


class FuturesPanel:
    def build(self) -> None:
        with gr.Accordion("Futures: every continuation above a cutoff, as blocks", open=True,
                          elem_id="futures-panel"):
            with gr.Row(equal_height=True):
                self.map_depth = gr.Slider(1, inference.MAX_MAP_DEPTH, value=DEPTH, step=1, label="Depth (tokens)",
                                           elem_id="futures-depth", min_width=120)
                self.map_cutoff = gr.Slider(MIN_CUTOFF, MAX_CUTOFF, value=CUTOFF, step=CUTOFF_STEP,
                                            label="Cutoff (least mass shown)", elem_id="futures-cutoff",
                                            min_width=120)
            self.colour_by_second = gr.Checkbox(False, label="Colour by where the second model parts",
                                                elem_id="futures-compare")
            self.view = gr.HTML(WAITING, elem_id="futures", js_on_load=FUTURES_JS)
        self.state = gr.State(None)  # the map on screen (Drawn)

    def slots(self) -> dict:
        return {"futures": self.view, "futures_state": self.state}

    def wire(self, wiring: Wiring, draft: Controls, settings: Controls, compare_with: gr.Dropdown,
             answered: gr.Number, refresh: dict) -> None:
        """Follow the suggestions' answers (`answered`) and the controls; zoom on a click; insert on "insert",
        then `refresh` the suggestions as a branch does."""
        view = Controls(FuturesView, depth=self.map_depth, cutoff=self.map_cutoff,
                        colour_by_second=self.colour_by_second, compare_with=compare_with)
        drawing = dict(concurrency_id="futures", concurrency_limit=EXPLANATIONS_AT_ONCE,
                       **shows_working("Drawing the map of futures"), while_continuing=gr.skip, cancels_fit=False)
        gr.on([answered.change, self.map_depth.release, self.map_cutoff.release, self.colour_by_second.input,
               compare_with.change],
              **wiring.handler(map_futures, dict(draft=draft, settings=settings, view=view, drawn=self.state),
                               ["futures", "futures_state"], trigger_mode="always_last", **drawing))
        # A zoom redraws what the page holds: at once, beside any model work.
        self.view.select(**wiring.handler(zoom, dict(drawn=self.state), ["futures", "futures_state"],
                                          concurrency_id="futures-zoom", concurrency_limit=None,
                                          show_progress="hidden"))
        self.view.submit(**wiring.handler(insert_future, dict(draft=draft, drawn=self.state,
                                                              history="history_state"), EDITED,
                                          trigger_mode="multiple")).success(**refresh)
