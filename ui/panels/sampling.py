"""The sampling panel: what turns p_base into p_final (a slider per `Sampling` field, made from its knob), how the
branches grow, and presets that set them together."""

from __future__ import annotations

import json
from dataclasses import asdict

import gradio as gr

import custom_llm_inference as inference
from lookahead.sampling import BRANCH_MODES, Sampling, knobs
from ui.controls import MAX_BUTTONS, BranchShape, Controls
from ui.wiring import Update, Wiring

PRESET_NAMES = [*inference.PRESETS, "custom"]
MAX_PAGE_DEPTH = 8  # tokens per branch the page offers (the API takes up to MAX_DEPTH)


def apply_preset(name: str) -> Update:
    """The sampling controls set to a preset: the sampling and the branch mode (the seed is no preset's)."""
    sampling, mode = inference.PRESETS[name]
    return {"sampling": sampling, "branch_mode": mode}


def matching_preset(sampling: Sampling, shape: BranchShape) -> Update:
    """The preset the sampling controls now hold, or "custom"."""
    matching = (name for name, preset in inference.PRESETS.items() if preset == (sampling, shape.branch_mode))
    return {"preset": next(matching, "custom")}


def mirror_js(groups: dict[str, list[str]]) -> str:
    """An event's js= that answers, for each group of `groups` (its field names, the event's inputs in order), one
    value: the fields by name, as a JSON box holds them."""
    return f"""(...values) => {{
  const groups = {json.dumps(list(groups.values()))};
  let next = 0;
  return groups.map((names) => Object.fromEntries(names.map((name) => [name, values[next++]])));
}}"""


def slider(name: str) -> gr.Slider:
    """The page's control for a sampling setting, as its knob describes it."""
    setting, default = knobs()[name], getattr(Sampling(), name)
    low, high, step = setting.slider
    return gr.Slider(low, high, value=default, step=step, label=setting.label, elem_id=name.replace("_", "-"))


class SamplingPanel:
    def build(self) -> None:
        with gr.Accordion("Sampling", open=True, elem_id="sampling-panel"):
            self.preset = gr.Radio(PRESET_NAMES, value="greedy", label="Preset", elem_id="preset")
            self.sliders = {name: slider(name) for name in knobs()}
            self.branch_mode = gr.Radio(list(BRANCH_MODES), value="greedy", label="Branches continue by",
                                        elem_id="branch-mode")
            self.seed = gr.Number(0, minimum=0, precision=0, label="Seed (for sampled branches)", elem_id="seed")
            with gr.Row():
                self.n_branches = gr.Slider(1, MAX_BUTTONS, value=5, step=1, label="Branches")
                self.depth = gr.Slider(1, MAX_PAGE_DEPTH, value=3, step=1, label="Depth (tokens per branch)")
            self.by_fit = gr.Checkbox(False, label="At a caret, order branches by how well they lead into the text "
                                      "after it (fit)", elem_id="by-fit")
        self.sampling = Controls(Sampling, **self.sliders)
        self.shape = Controls(BranchShape, n_branches=self.n_branches, depth=self.depth,
                              branch_mode=self.branch_mode, seed=self.seed, by_fit=self.by_fit)
        # What every other event reads of this panel: its values as two JSON boxes, which the browser sets from the
        # controls as they change (mirror_js), so that no event of the server takes the dozen controls. Gradio's
        # page work per event grows with the components that ever were an input of one (each one's loading status
        # is updated at every message of every event).
        self.sampling_box = gr.JSON(asdict(Sampling()), visible="hidden", elem_id="sampling-box")
        self.shape_box = gr.JSON(asdict(BranchShape(5, 3)), visible="hidden", elem_id="shape-box")

    def slots(self) -> dict:
        return {"preset": self.preset, "branch_mode": self.branch_mode, "sampling": self.sampling}

    def wire(self, wiring: Wiring, refresh: dict) -> None:
        controls = [*self.sampling, *self.shape]
        self.mirrored = dict(fn=None, inputs=controls, outputs=[self.sampling_box, self.shape_box],
                             js=mirror_js({"sampling": list(self.sampling.components),
                                           "shape": list(self.shape.components)}))
        self.preset.input(**wiring.handler(apply_preset, dict(name=self.preset), ["sampling", "branch_mode"])
                          ).then(**self.mirrored).then(**refresh)
        mirrored = gr.on([*(s.release for s in self.sliders.values()), self.branch_mode.input, self.n_branches.release,
                          self.depth.release, self.seed.submit, self.by_fit.input], **self.mirrored)
        mirrored.then(**wiring.handler(matching_preset, dict(sampling=self.sampling_box, shape=self.shape_box),
                                       ["preset"]))
        mirrored.then(**refresh)
