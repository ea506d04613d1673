"""The page's scripts and styles: small, plain JavaScript for what gradio's events do not cover.

Each lives in a file of ui/static, read once here at import, so app.py reads as the layout and the wiring
and eslint checks every script as the page runs it (eslint.config.js says how: a whole script in the page's
<head>, a gr.HTML js_on_load body, or an event's js= expression).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

STATIC = Path(__file__).with_name("static")


def static(name: str) -> str:
    """The text of ui/static/`name`, as the page gets it."""
    return (STATIC / name).read_text(encoding="utf-8")


def head_script(name: str) -> str:
    """A whole script of ui/static, as a <script> element for the page's <head>."""
    return f"<script>\n{static(name)}</script>\n"


KEYBOARD_JS = head_script("keyboard.js")
BRANCH_WHY_JS = head_script("branch_why.js")
WORKING_JS = head_script("working.js")
FOLD_ON_PHONE_JS = static("fold_on_phone.js")
WHY_BRANCH_JS = static("why_branch.js")
CLICK_TOKEN_JS = static("click_token.js")
SELECT_NODE_JS = static("select_node.js")
FUTURES_JS = static("futures.js")
IMPORT_JS = static("import.js")
IMPORT_HTML = static("import.html")
DOWNLOAD_JS = static("download.js")
CARET_JS = static("caret.js")
PLACE_CARET_JS = static("place_caret.js")
# Once the page has applied a text it put in the box, and placed the caret: the caret's line in view (keyboard.js).
SHOW_CARET_JS = "() => requestAnimationFrame(() => requestAnimationFrame(() => window.showCaret?.()))"
ANSWER_JS = static("answer.js")
CSS = static("page.css")

# The browser's copy of the history tree: one script whose value is {read, save}, each an event's js=.
HISTORY_SYNC_JS = static("history_sync.js")
READ_STORED_JS = f"({HISTORY_SYNC_JS}).read"
SAVE_HISTORY_JS = f"({HISTORY_SYNC_JS}).save"



def keep_settings_js(names: list[str]) -> str:
    """An event's js= that stores the values of the settings `names` (its inputs, in order) in this browser."""
    return f"(...values) => ({HISTORY_SYNC_JS}).keep({json.dumps(names)}, values)"



# The localStorage keys of that copy, of the kept settings and of the text typed last, as the script spells them
# (the browser tests read and set them).
STORAGE_KEY, SETTINGS_KEY, DRAFT_KEY = (
    json.loads(re.search(rf"const {name} = (\"[^\"]+\")", HISTORY_SYNC_JS).group(1))
    for name in ("STORAGE_KEY", "SETTINGS_KEY", "DRAFT_KEY"))
