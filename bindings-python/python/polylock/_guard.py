"""Stopping work when a hold is lost.

``with lock.guard() as guard:`` (and ``sem.guard(count)``) holds for the
block and gives the hold to it: ``guard.lost`` is set the moment the runtime
decides the hold is lost (before anyone else can be granted it, as far as the
backend lets it know: docs/guarantees.md), and ``guard.check()`` raises
``LockLostError`` from then on. ``async with lock.guard(cancel_on_loss=True)``
also cancels the task running the block on a loss; the block's end raises
``LockLostError`` in place of that cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import sys
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from . import _native, _options
from ._errors import LockLostError


class LossEvent:
    """``guard.lost``: the waiting half of a ``threading.Event``, set when
    the hold is lost (by the runtime's loss callback: no thread and no
    polling per hold). It stays unset for a hold released first.
    ``if guard.lost.is_set()``, or ``while not guard.lost.wait(0.5)`` to
    work in steps and stop at once on a loss."""

    __slots__ = ("_native",)

    def __init__(self, native: _native.Loss) -> None:
        self._native = native

    def is_set(self) -> bool:
        """True once the hold is lost (no I/O)."""
        return self._native.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """As ``threading.Event.wait``: blocks until the hold is lost or
        ``timeout`` seconds passed (None waits forever) and returns
        ``is_set()``. Releases the GIL while waiting; Ctrl-C interrupts it."""
        return self._native.wait(_options.event_timeout(timeout))

    async def wait_async(self) -> None:
        """For asyncio: returns once the hold is lost (never, if it is
        released first: bound it with ``asyncio.wait_for`` or cancel the
        task). The loss callback wakes the loop; nothing polls."""
        if self.is_set():
            return
        loop = asyncio.get_running_loop()
        lost: asyncio.Future[None] = loop.create_future()

        def fired(_reason: str) -> None:
            # A closed loop raises RuntimeError: nobody waits there any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set_done, lost)

        self._native.on_loss(fired)
        await lost

    @property
    def reason(self) -> str | None:
        """Why the hold was lost (lease expired, session expired, ...), or None."""
        return self._native.reason

    def _raise_if_set(self) -> None:
        self._native.check()

    def _call_on_loss(self, callback: _LossCallback) -> None:
        """``callback(reason)`` from a polylock thread, once, if lost."""
        self._native.on_loss(callback)

    def __repr__(self) -> str:
        state = f"set: {self.reason}" if self.is_set() else "unset"
        return f"<polylock.LossEvent {state}>"


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Guard:
    """One hold of a lock, given by ``with lock.guard() as guard:`` (or
    ``async with``) to the block it protects. Re-entries of one grant share
    its loss."""

    __slots__ = ("_lost", "_name", "_token")

    def __init__(self, name: str, token: int, loss: _native.Loss) -> None:
        self._name = name
        self._token = token
        self._lost = LossEvent(loss)

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def fencing_token(self) -> int:
        """This hold's fencing token: larger than every earlier grant's of
        the name. Pass it to the resource, and have it refuse smaller ones."""
        return self._token

    @property
    def lost(self) -> LossEvent:
        """Set when this hold is lost: stop touching the resource then."""
        return self._lost

    @property
    def lost_reason(self) -> str | None:
        """Why the hold was lost, or None."""
        return self._lost.reason

    def check(self) -> None:
        """Raises ``LockLostError`` if the hold was lost; else returns at
        once (no I/O). Call it between steps of the work."""
        self._lost._raise_if_set()

    def __repr__(self) -> str:
        lost = self._lost.is_set()
        return f"<polylock.Guard {self._name!r} fencing_token={self._token} lost={lost}>"


class _Hold(Protocol):
    """What a guard block holds: a :class:`Guard` or a ``Permits``."""

    @property
    def name(self) -> str: ...
    @property
    def lost(self) -> LossEvent: ...
    def check(self) -> None: ...


_H = TypeVar("_H", bound=_Hold)


class _LossCallback(Protocol):
    def __call__(self, reason: str) -> object: ...


class GuardBlock(Generic[_H]):
    """A ``with`` (owner: the thread) or ``async with`` (owner: the task)
    block that holds for its duration and gives the hold to the block. Its
    end releases, and raises ``LockLostError`` if the hold was lost
    meanwhile. One block at a time per object: call ``guard()`` again for
    another, nested or concurrent, block."""

    def __init__(self, cancel_on_loss: object) -> None:
        if not isinstance(cancel_on_loss, bool):
            raise TypeError(f"cancel_on_loss must be a bool, not {type(cancel_on_loss).__name__}")
        self._cancel_on_loss = cancel_on_loss
        self._hold: _H | None = None
        self._stop: _CancelOnLoss | None = None

    # ---- what each primitive does --------------------------------------

    def _acquire(self) -> _H:
        raise NotImplementedError

    async def _acquire_async(self) -> _H:
        raise NotImplementedError

    def _release(self, hold: _H) -> None:
        raise NotImplementedError

    async def _release_async(self, hold: _H) -> None:
        raise NotImplementedError

    # ---- the block -------------------------------------------------------

    def _start(self) -> None:
        if self._hold is not None:
            raise RuntimeError("this guard block is in use: call guard() again for another block")

    def _take(self) -> _H:
        hold = self._hold
        if hold is None:
            raise RuntimeError("this guard block was not entered")
        self._hold = None
        return hold

    def __enter__(self) -> _H:
        """Acquires for the calling thread (blocking; LockTimeout when the
        timeout passes) and returns the hold."""
        if self._cancel_on_loss:
            raise TypeError(
                "cancel_on_loss cancels an asyncio task: use it with `async with`; "
                "a thread watches guard.lost or calls guard.check()"
            )
        self._start()
        self._hold = self._acquire()
        return self._hold

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases; raises ``LockLostError`` if the hold was lost while
        the block ran (unless the block already raised it)."""
        hold = self._take()
        try:
            self._release(hold)
        except LockLostError:
            if not _already_raised(exc, hold):
                raise

    async def __aenter__(self) -> _H:
        """Acquires for the current task (cancelling the task withdraws the
        wait) and returns the hold; with ``cancel_on_loss``, from now until
        the block ends, a loss cancels the task."""
        self._start()
        task = asyncio.current_task() if self._cancel_on_loss else None
        if self._cancel_on_loss and task is None:
            raise RuntimeError("cancel_on_loss needs the block to run in an asyncio task")
        hold = await self._acquire_async()
        self._hold = hold
        if task is not None:
            self._stop = _CancelOnLoss(asyncio.get_running_loop(), task)
            hold.lost._call_on_loss(self._stop.on_loss)
        return hold

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Releases. A hold lost while the block ran raises
        ``LockLostError``; so does the cancellation a loss caused
        (``cancel_on_loss``). An outside cancellation stays a
        ``CancelledError``."""
        hold = self._take()
        stop, self._stop = self._stop, None
        stopped = stop.end() if stop is not None else _Stopped.NOT
        by_loss = stopped is _Stopped.BY_LOSS
        try:
            await self._release_async(hold)
        except LockLostError:
            if by_loss:
                raise  # in place of the CancelledError the loss caused
            if isinstance(exc, asyncio.CancelledError) or _already_raised(exc, hold):
                return  # that exception goes on as it is
            raise
        # A CancelledError here came from outside: the loss's own was
        # requested while the task waited inside the block (`end()` stopped
        # it before this await), so it was raised there. The release goes on.
        if by_loss:
            hold.check()  # released, and yet the loss stopped the block: say so


def _already_raised(exc: BaseException | None, hold: _Hold) -> bool:
    """Is ``exc`` this hold's loss, already raised in the block (by
    ``check()``, or by an inner block of the same lock)? Then it goes on as
    it is, once."""
    return isinstance(exc, LockLostError) and exc.name == hold.name


class _Stopped(enum.Enum):
    """How a block's task was cancelled on a loss."""

    NOT = "not cancelled by a loss"
    BY_LOSS = "cancelled by the loss alone"
    BY_LOSS_AND_OUTSIDE = "cancelled by the loss and from outside"


