// The import button's js_on_load (gradio runs it with `element`, `trigger`, ...): the chosen file's text
// travels as the upload event's data (history.py reads it), and the input is emptied to accept it again.
element.addEventListener('change', async (e) => {
  const file = e.target.files && e.target.files[0];
  if (!file) return;
  trigger('upload', {json: await file.text()});
  e.target.value = '';
});
