"""Interpreter exit while polylock's runtime thread delivers outcomes into
Python: the process exits cleanly. Entering Python while the interpreter
finalizes would abort it (`Fatal Python error: PyGILState_Release`), which
happened to about one run in eight of this script before the package's
atexit hook stopped the runtime thread's entries."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import redis_url, unique

APP = os.path.join(os.path.dirname(__file__), "apps", "exit_mid_flight.py")
RUNS = 30


def test_exit_with_outcomes_in_flight_never_aborts() -> None:
    failures = []
    for run in range(RUNS):
        done = subprocess.run(
            [sys.executable, APP, redis_url(), unique(f"exit-{run}")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0 or "Fatal Python error" in done.stderr:
            failures.append(f"run {run}: exit {done.returncode}\n{done.stderr[:400]}")
    assert not failures, f"{len(failures)} of {RUNS} exits failed:\n" + "\n".join(failures[:3])
