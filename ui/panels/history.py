"""The history panel: every text the writer had, as a tree to go back to; undo, redo, clear, export, import.

The tree is the session's (`history_state`, history.py); this browser keeps a copy in its localStorage
(ui/static/history_sync.js), sent what changed after each update, so a reload picks up where it left off
(`restore`).
"""

from __future__ import annotations

import json

import gradio as gr
from gradio.components import Component

import custom_llm_inference as inference
from history import History
from history.formats import EXPORTS, FORMAT_LABELS, OWN, export_notice, export_tree, file_name, read_tree
from ui.chat import MODES as CHAT_MODES
from ui.chat import TEXT_LABELS
from ui.errors import refuse
from ui.history_updates import AT_NODE, DEFAULT_TEXT, EDITED, edited, history_changes
from ui.scripts import (
    DOWNLOAD_JS,
    IMPORT_HTML,
    IMPORT_JS,
    READ_STORED_JS,
    SAVE_HISTORY_JS,
    SELECT_NODE_JS,
    keep_settings_js,
)
from ui.wiring import Update, Wiring


def resend_history(history: History) -> Update:
    """The whole tree for the browser's copy, which could not apply an update (SAVE_HISTORY_JS asks)."""
    return {"history_sync": history_changes(history, whole=True)}


def move(history: History, step: str) -> Update:
    """Undo (to the parent) or redo (to the child last visited)."""
    if not (history.undo() if step == "undo" else history.redo()):
        gr.Info(f"Nothing to {step}: this is the {'first' if step == 'undo' else 'latest'} step on this path.")
        return gr.skip()
    return at_node(history)


def select_node(history: History, event: gr.EventData) -> Update:
    history.select(int(event.node))
    return at_node(history)


def at_node(history: History) -> Update:
    """The text box, the conversation (state and view) and the tree, as at the history's current node."""
    conversation = history.conversation()
    return {"text_box": history.text, "caret_sync": "", "text_base": str(history.current),
            "conversation_state": conversation, "conversation_view": conversation, "history_state": history}


def clear(history: History) -> Update:
    history.add("", "clear")
    return edited(history)


def export_history(history: History, format: str) -> Update:
    """The tree in `format` (history/formats.py's EXPORTS) and its file's name, for the browser to save
    (DOWNLOAD_JS); what the format leaves out of the tree is said beside it."""
    notice = export_notice(history, format)
    if notice:
        gr.Info(notice)
    return {"history_file": json.dumps({"name": file_name(format), "text": export_tree(history, format)})}


def import_history(history: History, event: gr.EventData) -> Update:
    """Replace the session's tree with the file's (this app's, loom's, OpenLoom's, logitloom's or a mikupad
    session); its current node's text becomes the text. An unreadable file changes nothing and says why."""
    try:
        imported = read_tree(event.json)
    except ValueError as error:
        raise refuse(f"Could not import that file: {error}") from None
    if imported.notice:
        gr.Info(imported.notice)
    model = imported.history.model
    if model and model != history.model:
        gr.Warning(f"This history was written with {model}; suggestions now come from {history.model}.")
    return at_node(imported.history)


class KeptSettings:
    """The page's settings that a reload keeps, by name: this browser stores each one's value as it changes
    (history_sync.js), and `restore` sets back those still valid. The heatmap switch and chat mode are among
    them, restored with the tree (chat mode's conversation is the tree's)."""

    def __init__(self, components: dict[str, Component]) -> None:
        self.components = components

    def wire(self) -> None:
        inputs = list(self.components.values())
        gr.on([component.change for component in inputs], None, inputs, None,
              js=keep_settings_js(list(self.components)))

    def restored(self, kept: dict) -> list[dict]:
        """A gr.update per setting: its kept value where it has a valid one, else as it is."""
        return [gr.update(value=kept[name]) if name in kept and _acceptable(component, kept[name]) else gr.update()
                for name, component in self.components.items()]


def _acceptable(component: Component, value: object) -> bool:
    """Whether `value` is one `component` takes: one of its choices, a number within its range, a bool for a
    checkbox, text for a text box (a setting kept by another version of the page may be none of them)."""
    choices = getattr(component, "choices", None)
    if choices:
        return value in [choice[1] if isinstance(choice, tuple) else choice for choice in choices]
    if isinstance(component, gr.Checkbox):
        return isinstance(value, bool)
    if isinstance(component, (gr.Slider, gr.Number)):
        low, high = getattr(component, "minimum", None), getattr(component, "maximum", None)
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and (low is None or value >= low) and (high is None or value <= high))
    return isinstance(value, str)


def newer_draft(draft: str | None, history: History) -> str | None:
    """The text the writer last typed in this browser (keyboard.js keeps it at every edit), where the tree does not
    hold it yet: typed after the tree's current node, or after a node that only the writer's typing has followed
    since (the session recorded an earlier keystroke). None where the tree moved on otherwise (an undo, a branch)."""
    try:
        kept = json.loads(draft) if draft else {}
    except ValueError:
        return None
    text, node = kept.get("text"), kept.get("node")
    if not isinstance(text, str) or text == history.text or not isinstance(node, int) or node >= len(history.nodes):
        return None
    path = history.path()
    since = [history.nodes[n] for n in path if n > node]
    if node not in path or not all(step.kind == "type" for step in since):
        return None
    return text


