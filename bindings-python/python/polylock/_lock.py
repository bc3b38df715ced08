"""``Lock``: a distributed lock with the manners of ``threading.RLock``
(blocking, reentrant per thread) and of ``asyncio.Lock`` (reentrant per
task)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Callable, TypeVar

from . import _fork, _native, _options
from ._errors import LockLostError
from ._guard import Guard, GuardBlock
from ._owners import current_task, task_owner, thread_owner

_T = TypeVar("_T")


class Lock:
    """A handle on one lock name of a :class:`polylock.Client`. Make it with
    ``client.lock(name)``. Handles of the same client and name share their
    holds: a thread may acquire through one and release through another."""

    def __init__(self, native: _fork.Source[_native.Lock]) -> None:
        self._source = native

    @property
    def _native(self) -> _native.Lock:
        return self._source.get()

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    @property
    def mode(self) -> str:
        """``"mutex"``, or the half of a read-write lock: ``"read"`` or ``"write"``."""
        return self._native.mode

    def __repr__(self) -> str:
        mode = "" if self.mode == "mutex" else f" {self.mode}"
        return f"<polylock.Lock {self.name!r}{mode}>"

    # ---- blocking API: the owner is the calling thread ----------------

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As ``threading.Lock.acquire``: True once held, False if not
        granted (``blocking=False``, or ``timeout`` seconds passed; -1 waits
        forever). Releases the GIL while waiting; Ctrl-C interrupts it and
        leaves nothing behind on the server. LockUnavailableError if the
        server kept refusing (BUSY, LOADING, READONLY, ...) until then."""
        seconds = _options.threading_timeout(blocking, timeout)
        return self._native.acquire(thread_owner(), seconds)

    def release(self) -> None:
        """Ends the calling thread's newest hold. NotHeldError if it holds
        none; LockLostError if that hold was lost."""
        self._native.release(thread_owner())

    def locked(self) -> bool:
        """Held by anyone: an owner of this client (no I/O), or else any
        process, as the server reports it."""
        return self._native.locked()

    def __enter__(self) -> Lock:
        """Acquires (blocking, no timeout) for the calling thread."""
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases; raises ``LockLostError`` if the lock was lost while the block ran."""
        try:
            self.release()
        except LockLostError:
            if not self._reported(exc):
                raise

    # ---- asyncio API: the owner is the current task -------------------

    async def acquire_async(self, timeout: float | None = None) -> bool:
        """Waits until the current task holds the lock and returns True.
        ``timeout``: None waits forever, 0 tries once; LockTimeout when it
        passes (LockUnavailableError, a LockTimeout, if the server kept
        refusing meanwhile). Cancelling the task cancels the acquire (nothing is left on
        the server)."""
        granted = await _acquired(self._native.acquire_async, _options.async_timeout(timeout))
        return bool(granted)

    async def release_async(self) -> None:
        """Ends the current task's newest hold and waits for the server."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._native.release_async(task_owner(current_task()), _settle_from_thread(loop, done))
        await done

    async def __aenter__(self) -> Lock:
        """Acquires for the current asyncio task."""
        await self.acquire_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases; raises ``LockLostError`` if the lock was lost while the block ran."""
        try:
            await self.release_async()
        except LockLostError:
            if not self._reported(exc):
                raise

    # ---- a block that can stop its work on a loss ----------------------

    def guard(
        self, *, timeout: float | None = None, cancel_on_loss: bool = False
    ) -> GuardBlock[Guard]:
        """A block that holds the lock and gives it the hold:
        ``with lock.guard() as guard:`` for the calling thread, ``async with
        lock.guard() as guard:`` for the current task (reentrant, as
        ``with lock:``). ``guard.lost`` is set when the hold is lost (wait on
        it or poll it), ``guard.check()`` raises ``LockLostError`` from then
        on, and the block's end raises it too. ``timeout``: None waits
        forever, 0 tries once; LockTimeout when it passes.

        ``cancel_on_loss=True`` (``async with`` only): a loss cancels the
        task running the block, so its work stops at its next ``await``;
        the block's end raises ``LockLostError`` in place of that
        cancellation (a cancellation from outside stays a CancelledError)."""
        return _LockGuardBlock(self, _options.async_timeout(timeout), cancel_on_loss)

    # ---- state of the caller's holds ----------------------------------

    @property
    def held(self) -> bool:
        """True while the calling thread, or the current asyncio task,
        holds the lock; False once released or lost."""
        if self._native.held(thread_owner()):
            return True
        task = current_task()
        return task is not None and self._native.held(task_owner(task))

    @property
    def fencing_token(self) -> int:
        """The fencing token of the caller's (task's, else thread's) newest
        hold. NotHeldError if none; LockLostError if it was lost."""
        task = current_task()
        if task is not None:
            owner = task_owner(task)
            if self._native.held(owner) or not self._native.held(thread_owner()):
                return self._native.fencing_token(owner)
        return self._native.fencing_token(thread_owner())

    def _reported(self, exc: BaseException | None) -> bool:
        """Is ``exc`` this lock's loss, already raised by an inner
        (reentrant) block? Then the outer block lets it through as it is."""
        return isinstance(exc, LockLostError) and exc.name == self.name


class RwLock:
    """A read-write lock of a :class:`polylock.Client`, made with
    ``client.rw_lock(name)``: :attr:`read` and :attr:`write` are its halves,
    each an ordinary :class:`Lock` (``with rw.read:``, ``async with
    rw.write:``, ``acquire``, ``fencing_token``, ...)."""

    __slots__ = ("_read", "_write")

    def __init__(self, read: Lock, write: Lock) -> None:
        self._read = read
        self._write = write

    @property
    def name(self) -> str:
        """The read-write lock's name."""
        return self._read.name

    @property
    def read(self) -> Lock:
        """The shared half: many readers at once, none beside a writer."""
        return self._read

    @property
    def write(self) -> Lock:
        """The exclusive half. Its holder may take :attr:`read` too
        (downgrade); a reader acquiring it gets UpgradeRefused at once."""
        return self._write

    def __repr__(self) -> str:
        return f"<polylock.RwLock {self.name!r}>"


