"""The history panel: every text the writer had, as a tree to go back to; undo, redo, clear, export, import.

The tree is the session's (`history_state`, history.py); this browser keeps a copy in its localStorage
(ui/static/history_sync.js), sent what changed after each update, so a reload picks up where it left off
(`restore`).
"""

from __future__ import annotations

import json

import gradio as gr

import custom_llm_inference as cli
from history import History
from ui.chat import MODES as CHAT_MODES
from ui.chat import TEXT_LABELS
from ui.errors import refuse
from ui.insertion import caret_out
from ui.render import tree_view
from ui.scripts import DOWNLOAD_JS, IMPORT_HTML, IMPORT_JS, READ_STORED_JS, SAVE_HISTORY_JS, SELECT_NODE_JS
from ui.wiring import Update, Wiring

DEFAULT_TEXT = "The old lighthouse keeper climbed the stairs and"
AT_NODE = ["text_box", "caret_sync", "text_base", "conversation_state", "conversation_view", "history_state"]
EDITED = ["text_box", "caret_sync", "text_base", "history_state"]


def edited(history: History, caret: int | None = None) -> Update:
    """The text box, its caret and the history, after an edit recorded in the history."""
    return {"text_box": history.text, "caret_sync": caret_out(caret), "text_base": str(history.current),
            "history_state": history}


def history_shown(history: History) -> Update:
    """The session's history, its tree on the page, and what the browser's copy of it lacks."""
    return {"history_state": history, "tree": tree_view(history), "history_sync": history_changes(history)}


def history_changes(history: History, whole: bool = False) -> str:
    """What the browser's copy of the tree lacks, as JSON (SAVE_HISTORY_JS applies it)."""
    return json.dumps(history.changes(whole), ensure_ascii=False, separators=(",", ":"))


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


def export_history(history: History) -> Update:
    """The tree as JSON, for the browser to save as a file (DOWNLOAD_JS)."""
    return {"history_json": history.to_json()}


def import_history(history: History, event: gr.EventData) -> Update:
    """Replace the session's tree with an exported one; its current node's text becomes the text."""
    try:
        imported = History.from_json(event.json)
    except ValueError as error:
        raise refuse(f"Could not import that file: {error}") from None
    if imported.model != history.model:
        gr.Warning(f"This history was written with {imported.model}; suggestions now come from {history.model}.")
    return at_node(imported)


def restore(stored: str | None, settings: str | None, history: History) -> Update:
    """The tree this browser kept (READ_STORED_JS reads it), if it has a readable one, and the settings kept with
    it: the heatmap switch, and chat mode (whose conversation the tree holds).

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
    page = at_node(restored) if restored else {"history_state": history}
    if kept.get("heatmap_on") is True:
        page["heatmap_on"] = True
    if kept.get("chat_mode") in CHAT_MODES and restored:
        mode = kept["chat_mode"]
        page |= {"chat_mode": mode, "chat_panel": gr.update(visible=mode == "chat"),
                 "text_box": gr.update(value=restored.text, label=TEXT_LABELS[mode])}
    return page


class HistoryPanel:
    """The session's tree (`state`), its buttons (`build_buttons`, beside the text) and its view (`build_tree`)."""

    def build_state(self) -> None:
        self.state = gr.State(History.start(DEFAULT_TEXT, cli.default_model_name()))
        self.json = gr.Textbox(visible=False)  # carries an export to the browser's download
        # Each update sends this browser's copy what changed (history.changes); SAVE_HISTORY_JS keeps it.
        self.sync = gr.Textbox(visible="hidden", elem_id="history-sync")
        self.settings_sync = gr.Textbox(visible="hidden", elem_id="settings-sync")  # the kept settings, to restore

    def build_buttons(self) -> None:
        self.resync = gr.Button(elem_id="history-resync")  # hidden: pressed by SAVE_HISTORY_JS
        self.undo = gr.Button("Undo", elem_id="undo", size="sm")
        self.redo = gr.Button("Redo", elem_id="redo", size="sm")
        self.clear = gr.Button("Clear", elem_id="clear", size="sm")

    def build_tree(self) -> None:
        with gr.Accordion("History (click a line to go back there)", open=True, elem_id="history-panel"):
            self.tree = gr.HTML(elem_id="history-tree", js_on_load=SELECT_NODE_JS)
            with gr.Row():
                self.export = gr.Button("Export JSON", elem_id="export", size="sm", scale=0, min_width=120)
                self.importer = gr.HTML(IMPORT_HTML, elem_id="import", js_on_load=IMPORT_JS)

    def slots(self) -> dict:
        return {"history_state": self.state, "tree": self.tree, "history_sync": self.sync,
                "history_json": self.json}

    def wire(self, wiring: Wiring, demo: gr.Blocks, refresh: dict, kept: dict) -> None:
        """Undo, redo, a line of the tree, clear, export, import, and the browser's copy; `kept`: the settings kept
        with the tree (slot name -> component, read by `restore`)."""
        history = dict(history=self.state)
        self.sync.change(None, self.sync, None, js=SAVE_HISTORY_JS)
        self.resync.click(**wiring.handler(resend_history, history, ["history_sync"]))
        for button, step in ((self.undo, "undo"), (self.redo, "redo")):
            button.click(**wiring.handler(move, dict(step=gr.State(step), **history), AT_NODE)).success(**refresh)
        self.tree.select(**wiring.handler(select_node, history, AT_NODE)).success(**refresh)
        self.clear.click(**wiring.handler(clear, history, EDITED)).then(**refresh)
        self.export.click(**wiring.handler(export_history, history, ["history_json"])).then(
            None, self.json, None, js=DOWNLOAD_JS)
        self.importer.upload(**wiring.handler(import_history, history, AT_NODE)).success(**refresh)
        demo.load(js=READ_STORED_JS, **wiring.handler(
            restore, dict(stored=self.sync, settings=self.settings_sync, **history), [*AT_NODE, *kept],
        )).then(**refresh)
