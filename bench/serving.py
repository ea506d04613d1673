"""Start an app server for a benchmark: on a free loopback port, its log in the temp folder."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(command_for_port, env: dict[str, str], name: str) -> tuple[subprocess.Popen, str]:
    """Run `command_for_port(port)` with `env` added; return (process, url) once it answers.

    The process gets its own session, so `os.killpg(process.pid, 9)` also ends what it forked.
    """
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1",
           "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", **env}
    log = open(Path(tempfile.gettempdir()) / f"bench_{name}.log", "w")
    server = subprocess.Popen(command_for_port(port), stdout=log, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(600):
        try:
            urllib.request.urlopen(url, timeout=2)
            return server, url
        except OSError:
            time.sleep(0.5)
    os.killpg(server.pid, 9)
    raise RuntimeError(f"the {name} server did not start; see {log.name}")
