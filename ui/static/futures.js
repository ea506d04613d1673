// The futures map's js_on_load (gradio runs it with `element`, `trigger`, ...). Events are delegated from the
// component's root, so they survive each redraw. A block's click zooms to it ("select"), "insert" puts the zoomed
// block's path in the text ("submit"); each sends the map's number with the block's id. The caption under the
// map shows the numbers of the block under the pointer, and the zoomed block's again once the pointer leaves.
const sent = (target) => ({map: Number(target.closest('.futures').dataset.map), node: Number(target.dataset.node ?? target.dataset.insert)});
element.addEventListener('click', (e) => {
  const insert = e.target.closest('[data-insert]');
  const block = insert || e.target.closest('[data-node]');
  if (block) trigger(insert ? 'submit' : 'select', sent(block));
});
element.addEventListener('mouseover', (e) => {
  const block = e.target.closest('[data-caption]');
  const caption = element.querySelector('.futures-caption');
  if (block && caption) caption.textContent = block.dataset.caption;
});
element.addEventListener('mouseleave', () => {
  const caption = element.querySelector('.futures-caption');
  if (caption) caption.textContent = caption.dataset.focused;
});
