"""polylock leaves the host process alone: no thread's CPU affinity ever
changes while it works, and an idle client burns (almost) no CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import polylock
from conftest import unique


def _masks() -> dict[str, str]:
    """Every thread of this process and its allowed CPUs, from /proc."""
    masks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                for line in status:
                    if line.startswith("Cpus_allowed_list:"):
                        masks[tid] = line.split(":", 1)[1].strip()
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return masks


class _Sampler(threading.Thread):
    """Samples every thread's mask until stopped; keeps the ones that differ."""

    def __init__(self, expected: str) -> None:
        super().__init__(daemon=True)
        self.expected = expected
        self.stop = threading.Event()
        self.samples = 0
        self.changed: dict[str, str] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            for tid, mask in _masks().items():
                if mask != self.expected:
                    self.changed[tid] = mask
            self.samples += 1
            time.sleep(0.0005)


def test_no_thread_affinity_changes_while_thousands_of_calls_run(url: str) -> None:
    expected = _masks()[str(threading.get_native_id())]
    sampler = _Sampler(expected)
    sampler.start()
    try:
        with polylock.connect(url) as client:
            lock = client.lock(unique("affinity"))
            # Back to back, then paced as a service's calls come (2 ms, 10 ms).
            for pause, calls in ((0.0, 1600), (0.002, 500), (0.01, 300)):
                for _ in range(calls):
                    with lock:
                        pass
                    if pause:
                        time.sleep(pause)
    finally:
        sampler.stop.set()
        sampler.join()
    assert sampler.samples > 100, "the sampler did not run alongside the calls"
    assert sampler.changed == {}, f"threads whose CPUs changed from {expected}: {sampler.changed}"


# Runs in a process of its own, as a service's would: the test process
# carries other tests' leftovers, whose CPU would count too.
_IDLE_CLIENT = """
import sys, time, polylock
with polylock.connect(sys.argv[1]) as client:
    busy = client.lock(sys.argv[2] + "-busy")
    for _ in range(300):  # whatever a busy spell starts must stop with it
        with busy:
            pass
    locks = [client.lock(f"{sys.argv[2]}-{i}") for i in range(100)]
    for lock in locks:
        lock.acquire()
    time.sleep(0.2)
    before = time.process_time()
    time.sleep(2.0)
    print(time.process_time() - before)
    for lock in locks:
        lock.release()
"""


def test_an_idle_client_holding_100_locks_uses_almost_no_cpu(url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IDLE_CLIENT, url, unique("idle")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    used = float(done.stdout.strip())
    # 0.5% of one core.
    assert used < 0.01, f"an idle client used {used * 1000:.1f} ms of CPU in 2 s"
