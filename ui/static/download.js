// An event's js= (app.py's export): the history's JSON, saved as a file by the browser.
(json) => {
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([json], {type: 'application/json'}));
  link.download = 'lookahead-history.json';
  document.body.appendChild(link); link.click(); link.remove();
}
