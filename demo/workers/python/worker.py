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
(N hold at once: there is no single writer to fence).
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

    with polylock.connect(
        args.url, lease=args.lease_ms / 1000, session_timeout=args.session_ms / 1000
    ) as client:
        if args.permits is not None:
            permit_rounds(client.semaphore(args.lock, args.permits), args, base)
            return
        lock = client.lock(args.lock)
        for _ in range(args.rounds):
            lock.acquire()
            token = lock.fencing_token
            start = time.monotonic_ns()
            emit({"event": "grant", **base, "token": token, "t_ns": start})
            # The fenced read (-1: refused, and so is the write below).
            count = write(keys=[resource], args=[token])
            time.sleep(args.hold_ms / 1000)  # widen the window a lost update would need
            accepted = write(keys=[resource], args=[token, int(count or 0) + 1])
            end = time.monotonic_ns()
            # Lost during the section, or found out on release (a paused
            # process learns only when it runs again).
            lost = not lock.held
            try:
                lock.release()
            except polylock.LockLostError:
                lost = True
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
    sem: polylock.Semaphore, args: argparse.Namespace, base: dict[str, object]
) -> None:
    """The semaphore rounds: a grant line, a hold, a release, a record line."""
    for _ in range(args.rounds):
        permit = sem.grant(1)
        token = permit.fencing_token
        start = time.monotonic_ns()
        emit({"event": "grant", **base, "token": token, "t_ns": start})
        time.sleep(args.hold_ms / 1000)
        end = time.monotonic_ns()
        lost = not permit.held
        try:
            permit.release()
        except polylock.LockLostError:
            lost = True
        record = {"token": token, "start_ns": start, "end_ns": end, "accepted": True, "lost": lost}
        emit({**base, **record})


if __name__ == "__main__":
    main()
