"""Mutual exclusion under load: a read-modify-write that loses updates
unless the lock excludes."""

from __future__ import annotations

import asyncio
import threading
import time

import polylock
from conftest import unique


def test_16_threads_200_rounds_each_keep_the_counter_exact(
    client: polylock.Client, other: polylock.Client
) -> None:
    name = unique("threads")
    counter = [0]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        lock = (client if i % 2 else other).lock(name)
        try:
            for _ in range(200):
                with lock:
                    value = counter[0]
                    time.sleep(0)  # let another thread run inside, were it allowed
                    counter[0] = value + 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert counter[0] == 16 * 200


def test_100_asyncio_tasks_keep_the_counter_exact(client: polylock.Client) -> None:
    name = unique("tasks")
    counter = [0]

    async def work() -> None:
        lock = client.lock(name)
        for _ in range(3):
            async with lock:
                value = counter[0]
                await asyncio.sleep(0)
                counter[0] = value + 1

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(*(work() for _ in range(100))), timeout=300)

    asyncio.run(main())
    assert counter[0] == 300
