// A head script (ui/scripts.py puts it in the page's <head>): the text box's edits and the keyboard shortcuts.
// Every edit of the text refreshes: typing, paste, cut, drag-and-drop, delete, the browser's own
// undo, IME and autocomplete all fire the textarea's native input event (gradio's own "input"
// event misses paste and delete). After the textarea's own handler has updated the value, press
// the hidden button whose click (trigger_mode always_last) recomputes the suggestions.
document.addEventListener("input", (e) => {
  if (e.target.closest && e.target.closest("#text")) {
    setTimeout(() => document.getElementById("text-edited")?.click(), 0);
  }
});
document.addEventListener("keydown", (e) => {
  if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
    document.getElementById("refresh")?.click();
    e.preventDefault();
  } else if (e.altKey && /^Digit[1-9]$/.test(e.code)) {
    const button = document.getElementById("branch-" + (Number(e.code.slice(5)) - 1));
    if (button && button.offsetParent !== null) { button.click(); e.preventDefault(); }
  }
});
