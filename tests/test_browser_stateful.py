"""The page driven through random writer's sessions in Chromium (tests/writer_machine.py), the invariants checked
after every step: a short seeded run on the tiny Llama (scripts/stateful_page.py runs a long one on the embedded
model). A failure prints the sequence of steps that led to it."""

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from playwright.sync_api import sync_playwright

from browser import CHROMIUM, CHROMIUM_ARGS  # skips without chromium
from conftest import TINY_LLAMA_DIR
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
        finally:
            browser.close()
