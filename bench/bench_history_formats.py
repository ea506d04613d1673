"""Importing a loom tree: the seconds `import_tree` takes for a generated tree 20 levels deep.

The tree is the tests' (tests/test_history_formats.py): at each level the first node forks `width` ways and the
others go straight down, so width 4 makes 651 nodes and width 40 about 8,000. Each figure is the median of
several imports of the file's text (JSON parsing included), then the same for writing it back as loom.
Run: python bench/bench_history_formats.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from history.formats import export_tree, import_tree
from tests.test_history_formats import generated_loom_tree

DEPTH = 20
WIDTHS = (4, 40)


def seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for width in WIDTHS:
        data, count, _ = generated_loom_tree(DEPTH, width)
        text = json.dumps(data)
        history = import_tree(text)
        read = seconds(lambda: import_tree(text), args.repeats)
        written = seconds(lambda: export_tree(history, "loom"), args.repeats)
        print(f"depth {DEPTH}, {count} nodes ({len(text) / 1e3:.0f} kB): import {read * 1e3:.1f} ms, "
              f"export as loom {written * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
