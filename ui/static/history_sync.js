// The browser's copy of the writer's history tree, kept in localStorage so that a reload picks up where it
// left off, and the page's settings that a reload keeps with it (the heatmap switch, chat mode). An expression:
// {read, save, keep}, whose members are the js= of events of the page's panels (ui/scripts.py loads them): `read`
// hands the stored copies to the page's load event, `save` applies each history sync message, `keep` stores the
// settings.
// The sync message's fields: docs/architecture.md, "Page state messages".
(() => {
  const STORAGE_KEY = "interactive-lookahead-history";  // ui/scripts.py reads it from here
  const SETTINGS_KEY = "interactive-lookahead-settings";
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
      for (const node of update.nodes) {
        if (node.id > tree.nodes.length) return resync();
        tree.nodes[node.id] = node;
      }
      tree.current = update.current;
    }
    try { localStorage.setItem(STORAGE_KEY, JSON.stringify(tree)); } catch (e) { console.warn("history not kept:", e); }
  };
  const keep = (heatmapOn, chatMode) => {
    const settings = JSON.stringify({heatmap_on: heatmapOn, chat_mode: chatMode});
    try { localStorage.setItem(SETTINGS_KEY, settings); } catch (e) { console.warn("settings not kept:", e); }
  };
  const read = (_, __, history) => [localStorage.getItem(STORAGE_KEY), localStorage.getItem(SETTINGS_KEY), history];
  return {read, save, keep};
})()
