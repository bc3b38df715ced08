"""client.semaphore: a counting semaphore shaped like
threading.BoundedSemaphore, against the real servers. The server is read
directly. Redis (Redisson's ``RPermitExpirableSemaphore`` layout):
``{NAME}:timeout`` holds one member per held permit (Redisson's permit ids),
the waiter queue is ``polylock_semqueue:{NAME}``. ZooKeeper (Curator's
``InterProcessSemaphoreV2`` layout): one child of ``NAME/leases`` per held
permit, waiters queue in Curator's mutex at ``NAME/locks``.

The cases marked ``both`` run on both backends; the rest (a grant's loss
forced through Redisson's permit expiries) on Redis only."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Callable

import polylock
import pytest
import redis
from conftest import eventually, unique, url_of
from kazoo.client import KazooClient

# Runs a case on each backend (the module's ``backend`` is Redis alone).
both = pytest.mark.parametrize("backend", ["redis", "zookeeper"])


@pytest.fixture
def backend() -> str:
    return "redis"


@pytest.fixture
def client(backend: str) -> Iterator[polylock.Client]:
    with polylock.connect(url_of(backend)) as c:
        yield c


@pytest.fixture
def other(backend: str) -> Iterator[polylock.Client]:
    """A second client: another process, as far as the semaphore is concerned."""
    with polylock.connect(url_of(backend)) as c:
        yield c


def _zk_children(zk: KazooClient, path: str) -> list[str]:
    return list(zk.get_children(path)) if zk.exists(path) else []


@pytest.fixture
def held_on_server(
    backend: str, raw_redis: redis.Redis, raw_zk: KazooClient
) -> Callable[[str], int]:
    """How many permits the server records as held for a semaphore name."""
    if backend == "zookeeper":
        return lambda name: len(_zk_children(raw_zk, f"{name}/leases"))
    return lambda name: int(raw_redis.zcard(f"{{{name}}}:timeout"))


@pytest.fixture
def queued(backend: str, raw_redis: redis.Redis, raw_zk: KazooClient) -> Callable[[str], list[str]]:
    """The semaphore's waiter-queue keys (Redis) or Curator's mutex
    contenders (ZooKeeper) still on the server."""

    def check(name: str) -> list[str]:
        if backend == "zookeeper":
            return _zk_children(raw_zk, f"{name}/locks")
        keys = [f"polylock_semqueue:{{{name}}}", f"polylock_semqueue_deadline:{{{name}}}"]
        return [k for k in keys if raw_redis.exists(k)]

    return check


@both
def test_permits_are_counted_across_clients(
    client: polylock.Client, other: polylock.Client, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-count")
    sem, theirs = client.semaphore(name, 2), other.semaphore(name, 2)
    assert (sem.name, sem.permits) == (name, 2)
    assert sem.acquire() is True
    first = sem.fencing_token
    assert theirs.acquire(timeout=5) is True
    assert theirs.fencing_token > first
    assert sem.acquire(blocking=False) is False  # both permits are taken
    assert held_on_server(name) == 2
    assert (sem.held_permits, theirs.held_permits) == (1, 1)
    theirs.release()
    assert sem.acquire(blocking=False) is True
    assert sem.fencing_token > first
    assert sem.held_permits == 2
    sem.release()
    sem.release()
    assert eventually(lambda: held_on_server(name) == 0)
    with pytest.raises(polylock.NotHeldError):
        sem.fencing_token  # noqa: B018


@both
def test_k_permits_at_once(
    client: polylock.Client, other: polylock.Client, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-k")
    sem, theirs = client.semaphore(name, 3), other.semaphore(name, 3)
    assert sem.acquire(count=2) is True
    assert theirs.acquire(blocking=False, count=2) is False  # only 1 free
    assert theirs.acquire(blocking=False, count=1) is True
    assert held_on_server(name) == 3
    with pytest.raises(ValueError, match="split"):
        sem.release(1)  # a grant of 2 goes back whole
    assert sem.held_permits == 2
    sem.release(2)
    theirs.release()
    assert sem.acquire(blocking=False, count=3) is True
    sem.release(3)
    assert eventually(lambda: held_on_server(name) == 0)


@both
def test_another_thread_releases_what_one_acquired(
    client: polylock.Client, other: polylock.Client, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-threads")
    sem = client.semaphore(name, 1)
    acquired = threading.Event()

    def take() -> None:
        assert sem.acquire()
        acquired.set()

    t = threading.Thread(target=take)
    t.start()
    t.join(10)
    assert acquired.is_set()
    assert sem.held_permits == 1
    sem.release()  # the main thread gives back the other thread's permit
    assert sem.held_permits == 0

    # And a waiter in one thread is woken by a release in another thread.
    theirs = other.semaphore(name, 1)
    assert theirs.acquire(blocking=False) is True
    woken = threading.Event()
    t = threading.Thread(target=lambda: sem.acquire(timeout=10) and woken.set())
    t.start()
    time.sleep(0.3)
    assert not woken.is_set()
    releaser = threading.Thread(target=theirs.release)
    releaser.start()
    releaser.join(10)
    t.join(10)
    assert woken.is_set()
    assert held_on_server(name) == 1
    sem.release()
    assert eventually(lambda: held_on_server(name) == 0)


@both
def test_with_block(client: polylock.Client, held_on_server: Callable[[str], int]) -> None:
    name = unique("sem-with")
    sem = client.semaphore(name, 2)
    with sem as entered:
        assert entered is sem
        assert sem.held_permits == 1
        assert held_on_server(name) == 1
        with sem:
            assert held_on_server(name) == 2  # not reentrant: a permit of its own
            assert sem.acquire(blocking=False) is False
    assert sem.held_permits == 0
    assert eventually(lambda: held_on_server(name) == 0)


@both
def test_async_with_block(client: polylock.Client, held_on_server: Callable[[str], int]) -> None:
    name = unique("sem-async-with")
    sem = client.semaphore(name, 1)

    async def main() -> None:
        async with sem:
            assert sem.held_permits == 1
            assert held_on_server(name) == 1
            with pytest.raises(polylock.LockTimeout):
                await sem.acquire_async(timeout=0)
        assert sem.held_permits == 0
        assert await sem.acquire_async(timeout=1, count=1) is True
        await sem.release_async(1)

    asyncio.run(main())
    assert eventually(lambda: held_on_server(name) == 0)


@both
def test_timeout_returns_false_and_leaves_no_queue_entry(
    client: polylock.Client,
    other: polylock.Client,
    held_on_server: Callable[[str], int],
    queued: Callable[[str], list[str]],
) -> None:
    name = unique("sem-timeout")
    holder = other.semaphore(name, 1)
    assert holder.acquire()
    sem = client.semaphore(name, 1)
    started = time.monotonic()
    assert sem.acquire(timeout=0.3) is False
    assert time.monotonic() - started >= 0.25
    assert sem.held_permits == 0
    with pytest.raises(polylock.LockTimeout):
        asyncio.run(sem.acquire_async(timeout=0.3))
    assert eventually(lambda: queued(name) == []), queued(name)
    assert held_on_server(name) == 1
    holder.release()
    assert sem.acquire(blocking=False) is True
    sem.release()


@both
def test_permits_mismatch_is_typed_and_takes_nothing(
    client: polylock.Client, other: polylock.Client, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-mismatch")
    first = client.semaphore(name, 3)  # kept: a dropped handle releases what it holds
    assert first.acquire()
    wrong = other.semaphore(name, 4)
    with pytest.raises(polylock.PermitsMismatch) as caught:
        wrong.acquire(timeout=1)
    e = caught.value
    assert isinstance(e, polylock.LockError)
    assert (e.name, e.server, e.ours) == (name, 3, 4)
    assert "3" in str(e) and "4" in str(e)
    with pytest.raises(polylock.PermitsMismatch):
        asyncio.run(wrong.acquire_async(timeout=1))
    with pytest.raises(polylock.PermitsMismatch):
        wrong.grant(timeout=1)
    assert wrong.held_permits == 0
    assert held_on_server(name) == 1  # nothing taken
    right = other.semaphore(name, 3)
    assert right.acquire(blocking=False, count=2) is True
    right.release(2)
    first.release()


@both
@pytest.mark.parametrize("count", [0, 4])
def test_bad_count_is_a_value_error(
    client: polylock.Client,
    count: int,
    held_on_server: Callable[[str], int],
    queued: Callable[[str], list[str]],
) -> None:
    name = unique("sem-bad-count")
    sem = client.semaphore(name, 3)
    with pytest.raises(ValueError, match="permits"):
        sem.acquire(count=count)
    with pytest.raises(ValueError, match="permits"):
        asyncio.run(sem.acquire_async(count=count))
    with pytest.raises(ValueError, match="permits"):
        sem.grant(count)
    assert held_on_server(name) == 0 and queued(name) == []
    assert sem.acquire(blocking=False, count=3) is True
    sem.release(3)


def test_bad_arguments(client: polylock.Client) -> None:
    name = unique("sem-args")
    with pytest.raises(ValueError):
        client.semaphore(name, 0)
    with pytest.raises(TypeError):
        client.semaphore(name, "2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease"):
        client.semaphore(name, 2, lease=0)
    sem = client.semaphore(name, 2)
    with pytest.raises(ValueError, match="non-blocking"):
        sem.acquire(blocking=False, timeout=1)
    with pytest.raises(TypeError):
        sem.acquire(count=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sem.acquire(count=-1)
    with pytest.raises(ValueError, match="held"):
        sem.release()  # as BoundedSemaphore: released more than acquired


@both
def test_cancelled_async_acquire_leaves_nothing(
    client: polylock.Client,
    other: polylock.Client,
    held_on_server: Callable[[str], int],
    queued: Callable[[str], list[str]],
) -> None:
    name = unique("sem-cancel")
    holder = other.semaphore(name, 1)
    assert holder.acquire()
    sem = client.semaphore(name, 1)

    async def main() -> None:
        task = asyncio.create_task(sem.acquire_async())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    holder.release()
    assert eventually(lambda: held_on_server(name) == 0 and queued(name) == [])
    time.sleep(0.3)
    assert sem.held_permits == 0 and held_on_server(name) == 0


@both
def test_ctrl_c_withdraws_a_blocked_acquire(
    client: polylock.Client,
    other: polylock.Client,
    held_on_server: Callable[[str], int],
    queued: Callable[[str], list[str]],
    ctrl_c: Callable[[float], threading.Timer],
) -> None:
    name = unique("sem-interrupt")
    holder = other.semaphore(name, 1)
    assert holder.acquire()
    sem = client.semaphore(name, 1)
    timer = ctrl_c(0.5)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sem.acquire()
    assert time.monotonic() - started < 5
    # Raised once the server held nothing of the wait: looked at at once.
    assert queued(name) == [], "the interrupted acquire is still queued"
    timer.join()
    assert sem.held_permits == 0
    holder.release()
    assert eventually(lambda: held_on_server(name) == 0 and queued(name) == [])


def test_grant_is_one_grant_with_its_token_and_loss(
    client: polylock.Client, raw_redis: redis.Redis, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-grant")
    sem = client.semaphore(name, 3, lease=1.0)
    with sem.grant(2) as p:
        assert (p.count, p.held, p.lost_reason) == (2, True, None)
        assert sem.held_permits == 0  # not kept by the handle
        with pytest.raises(polylock.LockTimeout):
            sem.grant(2, timeout=0)
        q = sem.grant(1, timeout=0)
        assert q.fencing_token > p.fencing_token
        q.release()
        with pytest.raises(polylock.NotHeldError):
            q.release()
    assert not p.held
    # A grant the server ends (its expiry in the past) is reported lost.
    lost = sem.grant(1)
    key = f"{{{name}}}:timeout"
    for member in raw_redis.zrange(key, 0, -1):
        raw_redis.zadd(key, {member: 0}, xx=True)
    assert eventually(lambda: lost.lost_reason is not None, within=5), "loss not reported"
    assert not lost.held
    with pytest.raises(polylock.LockLostError):
        lost.release()
    assert eventually(lambda: held_on_server(name) == 0)

    async def main() -> None:
        async with await sem.grant_async(3, timeout=1) as p:
            assert p.count == 3 and held_on_server(name) == 3

    asyncio.run(main())
    assert eventually(lambda: held_on_server(name) == 0)


def test_release_of_a_lost_grant_raises_lock_lost(
    client: polylock.Client, raw_redis: redis.Redis, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-lost")
    sem = client.semaphore(name, 2, lease=1.0)
    assert sem.acquire(count=2)
    key = f"{{{name}}}:timeout"
    for member in raw_redis.zrange(key, 0, -1):
        raw_redis.zadd(key, {member: 0}, xx=True)
    time.sleep(1.5)  # past the lease: the renewal has found the permits gone
    with pytest.raises(polylock.LockLostError) as caught:
        sem.release(2)
    assert caught.value.name == name
    assert sem.held_permits == 0  # released all the same
    assert eventually(lambda: held_on_server(name) == 0)


@both
def test_a_grant_that_races_the_cancellation_goes_back(
    client: polylock.Client, held_on_server: Callable[[str], int]
) -> None:
    name = unique("sem-cancel-race")
    sem = client.semaphore(name, 1)

    async def main() -> None:
        for _ in range(5):
            task = asyncio.create_task(sem.acquire_async(timeout=5))
            await asyncio.sleep(0)  # the task starts the acquire
            # Blocking the loop: the grant arrives, but the task cannot take it yet.
            assert eventually(lambda: sem.held_permits == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert eventually(lambda: sem.held_permits == 0 and held_on_server(name) == 0)

    asyncio.run(main())
    assert sem.acquire(timeout=5) is True
    sem.release()
