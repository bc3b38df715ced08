"""A client made at import time, before the process forks, as servers fork
their workers: real gunicorn with --preload, and a multiprocessing fork
pool. Every worker's first call connects again; the counter the lock guards
comes out exact."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.request import urlopen

import polylock
import pytest
import redis
from conftest import redis_url, unique, url_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

APPS = os.path.join(os.path.dirname(__file__), "apps")
WORKERS = 4
REQUESTS = {"redis": 200, "zookeeper": 80}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str]:
    with urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def _serving(port: int, server: subprocess.Popen[bytes], within: float = 30) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"gunicorn exited with {server.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail("gunicorn did not start serving")


@pytest.mark.parametrize("backend", ["redis", "zookeeper"])
def test_gunicorn_preload_workers_share_a_client_made_in_the_master(backend: str) -> None:
    name = unique("gunicorn")
    port = _free_port()
    env = dict(
        os.environ,
        FORK_APP_LOCK_URL=url_of(backend),
        FORK_APP_NAME=name,
        FORK_APP_REDIS=redis_url(),
        PYTHONPATH=APPS,
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--preload",
            "-w",
            str(WORKERS),
            "-k",
            "sync",
            "-b",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "preload_counter:app",
        ],
        env=env,
    )
    try:
        _serving(port, server)
        count = REQUESTS[backend]
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: _get(f"http://127.0.0.1:{port}/"), range(count)))
    finally:
        server.terminate()
        server.wait(30)
    assert all(status == 200 for status, _ in answers), answers
    pids = {body.split()[0] for _, body in answers}
    assert len(pids) > 1, f"one worker served every request: {pids}"
    tokens = [int(body.split()[1]) for _, body in answers]
    assert len(set(tokens)) == count, "two requests were granted the same fencing token"
    assert int(redis.Redis.from_url(redis_url()).get(f"{name}:count") or 0) == count


# Made at import time in the pytest process, before the pool forks.
_POOL_CLIENTS: dict[str, polylock.Client] = {}


def _increment(job: tuple[str, str]) -> int:
    backend, name = job
    lock = _POOL_CLIENTS[backend].lock(name)
    counter = redis.Redis.from_url(redis_url())
    with lock:
        seen = int(counter.get(f"{name}:count") or 0)
        time.sleep(0.001)
        counter.set(f"{name}:count", seen + 1)
        token: int = lock.fencing_token
    return token


@pytest.mark.parametrize("backend", ["redis", "zookeeper"])
def test_a_multiprocessing_fork_pool_uses_the_parents_client(backend: str) -> None:
    client = _POOL_CLIENTS[backend] = polylock.connect(url_of(backend))
    name = unique("pool")
    with client.lock(name):  # the parent's connection is in use at the fork
        pass
    jobs = 60
    with multiprocessing.get_context("fork").Pool(4) as pool:
        tokens = pool.map(_increment, [(backend, name)] * jobs, chunksize=1)
    assert len(set(tokens)) == jobs
    assert int(redis.Redis.from_url(redis_url()).get(f"{name}:count") or 0) == jobs
    with client.lock(name):  # and the parent's client still works
        pass
    client.close()
