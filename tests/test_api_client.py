"""The tests' gradio_client: back-to-back calls survive the moment their event stream closes.

The reader of the stream is held as it takes the server's close message, until the next call has been sent or
CLOSE_HOLD_SECONDS have passed: that holds the moment open for the next call, however loaded the machine. Plain
gradio_client sends into it and loses the call; the tests' client waits for the close and keeps it.
"""

import concurrent.futures
import json
import threading
from types import SimpleNamespace

import gradio as gr
import gradio_client
import gradio_client.client
import pytest

from api_client import Client

CLOSE_HOLD_SECONDS = 2.0  # how long the reader is held at a close when no call is sent meanwhile


@pytest.fixture(scope="module")
def echo_url():
    with gr.Blocks() as demo:
        text = gr.Textbox()
        text.submit(lambda value: value, text, gr.Textbox(), api_name="echo")
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    yield url
    demo.close()


@pytest.fixture
def held_close(monkeypatch):
    sends = [0]  # calls sent so far
    sent = threading.Condition()

    def loads(line: str):
        message = json.loads(line)
        if message.get("msg") == "close_stream":
            with sent:
                before = sends[0]
                sent.wait_for(lambda: sends[0] > before, CLOSE_HOLD_SECONDS)
        return message

    send_data = gradio_client.Client.send_data

    def sending(self, *args, **kwargs):
        event_id = send_data(self, *args, **kwargs)
        with sent:
            sends[0] += 1
            sent.notify_all()
        return event_id

    monkeypatch.setattr(gradio_client.client, "json", SimpleNamespace(loads=loads, dumps=json.dumps))
    monkeypatch.setattr(gradio_client.Client, "send_data", sending)


def test_plain_gradio_client_loses_a_call_sent_as_its_stream_closes(echo_url, held_close):
    client = gradio_client.Client(echo_url, verbose=False)
    assert client.predict("first", api_name="/echo") == "first"
    with pytest.raises(concurrent.futures.CancelledError):
        client.predict("second", api_name="/echo")


def test_back_to_back_calls_all_answer(echo_url, held_close):
    client = Client(echo_url, verbose=False)
    assert [client.predict(f"call {i}", api_name="/echo") for i in range(3)] == [f"call {i}" for i in range(3)]
