// The heatmap's js_on_load (gradio runs it with `element`, `trigger`, `props`, `watch`, ...). The component's
// template never changes, so gradio never redraws it: the view is built here from heatmap update messages
// (ui/heatmap.py's heatmap_message; their fields: docs/architecture.md, "Page state messages"). It also shows
// a token's details, turns a click on an alternative into a select event (a rewind) and a click on
// "why the first?" into a click event (explain).
const VERSION = 1;  // of the messages this script reads (ui/heatmap.py's MESSAGE_VERSION)
const root = () => element.querySelector('.heatmap-view');
const resync = () => document.getElementById('heatmap-resync')?.click();  // asks for the whole view
let shown = null;  // the id of the message the page shows
const apply = (message) => {
  if (!message) { root().replaceChildren(); shown = null; return; }
  const m = JSON.parse(message);
  if (m.v !== VERSION) {
    // written for another version of this script: ask for the whole view, unless this was it
    shown = null;
    if (m.frame === undefined) resync();
    else console.warn('heatmap not shown: a message of version', m.v, '(reload the page)');
    return;
  }
  if (m.id === shown) return;
  if (m.frame !== undefined) {
    root().innerHTML = m.frame;
  } else {
    // a change to a view this page does not have (it missed one): ask for the whole view
    if (m.base !== shown) { shown = null; resync(); return; }
    const box = root().querySelector('#heatmap-text');
    let token;
    while ((token = box.lastElementChild) && token.classList.contains('tk')
           && Number(token.dataset.i) >= m.keep) token.remove();
    for (const old of box.querySelectorAll('.tk')) { if (Number(old.dataset.i) < m.first) old.remove(); else break; }
    box.querySelector('.earlier')?.remove();
    box.insertAdjacentHTML('afterbegin', m.earlier);
    box.insertAdjacentHTML('beforeend', m.spans);
    root().querySelector('#disagreements').outerHTML = m.disagreements;
  }
  shown = m.id;
};
watch('value', () => apply(props.value));
apply(props.value);
const details = () => element.querySelector('#token-details');
// An alternative as a button (the first model's: a click rewinds to it) or a label (the second model's), its
// probability drawn as a bar behind it, so two models' choices read side by side.
const choice = (tag, [id, text, prob], index) => {
  const item = document.createElement(tag);
  item.className = 'alt';
  if (tag === 'button') { item.dataset.index = index; item.dataset.tokenId = id; }
  item.textContent = `${text} ${prob}`;
  const width = Math.max(parseFloat(prob) || 0, 0);  // "< 0.01%" draws no bar
  item.style.backgroundImage = `linear-gradient(to right, var(--color-accent-soft, #dbeafe) ${width}%, transparent ${width}%)`;
  return item;
};
const show = (token) => {
  const box = details();
  if (!token || !box) return;
  element.querySelectorAll('.tk[data-selected]').forEach(t => t.removeAttribute('data-selected'));
  token.setAttribute('data-selected', '');
  box.replaceChildren();
  const head = document.createElement('div');
  const [text, prob, rank, label, entropy] = JSON.parse(token.dataset.s);
  head.textContent = prob === undefined ? `${text}: nothing before it to predict it from`
    : `${text}: ${prob}, rank ${rank}${label ? ` (${label})` : ''}, entropy ${entropy} bits. The model's top choices:`;
  box.appendChild(head);
  for (const alternative of JSON.parse(token.dataset.a || '[]')) box.appendChild(choice('button', alternative, token.dataset.i));
  if (prob !== undefined) {
    const why = document.createElement('button');
    why.className = 'alt why-token';
    why.dataset.index = token.dataset.i;
    why.textContent = 'why the first?';
    why.title = "What in the text before it made the model expect its first choice here";
    box.appendChild(why);
  }
  if (token.dataset.b) {  // a second model's view of the token (comparing two models)
    const [name, itsProb, js, alternatives] = JSON.parse(token.dataset.b);
    const line = document.createElement('div');
    line.className = 'second-model';
    line.textContent = `${name}: ${itsProb ?? '—'}` + (js ? `, ${js} bits apart` : '')
      + (alternatives.length ? '. Its top choices:' : '');
    box.appendChild(line);
    for (const alternative of alternatives) box.appendChild(choice('span', alternative));
  }
};
element.addEventListener('mouseover', (e) => show(e.target.closest('.tk')));
element.addEventListener('focusin', (e) => show(e.target.closest('.tk')));
element.addEventListener('click', (e) => {
  const why = e.target.closest('.why-token');
  const alt = e.target.closest('[data-token-id]');
  if (why) trigger('click', {index: Number(why.dataset.index)});
  else if (alt) trigger('select', {index: Number(alt.dataset.index), token_id: Number(alt.dataset.tokenId)});
  else show(e.target.closest('.tk'));
});
