"""Serve app.py as a ZeroGPU Space does, on this CPU: `python tests/zerogpu_space.py PORT LOG`;
or, with `stop` for PORT, run `stop_one_of_two` in the Space's process and print its events.

The real `spaces` package runs in ZeroGPU mode: its import-time CUDA emulation (the model
is "moved to CUDA" at import and packed off), a forked worker process per GPU task,
arguments and results pickled across, and gradio's ZeroGPU defaults. Only the device
manager is stubbed: scheduling (which also writes every request to LOG as a JSON line),
allow/release, the start-up report, and the worker's CUDA init and tensor move (each
fake CUDA tensor is pointed back at its CPU original). The hardware reads as the current
ZeroGPU model, so requested durations carry its 1.5 factor.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.update(
    SPACES_ZERO_GPU="true",
    SPACES_ZERO_DEVICE_API_URL="http://127.0.0.1:9/never-called",  # every call to it is stubbed
    # Where spaces offloads the model for its workers (~770 MB): the caller's, which it removes once this ends.
    ZEROGPU_OFFLOAD_DIR=os.environ.get("ZEROGPU_OFFLOAD_DIR") or tempfile.mkdtemp(prefix="zerogpu-offload-"),
    GRADIO_ANALYTICS_ENABLED="False",
    HF_HUB_DISABLE_TELEMETRY="1",
    HF_HUB_OFFLINE="1",
)
os.environ.pop("LOOKAHEAD_MODELS", None)  # the emulated Space offers just its default model
CURRENT_HARDWARE = "NVIDIA RTX PRO 6000 Blackwell Server Edition"  # spaces' configs.json: duration_factor 1.5

import torch  # noqa: E402


def not_in_bad_fork() -> bool:
    """Stands in for torch.cuda._is_in_bad_fork; spaces sends it to a process pool, so it must pickle."""
    return False


# What a CUDA build of torch has and this CPU wheel lacks, as far as spaces looks.
torch.version.cuda = "12.8"
torch._C._cuda_init = lambda: None
torch.cuda._is_in_bad_fork = not_in_bad_fork

import spaces  # noqa: E402,F401  (ZeroGPU mode: patches torch's CUDA at import)
from spaces.zero import api, client, config  # noqa: E402
from spaces.zero import torch as zero_torch  # noqa: E402
from spaces.zero.torch import patching  # noqa: E402

config._read_gpu_information = lambda: f"Model: {CURRENT_HARDWARE}\n"
config.get_config.cache_clear()  # spaces read the (absent) driver files at import

LOG = Path(sys.argv[2])
_lock = threading.Lock()
_busy: set[int] = set()  # emulated GPUs running a task; each concurrent task gets its own, as on ZeroGPU
_tokens: dict[str, int] = {}  # allow token -> its GPU
_token_numbers = itertools.count()


def schedule(task_id, request=None, duration=None, gpu_size=None, _first_attempt=True):
    seconds = client.get_duration_seconds(duration, gpu_size)
    with _lock:
        index = min(set(range(len(_busy) + 1)) - _busy)
        _busy.add(index)
        token = f"allow-{next(_token_numbers)}"
        _tokens[token] = index
        with LOG.open("a") as log:
            log.write(json.dumps({"task_id": task_id, "seconds": seconds, "gpu": index}) + "\n")
    return api.ScheduleResponse(idle=True, nvidiaIndex=index, nvidiaUUID=f"GPU-emulated-{index}", allowToken=token)


def release(allow_token, *, fail=False, allow_404=False):
    with _lock:
        _busy.discard(_tokens.pop(allow_token, None))


client.schedule = schedule
client.release = release
client.allow = lambda allow_token: None
client.startup_report = lambda: None
zero_torch.init = lambda nvidia_uuid: None

import app  # noqa: E402  (loads the model at import and "moves" it to CUDA, as ZeroGPU requires)
import custom_llm_inference as inference  # noqa: E402
from lookahead.scheduler import ASKED_AT  # noqa: E402

originals = {fake: original for fake, original in patching.cuda_aliases.items() if original is not None}
assert originals, "the model should have been moved to (emulated) CUDA at import"


def move(callback=None):
    """The worker's move to the GPU: here, each fake CUDA tensor gets its CPU original back."""
    for fake, original in originals.items():
        fake.data = original


zero_torch.move = move

STOP_TEXT = "The keeper climbed the stairs of the lighthouse, lit the lamp, and watched the boats come home"
STOPPED_STEPS, RUNNING_STEPS = 64, 32  # integrated-gradients points: 16 passes for the one stopped, 8 for the other


def stop_one_of_two() -> list[dict]:
    """What Stop does on a Space: two sessions' explanations run at once, each in a GPU worker of its own; once
    session "stopped" has had a pass reported, this process cancels that session, as Stop does. Then session "late"
    is stopped after asking for one and before its job starts (Stop overtaking the question on its way). Returns the
    events as they came here, in order: each explanation's question, each pass reported, the cancel (how many jobs it
    found), each explanation's end (its result, or the exception it raised), each with the emulated GPUs busy then."""
    events: list[dict] = []
    changed = threading.Condition()

    def record(**event) -> None:
        with changed:
            events.append({**event, "busy": sorted(_busy)})
            changed.notify_all()

    def explain(session: str, steps: int) -> None:
        record(session=session, text=STOP_TEXT, steps=steps)
        try:
            for item in inference.attribution_stream(STOP_TEXT, None, "integrated_gradients", steps, session=session):
                if "done" in item:
                    record(session=session, done=item["done"], of=item["of"])
                else:
                    record(session=session, target=item["target"]["token_id"],
                           scores=[token["score"] for token in item["tokens"]])
        except Exception as error:  # the test reads which
            record(session=session, raised=type(error).__name__)

    def reported(session: str) -> bool:
        return any(event["session"] == session and "done" in event for event in events)

    threads = {session: threading.Thread(target=explain, args=(session, steps))
               for session, steps in (("running", RUNNING_STEPS), ("stopped", STOPPED_STEPS))}
    for session, thread in threads.items():
        thread.start()
        with changed:
            changed.wait_for(lambda: reported(session))
    record(session="stopped", cancelled=inference.cancel("stopped"))
    for thread in threads.values():
        thread.join()
    ASKED_AT.set(time.monotonic())  # as the page's events say when they were asked
    inference.cancel("late")  # a Stop that came after the question was asked, before its job started
    explain("late", RUNNING_STEPS)
    return events


if __name__ == "__main__":
    if sys.argv[1] == "stop":
        print("EVENTS " + json.dumps(stop_one_of_two()), flush=True)
    else:
        _, url, _ = app.launch(server_name="127.0.0.1", server_port=int(sys.argv[1]), prevent_thread_lock=True,
                               quiet=True)
        print(f"SERVING {url}", flush=True)
        threading.Event().wait()
