"""The operation history of the conformance scenarios' lock steps, for
tests/history's histcheck (a Porcupine check of mutual exclusion).

With POLYLOCK_HISTORY_DIR set, every acquire (call, and return with the
token or the outcome's name), release (call, and return ok, or ok false when
told Lost) and reported loss goes as one JSON line (tests/history/events.go)
into ``py-conformance-<pid>.jsonl`` there, stamped with
``time.monotonic_ns()`` (CLOCK_MONOTONIC, the clock every language's
recorder reads). Each call and return is stamped in the owner's own thread
or task, right before and after the API call. Nothing is recorded when the
variable is unset.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import threading
import time
from typing import IO, Any, Callable

_runs = itertools.count()
_lock = threading.Lock()
_file: IO[str] | None = None


def _write(line: dict[str, Any]) -> None:
    global _file
    with _lock:
        if _file is None:
            path = os.path.join(
                os.environ["POLYLOCK_HISTORY_DIR"], f"py-conformance-{os.getpid()}.jsonl"
            )
            _file = open(path, "a", buffering=1)  # noqa: SIM115 (one file for the process)
        line["t_ns"] = time.monotonic_ns()
        _file.write(json.dumps(line) + "\n")


class History:
    """One scenario run's history: its lock name is unique to the run, so
    the checker sees each scenario, backend and mode as a history of its own."""

    def __init__(self, backend: str, lock: str) -> None:
        self.on = bool(os.environ.get("POLYLOCK_HISTORY_DIR"))
        self.backend, self.lock = backend, f"py:{lock}"
        self.run = f"py-{os.getpid()}-{next(_runs)}"

    def record(
        self, c: int, owner: int, mode: str | None, op: str, kind: str, **fields: Any
    ) -> None:
        if not self.on:
            return
        line: dict[str, Any] = {
            "client": f"{self.run}/c{c}.o{owner}",
            "backend": self.backend,
            "lock": self.lock,
            "resource": "",
            "op": op,
            "kind": kind,
        }
        if mode in ("read", "write"):
            line["mode"] = mode
        _write({**line, **fields})

    def lost(self, c: int, owner: int, mode: str | None) -> None:
        self.record(c, owner, mode, "lost", "event")

    def _call(self, c: int, owner: int, step: dict[str, Any], op: str, permits: int | None) -> None:
        fields: dict[str, Any] = {}
        if op == "acquire" and step.get("mode") == "permits":
            fields = {"permits": step.get("permits", permits), "count": step.get("count", 1)}
        self.record(c, owner, step.get("mode"), op, "call", **fields)

    def _return(self, c: int, owner: int, step: dict[str, Any], op: str, result: Any) -> None:
        if op == "acquire":
            fields = {"token": result} if isinstance(result, int) else {"error": str(result)}
        elif result == "ok":
            fields = {"ok": True}
        elif result == "lost":
            fields = {"ok": False}
        else:
            fields = {"error": str(result)}
        self.record(c, owner, step.get("mode"), op, "return", **fields)

    def wrap(
        self,
        c: int,
        owner: int,
        step: dict[str, Any],
        op: str,
        permits: int | None,
        fn: Callable[[], Any],
    ) -> Callable[[], Any]:
        """``fn`` (an acquire returning a token or an outcome name, or a
        release returning "ok" or one), recorded around its run in the
        owner's context: blocking, or a coroutine function."""
        if not inspect.iscoroutinefunction(fn):

            def blocking() -> Any:
                self._call(c, owner, step, op, permits)
                try:
                    result = fn()
                except BaseException as e:
                    self._return(c, owner, step, op, type(e).__name__)
                    raise
                self._return(c, owner, step, op, result)
                return result

            return blocking

        async def asynchronous() -> Any:
            self._call(c, owner, step, op, permits)
            try:
                result = await fn()
            except BaseException as e:  # a cancel included: its outcome is unknown
                self._return(c, owner, step, op, type(e).__name__)
                raise
            self._return(c, owner, step, op, result)
            return result

        return asynchronous
