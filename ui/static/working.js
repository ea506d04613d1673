// The page's one working line (ui/working.py): what runs for this writer, said calmly (page.css places it).
// Each long event shows its progress on a hidden marker (.working-marker, its label in data-working): gradio's status
// tracker there is hidden ("hide") unless the event waits or runs, and says "Error" once it failed. A long text's read
// follows the status line's "Partial … (n of m". Work shorter than SHOW_AFTER_MS never shows.
(() => {
  const SHOW_AFTER_MS = 400;
  let since = null;
  let timer = null;
  let drawing = false;
  const running = () => {
    const labels = [];
    const status = document.querySelector("#status")?.textContent || "";
    if (status.includes("Partial")) {
      const read = status.match(/\(([\d,]+) of ([\d,]+)/);
      labels.push(read ? `Reading the text: ${read[1]} of ${read[2]} tokens` : "Reading the text");
    }
    for (const marker of document.querySelectorAll(".working-marker")) {
      const tracker = marker.querySelector(".wrap");
      const label = marker.querySelector("[data-working]")?.dataset.working;
      if (label && tracker && !tracker.classList.contains("hide") && !tracker.textContent.includes("Error")) {
        labels.push(label);
      }
    }
    return labels;
  };
  const line = () => {
    let element = document.querySelector("#working-line");
    const status = document.querySelector("#status");
    if (!element && status) {
      element = document.createElement("div");
      element.id = "working-line";
      element.setAttribute("role", "status");
      element.setAttribute("aria-live", "polite");
      status.after(element);
    }
    return element;
  };
  const draw = () => {
    const element = line();
    if (!element) return;
    const labels = running();
    clearTimeout(timer);
    if (!labels.length) {
      since = null;
      element.hidden = true;
      element.dataset.working = "";
      return;
    }
    since ??= performance.now();
    const wait = SHOW_AFTER_MS - (performance.now() - since);
    if (wait > 0) {
      timer = setTimeout(draw, wait);
      return;
    }
    const text = labels.join(" · ");
    if (element.dataset.working !== text) {
      element.dataset.working = text;
      element.replaceChildren(Object.assign(document.createElement("span"), {className: "working-dot"}),
                              document.createTextNode(`${text}…`));
    }
    element.hidden = false;
  };
  const soon = () => {  // once a frame, however many changes the page made in it
    if (drawing) return;
    drawing = true;
    requestAnimationFrame(() => { drawing = false; draw(); });
  };
  new MutationObserver(soon).observe(document.documentElement, {subtree: true, childList: true, attributes: true,
                                                                 attributeFilter: ["class"], characterData: true});
})();
