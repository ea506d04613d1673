// An event's js= (the page's load): on a phone, the panels below the writer's text and its suggestions start folded
// (page.css puts them after the plot), so the suggestions are what the writer sees first.
() => {
  if (!window.matchMedia("(max-width: 640px)").matches) return;
  for (const id of ["why-panel", "sampling-panel", "history-panel", "heatmap-panel", "ledger-panel",
                    "futures-panel"]) {
    const toggle = document.querySelector(`#${id} > .label-wrap`);
    if (toggle && toggle.classList.contains("open")) toggle.click();
  }
}
