"""The page driven through random writer's sessions in Chromium (tests/writer_machine.py), the invariants checked
after every step: a short seeded run on the tiny Llama (scripts/stateful_page.py runs a long one on the embedded
model). A failure prints the sequence of steps that led to it."""

import time

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from playwright.sync_api import sync_playwright

from browser import CHROMIUM, CHROMIUM_ARGS, PAGE_SECONDS  # skips without chromium
from conftest import TINY_LLAMA_DIR
from lookahead.scheduler import scheduler
from writer_machine import ERRORS_SEEN_JS, WriterOnThePage

SEQUENCES, STEPS = 10, 15


def test_random_writers_sessions_never_lose_the_text_nor_leave_the_page_stuck(app_url):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        context.add_init_script(ERRORS_SEEN_JS)
        machine = type("Writer", (WriterOnThePage,), {"page": context.new_page(), "url": app_url,
                                                      "model": TINY_LLAMA_DIR})
        run = settings(max_examples=SEQUENCES, stateful_step_count=STEPS, deadline=None, derandomize=True,
                       database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        try:
            run_state_machine_as_test(machine, settings=run)
            assert_idle()  # the writer stopped, the page still open: nothing runs
        finally:
            browser.close()


def assert_idle(seconds: float = 2.0) -> None:
    """Once every text is read and nothing is asked, no long job is left running and the process's CPU is at rest."""
    deadline = time.monotonic() + PAGE_SECONDS
    while scheduler.running():
        assert time.monotonic() < deadline, f"no long job is left running: {scheduler.running()}"
        time.sleep(0.05)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    used = (time.process_time() - cpu) / (time.monotonic() - wall)
    assert used < 0.25, f"the server is idle: {used:.2f} of a core"
