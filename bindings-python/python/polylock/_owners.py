"""Who is asking: the unit of reentrancy. A thread for the blocking API, an
asyncio task for the async API. Each gets a process-unique id from the
runtime's one allocator (shared with every other binding in the process), so
an id is never reused (not even after its thread or task ends)."""

from __future__ import annotations

import asyncio
import threading
import weakref

from ._native import fresh_owner_id

_per_thread = threading.local()
_per_task: weakref.WeakKeyDictionary[asyncio.Task[object], int] = weakref.WeakKeyDictionary()


def thread_owner() -> int:
    owner: int | None = getattr(_per_thread, "owner", None)
    if owner is None:
        owner = _per_thread.owner = fresh_owner_id()
    return owner


def current_task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop
        return None


def task_owner(task: asyncio.Task[object] | None) -> int:
    """The owner of ``task``; outside any task, the thread's."""
    if task is None:
        return thread_owner()
    owner = _per_task.get(task)
    if owner is None:
        owner = _per_task[task] = fresh_owner_id()
    return owner