# The message of the CancelledError a loss raises in the block's task.
_LOSS_CANCEL_MESSAGE = "polylock: the lock was lost"


class _CancelOnLoss:
    """Cancels the task running a block when its hold is lost, until the
    block ends; then tells the end whether that cancellation happened.

    Python 3.11+ counts a task's cancellation requests: ``end()`` takes
    back the loss's own (``Task.uncancel()``, as ``asyncio.timeout`` does),
    so a cancellation from outside that came too is seen and stays a
    CancelledError, and enclosing ``asyncio.timeout``/``TaskGroup`` blocks
    count right. Before 3.11 there is no count: a cancellation the loss
    requested is taken to be the one the block saw."""

    __slots__ = ("_active", "_loop", "_requested", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object]) -> None:
        self._loop = loop
        self._task = task
        self._active = True
        self._requested = False

    def on_loss(self, reason: str) -> None:
        """The loss callback (a polylock thread, with the GIL): the task is
        cancelled on its own loop."""
        with contextlib.suppress(RuntimeError):  # a closed loop: no task is left to stop
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._active:  # else the block ended first: nothing to stop
            self._requested = self._task.cancel(_LOSS_CANCEL_MESSAGE)

    def end(self) -> _Stopped:
        """The block ended (called in its task): no cancellation from now on."""
        self._active = False
        if not self._requested:
            return _Stopped.NOT
        if sys.version_info >= (3, 11) and self._task.uncancel() > 0:
            return _Stopped.BY_LOSS_AND_OUTSIDE
        return _Stopped.BY_LOSS
