"""The page's stateful test at length: random writer's sessions in Chromium against the app on the embedded model (or
another), the invariants of tests/writer_machine.py checked after every step, failures shrunk to their shortest
sequence. CI runs a short seeded run on a tiny model (tests/test_browser_stateful.py); run this before a change to
the page lands:

    python scripts/stateful_page.py --sequences 40 --steps 30 [--seed N] [--model NAME]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=40)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=None, help="a fixed seed (default: a new one, printed)")
    parser.add_argument("--model", default=None, help="the model the page is set to (default: the app's default)")
    args = parser.parse_args()

    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as seeded
    from hypothesis.stateful import run_state_machine_as_test
    from playwright.sync_api import sync_playwright

    import custom_llm_inference as inference
    from app import demo, launch
    from browser import CHROMIUM, CHROMIUM_ARGS
    from writer_machine import ERRORS_SEEN_JS, WriterOnThePage

    seed = args.seed if args.seed is not None else int(time.time())
    _, url, _ = launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    start = time.monotonic()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
            context.add_init_script(ERRORS_SEEN_JS)
            machine = type("Writer", (WriterOnThePage,), {"page": context.new_page(), "url": url,
                                                  "model": args.model or inference.default_model_name()})
            run = settings(max_examples=args.sequences, stateful_step_count=args.steps, deadline=None,
                           database=None, phases=[Phase.generate, Phase.shrink],
                           suppress_health_check=list(HealthCheck))
            print(f"seed {seed}: {args.sequences} sequences of up to {args.steps} steps", flush=True)
            seeded(seed)(lambda: run_state_machine_as_test(machine, settings=run))()
            found = "nothing"
    except Exception as error:  # noqa: BLE001 - reported whole: the failing sequence and what failed in it
        traceback.print_exception(error)
        found = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    finally:
        demo.close()
    print(f"{WriterOnThePage.sequences} sequences, {WriterOnThePage.steps} steps checked in "
          f"{time.monotonic() - start:.0f} s; found: {found}")


if __name__ == "__main__":
    main()
