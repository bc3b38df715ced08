"""Read-write locks against the real servers: readers share, a writer
excludes, a waiting writer blocks new readers, downgrade keeps the read
hold, upgrade is refused at once, tokens grow, nothing is left behind; in
blocking and asyncio code. The halves are ordinary ``polylock.Lock``s."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Callable

import polylock
import pytest
from conftest import RW_BACKENDS, eventually, unique, zk_url


@pytest.fixture(params=RW_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's: every test here runs on RW_BACKENDS only."""
    return str(request.param)


# One other thread for the whole module: another owner of the client, the
# same one each time (so what it acquires, it can release).
_OTHER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="other-owner")


def in_thread(call: Callable[[], object]) -> object:
    """``call()``'s result from the other owner's thread."""
    return _OTHER.submit(call).result(30)


def test_halves_are_the_mutexs_lock_class(client: polylock.Client) -> None:
    name = unique("rw-class")
    rw = client.rw_lock(name)
    assert type(rw.read) is type(client.lock(unique("mutex"))) is polylock.Lock
    assert type(rw.write) is polylock.Lock
    assert isinstance(rw, polylock.RwLock)
    assert rw.name == rw.read.name == rw.write.name == name
    assert (rw.read.mode, rw.write.mode, client.lock(name).mode) == ("read", "write", "mutex")
    assert "read" in repr(rw.read) and name in repr(rw)


def test_bad_arguments_are_refused_as_for_a_mutex(client: polylock.Client) -> None:
    with pytest.raises(ValueError, match="empty"):
        client.rw_lock("")
    with pytest.raises(ValueError, match="lease"):
        client.rw_lock("a", lease=0)
    with pytest.raises(TypeError, match="on_lost"):
        client.rw_lock("a", on_lost=5)  # type: ignore[arg-type]


