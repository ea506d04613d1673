// A head script (ui/scripts.py puts it in the page's <head>): the text box's edits, its caret, and the keyboard
// shortcuts.
// Every edit of the text refreshes: typing, paste, cut, drag-and-drop, delete, the browser's own
// undo, IME and autocomplete all fire the textarea's native input event (gradio's own "input"
// event misses paste and delete). After the textarea's own handler has updated the value, press
// the hidden button whose click (trigger_mode always_last) recomputes the suggestions.
// The caret says where they are for: a character offset as Python counts them (code points; the textarea counts
// UTF-16 units), "" at the end of the text, kept in the hidden #caret-sync box that the suggestions read. A caret
// moved by a click, a key or a tap asks for new suggestions after a short pause, as typing does.
// An edit, a branch or a plot token taken: the suggestions on screen are stale at once, without a round trip, until
// those for the text the box shows arrive (answer.js). The hidden #text-base box names the history node whose text
// the session last put in the box; an edit marks it ("~N"), so the server takes the box's text as the writer's.
const CARET_PAUSE_MS = 350;
const caretSync = () => document.querySelector("#caret-sync textarea, #caret-sync input");
// Every panel's (a second model's too): "suggestions-stale" and the panel's suffix, as its answer box is named.
const markStale = () => {
  for (const box of document.querySelectorAll("[id^=answer-sync]")) {
    document.body.classList.add("suggestions-stale" + box.id.slice("answer-sync".length));
  }
};

function writerEdited() {
  markStale();
  const base = document.querySelector("#text-base textarea, #text-base input");
  if (base && !base.value.startsWith("~")) {
    base.value = "~" + base.value;
    base.dispatchEvent(new Event("input", { bubbles: true }));
  }
}

function syncCaret() {
  const box = document.querySelector("#text textarea");
  const sync = caretSync();
  if (!box || !sync || window.caretPending) return false;  // an insertion's caret is being placed (place_caret.js)
  const at = box.selectionStart >= box.value.length ? "" : String([...box.value.slice(0, box.selectionStart)].length);
  if (sync.value === at) return false;
  sync.value = window.caretFromWriter = at;  // place_caret.js leaves the caret alone for this value
  sync.dispatchEvent(new Event("input", { bubbles: true }));
  return true;
}

let caretPause;
function caretMoved() {
  clearTimeout(caretPause);
  caretPause = setTimeout(() => {
    if (syncCaret()) document.getElementById("caret-moved")?.click();
  }, CARET_PAUSE_MS);
}

const inText = (e) => e.target.closest && e.target.closest("#text");
document.addEventListener("input", (e) => {
  if (inText(e)) {
    window.keepDraft?.(e.target.value);  // history_sync.js: kept in this browser at once, for a reload
    writerEdited();
    syncCaret();
    setTimeout(() => document.getElementById("text-edited")?.click(), 0);
  }
});
// While Continue writes, the text box is the model's: an edit there would be overwritten by its next token. So
// the writer's first keystroke presses Stop, and their edits are held (not lost) until the continuation's last
// token is in and the caret after it, then go in there as typed (each fires the input event above). A click that
// acts on the text (a branch, a plot token, Alt+1…9, chat mode, undo…) is held the same way, then made in turn:
// the writer who acts before Continue is done is neither refused nor lost.
const HELD_CLICKS = ".branch-btn, .distribution [data-token-id], #chat-mode label, #undo, #redo, #clear, #append, " +
  "#refresh, #constrain, #unconstrain";
