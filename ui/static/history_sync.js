// The browser's copy of the writer's history tree, kept in localStorage so that a reload picks up where it
// left off, the page's settings that a reload keeps with it (every control's value, by name), and the writer's
// newest text (a reload a moment after the last key, before the session recorded it, still finds it). An
// expression: {read, save, keep}, whose members are the js= of events of the page's panels (ui/scripts.py loads
// them): `read` hands the stored copies to the page's load event, `save` applies each history sync message,
// `keep` stores the settings; and window.keepDraft, which keyboard.js calls at every edit.
// The sync message's fields: docs/architecture.md, "Page state messages".
(() => {
  const STORAGE_KEY = "interactive-lookahead-history";  // ui/scripts.py reads it from here
  const SETTINGS_KEY = "interactive-lookahead-settings";
  const DRAFT_KEY = "interactive-lookahead-draft";
  const VERSION = 1;  // of the messages this script reads (history.py's SYNC_VERSION)
  const resync = () => document.getElementById("history-resync")?.click();  // asks for the whole tree
  const stored = () => {
    try { return JSON.parse(localStorage.getItem(STORAGE_KEY)); } catch { return null; }
  };
  const save = (message) => {
    // The whole tree once, then each update's changed nodes.
    if (!message) return;
    const update = JSON.parse(message);
    if (update.v !== VERSION) {
      // written for another version of this script: ask for the whole tree, unless this was it
      if (!update.whole) resync();
      else console.warn("history not kept: a message of version", update.v, "(reload the page)");
      return;
    }
    let tree = stored();
    if (update.whole) {
      tree = {...update.whole, sync: update.sync};
    } else if (!tree || tree.sync !== update.sync) {
      return resync();  // no copy, or another tab's tree: ask for the whole one
    } else {
      const known = tree.nodes.length;
      for (const node of update.nodes) {
        if (node.id > tree.nodes.length) return resync();
        tree.nodes[node.id] = node;
      }
      // The session put a text of its own in the box (a branch, an undo): the text typed before it is no longer
      // the writer's newest. A new "type" node is the writer's typing recorded: what they typed since still is.
      const typed = update.current >= known && tree.nodes[update.current].kind === "type";
      if (update.current !== tree.current && !typed) localStorage.removeItem(DRAFT_KEY);
      tree.current = update.current;
    }
    try { localStorage.setItem(STORAGE_KEY, JSON.stringify(tree)); } catch (e) { console.warn("history not kept:", e); }
    window.historyCurrent = tree.current;
  };
  // `names`: the settings' names, `values` theirs, in order; the others stored stay.
  const keep = (names, values) => {
    let settings = {};
    try { settings = JSON.parse(localStorage.getItem(SETTINGS_KEY)) || {}; } catch { /* unreadable: start afresh */ }
    names.forEach((name, i) => { settings[name] = values[i]; });
    try { localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings)); } catch (e) { console.warn("settings not kept:", e); }
  };
  // With the node of the tree's copy the text was typed after, so that a reload tells it from an older text.
  window.keepDraft = (text) => {
    try {
      localStorage.setItem(DRAFT_KEY, JSON.stringify({text, node: window.historyCurrent ?? null}));
    } catch { /* storage full or off: the tree's copy still holds what the session recorded */ }
  };
  const read = (_, __, ___, history) => [localStorage.getItem(STORAGE_KEY), localStorage.getItem(SETTINGS_KEY),
    localStorage.getItem(DRAFT_KEY), history];
  return {read, save, keep};
})()
