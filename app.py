"""Gradio UI: write, see where the model could go next, click a branch to take it.

UI only: every number shown comes from custom_llm_inference. Run with `python app.py`.
"""

from __future__ import annotations

import html
import time

import gradio as gr

import custom_llm_inference as cli

SOURCE_LABELS = {"jacobi": "Jacobi window", "ngram": "n-gram draft", "step": "plain step"}
SOURCE_COLORS = {"Jacobi window": "#a78bfa", "n-gram draft": "#34d399", "plain step": "#e5e7eb"}
MAX_BUTTONS = 10  # the n_branches slider's maximum; buttons beyond n_branches are hidden
PLOT_TOKENS = 10
UNDO_LEVELS = 50
VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})

KEYBOARD_JS = """
<script>
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

CSS = """
.branch-btn { font-family: ui-monospace, monospace !important; }
#status { font-size: 13px; color: var(--body-text-color-subdued); }
"""
# The plot is plain HTML with inline styles: gr.HTML content does not see the page's CSS classes.
ROW_STYLE = "display:flex;align-items:center;gap:8px;margin:3px 0;font:13px ui-monospace,monospace"
TOKEN_STYLE = "flex:0 0 9em;text-align:right;overflow:hidden;text-overflow:ellipsis;white-space:pre"
TRACK_STYLE = "flex:1 1 auto;background:var(--neutral-100);border-radius:3px;height:16px"
PCT_STYLE = "flex:0 0 4em;text-align:right;color:var(--body-text-color-subdued)"


def visible(text: str) -> str:
    """Whitespace made visible, so a branch of spaces or newlines is not an empty button."""
    return text.translate(VISIBLE_WHITESPACE)


def distribution_plot(distribution: list[dict]) -> str:
    """A bar chart of the top tokens and the remaining mass as "other", with percentages."""
    top = distribution[:PLOT_TOKENS]
    rows = [(visible(d["token"]), d["prob"], "var(--color-accent)") for d in top]
    rows.append(("other", max(0.0, 1.0 - sum(d["prob"] for d in top)), "var(--neutral-400)"))
    scale = max(p for _, p, _ in rows) or 1.0
    return '<div id="distribution">' + "".join(
        f'<div class="dist-row" style="{ROW_STYLE}">'
        f'<span style="{TOKEN_STYLE}" title="{html.escape(token)}">{html.escape(token)}</span>'
        f'<span style="{TRACK_STYLE}"><span style="display:block;height:100%;border-radius:3px;'
        f'background:{color};width:{100 * p / scale:.1f}%"></span></span>'
        f'<span style="{PCT_STYLE}">{100 * p:.1f}%</span></div>'
        for token, p, color in rows
    ) + "</div>"


def branch_label(branch: dict) -> str:
    return f"{visible(branch['text'])}  ·  {100 * branch['prob']:.0f}%"


def remember(history: list[str], text: str) -> list[str]:
    return history if history and history[-1] == text else (history + [text])[-UNDO_LEVELS:]


def suggest(text: str, n_branches: int, depth: int, history: list[str], request: gr.Request):
    """Recompute everything for `text`: branches, plot, status. Records `text` in the undo history."""
    history = remember(history, text)
    if not text:
        hidden = [gr.update(visible=False)] * MAX_BUTTONS
        return (None, *hidden, "", "Type something to see where the model could go next.", history)
    start = time.perf_counter()
    try:
        result = cli.lookahead(text, int(n_branches), int(depth), session=session_key(request))
    except ValueError as error:
        raise gr.Error(str(error)) from None
    ms = 1000 * (time.perf_counter() - start)
    buttons = [gr.update(value=branch_label(b), visible=True) for b in result["branches"]]
    buttons += [gr.update(visible=False)] * (MAX_BUTTONS - len(buttons))
    status = (
        f"**{result['model']}** on {result['device']} · {result['context_tokens']} context tokens · "
        f"{result['reused_tokens']} reused · {ms:.0f} ms"
    )
    if result["notice"]:
        status += f" · ⚠️ {result['notice']}"
    return ((text, result), *buttons, distribution_plot(result["distribution"]), status, history)


def take_branch(index: int, text: str, shown: tuple[str, dict] | None) -> str:
    """The text with branch `index` appended, exactly as the engine spelled it.

    `shown` is (the text the suggestions were computed for, the result). A click that
    races an edit is refused rather than appending a branch computed for other text.
    """
    if not shown or shown[0] != text or index >= len(shown[1]["branches"]):
        raise gr.Error("The suggestions are being refreshed for your edit; try again in a moment.")
    return text + shown[1]["branches"][index]["text"]


def undo(history: list[str]) -> tuple[str, list[str]]:
    if len(history) < 2:
        raise gr.Error("Nothing to undo.")
    history = history[:-1]
    return history[-1], history


def continue_text(text: str, n_tokens: int, lossless: bool, history: list[str]):
    """Stream a greedy continuation into the text, then show which tokens came from accepted drafts."""
    if not text:
        raise gr.Error("Type something to continue.")
    if n_tokens is None:
        raise gr.Error("Say how many tokens to continue by.")
    history = remember(history, text)
    result = None
    try:
        for result in cli.generate_stream(text, int(n_tokens), "lookahead" if lossless else "greedy"):
            yield text + result["text"], gr.update(), f"{len(result['token_ids'])} tokens…", history
    except ValueError as error:
        raise gr.Error(str(error)) from None
    pieces = [(piece, SOURCE_LABELS[source]) for piece, source in
              zip(result["token_texts"], result["draft_source_per_token"])]
    n, passes = len(result["token_ids"]), result["forward_passes"]
    summary = (
        f"{n} tokens in **{passes} forward passes** ({n / passes:.2f} tokens per pass: a {n / passes:.1f}× "
        f"speed-up in passes over one token at a time) · {result['seconds']:.2f} s, "
        f"{n / result['seconds']:.1f} tokens/s"
    )
    yield text + result["text"], gr.update(value=pieces, visible=True), summary, history


def session_key(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def api_lookahead(text: str, n_branches: int = 5, depth: int = 3, request: gr.Request = None) -> dict:
    """Top n_branches next tokens of `text`, each continued greedily to `depth` tokens (see README)."""
    try:
        return cli.lookahead(text, n_branches, depth, session=session_key(request))
    except ValueError as error:
        raise gr.Error(str(error)) from None


def api_generate(text: str, max_new_tokens: int = 64, method: str = "lookahead") -> dict:
    """Continue `text` greedily; "lookahead" gives the same tokens as "greedy" in fewer forward passes."""
    try:
        return cli.generate(text, max_new_tokens, method)
    except ValueError as error:
        raise gr.Error(str(error)) from None


def api_next_token_distribution(text: str, k: int = 10, request: gr.Request = None) -> list:
    """The k most likely next tokens of `text`, with prob (plain softmax) and logprob."""
    try:
        return cli.next_token_distribution(text, k, session=session_key(request))
    except ValueError as error:
        raise gr.Error(str(error)) from None


with gr.Blocks(title="Interactive Lookahead") as demo:
    gr.Markdown(
        "## Interactive Lookahead\nWrite, and see where the model could go next. Click a branch (or "
        "press **Alt+1…9**) to append it; **Ctrl+Enter** refreshes."
    )
    shown = gr.State(None)  # (text, lookahead result) behind the buttons on screen
    history = gr.State([])
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(
                label="Your text", lines=8, max_lines=30, elem_id="text",
                value="The old lighthouse keeper climbed the stairs and",
            )
            with gr.Row(equal_height=True):
                branch_buttons = [
                    gr.Button(visible=False, elem_id=f"branch-{i}", elem_classes="branch-btn", size="sm",
                              min_width=100)
                    for i in range(MAX_BUTTONS)
                ]
            with gr.Row():
                n_branches = gr.Slider(1, MAX_BUTTONS, value=5, step=1, label="Branches")
                depth = gr.Slider(1, 8, value=3, step=1, label="Depth (tokens per branch)")
            with gr.Row():
                refresh_button = gr.Button("Refresh (Ctrl+Enter)", elem_id="refresh", size="sm")
                undo_button = gr.Button("Undo", elem_id="undo", size="sm")
                clear_button = gr.Button("Clear", elem_id="clear", size="sm")
            status = gr.Markdown(elem_id="status")
            with gr.Row():
                n_tokens = gr.Number(64, minimum=1, maximum=256, step=1, precision=0, label="Tokens to continue")
                lossless = gr.Checkbox(True, label="Lookahead decoding (same text, fewer passes)")
                continue_button = gr.Button("Continue", elem_id="continue", variant="primary", scale=0, min_width=140)
            continuation = gr.HighlightedText(
                label="Last continuation: where each token came from", color_map=SOURCE_COLORS,
                combine_adjacent=False, show_legend=True, elem_id="continuation", visible=False,
            )
            continuation_status = gr.Markdown(elem_id="continuation-status")
        with gr.Column(scale=2):
            gr.Markdown("**Next token**")
            plot = gr.HTML(elem_id="plot")

    suggest_io = dict(
        fn=suggest,
        inputs=[text, n_branches, depth, history],
        outputs=[shown, *branch_buttons, plot, status, history],
        api_visibility="private",
    )
    # always_last: while one update runs, only the newest of the inputs typed meanwhile runs next.
    text.input(trigger_mode="always_last", **suggest_io)
    gr.on([refresh_button.click, n_branches.release, depth.release, demo.load], **suggest_io)
    for i, button in enumerate(branch_buttons):
        button.click(
            lambda t, s, i=i: take_branch(i, t, s), [text, shown], text, api_visibility="private"
        ).success(**suggest_io)
    undo_button.click(undo, history, [text, history], api_visibility="private").success(**suggest_io)
    clear_button.click(lambda: "", None, text, api_visibility="private").then(**suggest_io)

    continue_button.click(
        continue_text, [text, n_tokens, lossless, history], [text, continuation, continuation_status, history],
        api_visibility="private",
    ).success(**suggest_io)

    gr.api(api_lookahead, api_name="lookahead")
    gr.api(api_generate, api_name="generate")
    gr.api(api_next_token_distribution, api_name="next_token_distribution")


def launch(**kwargs):
    """Start the app with its keyboard shortcuts and styles (Gradio 6 takes them at launch)."""
    return demo.queue(default_concurrency_limit=1).launch(head=KEYBOARD_JS, css=CSS, **kwargs)


if __name__ == "__main__":
    launch()
