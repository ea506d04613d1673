"""The page's scripts and styles (ui/static) against the Python that loads them and the page that runs them.

Cheap checks, no browser: every file is loaded and every loaded name is a file; the buttons the scripts press
are the page's; each message's version is the one its script reads; the storage key never changes.
(eslint.config.js checks each script's JavaScript, as the page runs it.)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import history
from ui import heatmap, scripts

ROOT = Path(__file__).resolve().parents[1]
LOADERS = ("static", "head_script")  # ui/scripts.py's functions that read a file of ui/static


def calls(tree: ast.AST) -> Iterator[ast.Call]:
    """The calls in `tree`, less those inside the loaders' own definitions."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef) and node.name in LOADERS:
            continue
        if isinstance(node, ast.Call):
            yield node
        yield from calls(node)


def loaded_names() -> set[str]:
    """The file names ui/*.py passes to the loaders."""
    names = set()
    for module in (ROOT / "ui").glob("*.py"):
        for node in calls(ast.parse(module.read_text(encoding="utf-8"))):
            if getattr(node.func, "id", None) in LOADERS:
                assert len(node.args) == 1 and isinstance(node.args[0], ast.Constant), (
                    f"{module.name}: load ui/static files by a literal name, so this test can follow it")
                names.add(node.args[0].value)
    return names


def test_every_static_file_is_loaded_and_every_loaded_name_is_a_file():
    files = {path.name for path in scripts.STATIC.iterdir()}
    loaded = loaded_names()
    assert loaded - files == set(), "loaded, but not in ui/static"
    assert files - loaded == set(), "in ui/static, but nothing loads it"


def test_head_scripts_are_wrapped_by_the_loader_and_no_file_ends_its_script_element():
    for head in (scripts.KEYBOARD_JS, scripts.BRANCH_WHY_JS, scripts.WORKING_JS):
        assert head.startswith("<script>\n") and head.endswith("</script>\n")
    for path in scripts.STATIC.glob("*.js"):
        assert "</script" not in path.read_text(encoding="utf-8").lower(), f"{path.name} would end its element"


def test_the_buttons_the_scripts_press_are_on_the_page():
    from app import demo  # the page as built (some ids are made in a loop)

    page_ids = {block.elem_id for block in demo.blocks.values()}
    for path in scripts.STATIC.glob("*.js"):
        pressed = set(re.findall(r"getElementById\((['\"])([^'\"]+)\1\)", path.read_text(encoding="utf-8")))
        assert {name for _, name in pressed} <= page_ids, path.name


def test_each_script_reads_the_version_of_the_messages_it_is_sent():
    def read_by(script: str) -> int:
        return int(re.search(r"const VERSION = (\d+);", script).group(1))

    assert read_by(scripts.HISTORY_SYNC_JS) == history.SYNC_VERSION
    assert read_by(heatmap.HEATMAP_JS) == heatmap.MESSAGE_VERSION


def test_the_storage_key_stays_so_a_reload_finds_the_tree_an_earlier_page_stored():
    assert scripts.STORAGE_KEY == "interactive-lookahead-history"
    assert scripts.HISTORY_SYNC_JS.count(scripts.STORAGE_KEY) == 1, "written once, where ui/scripts.py reads it"
