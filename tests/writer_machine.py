"""A writer's session on the page as a hypothesis state machine: random sequences of what a writer does, each step
followed by the page's invariants. tests/test_browser_stateful.py runs a short seeded run on a tiny model;
scripts/stateful_page.py a long one on the embedded model.

The machine keeps the text the writer's actions imply (`text`, and where the caret is). Typing, pasting and deleting
change it exactly; an insertion by the page (a branch, Alt+1, Alt+W, a token of the plot, Continue) adds one piece at
one place and removes nothing but the whitespace the piece's first token carries itself; chat and back, undo then
redo, export then import, and a reload change nothing. After every step the page settles within a deadline, and then:
the box holds exactly that text; the suggestions shown are for it (the answer's mark, answer.js); Continue shows
Continue (nothing is stuck); the caret's line is in view after the page put a text in the box; no message but the
refusals a step asks for.
"""

from __future__ import annotations

import time
import zlib

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from browser import PAGE_SECONDS, caret_line, stored_tree
from ui.history_updates import DEFAULT_TEXT
from ui.scripts import DRAFT_KEY, SETTINGS_KEY, STORAGE_KEY

WORDS = [" the", " sea", " and", "ab", ".", "\n", " keeper", ","]
PASTE = ("The lighthouse stood at the edge of the world, and every night the keeper climbed its stairs to light "
         "the lamp. Ships passed far out at sea, and none of them knew his name. ")
REFUSALS = ("Say how many tokens to continue by", "The constraint does not allow that token",
            "That token is part of a character", "Write something first", "Continue did not start")
