"""A server that keeps refusing (a busy script on the second Redis) until the
timeout passes raises LockUnavailableError naming the server's reply."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import polylock
import pytest
import redis
from conftest import unique


@pytest.fixture
def busy_redis() -> Iterator[str]:
    """The second Redis, busy running a script until the test ends."""
    url = os.environ.get("POLYLOCK_TEST_REDIS2")
    if not url:
        pytest.skip("POLYLOCK_TEST_REDIS2 not set (scripts/services start --redis2)")
    admin = redis.Redis.from_url(url)
    admin.config_set("busy-reply-threshold", 100)

    def spin() -> None:
        with contextlib.suppress(redis.RedisError):  # killed at the end of the test
            redis.Redis.from_url(url).eval("while true do end", 0)

    threading.Thread(target=spin, daemon=True).start()
    deadline = time.monotonic() + 5
    while True:
        try:
            redis.Redis.from_url(url).ping()
        except redis.RedisError as e:
            if "busy" in str(e).lower():
                break
        assert time.monotonic() < deadline, "the server never became busy"
        time.sleep(0.01)
    try:
        yield url
    finally:
        while True:
            try:
                redis.Redis.from_url(url).script_kill()
                break
            except redis.RedisError as e:
                if "No scripts in execution" in str(e) or "NOTBUSY" in str(e):
                    break
                time.sleep(0.01)


def test_a_busy_server_until_the_timeout_raises_unavailable_naming_busy(busy_redis: str) -> None:
    with polylock.connect(busy_redis) as client:
        name = unique("busy")
        lock = client.lock(name)
        started = time.monotonic()
        with pytest.raises(polylock.LockUnavailableError) as raised:
            lock.acquire(timeout=1)
        waited = time.monotonic() - started
        reply = raised.value.reply
        assert reply is not None and reply.startswith("BUSY"), reply
        assert raised.value.name == name
        assert isinstance(raised.value, polylock.LockTimeout)
        assert isinstance(raised.value, TimeoutError)
        assert waited >= 0.9, f"raised at once ({waited:.3f} s), not at the timeout"
