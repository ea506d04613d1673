// The plot's js_on_load (gradio runs it with `element`, `trigger`, ...). Clicks are delegated from the
// component's root, so they survive re-rendering; the clicked row's token id travels as the event's data.
element.addEventListener('click', (e) => {
  const row = e.target.closest('[data-token-id]');
  if (!row) return;
  // "why?" beside a token asks what in the text drives it; the rest of the row appends it
  // (a token that is part of a character is not appended alone: its title says so)
  const why = e.target.closest('.why');
  if (!why && row.hasAttribute('data-partial')) return;
  trigger(why ? 'select' : 'click', {token_id: Number(row.dataset.tokenId)});
});
