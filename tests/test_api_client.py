"""The tests' gradio_client: back-to-back calls survive the moment their event stream closes.

The reader of the stream is slowed as it takes the server's close message, which holds that moment open long enough
for the next call to be sent into it: plain gradio_client loses that call, the tests' client waits and keeps it.
"""

import concurrent.futures
import json
import time
from types import SimpleNamespace

import gradio as gr
import gradio_client
import gradio_client.client
import pytest

from api_client import Client

CLOSE_DELAY_SECONDS = 0.5  # the reader's lag at the close, far longer than a call takes to reach the server


@pytest.fixture(scope="module")
def echo_url():
    with gr.Blocks() as demo:
        text = gr.Textbox()
        text.submit(lambda value: value, text, gr.Textbox(), api_name="echo")
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    yield url
    demo.close()


@pytest.fixture
def slow_close(monkeypatch):
    def loads(line: str):
        message = json.loads(line)
        if message.get("msg") == "close_stream":
            time.sleep(CLOSE_DELAY_SECONDS)
        return message

    monkeypatch.setattr(gradio_client.client, "json", SimpleNamespace(loads=loads, dumps=json.dumps))


def test_plain_gradio_client_loses_a_call_sent_as_its_stream_closes(echo_url, slow_close):
    client = gradio_client.Client(echo_url, verbose=False)
    assert client.predict("first", api_name="/echo") == "first"
    with pytest.raises(concurrent.futures.CancelledError):
        client.predict("second", api_name="/echo")


def test_back_to_back_calls_all_answer(echo_url, slow_close):
    client = Client(echo_url, verbose=False)
    assert [client.predict(f"call {i}", api_name="/echo") for i in range(4)] == [f"call {i}" for i in range(4)]