def test_readers_of_two_clients_share_and_a_writer_excludes(
    client: polylock.Client, other: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    name = unique("rw-share")
    mine, theirs = client.rw_lock(name), other.rw_lock(name)
    with mine.read:
        assert theirs.read.acquire(blocking=False), "a reader of another client shares"
        assert in_thread(lambda: mine.read.acquire(blocking=False)), "another thread shares"
        assert mine.read.held and not mine.write.held
        assert mine.read.locked() and theirs.write.locked()
        theirs.read.release()  # else its write try would be an upgrade, refused
        assert theirs.write.acquire(timeout=0.2) is False, "a writer got in beside readers"
    # The other thread's read hold is its own: release it from a thread too.
    in_thread(mine.read.release)
    with theirs.write:
        assert mine.read.acquire(blocking=False) is False, "a reader beside a writer"
        assert theirs.read.locked()
        assert in_thread(lambda: theirs.read.acquire(blocking=False)) is False, (
            "a reader of the writer's own client, another thread, got in"
        )
        assert mine.write.acquire(blocking=False) is False, "two writers"
    assert mine.write.acquire(blocking=False)
    mine.write.release()
    assert eventually(lambda: leftovers(name) == [])


def test_upgrade_is_refused_at_once(
    client: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    name = unique("rw-up")
    rw = client.rw_lock(name)
    with rw.read:
        before = leftovers(name)
        started = time.monotonic()
        with pytest.raises(polylock.UpgradeRefused) as refused:
            rw.write.acquire()
        assert time.monotonic() - started < 0.5, "not refused at once"
        assert isinstance(refused.value, polylock.LockError)
        assert refused.value.name == name
        with pytest.raises(polylock.UpgradeRefused):
            rw.write.acquire(blocking=False)
        with pytest.raises(polylock.UpgradeRefused), rw.write:
            pytest.fail("upgraded")
        assert leftovers(name) == before, "the refused upgrade left something"
        assert rw.read.held and not rw.write.held
        # Another thread is not refused: it waits, as any writer.
        assert in_thread(lambda: rw.write.acquire(timeout=0.1)) is False
    with rw.write:
        assert rw.write.held
    assert eventually(lambda: leftovers(name) == [])


def test_a_writer_downgrades_and_keeps_its_read_hold(
    client: polylock.Client, other: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    name = unique("rw-down")
    rw, theirs = client.rw_lock(name), other.rw_lock(name)
    rw.write.acquire()
    write_token = rw.write.fencing_token
    with rw.read:
        read_token = rw.read.fencing_token
        # ZooKeeper: the write hold's token; Redis: a newer one. Never older.
        assert read_token >= write_token, "the downgrade's token went back"
        rw.write.release()
        assert rw.read.held and not rw.write.held, "the read hold outlives the write hold"
        assert theirs.write.acquire(timeout=0.2) is False, "a writer beside the downgraded reader"
        assert theirs.read.acquire(blocking=False), "another reader shares with it"
        theirs.read.release()
    assert theirs.write.acquire(timeout=5)
    assert theirs.write.fencing_token > read_token, "the next writer's token is below the read's"
    theirs.write.release()
    assert eventually(lambda: leftovers(name) == [])


def test_a_waiting_writer_blocks_new_readers(
    url: str, client: polylock.Client, other: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    name = unique("rw-starve")
    first = client.rw_lock(name)
    first.read.acquire()
    read_token = first.read.fencing_token
    got: dict[str, object] = {}

    def writer() -> None:
        w = other.rw_lock(name).write
        got["granted"] = w.acquire(timeout=20)
        got["token"] = w.fencing_token
        w.release()

    t = threading.Thread(target=writer)
    t.start()
    with polylock.connect(url) as third:
        late = third.rw_lock(name).read
        # Once the writer queues, a fresh reader's try fails.
        assert eventually(lambda: not late.acquire(blocking=False)), (
            "a new reader got in ahead of a waiting writer"
        )
        assert "granted" not in got, "the writer got in beside a reader"
        first.read.release()
        t.join(10)
        assert got.get("granted") is True
        token = got["token"]
        assert isinstance(token, int) and token > read_token, "tokens went back"
        assert late.acquire(timeout=5), "a reader gets in once the writer is gone"
        late.release()
    assert eventually(lambda: leftovers(name) == [])


def test_fencing_tokens_increase(client: polylock.Client, other: polylock.Client) -> None:
    name = unique("rw-tokens")
    mine, theirs = client.rw_lock(name), other.rw_lock(name)
    tokens = []
    for lock in (mine.write, theirs.read, mine.read, theirs.write, mine.write, theirs.read):
        with lock:
            tokens.append(lock.fencing_token)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens


def test_async_readers_share_writer_waits_and_upgrade_is_refused(
    client: polylock.Client, other: polylock.Client, leftovers: Callable[[str], list[str]]
) -> None:
    name = unique("rw-async")
    rw, theirs = client.rw_lock(name), other.rw_lock(name)

    async def main() -> None:
        inside = asyncio.Event()
        leave = asyncio.Event()

        async def reader() -> int:
            async with rw.read:
                inside.set()
                await leave.wait()
                return rw.read.fencing_token

        # Two tasks of one client are two owners: they read at once.
        r1 = asyncio.create_task(reader())
        await inside.wait()
        async with rw.read:
            assert rw.read.held
            with pytest.raises(polylock.UpgradeRefused):
                await rw.write.acquire_async()
            with pytest.raises(polylock.UpgradeRefused):
                async with rw.write:
                    pytest.fail("upgraded")

        async def writer() -> int:
            # The owner is the task: the write hold, its token and the
            # downgrade below are this task's.
            assert await theirs.write.acquire_async(timeout=20) is True
            token = theirs.write.fencing_token
            async with theirs.read:
                await theirs.write.release_async()
                assert theirs.read.held and not theirs.write.held
                with pytest.raises(polylock.LockTimeout):
                    await rw.write.acquire_async(timeout=0.2)
            return token

        waiting = asyncio.create_task(writer())
        await asyncio.sleep(0.3)
        assert not waiting.done(), "a writer got in beside a reader"
        with pytest.raises(polylock.LockTimeout):
            await rw.read.acquire_async(timeout=0)  # the waiting writer blocks it
        leave.set()
        read_token = await r1
        assert await waiting > read_token

    asyncio.run(main())
    assert eventually(lambda: leftovers(name) == [])


@pytest.mark.skipif("zookeeper" not in RW_BACKENDS, reason="needs ZooKeeper read-write locks")
def test_zookeeper_session_expiry_reports_a_read_holds_loss() -> None:
    name = unique("rw-lost")
    lost: list[str] = []
    called = threading.Event()

    def on_lost(reason: str) -> None:
        lost.append(reason)
        called.set()

    with polylock.connect(zk_url(), session_timeout=2.0, _debug_faults=True) as client:
        rw = client.rw_lock(name, on_lost=on_lost)
        with pytest.raises(polylock.LockLostError), rw.read:
            client._debug_expire_session()
            assert called.wait(20), "on_lost was not called"
            assert not rw.read.held
    assert lost
