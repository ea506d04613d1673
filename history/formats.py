"""Reading and writing the history in other loom-style tools' formats, told apart by their content.

`read_tree` reads this app's JSON, socketteer/loom's, OpenLoom's, logitloom's and a mikupad session
(what the file held that the tree does not is said in its `notice`); `import_tree` is the tree alone.
`export_tree` writes this app's JSON (lossless), loom's or OpenLoom's; `export_notice` says what the
chosen format leaves out. Every unreadable file is a ValueError saying what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from history import FORMAT as OWN_FORMAT
from history import History, logitloom, loom, mikupad, openloom
from history.foreign import Imported

OWN = "interactive-lookahead"
EXPORTS = (OWN, loom.FORMAT, openloom.FORMAT)  # the formats the tree can be written in
FORMAT_LABELS = {OWN: "Interactive Lookahead (everything)", loom.FORMAT: "loom", openloom.FORMAT: "OpenLoom",
                 logitloom.FORMAT: "logitloom", mikupad.FORMAT: "mikupad session"}
WRITERS: dict[str, Callable[[History], str]] = {OWN: History.to_json, loom.FORMAT: loom.write,
                                                 openloom.FORMAT: openloom.write}
NOTICES: dict[str, Callable[[History], str]] = {OWN: lambda _: "", loom.FORMAT: loom.notice,
                                                 openloom.FORMAT: openloom.notice}
# Checked in this order: each test looks at the fields its format alone has.
READERS = ((logitloom.is_logitloom, logitloom.read), (openloom.is_openloom, openloom.read),
           (loom.is_loom, loom.read), (mikupad.is_mikupad, mikupad.read))


def read_tree(data: str | bytes | dict) -> Imported:
    """The tree in `data` (a file's bytes or text, or its parsed JSON), in whichever format it is."""
    raw = _parsed(data)
    if raw.get("format") == OWN_FORMAT:
        return Imported(History.from_json(data if isinstance(data, str) else json.dumps(raw)), OWN)
    for recognises, read in READERS:
        if recognises(raw):
            return read(raw)
    fields = ", ".join(sorted(raw)[:8]) or "none"
    raise ValueError(f"not a history this app reads (this app's JSON, loom, OpenLoom, logitloom or a mikupad "
                     f"session); its fields: {fields}")


def import_tree(data: str | bytes | dict) -> History:
    return read_tree(data).history


def _parsed(data: str | bytes | dict) -> dict:
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise ValueError(f"not a text file: {error}") from None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a JSON file: {error}") from None
        except RecursionError:
            raise ValueError("the file nests its nodes too deep for Python's JSON reader (about 490 loom nodes; "
                             "OpenLoom's and this app's files are flat)") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a history file: its JSON is a {type(data).__name__}, not an object")
    return data


def export_tree(history: History, format: str) -> str:
    """The tree as a file in `format` (one of EXPORTS)."""
    return WRITERS[_export_format(format)](history)


def export_notice(history: History, format: str) -> str:
    """What the file `export_tree` writes in `format` does not hold of this tree ("" when it holds everything)."""
    return NOTICES[_export_format(format)](history)


def file_name(format: str) -> str:
    """The download's name, saying the format (history.loom.json …)."""
    return f"history.{_export_format(format)}.json"


def _export_format(format: str) -> str:
    if format not in EXPORTS:
        raise ValueError(f"cannot write the format {format!r} (this app writes {', '.join(EXPORTS)})")
    return format
