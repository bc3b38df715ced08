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
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import tempfile
import threading
from types import ModuleType

from . import _errors, _native

_module: ModuleType = _native
# The process that started using `_module` (None: not used yet, so its
# process-wide state is pristine and a child can use it as it is).
_used_in: int | None = None
_choosing = threading.Lock()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock at the fork.
    global _choosing
    _choosing = threading.Lock()


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
