"""Leaves the interpreter while polylock's runtime thread is still
delivering outcomes into Python: asyncio acquires in flight, and a daemon
thread in blocking acquires. Run by test_exit.py; argv: URL, name prefix."""

import asyncio
import sys
import threading

import polylock

url, prefix = sys.argv[1], sys.argv[2]
client = polylock.connect(url)


async def start_acquires() -> list:
    locks = [client.lock(f"{prefix}/a{i}") for i in range(200)]
    tasks = [asyncio.ensure_future(lock.acquire_async()) for lock in locks]
    await asyncio.sleep(0)  # sent; their outcomes arrive while we exit
    return tasks


def keep_acquiring() -> None:
    while True:
        for i in range(50):
            client.lock(f"{prefix}/t{i}").acquire(timeout=1)


loop = asyncio.new_event_loop()
pending = loop.run_until_complete(start_acquires())
threading.Thread(target=keep_acquiring, daemon=True).start()
