// The history tree's js_on_load (gradio runs it with `element`, `trigger`, ...). Clicks are delegated from
// the component's root, so they survive re-rendering; the clicked row's node id travels as the event's data.
element.addEventListener('click', (e) => {
  const row = e.target.closest('[data-node]');
  if (row) trigger('select', {node: Number(row.dataset.node)});
});
