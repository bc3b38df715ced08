"""Owner ids come from the runtime's one process-wide allocator: positive,
never reused, and never one that another binding (or the native layer
itself) in this process was handed."""

from __future__ import annotations

import asyncio
import threading

from polylock import _native
from polylock._owners import task_owner, thread_owner


def _owner_of_a_new_thread() -> int:
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(thread_owner()))
    t.start()
    t.join()
    return seen[0]


def test_thread_owners_are_drawn_from_the_runtimes_allocator() -> None:
    first = _owner_of_a_new_thread()
    direct = _native.fresh_owner_id()
    second = _owner_of_a_new_thread()
    # One counter: the native call's id falls between the two threads' ids.
    assert 0 < first < direct < second


def test_task_owners_are_unique_and_differ_from_the_threads() -> None:
    async def main() -> list[int]:
        async def own() -> int:
            return task_owner(asyncio.current_task())

        return list(await asyncio.gather(*(own() for _ in range(50))))

    owners = asyncio.run(main())
    assert len(set(owners)) == 50
    assert thread_owner() not in owners
    assert all(o > 0 for o in owners)
