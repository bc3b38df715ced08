"""Stopping work when a hold is lost: ``guard.lost`` and ``guard.check()``
for threads, ``cancel_on_loss`` for asyncio tasks.

The holder reaches its server through a relay that can freeze (a stalled
network: every byte dropped, sockets kept open), so its renewals (Redis) or
its session's pings (ZooKeeper) stop while its process runs on: the holder
is told of the loss at its local deadline, before the server lets the lock
go (docs/guarantees.md). A second client, waiting on the same lock straight
at the server, is then granted. The work must have stopped before that."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import polylock
import pytest
import redis
from conftest import redis_url, unique, url_of

# Redis: the holder's lease; it is told at its deadline, the drift margin
# (1% + 12 ms) before the server expires the key. ZooKeeper: its session,
# told at most 47/60 of it after the relay froze, before the server expires it.
LEASE = 3.0
SESSION = 2.0

# The primitives a guard block holds: a mutex, a read-write lock's read
# half (the rival asks for the write half), a semaphore's single permit.
KINDS = ["mutex", "rw", "semaphore"]


class FreezableRelay:
    """A loopback TCP relay to a server. ``freeze()`` makes it drop every
    byte both ways, on open and new connections, while keeping the
    sockets open: requests time out instead of failing fast."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname and parts.port, url
        self._target = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        port = self._listener.getsockname()[1]
        self.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def freeze(self) -> None:
        self._frozen.set()

    def close(self) -> None:
        self._closed.set()
        with self._guard:
            for s in self._sockets:
                _close(s)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                down, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            try:
                up = socket.create_connection(self._target)
            except OSError:
                _close(down)
                continue
            with self._guard:
                self._sockets += [down, up]
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()
        self._listener.close()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if self._frozen.is_set():
                continue  # a stalled network: the bytes never arrive
            try:
                dst.sendall(data)
            except OSError:
                break
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    with suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


@contextmanager
def frozen_holder_and_rival(backend: str) -> Iterator[tuple[FreezableRelay, Any, Any]]:
    """(relay, holder client through the relay, rival client straight at the server)."""
    relay = FreezableRelay(url_of(backend))
    holder = polylock.connect(
        relay.url,
        connect_timeout=1.0,
        request_timeout=0.2,
        session_timeout=SESSION,
        lease=LEASE,
    )
    try:
        with polylock.connect(url_of(backend)) as rival:
            yield relay, holder, rival
    finally:
        relay.close()
        # The holder's close waits (at most 5 s) for a cleanup that cannot
        # reach the server through the closed relay; nothing here needs to
        # wait for it (its keys or nodes run out with the lease or session).
        threading.Thread(target=holder.close, name="holder-close", daemon=True).start()


def guard_block(client: Any, kind: str, name: str, cancel_on_loss: bool = False) -> Any:
    if kind == "mutex":
        return client.lock(name).guard(cancel_on_loss=cancel_on_loss)
    if kind == "rw":
        return client.rw_lock(name).read.guard(cancel_on_loss=cancel_on_loss)
    return client.semaphore(name, 1).guard(cancel_on_loss=cancel_on_loss)


def rival_of(client: Any, kind: str, name: str) -> Any:
    """What the second client waits on: the lock, the write half, the permit."""
    if kind == "mutex":
        return client.lock(name)
    if kind == "rw":
        return client.rw_lock(name).write
    return client.semaphore(name, 1)


# ---- threads: guard.lost and guard.check() ----------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_thread_sees_guard_lost_before_the_next_holder_is_granted(
    backend: str, kind: str
) -> None:
    name = unique(f"stop-thread-{kind}")
    order: list[str] = []
    seen: dict[str, Any] = {}
    in_block = threading.Event()

    with frozen_holder_and_rival(backend) as (relay, holder, rival_client):
        block = guard_block(holder, kind, name)

        def work() -> None:
            try:
                with block as guard:
                    seen["token"] = guard.fencing_token
                    in_block.set()
                    while not guard.lost.wait(0.05):
                        pass  # one step of work per wait
                    order.append("holder stopped")
                    try:
                        guard.check()
                    except polylock.LockLostError as lost:
                        seen["check"] = lost
                    seen["reason"] = guard.lost_reason
            except polylock.LockLostError as lost:
                seen["exit"] = lost

        worker = threading.Thread(target=work)
        worker.start()
        assert in_block.wait(10), "the holder did not get the lock"

        rival = rival_of(rival_client, kind, name)
        assert not rival.acquire(blocking=False), "the rival was granted beside the holder"
        waiting = threading.Event()

        def compete() -> None:
            waiting.set()
            if rival.acquire(timeout=30):
                order.append("rival granted")
                seen["rival token"] = rival.fencing_token
                rival.release()

        competitor = threading.Thread(target=compete)
        competitor.start()
        assert waiting.wait(10)
        relay.freeze()
        worker.join(30)
        competitor.join(30)

    assert order == ["holder stopped", "rival granted"], order
    assert seen["reason"], "lost without a reason"
    for key in ("check", "exit"):
        assert isinstance(seen.get(key), polylock.LockLostError), (key, seen)
        assert seen[key].name == name
        assert seen[key].reason == seen["reason"]
    assert seen["rival token"] > seen["token"]