let continuing = false;
const held = [];
const hold = (action) => {
  if (!held.length) document.getElementById("continue-stop")?.click();
  held.push(action);
};
document.addEventListener("click", (e) => {
  const target = e.target.closest && e.target.closest(HELD_CLICKS);
  if (continuing && target && !target.closest(".why")) {
    e.preventDefault();
    e.stopImmediatePropagation();
    hold({ click: target });
  } else if (e.target.closest && e.target.closest("#continue")) {
    continuing = true;
    document.body.classList.add("continuing");
    // The run's name: Continue's event sends it, and so does a Stop, which then reaches this run alone, even one that
    // has not begun writing yet.
    window.continueRun = Date.now().toString(36) + Math.random().toString(36).slice(2);
  }
}, true);
document.addEventListener("beforeinput", (e) => {
  if (!continuing || !inText(e)) return;
  e.preventDefault();
  hold({ type: e.inputType, text: e.data ?? e.dataTransfer?.getData("text/plain") ?? "" });
}, true);
const LINE_BREAKS = new Set(["insertLineBreak", "insertParagraph"]);
function replayHeld() {
  if (window.caretPending) {  // the continuation's caret is still being placed (place_caret.js)
    requestAnimationFrame(replayHeld);
    return;
  }
  // Only now is the text box the writer's again: a key typed since Continue's event ended was held too, after the
  // keys before it, so that every key goes in in the order it was typed.
  continuing = false;
  document.body.classList.remove("continuing");
  const box = document.querySelector("#text textarea");
  if (!box || !held.length) return;
  for (const action of held.splice(0)) {
    if (action.click) {
      action.click.click();
    } else if (action.type.startsWith("delete")) {
      box.focus();
      document.execCommand(action.type.includes("Forward") ? "forwardDelete" : "delete");
    } else {
      box.focus();
      document.execCommand("insertText", false, LINE_BREAKS.has(action.type) ? "\n" : action.text);
    }
  }
}
// Continue's event has ended, however it ended (ui/panels/continuation.py): once its last answer is on the page, the
// text box is the writer's again, with what they typed meanwhile.
window.continueEnded = () => requestAnimationFrame(() => requestAnimationFrame(replayHeld));
// Taking a branch or a plot token (a click, a tap, Alt+1…9): new suggestions are on their way.
document.addEventListener("click", (e) => {
  if (e.target.closest && e.target.closest(".branch-btn, .distribution [data-token-id]") && !e.target.closest(".why")) {
    markStale();
  }
}, true);
// The caret moved by a click, a key, a tap or a phone's caret handle: each changes the selection.
document.addEventListener("selectionchange", () => {
  if (document.activeElement?.closest?.("#text")) caretMoved();
});
document.addEventListener("keydown", (e) => {
  if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
    document.getElementById("refresh")?.click();
    e.preventDefault();
  } else if (e.altKey && /^Digit[1-9]$/.test(e.code)) {
    const button = document.getElementById("branch-" + (Number(e.code.slice(5)) - 1));
    if (button && button.offsetParent !== null) { button.click(); e.preventDefault(); }
  } else if (e.altKey && e.code === "KeyW") {  // the first branch's next word only
    const first = document.getElementById("branch-0");
    if (first && first.offsetParent !== null) { document.getElementById("take-word")?.click(); e.preventDefault(); }
  } else if (e.key === "Enter" && e.target.type === "number" && e.target.closest(".block")?.querySelector("input[type=range]")) {
    // A number typed into a slider's box applies on Enter, as in any form (gradio applies it as the box loses
    // focus); the box keeps the focus.
    e.target.blur();
    e.target.focus();
    e.preventDefault();
  }
});
// The page put a text in the box (an insertion, Continue's next tokens, undo, a reload, chat and back): the box's own
// scroll stays where it was, or goes to the top, wherever the caret is. Once the caret is placed, scroll the box so
// that the caret's line is in view (a copy of the text up to the caret, laid out as the box lays it out, says where).
// The writer's own typing is left to the browser, which keeps their caret in view itself.
let typedValue = null;
document.addEventListener("input", (e) => { if (inText(e)) typedValue = e.target.value; }, true);
window.showCaret = () => {
  const box = document.querySelector("#text textarea");
  const typed = box?.value === typedValue;
  typedValue = null;  // once: the page may put that same text back later (chat and back)
  if (!box || typed) return;
  const style = getComputedStyle(box);
  const copy = document.createElement("div");
  for (const name of ["font", "padding", "border", "boxSizing", "letterSpacing", "lineHeight", "overflowWrap",
                      "wordBreak", "tabSize"]) copy.style[name] = style[name];
  Object.assign(copy.style, { position: "absolute", visibility: "hidden", whiteSpace: "pre-wrap",
                              width: box.clientWidth + "px", height: "auto", overflowY: "hidden" });
  copy.textContent = box.value.slice(0, box.selectionStart);
  const mark = document.createElement("span");
  mark.textContent = "|";
  copy.appendChild(mark);
  document.body.appendChild(copy);
  const top = mark.offsetTop, bottom = top + mark.offsetHeight;
  copy.remove();
  if (top < box.scrollTop || bottom > box.scrollTop + box.clientHeight) {
    box.scrollTop = Math.max(0, bottom - box.clientHeight + mark.offsetHeight);
  }
};