# Each error message the page shows, once, into window.pageErrors (a page's init script: after a reload too).
ERRORS_SEEN_JS = """
window.pageErrors = [];
const seenToasts = new WeakMap();  // a toast's element may be reused for the next message
new MutationObserver(() => {
  for (const toast of document.querySelectorAll(".toast-body.error")) {
    const words = toast.innerText;
    if (seenToasts.get(toast) !== words) { seenToasts.set(toast, words); window.pageErrors.push(words); }
  }
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def one_insertion(before: str, after: str) -> str | None:
    """The piece `after` adds to `before` at one place (the whitespace before it that the piece's first token carries
    may go), or None if `after` is not so."""
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    for kept in range(start, -1, -1):  # the text before the piece keeps all of its first `kept` characters ...
        if before[kept:start].strip():
            break  # ... losing whitespace only
        rest = before[start:]
        if len(after) >= kept + len(rest) and after.endswith(rest) and before[:kept] == after[:kept]:
            return after[kept:len(after) - len(rest)]
    return None


class WriterOnThePage(RuleBasedStateMachine):
    """Set `page` (a Playwright page of the app, with ERRORS_SEEN_JS as an init script), `url` and `model` (the model
    the page is set to) on the class."""

    page = url = model = None
    sequences = steps = 0  # how many were begun, and checked, in this process

    @initialize()
    def fresh_session(self) -> None:
        page = self.page
        page.goto(self.url)
        page.evaluate("([history, settings, draft, model]) => { localStorage.removeItem(history); "
                      "localStorage.removeItem(draft); localStorage.setItem(settings, JSON.stringify({model})); }",
                      [STORAGE_KEY, SETTINGS_KEY, DRAFT_KEY, self.model])
        WriterOnThePage.sequences += 1
        self.text, self.caret = DEFAULT_TEXT, None  # None: the end
        self.refusal = ()  # the refusals the step may meet
        self.placed = False  # whether the page put the text in the box in the step
        self.acting()
        page.reload()

    # What a writer does -----------------------------------------------------------------------------------------

    @rule(word=st.sampled_from(WORDS))
    def type_word(self, word: str) -> None:
        self.put_caret()
        self.acting()
        self.page.locator("#text textarea").press_sequentially(word)
        self.inserted(word)

    @rule(length=st.integers(20, 400))
    def paste(self, length: int) -> None:
        self.put_caret()
        self.acting()
        self.page.keyboard.insert_text(PASTE[:length])
        self.inserted(PASTE[:length])

    @rule(n=st.integers(1, 6))
    def delete(self, n: int) -> None:
        at = self.at
        if not at:
            return
        self.put_caret()
        self.acting()
        for _ in range(min(n, at)):
            self.page.keyboard.press("Backspace")
        after = self.page.locator("#text textarea").input_value()  # a key deletes a character as the browser sees it
        kept = len(after) - len(self.text[at:])
        assert after.endswith(self.text[at:]) and 0 <= kept < at and after[:kept] == self.text[:kept], \
            f"Backspace deletes before the caret alone: {self.text!r} -> {after!r}"
        self.text, self.caret = after, self.caret_after(kept)

    @rule(where=st.floats(0, 1))
    def move_caret(self, where: float) -> None:
        self.caret = self.caret_after(round(where * len(self.text)))
        self.put_caret()
        self.answered = None  # a new answer only if the caret's place changed

    @rule(index=st.integers(0, 2), at_once=st.booleans())
    def take_branch(self, index: int, at_once: bool) -> None:
        if not at_once:
            self.settle()
        button = self.page.locator(f"#branch-{index}")
        if button.is_visible():
            self.acting(REFUSALS[3:4])
            button.click()
            self.taken()

    @rule(key=st.sampled_from(["Alt+1", "Alt+W"]))
    def shortcut(self, key: str) -> None:
        self.put_caret()
        if self.page.locator("#branch-0").is_visible():
            self.acting(REFUSALS[3:4])
            self.page.keyboard.press(key)
            self.taken()

    @rule()
    def plot_token(self) -> None:
        token = self.page.locator("#plot [data-token-id]").first
        if token.is_visible():
            self.acting(REFUSALS[1:4])
            token.click()
            self.taken()

    @rule(tokens=st.integers(1, 8), typed=st.sampled_from(["", " Suddenly"]), stop=st.booleans())
    def continue_(self, tokens: int, typed: str, stop: bool) -> None:
        self.put_caret()
        self.set_tokens(tokens)
        before = self.text
        self.acting(("Type something to continue", REFUSALS[4]))
        self.page.locator("#continue").click()
        if stop:  # where it still shows (a short Continue may have ended already)
            self.page.evaluate("() => { const stop = document.getElementById('continue-stop');"
                               " if (stop?.offsetParent) stop.click(); }")
        if typed:
            self.page.locator("#text textarea").press_sequentially(typed)
        self.settle()
        piece = self.adopt(before)
        assert piece.endswith(typed), f"the keys typed during Continue go in after what it wrote: {piece!r}"
        self.placed = True

    @rule(tokens=st.sampled_from([0, 99999]))
    def refused_continue(self, tokens: int) -> None:
        """A number of tokens the page does not take: refused (or, where the box clamps it, a Continue)."""
        self.set_tokens(tokens)
        before = self.text
        self.acting(REFUSALS[:1])
        self.page.locator("#continue").click()
        self.settle()
        self.adopt(before)
        self.set_tokens(8)

    @rule(fits=st.booleans())
    def constrain(self, fits: bool) -> None:
        self.open_panel("#constrain-panel")
        self.page.locator("#constraint-value textarea").fill(" yes\n no" if fits else "zzz")
        self.put_caret()
        self.acting(("Not constrained",))
        self.page.locator("#constrain").click()

    @rule()
    def unconstrain(self) -> None:
        self.open_panel("#constrain-panel")
        self.acting()
        self.page.locator("#unconstrain").click()

    @rule()
    def chat_and_back(self) -> None:
        self.settle()
        page = self.page
        self.acting()
        page.locator("#chat-mode label").filter(has_text="chat").click()
        self.settle()
        assert page.locator("#text textarea").input_value() == "", "chat mode: the reply's box, empty"
        self.acting()
        page.locator("#chat-mode label").filter(has_text="plain text").click()
        self.caret, self.placed = None, True

    @rule()
    def undo_then_redo(self) -> None:
        self.settle()
        self.acting()
        self.page.locator("#undo").click()
        self.settle()
        assert self.page.locator("#text textarea").input_value() in self.node_texts(), "undo: a text of the tree"
        self.acting()
        self.page.locator("#redo").click()
        self.caret, self.placed = None, True

    @rule()
    def undo(self) -> None:
        self.settle()
        self.acting()
        self.page.locator("#undo").click()
        self.settle()
        self.text, self.caret, self.placed = self.page.locator("#text textarea").input_value(), None, True
        assert self.text in self.node_texts(), "undo: a text of the tree"

    @rule()
    def export_then_import(self) -> None:
        self.settle()
        page = self.page
        with page.expect_download(timeout=PAGE_SECONDS * 1000) as download:
            page.locator("#export").click()
        self.acting()
        page.locator("#import input[type=file]").set_input_files(download.value.path())
        self.caret, self.placed = None, True

    @rule(at_once=st.booleans())
    def reload(self, at_once: bool) -> None:
        if not at_once:
            self.settle()
        self.acting()
        self.page.reload()
        self.caret, self.placed = None, True

    # After every step ---------------------------------------------------------------------------------------------

    @invariant()
    def the_page_is_the_writers(self) -> None:
        if self.page is None or not hasattr(self, "text"):
            return
        self.settle()
        page = self.page
        shown = page.locator("#text textarea").input_value()
        assert shown == self.text, f"the box holds the writer's text: {self.text!r}, not {shown!r}"
        assert page.locator("#continue").is_visible() and page.locator("#continue-stop").is_hidden(), \
            "Continue shows Continue when nothing runs"
        errors = [e for e in page.evaluate("() => (window.pageErrors || []).splice(0)")
                  if not any(words in e for words in self.refusal)]
        assert not errors, f"no message but the refusals the step may meet: {errors}"
        if self.placed:
            box = page.locator("#text textarea").bounding_box()
            line = caret_line(page)
            assert box["y"] - 1 <= line["top"] and line["bottom"] <= box["y"] + box["height"] + 1, \
                f"the caret's line is in view: {line}, {box}"
        self.refusal, self.placed = (), False
        WriterOnThePage.steps += 1

    # Helpers ------------------------------------------------------------------------------------------------------

    @property
    def at(self) -> int:
        return len(self.text) if self.caret is None else self.caret

    def caret_after(self, at: int) -> int | None:
        return None if at >= len(self.text) else at

    def put_caret(self) -> None:
        """The box focused, its caret where the writer has it."""
        self.page.locator("#text textarea").evaluate(
            "(box, at) => { box.focus(); const u = [...box.value].slice(0, at).join('').length;"
            " box.setSelectionRange(u, u); }", self.at)

    def acting(self, refusals: tuple[str, ...] = ()) -> None:
        """What the page shows answers the writer's next action: a new answer (or a refusal) is to come."""
        if self.page.url.startswith("http"):  # the messages shown closed: gradio shows one again only once it has gone
            self.page.evaluate("() => document.querySelectorAll('.toast-close').forEach((close) => close.click())")
            self.wait_until(lambda: not self.page.locator(".toast-body").count(), "the messages shown have gone")
            state = self.page.evaluate(ANSWER_JS)
            self.answered, self.errors = state["answer"], state["errors"]
        else:
            self.answered, self.errors = "", 0
        self.refusal = (*self.refusal, *refusals)

    def inserted(self, piece: str) -> None:
        at = self.at
        self.text = self.text[:at] + piece + self.text[at:]
        self.caret = self.caret_after(at + len(piece))

    def taken(self) -> None:
        """A click that inserts what the page offers: one piece, at one place."""
        before = self.text
        self.settle()
        self.adopt(before)
        self.placed = True

    def adopt(self, before: str) -> str:
        after = self.page.locator("#text textarea").input_value()
        piece = one_insertion(before, after)
        assert piece is not None, f"one insertion into the writer's text: {before!r} -> {after!r}"
        at = self.page.locator("#text textarea").evaluate("(b) => [...b.value.slice(0, b.selectionStart)].length")
        self.text = after
        self.caret = self.caret_after(at)
        return piece

    def set_tokens(self, tokens: int) -> None:
        field = self.page.get_by_label("Tokens to continue")
        field.fill(str(tokens))
        field.blur()

    def open_panel(self, panel: str) -> None:
        label = self.page.locator(f"{panel} > .label-wrap")
        if "open" not in (label.get_attribute("class") or ""):
            label.click()

    def node_texts(self) -> set[str]:
        return {node.text for node in stored_tree(self.page).nodes}

    def wait_until(self, condition, what: str, seen=lambda: None) -> None:
        deadline = time.monotonic() + PAGE_SECONDS
        while not condition():
            assert time.monotonic() < deadline, f"within {PAGE_SECONDS} s: {what} (the page: {seen()})"
            time.sleep(0.05)

    def settle(self) -> None:
        """Wait until nothing runs for the writer, the answer to their last action has come (or its refusal), and
        the suggestions shown are for the text in the box."""
        page = self.page

        def settled() -> bool:
            state = page.evaluate(ANSWER_JS)
            if state["text"] is None or state["busy"]:
                return False
            if self.answered is not None and state["answer"] == self.answered and state["errors"] <= self.errors:
                return False
            return state["answer"].split(":")[-1] == str(zlib.crc32(state["text"].encode("utf-16-le")))

        self.wait_until(settled, "the answer to the writer's action, for the text in the box",
                        lambda: {**page.evaluate(ANSWER_JS), "before": self.answered,
                                 "status": page.locator("#status").inner_text(),
                                 "continuation": page.locator("#continuation-status").inner_text()})
        self.answered = None


# The page as `settle` reads it: the box's text, the mark of the answer shown (answer.js), whether Continue or an event
# that answers on the status line runs (its tracker shows), and how many errors were shown since they were last read.
ANSWER_JS = """() => ({
  text: document.querySelector("#text textarea")?.value ?? null,
  answer: document.querySelector("#answer-sync textarea, #answer-sync input")?.value ?? "",
  busy: document.body.classList.contains("continuing") || [...document.querySelectorAll(
    "#status [data-testid=status-tracker]")].some((t) => !t.classList.contains("hide") && t.offsetHeight > 0),
  errors: (window.pageErrors || []).length,
})"""
