// An event's js= ("Constrain from here"): the text box's caret, in code points (what Python's offsets count;
// the textarea counts UTF-16 units, which differ after an emoji), replaces the hidden caret input.
(kind, value, mode, caret, text) => {
  const box = document.querySelector('#text textarea');
  const at = box ? [...box.value.slice(0, box.selectionStart)].length : [...text].length;
  return [kind, value, mode, at, text];
}
