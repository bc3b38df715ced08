"""The exceptions polylock raises. The native module instantiates these
classes by name, so keep the constructors' signatures in step with
``src/errors.rs``."""

from __future__ import annotations


class LockError(Exception):
    """Base class of every polylock failure (bad arguments aside: those are
    ``ValueError`` or ``TypeError``)."""


class LockTimeout(LockError, TimeoutError):
    """An asynchronous acquire was not granted within its timeout."""


class LockUnavailableError(LockTimeout):
    """The timeout passed while the server kept refusing with a transient
    error (Redis ``BUSY``, ``LOADING``, ``READONLY``, ...; ZooKeeper
    throttling). ``reply`` is the server's last answer. A ``LockTimeout``
    (and so a ``TimeoutError``) too: the caller's timeout did pass, and code
    that handles a timeout handles this one; catch this class first to tell
    a refusing server from a held lock. Raised even by ``acquire(timeout=...)``,
    which returns False only when the lock was held."""

    def __init__(self, message: str, name: str | None = None, reply: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.reply = reply


class LockLostError(LockError):
    """The lock was lost while held (lease expired, session expired): the
    code that ran under it was not protected."""

    def __init__(self, message: str, name: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason


class NotHeldError(LockError, RuntimeError):
    """Release by a thread or task that does not hold the lock."""


class UpgradeRefused(LockError):
    """A write acquire by a thread or task that holds the read half of the
    same read-write lock: refused at once, since it would wait for itself
    forever. Release the read hold first (the reverse, taking the read half
    while writing, is allowed: a downgrade)."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


class PermitsMismatch(LockError):
    """A semaphore made with another number of permits than the server
    records for its name (``server``; ``ours`` is this handle's). Nothing
    was taken. Every client of one semaphore must agree on its permits."""

    def __init__(
        self,
        message: str,
        name: str | None = None,
        server: int | None = None,
        ours: int | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.server = server
        self.ours = ours


class LockConnectionError(LockError, ConnectionError):
    """The server could not be reached; ``address`` says which."""

    def __init__(self, message: str, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


class ClientClosedError(LockError):
    """The client was closed."""
