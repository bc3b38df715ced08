"""Ctrl-C during a blocked acquire, and os.fork(): neither may hang or
leave anything behind."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

import polylock
import pytest
from conftest import eventually, unique


def test_ctrl_c_interrupts_a_blocked_acquire_and_leaves_nothing(
    client: polylock.Client,
    other: polylock.Client,
    leftovers: Callable[[str], list[str]],
    ctrl_c: Callable[[float], threading.Timer],
) -> None:
    name = unique("interrupt")
    holder = other.lock(name)
    holder.acquire()
    lock = client.lock(name)
    timer = ctrl_c(0.5)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    # Generous bound: the claim (< 100 ms) is measured, not asserted here.
    assert time.monotonic() - started < 5
    timer.join()
    assert not lock.held
    # The waiter is withdrawn: once the holder releases, nothing of ours remains.
    status = client.status(name)
    assert status.held and status.holder is not None and status.holder.startswith(other.id)
    holder.release()
    assert eventually(lambda: leftovers(name) == []), leftovers(name)
    assert not client.status(name).held


def _wait_child(pid: int, within: float) -> int:
    end = time.monotonic() + within
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child hung for {within} s")


def _child_connects(url: str, name: str) -> str:
    """In the forked child: a new client of its own works, on either backend
    (see python/polylock/_fork.py)."""
    try:
        with polylock.connect(url) as mine, mine.lock(name) as own:
            return f"child token {own.fencing_token}"
    except polylock.LockError as e:
        return f"refused: {e}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_fork_child_gets_a_clear_error_then_works_with_its_own_client(
    client: polylock.Client, url: str
) -> None:
    name = unique("fork")
    lock = client.lock(name)
    with lock:
        pass  # the parent's runtime and connections are in use
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            try:
                lock.acquire()
                report = "the parent's client worked in the child"
            except polylock.LockError as e:
                report = str(e)
            report += "|" + _child_connects(url, name)
            code = 0
        except BaseException as e:
            report = f"child failed: {e!r}"
        os.write(write, report.encode())
        os._exit(code)
    os.close(write)
    code = _wait_child(pid, within=30)
    report = os.read(read, 4096).decode()
    os.close(read)
    assert code == 0, report
    assert "created in another process" in report and "connect again" in report, report
    assert "|child token " in report, report
    with lock:  # the parent is unaffected
        assert lock.held
