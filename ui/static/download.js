// An event's js= (an export: the history's, the ledger's): {"name", "text"} as JSON, the text saved as a file of that name.
(file) => {
  const {name, text} = JSON.parse(file);
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([text], {type: 'application/json'}));
  link.download = name;
  document.body.appendChild(link); link.click(); link.remove();
}
