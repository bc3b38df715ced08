"""``Semaphore``: a distributed counting semaphore with the manners of
``threading.BoundedSemaphore`` (and of ``asyncio.BoundedSemaphore`` through
its ``*_async`` methods), plus ``Permits``, one grant as an object."""

from __future__ import annotations

import asyncio
from types import TracebackType

from . import _fork, _native, _options
from ._errors import LockTimeout, NotHeldError
from ._guard import GuardBlock, LossEvent
from ._lock import _settle_from_thread


class Semaphore:
    """A counting semaphore of ``permits`` permits, shared by every client of
    its name (make it with ``client.semaphore(name, permits)``; every client
    must use the same ``permits``, else PermitsMismatch).

    As a ``threading.BoundedSemaphore``: ``acquire()`` takes permits for
    this handle and ``release()`` gives them back, from any thread or task
    (the permits belong to the handle, not to a thread). A release gives
    back whole grants (the newest whose counts fit): ``acquire(count=2)`` is released by
    ``release(2)``, not by two ``release()`` calls. ``sem.grant(count)``
    instead hands out one grant as a :class:`Permits` object, with its own
    fencing token and loss.

    Not reentrant: each acquire takes permits of its own. On Redis
    (single, Sentinel, Cluster) in Redisson's ``RPermitExpirableSemaphore``
    layout, each grant with a lease; on ZooKeeper in Curator's
    ``InterProcessSemaphoreV2`` layout (one ephemeral lease node per
    permit under ``NAME/leases``, waiters in line for Curator's mutex at
    ``NAME/locks``), so Curator clients share the permits."""

    def __init__(self, native: _fork.Source[_native.Semaphore]) -> None:
        self._source = native

    @property
    def _native(self) -> _native.Semaphore:
        return self._source.get()

    @property
    def name(self) -> str:
        """The semaphore's name."""
        return self._native.name

    @property
    def permits(self) -> int:
        """How many permits the semaphore has in all (``N``)."""
        return self._native.permits

    @property
    def held_permits(self) -> int:
        """How many permits this handle holds (taken with ``acquire``)."""
        return self._native.held_permits()

    @property
    def fencing_token(self) -> int:
        """The fencing token of the newest grant this handle holds (each
        grant's is larger than every earlier grant's of this name).
        NotHeldError if it holds none."""
        token = self._native.fencing_token()
        if token is None:
            raise NotHeldError(f"semaphore {self.name!r}: no permits held by this handle")
        return token

    def __repr__(self) -> str:
        return f"<polylock.Semaphore {self.name!r} permits={self.permits}>"

    # ---- blocking API --------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: float | None = None, count: int = 1) -> bool:
        """As ``threading.Semaphore.acquire``, for ``count`` permits at once:
        True once they are held by this handle, False if not granted
        (``blocking=False``, or ``timeout`` seconds passed; None waits
        forever). Releases the GIL while waiting; Ctrl-C interrupts it and
        leaves nothing behind on the server. ValueError if ``count`` is not
        between 1 and ``permits``; PermitsMismatch if the server records
        another number of permits (nothing is taken then)."""
        seconds = _options.semaphore_timeout(blocking, timeout)
        return self._native.acquire(_options.permit_count(count), seconds)

    def release(self, count: int = 1) -> None:
        """Gives back ``count`` permits held by this handle, newest grants
        first, and waits for the server. Any thread may release what another
        acquired. ValueError (as ``BoundedSemaphore`` raises) if the handle
        holds fewer, or if ``count`` would split a grant (nothing is
        released then); LockLostError if a released grant had been lost."""
        self._native.release(_options.permit_count(count))

    def __enter__(self) -> Semaphore:
        """Acquires one permit (blocking, no timeout)."""
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases the permit the ``with`` block took."""
        self.release()

    # ---- asyncio API ---------------------------------------------------

    async def acquire_async(self, timeout: float | None = None, count: int = 1) -> bool:
        """Waits until ``count`` permits are held by this handle and returns
        True. ``timeout``: None waits forever, 0 tries once; LockTimeout
        when it passes. Cancelling the task cancels the acquire (nothing is
        left on the server, and permits granted meanwhile go back)."""
        seconds = _options.async_timeout(timeout)
        count = _options.permit_count(count)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        op = self._native.acquire_async(count, seconds, _settle_from_thread(loop, done))
        try:
            return await done
        except BaseException:
            op.cancel()  # also gives back a grant that raced the cancellation
            raise

    async def release_async(self, count: int = 1) -> None:
        """``release(count)``, waiting for the server without blocking the loop."""
        count = _options.permit_count(count)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._native.release_async(count, _settle_from_thread(loop, done))
        await done

    async def __aenter__(self) -> Semaphore:
        """Acquires one permit for the current asyncio task."""
        await self.acquire_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases the permit the ``async with`` block took."""
        await self.release_async()

    # ---- one grant as an object ------------------------------------------

    def guard(
        self, count: int = 1, *, timeout: float | None = None, cancel_on_loss: bool = False
    ) -> GuardBlock[Permits]:
        """A block that holds ``count`` permits (one grant, as ``grant``)
        and gives them to the block as :class:`Permits`: ``with
        sem.guard(2) as permits:`` or ``async with``. ``permits.lost``,
        ``permits.check()``, the end's ``LockLostError`` and
        ``cancel_on_loss`` (``async with`` only) work as for
        ``Lock.guard``."""
        return _PermitsGuardBlock(self, _options.permit_count(count), timeout, cancel_on_loss)

    def grant(self, count: int = 1, *, timeout: float | None = None) -> Permits:
        """Waits for ``count`` permits and returns them as one
        :class:`Permits` (``with sem.grant(2) as p: ...``), not kept by this
        handle. ``timeout``: None waits forever, 0 tries once; LockTimeout
        when it passes. Ctrl-C interrupts it, leaving nothing behind."""
        seconds = _options.async_timeout(timeout)
        permits = self._native.grant(_options.permit_count(count), seconds)
        if permits is None:
            raise LockTimeout(f"timed out waiting for {count} permits of {self.name!r}")
        return Permits(permits)

    async def grant_async(self, count: int = 1, *, timeout: float | None = None) -> Permits:
        """``grant`` for asyncio (``async with await sem.grant_async(2) as p``).
        Cancelling the task cancels the acquire."""
        seconds = _options.async_timeout(timeout)
        count = _options.permit_count(count)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_native.Permits] = loop.create_future()
        op = self._native.grant_async(count, seconds, _settle_from_thread(loop, done))
        try:
            return Permits(await done)
        except BaseException:
            op.cancel()  # a grant that raced the cancellation is dropped: released
            raise


