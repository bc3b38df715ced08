"""A WSGI app as a new user writes one: the client is made at import time,
so under ``gunicorn --preload`` it is made in the master, before the fork.
Each request increments a counter in Redis by a read-modify-write that is
only exact under the lock."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any, Callable

import polylock
import redis

LOCK_URL = os.environ["FORK_APP_LOCK_URL"]
NAME = os.environ["FORK_APP_NAME"]

client = polylock.connect(LOCK_URL)
lock = client.lock(NAME)
counter = redis.Redis.from_url(os.environ["FORK_APP_REDIS"])
COUNT = f"{NAME}:count"  # beside the lock's own key, which is NAME on Redis


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    with lock:
        seen = int(counter.get(COUNT) or 0)
        time.sleep(0.001)  # widen the race a missing lock would lose
        counter.set(COUNT, seen + 1)
        token = lock.fencing_token
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{os.getpid()} {token}".encode()]