class _LockGuardBlock(GuardBlock[Guard]):
    """``lock.guard()``: held by the thread (``with``) or the task (``async
    with``), released by that owner at the end, as ``with lock:`` does."""

    def __init__(self, lock: Lock, timeout: float | None, cancel_on_loss: object) -> None:
        super().__init__(cancel_on_loss)
        self._lock = lock
        self._timeout = timeout

    def _acquire(self) -> Guard:
        token, loss = self._lock._native.acquire_guard(thread_owner(), self._timeout)
        return Guard(self._lock.name, token, loss)

    async def _acquire_async(self) -> Guard:
        native = self._lock._native
        token, loss = await _acquired(native.acquire_guard_async, self._timeout)
        return Guard(native.name, token, loss)

    def _release(self, hold: Guard) -> None:
        self._lock.release()

    async def _release_async(self, hold: Guard) -> None:
        await self._lock.release_async()


async def _acquired(start: Callable[..., _native.AsyncOp], seconds: float | None) -> Any:
    """Runs a native asynchronous acquire for the current task and returns
    what it granted. Cancelling the task cancels the acquire (nothing is
    left on the server, and a grant that raced the cancellation goes back)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    op = start(task_owner(current_task()), seconds, _settle_from_thread(loop, done))
    try:
        return await done
    except BaseException:
        op.cancel()  # also gives back a grant that raced the cancellation
        raise


def _settle_from_thread(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[_T]
) -> Callable[[object, BaseException | None], None]:
    """A callback for the native side (called from a runtime thread) that
    completes ``future`` on its event loop."""

    def done(value: object, error: BaseException | None) -> None:
        loop.call_soon_threadsafe(_settle, future, value, error)

    return done


def _settle(future: asyncio.Future[_T], value: object, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]
