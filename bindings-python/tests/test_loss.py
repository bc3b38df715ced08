"""Losing a lock while a block runs under it: on_lost is called, held turns
False, and the block's end raises LockLostError."""

from __future__ import annotations

import asyncio
import sys
import threading

import polylock
import pytest
import redis
from conftest import eventually, redis_url, unique, zk_url


class LossRecorder:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.called = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.called.set()


def test_redis_lease_expiry_inside_a_with_block(raw_redis: redis.Redis) -> None:
    name = unique("lost")
    lost = LossRecorder()
    with polylock.connect(redis_url()) as client:
        lock = client.lock(name, lease=1.0, on_lost=lost)
        with pytest.raises(polylock.LockLostError) as caught, lock:
            assert lock.held
            raw_redis.delete(name)  # the lease is gone server-side
            assert lost.called.wait(10), "on_lost was not called"
            assert not lock.held
            with pytest.raises(polylock.LockLostError):
                _ = lock.fencing_token
        assert caught.value.name == name
        assert lost.reasons and caught.value.reason == lost.reasons[0]
        # The lock is usable again afterwards.
        with lock:
            assert lock.held


def test_redis_loss_inside_nested_async_with_is_raised_once(raw_redis: redis.Redis) -> None:
    name = unique("lost-async")
    lost = LossRecorder()

    async def main() -> None:
        with polylock.connect(redis_url()) as client:
            lock = client.lock(name, lease=1.0, on_lost=lost)
            with pytest.raises(polylock.LockLostError) as caught:
                async with lock, lock:
                    raw_redis.delete(name)
                    while not lost.called.is_set():
                        await asyncio.sleep(0.05)
                    assert not lock.held
            assert caught.value.__context__ is None, "the outer block re-raised the inner loss"

    asyncio.run(asyncio.wait_for(main(), 30))


def test_redis_reacquire_inside_a_lost_block_keeps_the_outer_loss(raw_redis: redis.Redis) -> None:
    """A block re-entered after a loss holds the lock afresh; the outer
    block still ends in LockLostError (the runtime's release_as alone would
    say NotHeld there: a new acquire clears its pending loss reports), and
    a second loss of the fresh hold is reported to on_lost again."""
    name = unique("lost-reacquire")
    lost = LossRecorder()
    with polylock.connect(redis_url()) as client:
        lock = client.lock(name, lease=1.0, on_lost=lost)
        with pytest.raises(polylock.LockLostError) as outer, lock:
            raw_redis.delete(name)
            assert lost.called.wait(10), "on_lost was not called"
            with lock:  # granted afresh, with a new token
                assert lock.held
                assert raw_redis.exists(name)
            assert not lock.held
            with pytest.raises(polylock.LockLostError), lock:
                lost.called.clear()
                raw_redis.delete(name)
                assert lost.called.wait(10), "on_lost was not called for the fresh hold"
        assert outer.value.name == name
        assert len(lost.reasons) == 2
        assert eventually(lambda: not raw_redis.exists(name))
        with pytest.raises(polylock.NotHeldError):
            lock.release()


def test_on_lost_exceptions_are_printed_not_raised(
    raw_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They go to sys.unraisablehook, whose default prints the traceback."""
    name = unique("lost-raise")
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

    def broken(reason: str) -> None:
        raise RuntimeError("boom from on_lost")

    with polylock.connect(redis_url()) as client:
        lock = client.lock(name, lease=1.0, on_lost=broken)
        with pytest.raises(polylock.LockLostError), lock:
            raw_redis.delete(name)
            assert eventually(lambda: bool(seen), within=10)
    assert "boom from on_lost" in str(seen[0])


def test_zookeeper_session_expiry_inside_a_with_block() -> None:
    name = unique("lost-zk")
    lost = LossRecorder()
    with polylock.connect(zk_url(), session_timeout=2.0, _debug_faults=True) as client:
        lock = client.lock(name, on_lost=lost)
        with pytest.raises(polylock.LockLostError), lock:
            client._debug_expire_session()
            assert lost.called.wait(20), "on_lost was not called"
            assert not lock.held
        assert lost.reasons