def test_a_guard_released_normally_stays_unlost(client: polylock.Client) -> None:
    lock = client.lock(unique("guard-kept"))
    with lock.guard() as guard:
        assert guard.fencing_token == lock.fencing_token
        assert not guard.lost.wait(0.05)
        guard.check()
    assert not guard.lost.is_set()
    assert not guard.lost.wait(0)
    assert guard.lost_reason is None
    guard.check()
    assert not lock.held


def test_a_guard_block_raises_lock_timeout_when_not_granted(
    client: polylock.Client, other: polylock.Client
) -> None:
    name, sem_name = unique("guard-timeout"), unique("guard-timeout-sem")
    with (
        client.lock(name).guard(),
        pytest.raises(polylock.LockTimeout),
        other.lock(name).guard(timeout=0),
    ):
        pytest.fail("granted beside the holder")
    with (
        client.semaphore(sem_name, 1).guard(),
        pytest.raises(polylock.LockTimeout),
        other.semaphore(sem_name, 1).guard(timeout=0.1),
    ):
        pytest.fail("a second permit of one")


def test_cancel_on_loss_is_refused_for_a_thread(client: polylock.Client) -> None:
    lock = client.lock(unique("guard-thread-cancel"))
    with pytest.raises(TypeError, match="async with"), lock.guard(cancel_on_loss=True):
        pytest.fail("entered")
    assert not lock.locked(), "a refused block took the lock"


# ---- asyncio: cancel_on_loss -------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_on_loss_cancels_the_task_before_the_next_holder_is_granted(
    backend: str, kind: str
) -> None:
    name = unique(f"stop-task-{kind}")
    order: list[str] = []

    async def main() -> None:
        with frozen_holder_and_rival(backend) as (relay, holder, rival_client):
            block = guard_block(holder, kind, name, cancel_on_loss=True)
            in_block = asyncio.Event()

            async def work() -> None:
                async with block:
                    in_block.set()
                    try:
                        await asyncio.sleep(3600)  # the work: stopped only by the loss
                    except asyncio.CancelledError:
                        order.append("holder cancelled")
                        raise
                    order.append("holder not cancelled")

            task = asyncio.create_task(work())
            await in_block.wait()
            rival = rival_of(rival_client, kind, name)
            with pytest.raises(polylock.LockTimeout):
                await rival.acquire_async(timeout=0)

            async def compete() -> None:
                await rival.acquire_async(timeout=30)
                order.append("rival granted")
                await rival.release_async()

            competitor = asyncio.create_task(compete())
            relay.freeze()
            with pytest.raises(polylock.LockLostError) as caught:
                await task
            await competitor

            assert caught.value.name == name
            assert caught.value.reason
            # The block's end raised it in place of the loss's cancellation.
            assert isinstance(caught.value.__context__, asyncio.CancelledError)
            assert not task.cancelled()
            if sys.version_info >= (3, 11):
                assert task.cancelling() == 0, "the loss's cancel request was not taken back"

    asyncio.run(asyncio.wait_for(main(), 60))
    assert order == ["holder cancelled", "rival granted"], order


def test_an_outside_cancel_stays_a_cancelled_error(client: polylock.Client) -> None:
    lock = client.lock(unique("guard-outside-cancel"))

    async def main() -> None:
        in_block = asyncio.Event()

        async def work() -> None:
            async with lock.guard(cancel_on_loss=True) as guard:
                in_block.set()
                try:
                    await asyncio.sleep(3600)
                finally:
                    assert not guard.lost.is_set()

        task = asyncio.create_task(work())
        await in_block.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert not lock.locked(), "the cancelled block did not release"


def test_an_outside_cancel_of_a_lost_block_stays_a_cancelled_error(
    raw_redis: redis.Redis,
) -> None:
    """Without cancel_on_loss a loss cancels nothing: the block runs on
    (guard.lost is set), and a cancellation from outside afterwards is
    still a CancelledError at the block's end, not the loss."""
    name = unique("guard-lost-outside-cancel")

    async def main() -> None:
        with polylock.connect(redis_url()) as client:
            in_block = asyncio.Event()
            lost_seen = asyncio.Event()

            async def work() -> None:
                async with client.lock(name, lease=LEASE).guard() as guard:
                    in_block.set()
                    while not guard.lost.is_set():
                        await asyncio.sleep(0.02)
                    lost_seen.set()
                    await asyncio.sleep(3600)

            task = asyncio.create_task(work())
            await in_block.wait()
            raw_redis.delete(name)  # lost: the next renewal finds it gone
            await asyncio.wait_for(lost_seen.wait(), 2 * LEASE)
            assert not task.done(), "a loss without cancel_on_loss stopped the task"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(asyncio.wait_for(main(), 30))


def test_cancel_on_loss_leaves_a_block_released_normally_alone(client: polylock.Client) -> None:
    lock = client.lock(unique("guard-async-kept"))
    sem = client.semaphore(unique("guard-async-kept-sem"), 2)

    async def main() -> None:
        async with lock.guard(cancel_on_loss=True) as guard:
            assert lock.held
            await asyncio.sleep(0.1)
        assert not guard.lost.is_set()
        guard.check()
        async with sem.guard(2, cancel_on_loss=True) as permits:
            assert permits.count == 2
            await asyncio.sleep(0.1)
        assert not permits.lost.is_set()
        permits.check()
        await asyncio.sleep(0.1)  # a stray cancellation would land here
        task = asyncio.current_task()
        assert task is not None
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0

    asyncio.run(asyncio.wait_for(main(), 30))
    assert not lock.locked()
