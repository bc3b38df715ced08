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


def _in_forked_child(body: Callable[[], str], within: float = 30) -> str:
    """Runs ``body`` in a forked child; returns its report, or fails."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            report = body()
            code = 0
        except BaseException as e:
            report = f"child failed: {e!r}"
        os.write(write, report.encode())
        os._exit(code)
    os.close(write)
    code = _wait_child(pid, within)
    report = os.read(read, 4096).decode()
    os.close(read)
    assert code == 0, report
    return report


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_client_made_before_fork_connects_again_in_the_child(
    client: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    """gunicorn --preload, celery prefork: the parent's client, and every
    handle made from it, work in the child with the child's own connection;
    what the parent holds stays the parent's."""
    name, kept, rw_name, sem_name = (
        unique(p) for p in ("fork", "fork-kept", "fork-rw", "fork-sem")
    )
    lock, held_by_parent = client.lock(name), client.lock(kept)
    rw, sem = client.rw_lock(rw_name), client.semaphore(sem_name, 2)
    with lock:
        parent_token = lock.fencing_token
    held_by_parent.acquire()

    def child() -> str:
        assert client.id != parent_id, "the child kept the parent's connection"
        assert not held_by_parent.held, "the child believes it holds the parent's lock"
        assert not held_by_parent.acquire(blocking=False), "the child was granted the parent's lock"
        with lock:
            token = lock.fencing_token
        assert not lock.held
        with rw.write:
            pass
        with sem:
            assert sem.held_permits == 1
        return f"child token {token}"

    parent_id = client.id
    report = _in_forked_child(child)
    assert report.startswith("child token "), report
    assert int(report.removeprefix("child token ")) > parent_token, report
    # The parent is unaffected: it still holds, its connection still works.
    assert held_by_parent.held
    held_by_parent.release()
    with lock:
        assert lock.held
    for each in (name, kept):
        assert eventually(lambda each=each: leftovers(each) == []), leftovers(each)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_client_closed_before_fork_stays_closed_in_the_child(url: str) -> None:
    closed = polylock.connect(url)
    lock = closed.lock(unique("fork-closed"))
    closed.close()

    def child() -> str:
        try:
            lock.acquire()
        except polylock.ClientClosedError as e:
            return f"refused: {e}"
        return "a closed client connected again in the child"

    report = _in_forked_child(child)
    assert report.startswith("refused: "), report


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_grant_held_across_fork_is_refused_clearly_in_the_child(client: polylock.Client) -> None:
    """The one thing that cannot follow the child: a grant object the parent
    holds. Releasing it there is a clear error, and the parent keeps it."""
    sem = client.semaphore(unique("fork-grant"), 1)
    grant = sem.grant()

    def child() -> str:
        try:
            grant.release()
        except polylock.LockError as e:
            return f"refused: {e}"
        return "the parent's grant was released by the child"

    report = _in_forked_child(child)
    assert "created in another process" in report, report
    assert grant.held
    grant.release()
