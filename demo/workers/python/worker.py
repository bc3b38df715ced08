"""The Python worker of the demo: the same protocol and output as the Rust
one (runtime/examples/demo_worker.rs).

``worker.py --url URL --lock NAME --resource-url REDIS_URL --rounds N --id ID
[--hold-ms MS] [--lease-ms MS] [--session-ms MS] [--permits N]``

For each round: acquire (blocking API: the owner is this thread); print a
grant line; read the resource's count; hold for --hold-ms; write count+1
through the fencing-checked script (demo/resource.lua); print a record line
with start/end on CLOCK_MONOTONIC and whether the lock was lost meanwhile;
release. Then close the client. With ``--permits N`` it takes one permit of
the semaphore of N permits instead and holds without touching the resource
(N hold at once: there is no single writer to fence). With
POLYLOCK_HISTORY_DIR set it also records its operation history there (see
demo/README.md and History below).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import polylock
import redis

SCRIPT = (Path(__file__).resolve().parents[2] / "resource.lua").read_text()


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


class History:
    """The worker's operation history for tests/history's histcheck: one JSON
    line per call, return and reported loss, in POLYLOCK_HISTORY_DIR (nothing
    when unset). Each line is one unbuffered write, so a killed worker leaves
    whole lines (a call without its return: an outcome unknown)."""

    def __init__(self, worker: str, backend: str, lock: str, resource: str) -> None:
        directory = os.environ.get("POLYLOCK_HISTORY_DIR")
        self.fd = None
        if directory:
            path = os.path.join(directory, f"{worker}-{os.getpid()}.jsonl")
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.common = {
            "client": f"{worker}/{os.getpid()}",
            "backend": backend,
            "lock": lock,
            "resource": resource,
        }

    def record(self, op: str, kind: str, **fields: object) -> None:
        if self.fd is not None:
            line = {**self.common, "op": op, "kind": kind, "t_ns": time.monotonic_ns(), **fields}
            os.write(self.fd, (json.dumps(line) + "\n").encode())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("--resource-url", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--id", default=f"python-{os.getpid()}")
    ap.add_argument("--hold-ms", type=int, default=2)
    ap.add_argument("--lease-ms", type=int, default=30_000)
    ap.add_argument("--session-ms", type=int, default=10_000)
    ap.add_argument("--permits", type=int)
    args = ap.parse_args()

    backend = "zookeeper" if args.url.startswith("zk") else "redis"
    resource = f"demo:resource:{backend}:{args.lock}"
    pid = os.getpid()
    r = redis.Redis.from_url(args.resource_url)
    write = r.register_script(SCRIPT)
    base = {"worker": args.id, "lang": "python", "backend": backend, "pid": pid}
    history = History(args.id, backend, args.lock, resource)

    with polylock.connect(
        args.url, lease=args.lease_ms / 1000, session_timeout=args.session_ms / 1000
    ) as client:
        if args.permits is not None:
            permit_rounds(client.semaphore(args.lock, args.permits), args, base, history)
            return
        lock = client.lock(args.lock)
        for _ in range(args.rounds):
            history.record("acquire", "call")
            lock.acquire()
            token = lock.fencing_token
            history.record("acquire", "return", token=token)
            start = time.monotonic_ns()
            emit({"event": "grant", **base, "token": token, "t_ns": start})
            # The fenced read (-1: refused, and so is the write below).
            history.record("read", "call", token=token)
            count = int(write(keys=[resource], args=[token]) or 0)
            history.record("read", "return", value=count)
            time.sleep(args.hold_ms / 1000)  # widen the window a lost update would need
            history.record("write", "call", token=token, value=count + 1)
            accepted = write(keys=[resource], args=[token, count + 1])
            history.record("write", "return", ok=accepted == 1)
            end = time.monotonic_ns()
            # Lost during the section, or found out on release (a paused
            # process learns only when it runs again).
            lost = not lock.held
            if lost:
                history.record("lost", "event")
            history.record("release", "call", token=token)
            try:
                lock.release()
            except polylock.LockLostError:
                lost = True
            history.record("release", "return", ok=not lost)
            emit(
                {
                    **base,
                    "token": token,
                    "start_ns": start,
                    "end_ns": end,
                    "accepted": accepted == 1,
                    "lost": lost,
                }
            )
    r.close()


def permit_rounds(
    sem: polylock.Semaphore, args: argparse.Namespace, base: dict[str, object], history: History
) -> None:
    """The semaphore rounds: a grant line, a hold, a release, a record line."""
    for _ in range(args.rounds):
        history.record("acquire", "call", permits=args.permits)
        permit = sem.grant(1)
        token = permit.fencing_token
        history.record("acquire", "return", token=token)
        start = time.monotonic_ns()
        emit({"event": "grant", **base, "token": token, "t_ns": start})
        time.sleep(args.hold_ms / 1000)
        end = time.monotonic_ns()
        lost = not permit.held
        if lost:
            history.record("lost", "event")
        history.record("release", "call", token=token)
        try:
            permit.release()
        except polylock.LockLostError:
            lost = True
        history.record("release", "return", ok=not lost)
        record = {"token": token, "start_ns": start, "end_ns": end, "accepted": True, "lost": lost}
        emit({**base, **record})


if __name__ == "__main__":
    main()