class Permits:
    """One grant of ``count`` permits, from ``Semaphore.grant`` or
    ``Semaphore.guard``. Held until ``release()`` (or the end of its
    ``with`` block); renewed with its lease meanwhile (Redis) or kept by
    the session (ZooKeeper). Dropped without a release, it is released in
    the background."""

    def __init__(self, native: _native.Permits) -> None:
        self._native = native
        self._lost: LossEvent | None = None

    @property
    def name(self) -> str:
        """The semaphore's name."""
        return self._native.name

    @property
    def count(self) -> int:
        """How many permits this grant holds."""
        return self._native.count

    @property
    def fencing_token(self) -> int:
        """This grant's fencing token: larger than every earlier grant's of
        the semaphore's name."""
        return self._native.fencing_token

    @property
    def held(self) -> bool:
        """True until released or lost."""
        return self._native.held

    @property
    def lost_reason(self) -> str | None:
        """Why the permits were lost (lease expired, ...), or None."""
        return self._native.lost_reason

    @property
    def lost(self) -> LossEvent:
        """Set when the permits are lost (wait on it or poll it, as
        ``Guard.lost``): stop touching the resource then."""
        if self._lost is None:
            self._lost = LossEvent(self._native.loss())
        return self._lost

    def check(self) -> None:
        """Raises ``LockLostError`` if the permits were lost; else returns
        at once (no I/O)."""
        self.lost._raise_if_set()

    def release(self) -> None:
        """Gives the permits back and waits for the server. LockLostError
        if they were lost meanwhile; NotHeldError if already released."""
        self._native.release()

    async def release_async(self) -> None:
        """``release()``, waiting for the server without blocking the loop."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._native.release_async(_settle_from_thread(loop, done))
        await done

    def __enter__(self) -> Permits:
        """Returns the grant itself (already acquired)."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases the grant."""
        self.release()

    async def __aenter__(self) -> Permits:
        """Returns the grant itself (already acquired)."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases the grant without blocking the loop."""
        await self.release_async()

    def __repr__(self) -> str:
        return f"<polylock.Permits count={self.count} fencing_token={self.fencing_token}>"


class _PermitsGuardBlock(GuardBlock[Permits]):
    """``sem.guard(count)``: one grant for the block, released at its end."""

    def __init__(
        self, sem: Semaphore, count: int, timeout: float | None, cancel_on_loss: object
    ) -> None:
        super().__init__(cancel_on_loss)
        _options.async_timeout(timeout)  # a bad timeout fails here, not at the block
        self._sem = sem
        self._count = count
        self._timeout = timeout

    def _acquire(self) -> Permits:
        return self._sem.grant(self._count, timeout=self._timeout)

    async def _acquire_async(self) -> Permits:
        return await self._sem.grant_async(self._count, timeout=self._timeout)

    def _release(self, hold: Permits) -> None:
        hold.release()

    async def _release_async(self, hold: Permits) -> None:
        await hold.release_async()
