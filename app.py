"""Placeholder UI until the app issue lands: text in, lookahead branches out."""

import gradio as gr

import custom_llm_inference as cli

with gr.Blocks(title="Interactive Lookahead Text Generator") as demo:
    text = gr.Textbox(label="Your text", lines=6, value="Once upon a time")
    result = gr.JSON(label="Lookahead")
    text.change(cli.lookahead, inputs=text, outputs=result, api_name="lookahead")

if __name__ == "__main__":
    demo.launch()
