"""Checks of user-supplied arguments, so a mistake raises ValueError or
TypeError naming the argument before anything reaches the server."""

from __future__ import annotations

import _thread
import math


def positive_seconds(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return seconds


def lock_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"lock name must be a str, not {type(name).__name__}")
    return name


def url(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"connection URL must be a str, not {type(value).__name__}")
    return value


def threading_timeout(blocking: object, timeout: object) -> float | None:
    """``threading.RLock.acquire``'s arguments as the native timeout: None
    waits forever, 0.0 tries once. A value RLock refuses raises exactly what
    RLock raises (type and message, on every Python version), because RLock
    itself checks it: the same arguments go to a fresh, uncontended one,
    which answers at once."""
    probe = _thread.RLock()
    if probe.acquire(blocking, timeout):  # type: ignore[arg-type]
        probe.release()
    if not blocking:
        return 0.0
    seconds = float(timeout)  # type: ignore[arg-type]
    return None if seconds == -1 else seconds


def async_timeout(timeout: object) -> float | None:
    """``acquire_async``'s timeout: None waits forever, 0 tries once."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number or None, not {type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(
            f"timeout must be a non-negative number or None (wait forever), got {timeout!r}"
        )
    return None if timeout == math.inf else float(timeout)


def semaphore_timeout(blocking: object, timeout: object) -> float | None:
    """``threading.Semaphore.acquire``'s arguments as the native timeout:
    None waits forever, 0.0 tries once. As there, a timeout with
    ``blocking=False`` is a ValueError and a negative one tries once; NaN
    (which threading would wait on forever) is a ValueError."""
    if not blocking:
        if timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        return 0.0
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number or None, not {type(timeout).__name__}")
    if math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds or None (wait forever), got nan")
    if timeout == math.inf:
        return None
    return max(float(timeout), 0.0)


def permit_count(count: object) -> int:
    """A number of permits for the native side. Whether it fits the
    semaphore (1 to its permits) is the runtime's to say (ValueError)."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an int, not {type(count).__name__}")
    if not 0 <= count <= 0xFFFF_FFFF:
        raise ValueError(f"count must be a positive number of permits, got {count}")
    return count


def permits_total(permits: object) -> int:
    """A semaphore's number of permits (the runtime checks its range)."""
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"permits must be an int, not {type(permits).__name__}")
    if not 0 <= permits <= 0xFFFF_FFFF:
        raise ValueError(f"permits must be a positive number, got {permits}")
    return permits


def event_timeout(timeout: object) -> float | None:
    """``LossEvent.wait``'s timeout, as ``threading.Event.wait`` takes it:
    None (or infinity) waits forever, a negative one does not wait. NaN,
    which threading would not wait on either, is a ValueError here: it is a
    bug in the caller's arithmetic, not a timeout."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number or None, not {type(timeout).__name__}")
    if math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds or None (wait forever), got nan")
    if timeout == math.inf:
        return None
    return max(float(timeout), 0.0)
