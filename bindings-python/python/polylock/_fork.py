"""Fork support: which copy of the native library this process uses.

A child forked after its parent used polylock inherits the native library's
process-wide state in a state it cannot use: the tokio runtime's threads
are gone, and zookeeper-client does its I/O on async-io's global reactor,
whose epoll instance the child would share with its parent (each could
steal the other's readiness events) and whose lock is typically held, for
ever, by the parent's "async-io" thread that did not survive the fork.
None of that can be reset from outside. So such a child loads a fresh,
private copy of the native library (a copy of the file: the dynamic loader
would hand back the loaded one for the same file), in which every static
starts anew, for every backend. Objects made by the parent's copy keep
refusing to work in the child ("created in another process").

The Python objects a user holds (``Client``, ``Lock``, ``Semaphore``) do
not: each keeps its native object in a :class:`PerProcess`, which makes it
again in a forked child on first use: a client made at import time in a
gunicorn ``--preload`` master or a celery prefork parent reconnects by
itself in each worker, with the worker's own connections and runtime, as
redis-py's connection pool does. Whatever the parent holds stays the
parent's: the child's new client holds nothing.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import tempfile
import threading
from types import ModuleType
from typing import Callable, Generic, NoReturn, Protocol, TypeVar

from . import _errors, _native

_module: ModuleType = _native
# The process that started using `_module` (None: not used yet, so its
# process-wide state is pristine and a child can use it as it is).
_used_in: int | None = None
_choosing = threading.Lock()
# How many forks this process is away from the one that imported polylock:
# a PerProcess made in an earlier generation makes its object again.
_generation = 0
# Reentrant: a handle remade in a child remakes its client first.
_remaking = threading.RLock()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the locks at the fork.
    global _choosing, _remaking, _generation
    _choosing = threading.Lock()
    _remaking = threading.RLock()
    _generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def native() -> ModuleType:
    """The native module for a new client in this process."""
    global _module, _used_in
    pid = os.getpid()
    with _choosing:
        if _used_in is not None and _used_in != pid:
            _module = _fresh_copy()
        _used_in = pid
        return _module


def _fresh_copy() -> ModuleType:
    # Always from the installed file: a copy loaded by an ancestor was
    # deleted once mapped (a child of a forked child lands here too).
    origin = _native.__file__
    if origin is None:
        raise _errors.LockError("polylock's native library has no file to load again after fork")
    try:
        with tempfile.TemporaryDirectory(prefix="polylock-fork-") as scratch:
            path = os.path.join(scratch, os.path.basename(origin))
            shutil.copyfile(origin, path)
            loader = importlib.machinery.ExtensionFileLoader(_native.__name__, path)
            spec = importlib.util.spec_from_file_location(_native.__name__, path, loader=loader)
            if spec is None:
                raise ImportError(f"no module spec for {path}")
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            # Mapped now: the file itself is no longer needed.
            return module
    except (OSError, ImportError) as e:
        message = f"cannot load polylock's native library in this forked process: {e}"
        raise _errors.LockError(message) from e


_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class Source(Protocol[_T_co]):
    """Where a Python handle finds its native object in this process."""

    def get(self) -> _T_co: ...


class PerProcess(Generic[_T]):
    """A native object of this process: ``make()`` is called at once, and
    again on the first ``get()`` in a forked child (the parent's object is
    left alone; its native half refuses to work in the child). ``retire``
    makes every later remake raise instead (a closed client stays closed in
    its children)."""

    __slots__ = ("_generation", "_make", "_value")

    def __init__(self, make: Callable[[], _T]) -> None:
        self._make = make
        self._value = make()
        self._generation = _generation

    def get(self) -> _T:
        if self._generation == _generation:
            return self._value
        with _remaking:
            if self._generation != _generation:
                self._value = self._make()
                self._generation = _generation
        return self._value

    def retire(self, error: Callable[[], BaseException]) -> None:
        def refuse() -> NoReturn:
            raise error()

        self._make = refuse
