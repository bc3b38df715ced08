"""Shared fixtures: the real servers (from scripts/services env), unique
lock names, and raw clients (redis-py, kazoo) to inspect what is left on
the server."""

from __future__ import annotations

import _thread
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Callable

import polylock
import pytest
import redis
from kazoo.client import KazooClient

_names = itertools.count()


def _env(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        pytest.fail(
            f"{var} is not set: start the servers and run "
            f'eval "$(scripts/services env)" before the Python tests',
            pytrace=False,
        )
    return value


def redis_url() -> str:
    return _env("POLYLOCK_TEST_REDIS")


def zk_url() -> str:
    return _env("POLYLOCK_TEST_ZK")


def url_of(backend: str) -> str:
    return redis_url() if backend == "redis" else zk_url()


def unique(prefix: str) -> str:
    return f"/polylock-test/py-{prefix}-{os.getpid()}-{next(_names)}"


def eventually(check: Callable[[], bool], within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


@pytest.fixture
def ctrl_c() -> Iterator[Callable[[float], threading.Timer]]:
    """``ctrl_c(seconds)``: a Ctrl-C (``_thread.interrupt_main``) after that
    long. Python's own SIGINT handler is installed for the test: a process
    started with SIGINT ignored (a background job of a non-interactive shell,
    nohup) has none, and then ``interrupt_main`` does nothing at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timers: list[threading.Timer] = []

    def after(seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, _thread.interrupt_main)
        timers.append(timer)
        timer.start()
        return timer

    yield after
    for timer in timers:
        timer.cancel()
        timer.join()
    signal.signal(signal.SIGINT, previous)


# The backends that have read-write locks (test_rw_lock.py runs on these).
RW_BACKENDS = ["redis", "zookeeper"]


@pytest.fixture(params=["redis", "zookeeper"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str) -> str:
    return url_of(backend)


@pytest.fixture
def client(url: str) -> Iterator[polylock.Client]:
    with polylock.connect(url) as c:
        yield c


@pytest.fixture
def other(url: str) -> Iterator[polylock.Client]:
    """A second client: another process, as far as the lock is concerned."""
    with polylock.connect(url) as c:
        yield c


@pytest.fixture(scope="session")
def raw_redis() -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url())
    yield r
    r.close()


@pytest.fixture(scope="session")
def raw_zk() -> Iterator[KazooClient]:
    zk = KazooClient(hosts=zk_url().removeprefix("zk://"))
    zk.start(timeout=10)
    yield zk
    zk.stop()
    zk.close()


@pytest.fixture
def leftovers(
    backend: str, raw_redis: redis.Redis, raw_zk: KazooClient
) -> Callable[[str], list[str]]:
    """What the server still has for a lock name: Redis keys (the lock
    hash, the waiter queue) or ZooKeeper contender nodes."""

    def check(name: str) -> list[str]:
        if backend == "redis":
            keys = [name, f"polylock_queue:{{{name}}}", f"polylock_queue_deadline:{{{name}}}"]
            return [k for k in keys if raw_redis.exists(k)]
        return list(raw_zk.get_children(name)) if raw_zk.exists(name) else []

    return check