def restore(stored: str | None, settings: str | None, draft: str | None, history: History,
            kept_settings: KeptSettings) -> Update:
    """The tree this browser kept (READ_STORED_JS reads it), if it has a readable one, with the text typed last
    where the tree does not hold it yet, and the settings kept with it (`kept_settings`).

    Without a tree the box is left as it is: the writer may have started typing before the page
    finished loading (under load, this event can wait in the queue for seconds).
    """
    try:
        restored = History.from_json(stored) if stored else None
    except ValueError:
        restored = None  # written by another version of the app: start afresh
    try:
        kept = json.loads(settings) if settings else {}
    except ValueError:
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    if not restored:
        kept.pop("chat_mode", None)  # its conversation is the tree's
    page: Update = {"history_state": history, "kept_settings": kept_settings.restored(kept)}
    if restored:
        page |= at_node(restored)
        typed = newer_draft(draft, restored)
        if typed is not None:
            page |= {"text_box": typed, "text_base": f"~{restored.current}"}  # the writer's: the refresh records it
    if kept.get("chat_mode") in CHAT_MODES and restored:
        mode = kept["chat_mode"]
        page |= {"chat_panel": gr.update(visible=mode == "chat"),
                 "text_box": gr.update(value=page["text_box"], label=TEXT_LABELS[mode])}
    return page


class HistoryPanel:
    """The session's tree (`state`), its buttons (`build_buttons`, beside the text) and its view (`build_tree`)."""

    def build_state(self) -> None:
        self.state = gr.State(History.start(DEFAULT_TEXT, inference.default_model_name()))
        self.file = gr.Textbox(visible=False)  # carries an export ({"name", "text"}) to the browser's download
        # Each update sends this browser's copy what changed (history.changes); SAVE_HISTORY_JS keeps it.
        self.sync = gr.Textbox(visible="hidden", elem_id="history-sync")
        self.settings_sync = gr.Textbox(visible="hidden", elem_id="settings-sync")  # the kept settings, to restore
        self.draft_sync = gr.Textbox(visible="hidden", elem_id="draft-sync")  # the text typed last, to restore

    def build_buttons(self) -> None:
        self.resync = gr.Button(elem_id="history-resync")  # hidden: pressed by SAVE_HISTORY_JS
        self.undo = gr.Button("Undo", elem_id="undo", size="sm")
        self.redo = gr.Button("Redo", elem_id="redo", size="sm")
        self.clear = gr.Button("Clear", elem_id="clear", size="sm")

    def build_tree(self) -> None:
        with gr.Accordion("History (click a line to go back there)", open=True, elem_id="history-panel"):
            self.tree = gr.HTML(elem_id="history-tree", js_on_load=SELECT_NODE_JS)
            with gr.Row():
                self.export_format = gr.Dropdown([(FORMAT_LABELS[f], f) for f in EXPORTS], value=OWN,
                                                 show_label=False, elem_id="export-format", scale=0, min_width=200,
                                                 container=False)
                self.export = gr.Button("Export", elem_id="export", size="sm", scale=0, min_width=90)
                self.importer = gr.HTML(IMPORT_HTML, elem_id="import", js_on_load=IMPORT_JS)

    def slots(self) -> dict:
        return {"history_state": self.state, "tree": self.tree, "history_sync": self.sync,
                "history_file": self.file}

    def wire(self, wiring: Wiring, demo: gr.Blocks, refresh: dict, kept: KeptSettings,
             restored: list[dict] = ()) -> None:
        """Undo, redo, a line of the tree, clear, export, import, and the browser's copy; `kept`: the settings kept
        with the tree; `restored`: events that follow their restoring (the controls they show), before the
        refresh."""
        history = dict(history=self.state)
        self.sync.change(None, self.sync, None, js=SAVE_HISTORY_JS)
        self.resync.click(**wiring.handler(resend_history, history, ["history_sync"]))
        for button, step in ((self.undo, "undo"), (self.redo, "redo")):
            button.click(**wiring.handler(move, dict(step=gr.State(step), **history), AT_NODE)).success(**refresh)
        self.tree.select(**wiring.handler(select_node, history, AT_NODE)).success(**refresh)
        self.clear.click(**wiring.handler(clear, history, EDITED)).then(**refresh)
        self.export.click(**wiring.handler(export_history, dict(format=self.export_format, **history),
                                           ["history_file"])).then(None, self.file, None, js=DOWNLOAD_JS)
        self.importer.upload(**wiring.handler(import_history, history, AT_NODE)).success(**refresh)
        kept.wire()
        wiring = wiring.adding(kept_settings=list(kept.components.values()))
        def restore_page(stored: str | None, settings: str | None, draft: str | None, history: History) -> Update:
            return restore(stored, settings, draft, history, kept)

        restoring = demo.load(js=READ_STORED_JS, **wiring.handler(
            restore_page, dict(stored=self.sync, settings=self.settings_sync, draft=self.draft_sync, **history),
            [*AT_NODE, "chat_panel", "kept_settings"]))
        for event in restored:
            restoring = restoring.then(**event)
        restoring.then(**refresh)
