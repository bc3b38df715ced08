"""A process forked after its parent used ZooKeeper (gunicorn and celery
prefork workers, multiprocessing's fork start method) connects on its own
and takes locks on ZooKeeper and Redis; the parent keeps working."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Callable

import polylock
import pytest
from conftest import redis_url, unique, zk_url


def _parent_uses_zookeeper() -> polylock.Client:
    parent = polylock.connect(zk_url())
    with parent.lock(unique("fork-parent")) as held:
        assert held.fencing_token > 0
    return parent


def _take_and_release_everywhere() -> str:
    """What the child does: a new client per backend, one lock each."""
    tokens = []
    for url in (zk_url(), redis_url()):
        with polylock.connect(url) as mine:
            lock = mine.lock(unique("fork-child"))
            with lock:
                assert lock.held
                tokens.append(lock.fencing_token)
            assert not lock.held
    return " ".join(f"{t}" for t in tokens)


def _child_main() -> None:
    """multiprocessing target: the exit code is the verdict."""
    _take_and_release_everywhere()


def _parent_still_works(parent: polylock.Client) -> None:
    lock = parent.lock(unique("fork-parent-after"))
    with lock:
        assert lock.held


def _wait(pid: int, within: float) -> int:
    end = time.monotonic() + within
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child hung for {within} s")


def _fork_and_report(body: Callable[[], str], within: float = 30) -> tuple[int, str]:
    """Runs `body` in a forked child; returns its exit code and report."""
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
    code = _wait(pid, within)
    report = os.read(read, 4096).decode()
    os.close(read)
    return code, report


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_os_fork_child_locks_on_zookeeper_and_redis() -> None:
    parent = _parent_uses_zookeeper()
    code, report = _fork_and_report(lambda: "tokens " + _take_and_release_everywhere())
    assert code == 0, report
    assert report.startswith("tokens "), report
    _parent_still_works(parent)
    parent.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_child_of_a_forked_child_locks_too() -> None:
    """A prefork worker that forks again after using polylock itself."""
    parent = _parent_uses_zookeeper()

    def child() -> str:
        mine = _take_and_release_everywhere()
        code, report = _fork_and_report(lambda: "tokens " + _take_and_release_everywhere())
        if code != 0:
            raise AssertionError(f"the grandchild failed: {report}")
        return f"child {mine}; grandchild {report}"

    code, report = _fork_and_report(child, within=60)
    assert code == 0, report
    assert "grandchild tokens " in report, report
    _parent_still_works(parent)
    parent.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_multiprocessing_fork_child_locks_on_zookeeper_and_redis() -> None:
    parent = _parent_uses_zookeeper()
    children = [multiprocessing.get_context("fork").Process(target=_child_main) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        if child.exitcode is None:
            child.kill()
            pytest.fail("a multiprocessing fork child hung")
    assert [c.exitcode for c in children] == [0, 0]
    _parent_still_works(parent)
    parent.close()
