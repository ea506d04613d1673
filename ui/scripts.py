"""The page's scripts and styles: small, plain JavaScript for what gradio's events do not cover.

Kept here so app.py reads as the layout and the wiring.
"""

KEYBOARD_JS = """
<script>
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
</script>
"""
# "why?" on a branch: a small chip over the corner of the branch button under the pointer (or focused;
# there "?" asks too); it presses the hidden #why-branch button, whose event reads the branch from WHY_BRANCH_JS.
BRANCH_WHY_JS = """
<script>
(() => {
  let chip = null, branch = null, hiding = null;
  const explain = (button) => {
    window.lookaheadWhyBranch = Number(button.id.replace("branch-", ""));
    if (chip) chip.hidden = true;
    document.getElementById("why-branch")?.click();
  };
  const hideSoon = () => { clearTimeout(hiding); hiding = setTimeout(() => { if (chip) chip.hidden = true; }, 600); };
  const showOver = (button) => {
    if (!chip) {
      chip = document.createElement("button");
      chip.id = "branch-why";
      chip.type = "button";
      chip.textContent = "why?";
      chip.title = "What in your text makes the model want this branch's first token (or focus the branch and press ?)";
      chip.addEventListener("mouseenter", () => clearTimeout(hiding));
      chip.addEventListener("mouseleave", hideSoon);
      chip.addEventListener("click", () => explain(branch));
      document.body.appendChild(chip);
    }
    clearTimeout(hiding);
    branch = button;
    const box = button.getBoundingClientRect();
    chip.style.left = `${box.right + window.scrollX - 34}px`;
    chip.style.top = `${box.top + window.scrollY - 12}px`;
    chip.hidden = false;
  };
  const branchOf = (e) => e.target.closest && e.target.closest(".branch-btn");
  document.addEventListener("mouseover", (e) => { if (branchOf(e)) showOver(branchOf(e)); });
  document.addEventListener("focusin", (e) => { if (branchOf(e)) showOver(branchOf(e)); });
  document.addEventListener("mouseout", (e) => { if (branchOf(e)) hideSoon(); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "?" && branchOf(e)) { explain(branchOf(e)); e.preventDefault(); }
  });
})();
</script>
"""
WHY_BRANCH_JS = "(index, ...rest) => [window.lookaheadWhyBranch ?? index, ...rest]"
# Clicks inside the plot and the tree are delegated from the component's root, so they
# survive re-rendering; the clicked element's data attribute travels as the event's data.
CLICK_TOKEN_JS = """element.addEventListener('click', (e) => {
  const row = e.target.closest('[data-token-id]');
  if (!row) return;
  // "why?" beside a token asks what in the text drives it; the rest of the row appends it
  trigger(e.target.closest('.why') ? 'select' : 'click', {token_id: Number(row.dataset.tokenId)});
});"""
SELECT_NODE_JS = """element.addEventListener('click', (e) => {
  const row = e.target.closest('[data-node]');
  if (row) trigger('select', {node: Number(row.dataset.node)});
});"""
IMPORT_JS = """element.addEventListener('change', async (e) => {
  const file = e.target.files && e.target.files[0];
  if (!file) return;
  trigger('upload', {json: await file.text()});
  e.target.value = '';
});"""
DOWNLOAD_JS = """(json) => {
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([json], {type: 'application/json'}));
  link.download = 'lookahead-history.json';
  document.body.appendChild(link); link.click(); link.remove();
}"""
STORAGE_KEY = "interactive-lookahead-history"  # the browser's copy of the tree, for reloads
READ_STORED_JS = f"(_, history) => [localStorage.getItem('{STORAGE_KEY}'), history]"
SAVE_HISTORY_JS = """(message) => {
  // Keep the browser's copy of the tree: the whole tree once, then each update's changed nodes.
  if (!message) return;
  const update = JSON.parse(message);
  const resync = () => document.getElementById("history-resync")?.click();
  let tree = null;
  try { tree = JSON.parse(localStorage.getItem("KEY")); } catch (e) {}
  if (update.whole) {
    tree = {...update.whole, sync: update.sync};
  } else if (!tree || tree.sync !== update.sync) {
    return resync();  // no copy, or another tab's tree: ask for the whole one
  } else {
    for (const node of update.nodes) {
      if (node.id > tree.nodes.length) return resync();
      tree.nodes[node.id] = node;
    }
    tree.current = update.current;
  }
  try { localStorage.setItem("KEY", JSON.stringify(tree)); } catch (e) { console.warn("history not kept:", e); }
}""".replace("KEY", STORAGE_KEY)
IMPORT_HTML = (
    '<label style="cursor:pointer;font-size:13px;padding:4px 10px;border:1px solid var(--border-color-primary);'
    'border-radius:6px;display:inline-block">Import JSON…'
    '<input type="file" accept=".json,application/json" style="display:none"></label>'
)

CSS = """
.branch-btn { font-family: ui-monospace, monospace !important; }
#text-edited, #history-resync, #heatmap-resync, #why-branch { display: none !important; }
#branch-why { position: absolute; z-index: 1000; font: 11px ui-monospace, monospace; padding: 1px 6px;
  border-radius: 8px; border: 1px solid var(--color-accent); background: var(--background-fill-primary, #fff);
  color: var(--color-accent); cursor: pointer; }
#status { font-size: 13px; color: var(--body-text-color-subdued); }
"""
# "Constrain from here": the text box's caret, in code points (what Python's offsets count; the
# textarea counts UTF-16 units, which differ after an emoji), replaces the hidden caret input.
CARET_JS = """(kind, value, mode, caret, text) => {
  const box = document.querySelector('#text textarea');
  const at = box ? [...box.value.slice(0, box.selectionStart)].length : [...text].length;
  return [kind, value, mode, at, text];
}"""
