"""polylock: distributed locks on Redis and ZooKeeper.

import polylock
with polylock.connect("redis://127.0.0.1:6379") as client:
    with client.lock("orders/42") as lock:
        write(order, fencing_token=lock.fencing_token)
    with client.lock("orders/43").guard() as guard:  # guard.lost: set on a loss
        for step in steps:
            guard.check()  # LockLostError once the lock is lost
            step()
    with client.semaphore("exports", 4):  # at most 4 at once, everywhere
        export()
    with client.election("scheduler").leadership() as lead:  # one leader at a time
        schedule(term=lead.term)
"""

import atexit

from . import _native
from ._client import Client, LockStatus, connect
from ._election import Campaign, Election, Leader, Leadership
from ._errors import (
    ClientClosedError,
    LockConnectionError,
    LockError,
    LockLostError,
    LockTimeout,
    LockUnavailableError,
    NotHeldError,
    PermitsMismatch,
    UpgradeRefused,
)
from ._guard import Guard, LossEvent
from ._lock import Lock, RwLock
from ._semaphore import Permits, Semaphore

# Before the interpreter finalizes, the runtime thread stops delivering
# outcomes into Python (it would abort the process): see _native's exit_gate.
atexit.register(_native.close_for_exit)

__all__ = [
    "Campaign",
    "Client",
    "ClientClosedError",
    "Election",
    "Guard",
    "Leader",
    "Leadership",
    "Lock",
    "LockConnectionError",
    "LockError",
    "LockLostError",
    "LockStatus",
    "LockTimeout",
    "LockUnavailableError",
    "LossEvent",
    "NotHeldError",
    "Permits",
    "PermitsMismatch",
    "RwLock",
    "Semaphore",
    "UpgradeRefused",
    "connect",
]
