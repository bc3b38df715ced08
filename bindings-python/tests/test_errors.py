"""Bad input gives a clear, typed error before anything reaches the server;
an unreachable server gives a ConnectionError naming the address."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

import polylock
import pytest
from conftest import redis_url, unique, zk_url

BAD_LOCKS: list[tuple[str, Callable[[polylock.Client], Any], type[Exception], str]] = [
    ("empty name", lambda c: c.lock(""), ValueError, "empty"),
    ("None name", lambda c: c.lock(None), TypeError, "NoneType"),  # type: ignore[arg-type]
    ("int name", lambda c: c.lock(42), TypeError, "int"),  # type: ignore[arg-type]
    ("2 KiB name", lambda c: c.lock("x" * 2048), ValueError, "limit"),
    ("negative lease", lambda c: c.lock("a", lease=-1), ValueError, "lease"),
    ("zero lease", lambda c: c.lock("a", lease=0), ValueError, "lease"),
    ("str lease", lambda c: c.lock("a", lease="1"), TypeError, "lease"),  # type: ignore[arg-type]
    ("callback", lambda c: c.lock("a", on_lost=5), TypeError, "on_lost"),  # type: ignore[arg-type]
    (
        "async timeout -1",
        lambda c: asyncio.run(c.lock(unique("t")).acquire_async(timeout=-1)),
        ValueError,
        "timeout",
    ),
]


@pytest.mark.parametrize(
    ("case", "call", "error", "says"), BAD_LOCKS, ids=[b[0] for b in BAD_LOCKS]
)
def test_bad_lock_arguments(
    client: polylock.Client,
    case: str,
    call: Callable[[polylock.Client], Any],
    error: type[Exception],
    says: str,
) -> None:
    with pytest.raises(error) as caught:
        call(client)
    assert says in str(caught.value), f"{case}: {caught.value}"


# Every value threading.RLock.acquire refuses, and a few it accepts.
RLOCK_TIMEOUTS: list[dict[str, Any]] = [
    {"timeout": -5},
    {"timeout": -1.5},
    {"timeout": float("nan")},
    {"timeout": float("inf")},
    {"timeout": 1e100},
    {"timeout": "1"},
    {"timeout": None},
    {"blocking": False, "timeout": 1},
    {"blocking": "yes"},
    {"blocking": None},
]


@pytest.mark.parametrize("kwargs", RLOCK_TIMEOUTS, ids=[repr(k) for k in RLOCK_TIMEOUTS])
def test_bad_acquire_arguments_raise_what_rlock_raises(
    client: polylock.Client, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(Exception) as expected:
        threading.RLock().acquire(**kwargs)
    lock = client.lock(unique("rlock-args"))
    with pytest.raises(Exception) as caught:
        lock.acquire(**kwargs)
    assert (type(caught.value), str(caught.value)) == (type(expected.value), str(expected.value))
    assert not lock.locked(), "a refused acquire left the lock held"


def test_values_rlock_accepts_are_accepted(client: polylock.Client) -> None:
    lock = client.lock(unique("rlock-ok"))
    for kwargs in ({"timeout": True}, {"timeout": -1.0}, {"timeout": -0.0}, {"blocking": 1}):
        assert lock.acquire(**kwargs) is True, kwargs
        lock.release()


BAD_CONNECTS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("no scheme", lambda: polylock.connect("localhost:6379"), ValueError, "URL"),
    ("http", lambda: polylock.connect("http://h"), ValueError, "URL"),
    ("bad port", lambda: polylock.connect("redis://h:port"), ValueError, "URL"),
    ("empty zk host", lambda: polylock.connect("zk://a:1,,b:2"), ValueError, "URL"),
    ("None url", lambda: polylock.connect(None), TypeError, "str"),  # type: ignore[arg-type]
    ("negative lease", lambda: polylock.connect(redis_url(), lease=-1), ValueError, "lease"),
    (
        "zero timeout",
        lambda: polylock.connect(redis_url(), connect_timeout=0),
        ValueError,
        "connect_timeout",
    ),
]


@pytest.mark.parametrize(
    ("case", "call", "error", "says"), BAD_CONNECTS, ids=[b[0] for b in BAD_CONNECTS]
)
def test_bad_connect_arguments(
    case: str, call: Callable[[], Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error) as caught:
        call()
    assert says in str(caught.value), f"{case}: {caught.value}"


@pytest.mark.parametrize("scheme", ["redis", "zk"])
def test_unreachable_port_is_a_connection_error_naming_the_address(scheme: str) -> None:
    with pytest.raises(polylock.LockConnectionError) as caught:
        polylock.connect(f"{scheme}://127.0.0.1:1", connect_timeout=1)
    assert isinstance(caught.value, ConnectionError)
    assert isinstance(caught.value, polylock.LockError)
    assert "127.0.0.1:1" in str(caught.value)
    assert caught.value.address == "127.0.0.1:1"


def test_expire_session_is_refused_on_redis() -> None:
    with polylock.connect(redis_url()) as c, pytest.raises(ValueError, match="ZooKeeper"):
        c._debug_expire_session()


def test_urls_are_read() -> None:
    assert zk_url().startswith("zk://")
