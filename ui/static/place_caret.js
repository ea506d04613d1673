// An event's js= (the hidden #caret-sync box changed: a branch, a token or a continuation was inserted at the
// caret): once the text box shows the new text, put its caret there (a character offset as Python counts them,
// "" at the end; the textarea counts UTF-16 units, which differ after an emoji). A value the writer's own caret
// wrote there (keyboard.js) is where the caret already is: moving it again a few frames later would undo the
// keystrokes typed meanwhile.
// Then the box scrolls to the caret's line (keyboard.js). Until it has, the caret sits wherever the new value left it (the end): keyboard.js reads no caret meanwhile
// (window.caretPending), or a caret move timed just then would ask for suggestions at the end of the text.
(caret) => {
  if (caret === window.caretFromWriter) return caret;
  window.caretPending = true;
  requestAnimationFrame(() => requestAnimationFrame(() => {
    window.caretPending = false;
    const box = document.querySelector("#text textarea");
    if (!box) return;
    const chars = [...box.value];
    const at = caret === "" || caret == null ? chars.length : Math.min(Number(caret), chars.length);
    const units = chars.slice(0, at).join("").length;
    if (box.selectionStart !== units) box.setSelectionRange(units, units);
    window.showCaret?.();
  }));
  return caret;
}
