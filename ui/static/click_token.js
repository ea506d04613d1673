// The plot's js_on_load (gradio runs it with `element`, `trigger`, ...). Clicks are delegated from the
// component's root, so they survive re-rendering; the clicked row's token id travels as the event's data.
element.addEventListener('click', (e) => {
  const row = e.target.closest('[data-token-id]');
  if (!row) return;
  // "why?" beside a token asks what in the text drives it; the rest of the row appends it
  trigger(e.target.closest('.why') ? 'select' : 'click', {token_id: Number(row.dataset.tokenId)});
});
