"""``Election``: leader election on one name, and ``Leadership``, one
participant's term as leader, with its ``lost`` event."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import NamedTuple

from . import _fork, _native, _options
from ._errors import LockLostError, LockTimeout
from ._guard import LossEvent
from ._lock import _settle_from_thread


class Leader(NamedTuple):
    """Who leads an election, as the server records it."""

    participant: str
    """The leader's participant id (``Leadership.participant``; for a
    Curator ``LeaderLatch``, the id it was given)."""
    term: int | None
    """The leadership's term: ZooKeeper always; Redis while the grant's
    first lease lives (None after)."""


class Leadership:
    """One participant's leadership of an election, from ``Election.campaign``
    or a ``with election.leadership():`` block. Its ``term`` is a fencing
    token: hand it to what the leader writes to, and have that refuse terms
    smaller than the largest it has seen. When ``lost`` is set, stop acting
    as the leader. Dropped without a resign, it resigns in the background."""

    __slots__ = ("_lost", "_name", "_native", "_resigned")

    def __init__(self, native: _native.Leadership, name: str) -> None:
        self._native = native
        self._name = name
        self._lost = LossEvent(native.loss())
        self._resigned = False

    @property
    def name(self) -> str:
        """The election's name."""
        return self._name

    @property
    def term(self) -> int:
        """The term: larger than every earlier leadership's of this election."""
        return self._native.term

    @property
    def participant(self) -> str:
        """This participant's id, as ``Election.leader()`` reports it while it leads."""
        return self._native.participant

    @property
    def lost(self) -> LossEvent:
        """Set when the leadership is lost (``lost.reason`` says why)."""
        return self._lost

    @property
    def leading(self) -> bool:
        """True until resigned or lost."""
        return self._native.leading

    def resign(self) -> None:
        """Ends the leadership and waits for the server; the next participant
        leads after it. LockLostError if it was lost meanwhile; NotHeldError
        if already resigned."""
        self._resigned = True
        self._native.resign()

    async def resign_async(self) -> None:
        """``resign()``, waiting for the server without blocking the loop."""
        self._resigned = True
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._native.resign_async(_settle_from_thread(loop, done))
        await done

    def __enter__(self) -> Leadership:
        """Returns the leadership itself (already leading)."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Resigns unless already resigned; raises ``LockLostError`` if the
        leadership was lost while the block ran."""
        if self._resigned:
            return
        try:
            self.resign()
        except LockLostError:
            if not self._reported(exc):
                raise

    async def __aenter__(self) -> Leadership:
        """Returns the leadership itself (already leading)."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """As ``__exit__``, without blocking the loop."""
        if self._resigned:
            return
        try:
            await self.resign_async()
        except LockLostError:
            if not self._reported(exc):
                raise

    def _reported(self, exc: BaseException | None) -> bool:
        """Is ``exc`` this leadership's loss, already raised inside the block?"""
        return isinstance(exc, LockLostError) and exc.name == self._name

    def __repr__(self) -> str:
        state = "lost" if self._lost.is_set() else "resigned" if self._resigned else "leading"
        return f"<polylock.Leadership {self._name!r} term={self.term} {state}>"


class Election:
    """A leader election of a :class:`polylock.Client` (``client.election(name)``).
    Each campaign is a participant of its own; one leads at a time, the
    others wait in line. On ZooKeeper in Curator's ``LeaderLatch`` layout;
    on Redis the leader holds the name's mutex (use a name either as a lock
    or as an election)."""

    def __init__(self, native: _fork.Source[_native.Election]) -> None:
        self._source = native

    @property
    def _native(self) -> _native.Election:
        return self._source.get()

    @property
    def name(self) -> str:
        """The election's name."""
        return self._native.name

    def __repr__(self) -> str:
        return f"<polylock.Election {self.name!r}>"

    def leadership(self, timeout: float | None = None) -> Campaign:
        """A campaign for a ``with`` or ``async with`` block: entering it
        waits to lead (``timeout`` as for ``campaign``) and gives the
        :class:`Leadership`; leaving it resigns, and raises LockLostError if
        the leadership was lost while the block ran."""
        return Campaign(self, _options.async_timeout(timeout))

    def campaign(self, timeout: float | None = None) -> Leadership:
        """Waits until a new participant of this process leads and returns
        its leadership. ``timeout``: None waits forever, 0 leads only if
        nobody leads or waits; LockTimeout when it passes. Releases the GIL
        while waiting; Ctrl-C withdraws the participant from the server."""
        seconds = _options.async_timeout(timeout)
        native = self._native.campaign(seconds)
        if native is None:
            raise _timed_out(self.name, timeout)
        return Leadership(native, self.name)

    async def campaign_async(self, timeout: float | None = None) -> Leadership:
        """``campaign`` for asyncio; cancelling the task withdraws the
        participant (a leadership that raced the cancellation resigns)."""
        seconds = _options.async_timeout(timeout)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_native.Leadership | None] = loop.create_future()
        op = self._native.campaign_async(seconds, _settle_from_thread(loop, done))
        try:
            native = await done
        except BaseException:
            op.cancel()
            raise
        if native is None:
            raise _timed_out(self.name, timeout)
        return Leadership(native, self.name)

    def leader(self) -> Leader | None:
        """Who leads now, as the server records it (one read), or None.
        Stale the moment it returns: to act as the leader, campaign, and
        check the term where the leader writes."""
        found = self._native.leader()
        return None if found is None else Leader(*found)

    async def leader_async(self) -> Leader | None:
        """``leader()`` without blocking the loop."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[str, int | None] | None] = loop.create_future()
        self._native.leader_async(_settle_from_thread(loop, done))
        found = await done
        return None if found is None else Leader(*found)


class Campaign:
    """What ``Election.leadership()`` returns: ``with`` or ``async with``
    it to lead for the block. One block at a time per object."""

    __slots__ = ("_election", "_leadership", "_timeout")

    def __init__(self, election: Election, timeout: float | None) -> None:
        self._election = election
        self._timeout = timeout
        self._leadership: Leadership | None = None

    def __enter__(self) -> Leadership:
        """Campaigns (blocking) and returns the leadership."""
        self._refuse_reentry()
        self._leadership = self._election.campaign(self._timeout)
        return self._leadership

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Resigns; raises LockLostError if the leadership was lost meanwhile."""
        leadership, self._leadership = self._leadership, None
        if leadership is not None:
            leadership.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Leadership:
        """Campaigns (asyncio) and returns the leadership."""
        self._refuse_reentry()
        self._leadership = await self._election.campaign_async(self._timeout)
        return self._leadership

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Resigns without blocking the loop; raises LockLostError if the
        leadership was lost meanwhile."""
        leadership, self._leadership = self._leadership, None
        if leadership is not None:
            await leadership.__aexit__(exc_type, exc, tb)

    def _refuse_reentry(self) -> None:
        # A leadership is not re-entrant: a second campaign of this process
        # would wait behind the first one's block for ever.
        if self._leadership is not None:
            raise RuntimeError(
                "this leadership() block is already entered; a leadership is not re-entrant"
            )


def _timed_out(name: str, timeout: float | None) -> LockTimeout:
    return LockTimeout(f"did not lead election {name!r} within {timeout} s")
