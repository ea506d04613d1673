"""The page's one working line: what runs for this writer (a long text being read, the map of futures, a "why?", a
Continue), said calmly in the window's corner, never as gradio's "processing | 115.3/15.2s" over a panel.

A long event shows its progress on a hidden element of its own (`shows_working`); ui/static/working.js reads gradio's
own record of the event there (pending, running, ended, failed: whatever ended it, a cancel or an error included) and
says on the line what runs. The read of a long text has no event of its own: the line follows the status line's
"Partial" and its count of tokens read.
"""

from __future__ import annotations

from html import escape

import gradio as gr


def shows_working(label: str) -> dict:
    """An event's progress options: while it runs, the working line says `label` (built where the event is wired)."""
    marker = gr.HTML(f'<span data-working="{escape(label)}"></span>', elem_classes="working-marker", padding=False)
    return {"show_progress": "minimal", "show_progress_on": [marker]}
