"""A thread that stops using the CPU hands its OpenMP workers back: the process's threads say so, and every kernel
after it, in any thread, computes what it computed before."""

import os
import threading
import time

import pytest
import torch

from lookahead.cpu_threads import release_workers


def process_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(torch.get_num_threads() < 2 or not os.path.isdir("/proc/self/task"),
                    reason="one CPU thread for torch: no OpenMP workers to hand back")
def test_a_thread_that_ran_a_parallel_kernel_hands_its_workers_back():
    a = torch.randn(512, 512)
    counts = {}

    def work():
        a @ a
        counts["after a kernel"] = workers = process_threads()
        release_workers()
        deadline = time.monotonic() + 10  # a worker told to end leaves the process's list once it has
        while process_threads() > workers - (torch.get_num_threads() - 1) and time.monotonic() < deadline:
            time.sleep(0.01)
        counts["after the release"] = process_threads()

    before = process_threads()
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert counts["after a kernel"] >= before + 2, "the thread and its workers"
    assert counts["after the release"] == counts["after a kernel"] - (torch.get_num_threads() - 1)


def test_kernels_after_releases_in_many_threads_compute_the_same():
    torch.manual_seed(0)
    a, b = torch.randn(256, 384), torch.randn(384, 192)
    expected = a @ b
    failures = []

    def work():
        for _ in range(200):
            if not torch.equal(a @ b, expected):
                failures.append("a product changed")
            release_workers()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    release_workers()  # a thread with no workers: nothing to do
    assert torch.equal(a @ b, expected)
