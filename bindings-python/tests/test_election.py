"""Leader elections against the real servers, on both backends: one leader
at a time, the next leads after a resign or a block's exit, the term grows,
``leader()`` agrees with the leadership, a campaign given up (Ctrl-C, task
cancel) leaves nothing on the server, and a lost leadership sets ``lost``
and makes the block's exit raise LockLostError."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import polylock
import pytest
import redis
from conftest import eventually, redis_url, unique, zk_url
from kazoo.client import KazooClient

Leftovers = Callable[[str], list[str]]


def test_one_leader_at_a_time_and_the_next_leads_after_the_block(
    backend: str,
    client: polylock.Client,
    other: polylock.Client,
    leftovers: Leftovers,
    raw_zk: KazooClient,
) -> None:
    name = unique("election")
    ours, theirs = client.election(name), other.election(name)
    assert ours.leader() is None, "a leader before any campaign"
    led: list[polylock.Leadership] = []
    may_resign = threading.Event()

    def second_participant() -> None:
        with theirs.leadership(timeout=30) as lead:
            led.append(lead)
            may_resign.wait(30)

    with ours.leadership(timeout=5) as first:
        assert first.leading and not first.lost.is_set()
        leader = theirs.leader()
        assert leader is not None and leader.participant == first.participant
        if backend == "zookeeper":
            assert leader.term == first.term, "the term as the server records it"
            children = raw_zk.get_children(name)
            assert len(children) == 1 and "-latch-" in children[0], children
        with pytest.raises(polylock.LockTimeout):
            theirs.campaign(timeout=0)  # leads only if nobody leads or waits
        waiting = threading.Thread(target=second_participant)
        waiting.start()
        time.sleep(0.3)
        assert not led, "a second leader while the first leads"
    assert not first.leading
    assert eventually(lambda: bool(led), within=10), "the next did not lead after the block"
    second = led[0]
    assert second.term > first.term, "the term did not grow"
    now = ours.leader()
    assert now is not None and now.participant == second.participant != first.participant
    may_resign.set()
    waiting.join(10)
    assert ours.leader() is None, "a leader after every block ended"
    assert eventually(lambda: not leftovers(name)), leftovers(name)


def test_a_resign_lets_the_next_lead_and_a_second_resign_is_refused(
    client: polylock.Client, other: polylock.Client
) -> None:
    name = unique("election-resign")
    first = client.election(name).campaign(timeout=5)
    with pytest.raises(polylock.LockTimeout):
        other.election(name).campaign(timeout=0.2)
    first.resign()
    with pytest.raises(polylock.NotHeldError):
        first.resign()
    with other.election(name).leadership(timeout=5) as second:
        assert second.term > first.term
        second.resign()  # inside the block: the exit then does nothing
    assert client.election(name).leader() is None


def test_asyncio_leadership_and_a_cancelled_campaign_leaves_nothing_behind(
    client: polylock.Client, other: polylock.Client, leftovers: Leftovers
) -> None:
    name = unique("election-async")
    ours, theirs = client.election(name), other.election(name)
    terms: list[int] = []

    async def main() -> None:
        async with ours.leadership() as first:
            terms.append(first.term)
            leader = await theirs.leader_async()
            assert leader is not None and leader.participant == first.participant
            waiting = asyncio.ensure_future(theirs.campaign_async())
            await asyncio.sleep(0.3)
            assert not waiting.done(), "led while another leads"
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting

    asyncio.run(asyncio.wait_for(main(), 30))
    # The withdrawal finishes in the background: a grant that raced it is given back.
    assert eventually(lambda: not leftovers(name)), leftovers(name)
    assert theirs.leader() is None, "the cancelled participant leads"
    with theirs.leadership(timeout=5) as second:
        assert second.term > terms[0], "the term did not grow"


def test_ctrl_c_while_campaigning_withdraws_the_participant(
    client: polylock.Client,
    other: polylock.Client,
    leftovers: Leftovers,
    ctrl_c: Callable[[float], threading.Timer],
) -> None:
    name = unique("election-interrupt")
    leading = client.election(name).campaign()
    ctrl_c(0.3)
    with pytest.raises(KeyboardInterrupt):
        other.election(name).campaign()
    leading.resign()
    assert eventually(lambda: not leftovers(name)), leftovers(name)
    assert other.election(name).leader() is None, "the interrupted participant led"


def test_redis_loss_sets_lost_and_the_block_exit_raises(raw_redis: redis.Redis) -> None:
    name = unique("election-lost")
    with polylock.connect(redis_url()) as client:
        election = client.election(name, lease=1.0)
        with pytest.raises(polylock.LockLostError) as caught, election.leadership() as lead:
            raw_redis.delete(name)  # the leader's lease is gone server-side
            assert lead.lost.wait(10), "lost was not set"
            assert lead.lost.reason and not lead.leading
        assert caught.value.name == name
        assert caught.value.reason == lead.lost.reason
        with election.leadership(timeout=5) as again:  # a new participant leads
            assert again.term > lead.term


def test_redis_loss_wakes_an_asyncio_waiter_and_the_async_exit_raises(
    raw_redis: redis.Redis,
) -> None:
    name = unique("election-lost-async")

    async def main() -> None:
        with polylock.connect(redis_url()) as client:
            election = client.election(name, lease=1.0)
            with pytest.raises(polylock.LockLostError):
                async with election.leadership() as lead:
                    raw_redis.delete(name)
                    await asyncio.wait_for(lead.lost.wait_async(), 10)
                    assert lead.lost.is_set()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_zookeeper_session_expiry_sets_lost_and_the_block_exit_raises() -> None:
    name = unique("election-lost-zk")
    client = polylock.connect(zk_url(), session_timeout=2.0, _debug_faults=True)
    with client, pytest.raises(polylock.LockLostError), client.election(name).leadership() as lead:
        client._debug_expire_session()
        assert lead.lost.wait(20), "lost was not set"
        assert lead.lost.reason and not lead.leading


def test_a_leadership_block_is_not_reentrant(client: polylock.Client) -> None:
    block = client.election(unique("election-reentry")).leadership(timeout=5)
    with block, pytest.raises(RuntimeError), block:
        pass
