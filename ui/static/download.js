// An event's js= (an export): JSON saved as a file by the browser, under `name` (the history's by default).
(json, name = 'lookahead-history.json') => {
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([json], {type: 'application/json'}));
  link.download = name;
  document.body.appendChild(link); link.click(); link.remove();
}
