"""What the model's server cannot give, said on the page where it would be offered.

Read from the backend's `capabilities` when a page loads, not when it is built: the backend may be chosen after
the page is built (`python app.py --backend ...`), and a server is asked what it does once it answers.
"""

from __future__ import annotations

from typing import NamedTuple

import gradio as gr

import custom_llm_inference as inference

NO_SCORES = "This server does not score the text you wrote, so it has no heatmap."
NO_WHY = "“Why?” needs the model's gradients, in this app's process; this server returns log-probabilities only."
NO_CONSTRAINTS = "This server takes no list of the tokens allowed next, so it has no constraints."
SHARED_CACHE = (
    "**This server keeps one cache for every visitor**: from how fast it answers, one visitor could tell whether "
    "another wrote a text. Serve one visitor through it, or use a backend that keeps visitors apart."
)


class Limits(NamedTuple):
    """The updates of the controls a server may not serve, and of the page's notice."""

    heatmap_on: dict
    why_method: dict
    constrain: dict
    constraint_status: dict
    notice: dict


def offered(able: bool, why_not: str) -> dict:
    """A control usable where the server gives what it asks, else greyed out, saying why."""
    return gr.update(interactive=able, info=None if able else why_not)


def server_limits() -> Limits:
    capabilities = inference.backend().capabilities
    return Limits(offered(capabilities.prompt_scores, NO_SCORES), offered(capabilities.attribution, NO_WHY),
                  gr.update(interactive=capabilities.constraints),
                  gr.skip() if capabilities.constraints else gr.update(value=NO_CONSTRAINTS),
                  gr.update(value=SHARED_CACHE, visible=not capabilities.visitors_apart))
