"""``connect`` and ``Client``."""

from __future__ import annotations

from types import TracebackType
from typing import Callable, NamedTuple

from . import _fork, _native, _options
from ._election import Election
from ._errors import ClientClosedError
from ._lock import Lock, RwLock
from ._semaphore import Semaphore


class LockStatus(NamedTuple):
    """A lock as the server sees it."""

    held: bool
    holder: str | None
    fencing_token: int | None
    waiters: int | None
    ttl_ms: int | None


def connect(
    url: str,
    *,
    connect_timeout: float = 5.0,
    request_timeout: float = 5.0,
    session_timeout: float = 10.0,
    lease: float = 30.0,
    _debug_faults: bool = False,
) -> Client:
    """Connects to ``redis://[user:pass@]host:port[/db]``, ``rediss://...?ca=PATH``,
    ``redis+sentinel://[user:pass@]h1:26379,h2:26379/MASTER[?replicas=K]`` (or
    ``rediss+sentinel://``), ``redis+cluster://[user:pass@]h1:7000,h2:7001[?replicas=K]``
    (or ``rediss+cluster://``), ``zk://[user:pass@]h1:2181,h2:2181[/chroot]`` or
    ``zks://...?ca=PATH``.
    Times in seconds: ``connect_timeout`` bounds the connect,
    ``request_timeout`` one Redis command, ``session_timeout`` is the
    ZooKeeper session, ``lease`` the default Redis lease (renewed every third
    of it). Raises LockConnectionError (a ConnectionError) naming the address
    if the server cannot be reached, ValueError for a bad URL or option.

    A client made before ``os.fork()`` (at import time in a gunicorn
    ``--preload`` master, a celery prefork parent, a ``multiprocessing``
    fork pool) connects again by itself in the child on its first call."""
    args = (
        _options.url(url),
        _options.positive_seconds("connect_timeout", connect_timeout),
        _options.positive_seconds("request_timeout", request_timeout),
        _options.positive_seconds("session_timeout", session_timeout),
        _options.positive_seconds("lease", lease),
        _debug_faults,
    )
    return Client(_fork.PerProcess(lambda: _fork.native().connect(*args)))


class Client:
    """A connection to one Redis server or ZooKeeper ensemble, shared by
    every lock made from it. Usable as a context manager (closes on exit).

    After ``os.fork()`` the child's first call on the client, or on any
    lock or semaphore made from it, connects again with the child's own
    connections. What the parent holds stays the parent's: in the child
    those locks are not held, and the child's grants carry their own
    fencing tokens. A closed client stays closed in its children."""

    def __init__(self, native: _fork.PerProcess[_native.Client]) -> None:
        self._connection = native

    @property
    def _native(self) -> _native.Client:
        return self._connection.get()

    @property
    def backend(self) -> str:
        """``"redis"`` or ``"zookeeper"``."""
        return self._native.backend

    @property
    def id(self) -> str:
        """This client's id, as written in Redis hash fields and ZooKeeper node data."""
        return self._native.id

    def lock(
        self,
        name: str,
        *,
        lease: float | None = None,
        on_lost: Callable[[str], object] | None = None,
    ) -> Lock:
        """A handle on the lock ``name`` (no I/O). ``lease`` (Redis, seconds)
        overrides the client's. ``on_lost(reason)`` is called from a
        background thread if a hold is lost; its exceptions are printed."""
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        seconds = None if lease is None else _options.positive_seconds("lease", lease)
        checked = _options.lock_name(name)
        return Lock(_fork.PerProcess(lambda: self._native.lock(checked, seconds, on_lost)))

    def rw_lock(
        self,
        name: str,
        *,
        lease: float | None = None,
        on_lost: Callable[[str], object] | None = None,
    ) -> RwLock:
        """A read-write lock ``name`` (no I/O): ``.read`` is shared by many
        readers, ``.write`` excludes everyone; each is a :class:`Lock`, as
        ``lock()`` returns. A writer may take ``.read`` too (downgrade) and
        keep it after releasing ``.write``; a reader's ``.write.acquire()``
        raises UpgradeRefused at once. A waiting writer blocks new readers.
        ``lease`` and ``on_lost`` as for ``lock()``, shared by both halves.
        Use a name either as a mutex or as a read-write lock, not both."""
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        seconds = None if lease is None else _options.positive_seconds("lease", lease)
        checked = _options.lock_name(name)
        halves = _fork.PerProcess(lambda: self._native.rw_lock(checked, seconds, on_lost))
        return RwLock(Lock(_Half(halves, 0)), Lock(_Half(halves, 1)))

    def semaphore(self, name: str, permits: int, *, lease: float | None = None) -> Semaphore:
        """A counting semaphore ``name`` of ``permits`` permits (no I/O),
        shaped like ``threading.BoundedSemaphore``: ``with sem:``,
        ``acquire(blocking, timeout, count)``, ``release(count)``, their
        ``*_async`` twins, and ``grant(count)`` for one grant as an object.
        Every client of one name must use the same ``permits`` (the first
        acquire records it on the server; another number raises
        PermitsMismatch). ``lease`` (Redis, seconds) is each grant's,
        renewed while held; default the client's. Redis (single, Sentinel,
        Cluster: Redisson's ``RPermitExpirableSemaphore`` layout) and
        ZooKeeper (Curator's ``InterProcessSemaphoreV2`` layout)."""
        seconds = None if lease is None else _options.positive_seconds("lease", lease)
        total = _options.permits_total(permits)
        checked = _options.lock_name(name)
        return Semaphore(_fork.PerProcess(lambda: self._native.semaphore(checked, total, seconds)))

    def election(self, name: str, *, lease: float | None = None) -> Election:
        """A leader election ``name`` (no I/O): ``with election.leadership(timeout=...)
        as lead:`` (or ``async with``) leads for the block, ``lead.term`` is a
        fencing token, ``lead.lost`` is set if the leadership is lost;
        ``election.leader()`` says who leads. ZooKeeper: Curator's
        ``LeaderLatch`` layout; Redis: the leader holds the name's mutex, so
        use a name either as a lock or as an election. ``lease`` (Redis,
        seconds) overrides the client's."""
        seconds = None if lease is None else _options.positive_seconds("lease", lease)
        checked = _options.lock_name(name)
        return Election(_fork.PerProcess(lambda: self._native.election(checked, seconds)))

    def status(self, name: str) -> LockStatus:
        """Who holds ``name`` right now, as the server sees it (read-only)."""
        return LockStatus(*self._native.status(_options.lock_name(name)))

    def close(self) -> None:
        """Releases every held lock and fails pending acquires; later calls
        raise ClientClosedError."""
        self._connection.retire(lambda: ClientClosedError("the client was closed"))
        self._native.close()

    def _debug_expire_session(self) -> None:
        """Tests only: make ZooKeeper expire this client's session (needs
        ``connect(..., _debug_faults=True)``; takes the session timeout)."""
        self._native.debug_expire_session()

    def __enter__(self) -> Client:
        """Returns the client; the ``with`` block's end closes it."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Closes the client (``close()``)."""
        self.close()

    def __repr__(self) -> str:
        return f"<polylock.Client {self.backend} {self.id}>"


class _Half:
    """One half of a read-write lock's pair of native locks, made again
    (both together) in a forked child."""

    __slots__ = ("_halves", "_index")

    def __init__(
        self, halves: _fork.PerProcess[tuple[_native.Lock, _native.Lock]], index: int
    ) -> None:
        self._halves = halves
        self._index = index

    def get(self) -> _native.Lock:
        return self._halves.get()[self._index]
