"""Every line of the documented API, on both backends."""

from __future__ import annotations

import asyncio
import threading
from typing import Callable

import polylock
import pytest
from conftest import eventually, unique


def test_with_block_holds_and_gives_a_fencing_token(
    client: polylock.Client, other: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    lock = client.lock(unique("with"))
    with lock as same:
        assert same is lock
        token = lock.fencing_token
        assert isinstance(token, int) and token > 0
        assert lock.held and lock.locked()
        assert other.status(lock.name).held
        assert not other.lock(lock.name).acquire(blocking=False)
    assert not lock.held and not lock.locked()
    assert not other.status(lock.name).held
    assert eventually(lambda: leftovers(lock.name) == [])


def test_acquire_has_threading_lock_semantics(
    client: polylock.Client, other: polylock.Client
) -> None:
    name = unique("acquire")
    mine, theirs = client.lock(name), other.lock(name)
    assert mine.acquire() is True
    assert theirs.acquire(blocking=False) is False
    assert theirs.acquire(timeout=0.2) is False
    assert theirs.acquire(True, 0) is False
    assert theirs.locked(), "locked() sees a holder in another client"
    mine.release()
    assert theirs.acquire(blocking=False) is True
    theirs.release()


def test_reentrant_per_thread_and_exclusive_between_threads(
    client: polylock.Client, other: polylock.Client
) -> None:
    name = unique("reentry")
    lock = client.lock(name)
    assert lock.acquire() and lock.acquire()
    assert client.lock(name).acquire(), "another handle, same thread: reentrant too"
    seen: dict[str, object] = {}

    def other_thread() -> None:
        seen["got"] = lock.acquire(blocking=False)
        seen["held"] = lock.held

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert seen == {"got": False, "held": False}, "threads of one client exclude each other"
    lock.release()
    lock.release()
    assert lock.held, "two releases of three acquires"
    assert not other.lock(name).acquire(blocking=False)
    lock.release()
    assert not lock.held
    assert other.lock(name).acquire(blocking=False)
    other.lock(name).release()


def test_release_when_not_held_raises_and_leaves_the_lock(
    client: polylock.Client, other: polylock.Client
) -> None:
    lock = client.lock(unique("notheld"))
    with pytest.raises(polylock.NotHeldError) as caught:
        lock.release()
    assert isinstance(caught.value, RuntimeError)
    theirs = other.lock(lock.name)
    with theirs:
        with pytest.raises(polylock.NotHeldError):
            lock.release()
        assert client.status(lock.name).held
        with pytest.raises(polylock.NotHeldError):
            _ = lock.fencing_token


def test_fencing_tokens_increase_across_grants(
    client: polylock.Client, other: polylock.Client
) -> None:
    name = unique("fence")
    last = 0
    for i in range(6):
        with (client if i % 2 else other).lock(name) as lock:
            assert lock.fencing_token > last
            last = lock.fencing_token


def test_async_with_is_reentrant_per_task(client: polylock.Client) -> None:
    name = unique("async")

    async def main() -> None:
        lock = client.lock(name)
        async with lock:
            assert lock.held and lock.fencing_token > 0
            assert await lock.acquire_async() is True  # same task: reentrant

            async def rival() -> bool:
                with pytest.raises(polylock.LockTimeout) as caught:
                    await lock.acquire_async(timeout=0)
                assert isinstance(caught.value, TimeoutError)
                with pytest.raises(polylock.LockTimeout):
                    await lock.acquire_async(timeout=0.2)
                return lock.held

            assert await asyncio.create_task(rival()) is False, "another task does not hold it"
            await lock.release_async()
            assert lock.held
        assert not lock.held
        with pytest.raises(polylock.NotHeldError):
            await lock.release_async()

    asyncio.run(main())


def test_cancelling_an_async_acquire_leaves_nothing(
    client: polylock.Client, other: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    name = unique("cancel")
    holder = other.lock(name)
    holder.acquire()

    async def main() -> None:
        lock = client.lock(name)
        waiting = asyncio.create_task(lock.acquire_async())
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not lock.held

    asyncio.run(main())
    holder.release()
    assert eventually(lambda: leftovers(name) == []), leftovers(name)
    assert not client.status(name).held


def test_client_as_context_manager_and_close(url: str) -> None:
    name = unique("close")
    with polylock.connect(url) as c:
        assert c.backend in ("redis", "zookeeper")
        lock = c.lock(name)
        lock.acquire()
    with polylock.connect(url) as checker:
        assert eventually(lambda: not checker.status(name).held), "close released the lock"
    with pytest.raises(polylock.ClientClosedError) as caught:
        lock.acquire()
    assert isinstance(caught.value, polylock.LockError)
