"""gradio_client's Client for the tests and benchmarks, with one race of its event stream closed.

A client reads every answer of its session through one event stream, which the server closes once nothing of the
session is pending. A call sent in the moment between an answer and that close is registered with the closing
stream and ends in `CancelledError` while the server still works on it (seen under a crowd on 2 cores). This client
waits, before each call sent with nothing pending, for the stream of the calls before to close. Calls in flight
together on one client still meet that race when one ends as the next is sent: each thread gets a client of its own.
"""

import time

import gradio_client

STREAM_CLOSE_SECONDS = 10  # the server closes a finished stream at once; past this, send anyway
POLL_SECONDS = 0.005


class Client(gradio_client.Client):
    def submit(self, *args, **kwargs):
        self._wait_for_finished_stream()
        return super().submit(*args, **kwargs)

    def _wait_for_finished_stream(self) -> None:
        deadline = time.monotonic() + STREAM_CLOSE_SECONDS
        while time.monotonic() < deadline:
            with self.pending_lock:
                if not self.stream_open or self.pending_event_ids:
                    return
            time.sleep(POLL_SECONDS)
