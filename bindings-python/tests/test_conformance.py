"""The conformance scenarios (tests/conformance/*.json, format in its
README) through the Python package's public API: one pytest case per
scenario, backend and mode. Every selected case starts at once in a thread
pool (the first case to run starts them all), so the whole set takes about
as long as its slowest scenario.

Owners. ``owner`` numbers map to the unit of reentrancy of the API under
test, the same one for the whole scenario. A number is an owner per client:
clients stand for separate processes, so owner 1 of client 0 and owner 1
of client 1 are unrelated (as ``OwnerId(1)`` in two Rust clients), and
they must be distinct units here since one may wait in an acquire while the
other releases:

- mode ``threads`` (the blocking API): each (client, owner) is a long-lived
  thread of its own; each of its steps runs on that thread through a ``client.lock(name)``
  handle per (client, owner). Scenarios with ``start_acquire`` do not run
  in this mode: a blocking acquire cannot be cancelled from another thread
  (only Ctrl-C in the main thread interrupts it).
- mode ``asyncio`` (the async API): one event loop per scenario, and each
  (client, owner) is a long-lived asyncio task that runs its steps one after another
  (``acquire_async``/``release_async``). ``start_acquire`` hands the task an
  acquire and returns at once; ``await`` waits for its outcome; ``cancel`` is
  ``task.cancel()`` on the owner task while it awaits that acquire (the task
  survives it: it catches the CancelledError and uncancels itself).

Outcomes: ``granted`` = acquire returned True / acquire_async returned;
``would_block`` = ``acquire(blocking=False)`` returned False, or
``acquire_async(timeout=0)`` raised LockTimeout; ``timeout`` = the same
with a positive timeout; ``ok`` = release returned; ``not_held`` =
NotHeldError; ``lost`` = LockLostError; ``invalid_name`` = ValueError
or TypeError from ``client.lock``; ``invalid_url`` = the same from
``connect``; ``connect_error`` = LockConnectionError. ``await_lost`` = the
``on_lost`` callback of that owner's handle is called and ``lock.held``
turns False for that owner. ``hold_count`` = ``lock.held`` in the owner's
context: the public API has no hold count, so a count above 1 is only
checked as "held" (a finding, reported with the runner); an owner that is
waiting in a ``start_acquire`` holds nothing (its task is busy waiting, and
a holder's re-entry would not wait). ``expire_lease``
is a DEL of the lock key (Redis) or the private
``client._debug_expire_session()`` (ZooKeeper; scenario clients connect
with ``_debug_faults=True`` and a 2 s session). ``server_*`` read the
servers directly (redis-py, kazoo).

Semaphores (``"permits": N``, steps with ``"mode": "permits"``): a grant
of (client, owner) is taken in that owner's thread or task through the
``threading.BoundedSemaphore`` shape (``sem.acquire(blocking, timeout,
count)`` / ``sem.release(count)``, or ``acquire_async`` / ``release_async``)
on a ``client.semaphore(name, permits)`` handle of its own per (client,
owner, permits), so the handle holds exactly that grant. A scenario with
``await_lost`` uses the guard shape instead (``sem.grant(count)`` /
``grant_async``, then ``Permits.release``), since only a ``Permits`` carries
one grant's loss: ``await_lost`` is its ``lost_reason`` turning non-None and
``held`` False. ``would_block``/``timeout`` = acquire returned False (or
LockTimeout); ``permits_mismatch`` = PermitsMismatch; ``invalid_option`` =
ValueError. On Redis ``server_permits`` is ``ZCARD {NAME}:timeout``;
``server_clean`` wants that empty and no ``polylock_semqueue:{NAME}`` /
``polylock_semqueue_deadline:{NAME}`` (the counter at NAME stays);
``expire_lease`` sets every member of ``{NAME}:timeout`` to score 0. On
ZooKeeper (Curator's ``InterProcessSemaphoreV2`` layout, PATH = NAME with a
leading ``/``) ``server_permits`` is the number of children of
``PATH/leases``; ``server_clean`` wants no children under ``PATH/locks``
(Curator's mutex) nor ``PATH/leases`` (the ``PATH/polylock_permits``
record of N stays); ``expire_lease`` is the session expiry, as for a lock.

Backends ``sentinel`` and ``cluster`` (``REDIS_VARIANTS``): every Redis
scenario once more through the ``redis+sentinel://`` URL of
POLYLOCK_TEST_SENTINEL (``scripts/services start --sentinel``) and the
``redis+cluster://`` URL of POLYLOCK_TEST_CLUSTER (``scripts/services start
--cluster``), with the same expected results; ``server_*`` and
``expire_lease`` then look at the master the sentinels name, or, on the
cluster, at the master of the lock's slot (through redis-py's
``RedisCluster``, which routes each key there). No scenario is left out
there: the ``connect`` steps name their own URLs. When a variable is unset
its cases are skipped, saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import json
import os
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, Callable, NamedTuple

import polylock
import pytest
import redis
from conformance_history import History
from conftest import redis_url, unique, url_of, zk_url
from kazoo.client import KazooClient

SCENARIOS = Path(__file__).resolve().parents[2] / "tests" / "conformance"
STEP_LIMIT = 60.0  # seconds: a step that takes longer is a hang, not a wait


class Variant(NamedTuple):
    """A Redis deployment that every Redis scenario runs on once more."""

    url: str | None  # None: its variable is unset, and its cases are skipped
    unset: str  # the reason given for skipping them
    # from the URL, a client that reads the servers holding the locks
    inspector: Callable[[str], redis.Redis | redis.RedisCluster]


def _variant(backend: str, var: str, inspector: Callable[[str], Any]) -> Variant:
    unset = f"{var} is unset: run scripts/services start --{backend}"
    return Variant(os.environ.get(var), unset, inspector)


def _sentinel_master(url: str) -> redis.Redis:
    return redis.Redis(*_master_addr(url))


def _cluster(url: str) -> redis.RedisCluster:
    """redis-py's cluster client on the URL's seeds: it sends each key's
    command to the master of the key's slot."""
    hosts = url.split("://", 1)[1].rsplit("@", 1)[-1].split("?")[0].split(",")
    seeds = [redis.cluster.ClusterNode(h, int(p)) for h, p in (h.rsplit(":", 1) for h in hosts)]
    return redis.RedisCluster(startup_nodes=seeds)


REDIS_VARIANTS = {
    "sentinel": _variant("sentinel", "POLYLOCK_TEST_SENTINEL", _sentinel_master),
    "cluster": _variant("cluster", "POLYLOCK_TEST_CLUSTER", _cluster),
}


def _load() -> list[tuple[str, str, str]]:
    cases = []
    for f in sorted(SCENARIOS.glob("*.json")):
        sc = json.loads(f.read_text())
        starts = any(s["op"] == "start_acquire" for s in sc["steps"])
        for b in sc["backends"]:
            backend = "redis" if b == "any" else b
            for mode in ("threads", "asyncio"):
                if mode == "threads" and starts:
                    continue
                cases.append((f.stem, backend, mode))
                if backend == "redis":
                    cases.extend((f.stem, variant, mode) for variant in REDIS_VARIANTS)
    return cases


CASES = _load()
assert len({c[0] for c in CASES}) >= 20, f"expected at least 20 scenarios in {SCENARIOS}"


class Mismatch(AssertionError):
    pass


def _outcome(exc: BaseException, *, try_once: bool = False) -> str:
    if isinstance(exc, polylock.LockTimeout):
        return "would_block" if try_once else "timeout"
    if isinstance(exc, polylock.NotHeldError):
        return "not_held"
    if isinstance(exc, polylock.LockLostError):
        return "lost"
    if isinstance(exc, polylock.LockConnectionError):
        return "connect_error"
    if isinstance(exc, polylock.UpgradeRefused):
        return "upgrade_refused"
    if isinstance(exc, polylock.PermitsMismatch):
        return "permits_mismatch"
    if isinstance(exc, ValueError):
        return "invalid_option"
    return f"other error {type(exc).__name__}: {exc}"


class _Threads:
    """Owner n = a thread of its own (the blocking API)."""

    def __init__(self) -> None:
        self.pools: dict[Owner, cf.ThreadPoolExecutor] = {}

    def call(self, owner: Owner, fn: Callable[[], Any]) -> Any:
        pool = self.pools.setdefault(owner, cf.ThreadPoolExecutor(1, f"owner-{owner}"))
        return pool.submit(fn).result(STEP_LIMIT)

    def close(self) -> None:
        for p in self.pools.values():
            p.shutdown(wait=False)


Owner = tuple[int, int]  # (client, owner number)
_Item = tuple[Callable[[], Awaitable[Any]], "cf.Future[Any]"]


class _Tasks:
    """Owner n = a long-lived asyncio task on the scenario's event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.queues: dict[Owner, asyncio.Queue[_Item | None]] = {}
        self.tasks: dict[Owner, asyncio.Task[None]] = {}

    async def _owner(self, queue: asyncio.Queue[_Item | None]) -> None:
        while True:
            try:
                item = await queue.get()
            except asyncio.CancelledError:  # a cancel that came too late: ignore it
                _uncancel()
                continue
            if item is None:
                return
            fn, result = item
            try:
                result.set_result(await fn())
            except asyncio.CancelledError as e:
                _uncancel()
                result.set_exception(e)
            except BaseException as e:
                result.set_exception(e)

    def start(self, owner: Owner, fn: Callable[[], Awaitable[Any]]) -> cf.Future[Any]:
        result: cf.Future[Any] = cf.Future()

        def put() -> None:
            if owner not in self.tasks:
                self.queues[owner] = asyncio.Queue()
                self.tasks[owner] = self.loop.create_task(self._owner(self.queues[owner]))
            self.queues[owner].put_nowait((fn, result))

        self.loop.call_soon_threadsafe(put)
        return result

    def call(self, owner: Owner, fn: Callable[[], Awaitable[Any]]) -> Any:
        return self.start(owner, fn).result(STEP_LIMIT)

    def cancel(self, owner: Owner) -> None:
        self.loop.call_soon_threadsafe(lambda: self.tasks[owner].cancel())

    def close(self) -> None:
        async def stop() -> None:
            for q in self.queues.values():
                q.put_nowait(None)
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(STEP_LIMIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(STEP_LIMIT)
        self.loop.close()


def _uncancel() -> None:
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python >= 3.11
    if uncancel is not None:
        uncancel()


class Run:
    def __init__(self, sc: dict[str, Any], backend: str, mode: str, raw: Raw) -> None:
        self.sc, self.backend, self.mode, self.raw = sc, backend, mode, raw
        self.ctx = ""
        variant = REDIS_VARIANTS.get(backend)
        if variant is None:
            self.url = url_of(backend)
        else:
            assert variant.url, variant.unset
            self.url = variant.url
        self.name = unique(f"conformance-{sc['name']}")
        opts: dict[str, Any] = {"session_timeout": 2.0, "_debug_faults": True}
        if "lease_ms" in sc:
            opts["lease"] = sc["lease_ms"] / 1000
        self.clients = [polylock.connect(self.url, **opts) for _ in range(sc["clients"])]
        self.locks: dict[tuple[int, int, str], polylock.Lock] = {}
        self.lost: dict[tuple[int, int, str], threading.Event] = {}
        self.tokens: dict[str, int] = {}
        self.background: dict[str, tuple[Owner, cf.Future[Any]]] = {}
        self.permits: int | None = sc.get("permits")
        self.sems: dict[tuple[int, int, int], polylock.Semaphore] = {}
        # (client, owner) -> its grant: (handle, count) in the threading
        # shape, or a Permits in the guard shape
        self.grants: dict[Owner, tuple[polylock.Semaphore, int] | polylock.Permits] = {}
        self.guards = any(st["op"] == "await_lost" for st in sc["steps"])
        self.owners: _Threads | _Tasks = _Threads() if mode == "threads" else _Tasks()
        # the lock steps' operation history (POLYLOCK_HISTORY_DIR), for histcheck
        self.history = History(backend, self.name)

    def fail(self, what: str) -> None:
        raise Mismatch(f"{self.ctx}: {what}")

    def expect(self, got: str, want: str) -> None:
        if got != want:
            self.fail(f"expected {want}, got {got}")

    def lock(self, c: int, owner: int, step: dict[str, Any]) -> polylock.Lock:
        """Owner's handle on the lock in client c, with its own on_lost: the
        mutex, or the half of the read-write lock the step's ``mode`` names."""
        mode = step.get("mode", "mutex")
        key = (c, owner, mode)
        if key not in self.locks:
            event = self.lost[key] = threading.Event()
            on_lost = lambda _r: event.set()  # noqa: E731
            if mode == "mutex":
                self.locks[key] = self.clients[c].lock(self.name, on_lost=on_lost)
            else:
                rw = self.clients[c].rw_lock(self.name, on_lost=on_lost)
                self.locks[key] = rw.read if mode == "read" else rw.write
        return self.locks[key]

    # ---- acquire / release in the owner's context ---------------------

    def _acquire_fn(self, lock: polylock.Lock, timeout: float | None) -> Callable[[], Any]:
        """The acquire for the owner's context: returns the token, or an
        outcome name when not granted."""
        if isinstance(self.owners, _Threads):

            def blocking() -> int | str:
                try:
                    if timeout == 0:
                        granted = lock.acquire(blocking=False)
                    else:
                        granted = lock.acquire(timeout=-1 if timeout is None else timeout)
                except polylock.UpgradeRefused as e:
                    return _outcome(e)
                if not granted:
                    return "would_block" if timeout == 0 else "timeout"
                return lock.fencing_token

            return blocking

        async def asynchronous() -> int | str:
            try:
                await lock.acquire_async(timeout)
            except polylock.LockError as e:
                return _outcome(e, try_once=timeout == 0)
            return lock.fencing_token

        return asynchronous

    def _release_fn(self, lock: polylock.Lock) -> Callable[[], Any]:
        if isinstance(self.owners, _Threads):

            def blocking() -> str:
                try:
                    lock.release()
                except polylock.LockError as e:
                    return _outcome(e)
                return "ok"

            return blocking

        async def asynchronous() -> str:
            try:
                await lock.release_async()
            except polylock.LockError as e:
                return _outcome(e)
            return "ok"

        return asynchronous

    def _held_fn(self, lock: polylock.Lock) -> Callable[[], Any]:
        if isinstance(self.owners, _Threads):
            return lambda: lock.held

        async def asynchronous() -> bool:
            return lock.held

        return asynchronous

    def granted(self, step: dict[str, Any], result: int | str) -> None:
        if isinstance(result, str):
            self.expect(result, step["expect"])
            return
        self.expect("granted", step["expect"])
        if "token_eq" in step and result != self.tokens[step["token_eq"]]:
            self.fail(f"token {result} != {step['token_eq']}={self.tokens[step['token_eq']]}")
        if "token_gt" in step and result <= self.tokens[step["token_gt"]]:
            self.fail(f"token {result} not > {step['token_gt']}={self.tokens[step['token_gt']]}")
        if "save_token" in step:
            self.tokens[step["save_token"]] = result

    # ---- semaphores ---------------------------------------------------

    def semaphore(self, c: int, owner: int, step: dict[str, Any]) -> polylock.Semaphore:
        """Owner's own handle on the scenario's semaphore, with the step's permits."""
        assert self.permits is not None, "a permits step in a scenario without permits"
        n = step.get("permits", self.permits)
        key = (c, owner, n)
        if key not in self.sems:
            self.sems[key] = self.clients[c].semaphore(self.name, n)
        return self.sems[key]

    def _sem_acquire_fn(
        self, c: int, owner: int, step: dict[str, Any], timeout: float | None
    ) -> Callable[[], Any]:
        """The acquire of (client, owner)'s grant in the owner's context:
        returns the grant's token, or an outcome name when not granted."""
        sem, count, key = self.semaphore(c, owner, step), step.get("count", 1), (c, owner)
        try_once = timeout == 0
        if isinstance(self.owners, _Threads):

            def blocking() -> int | str:
                try:
                    if self.guards:
                        p = sem.grant(count, timeout=timeout)
                        self.grants[key] = p
                        return p.fencing_token
                    if try_once:
                        granted = sem.acquire(blocking=False, count=count)
                    else:
                        granted = sem.acquire(timeout=timeout, count=count)
                except (polylock.LockError, ValueError) as e:
                    return _outcome(e, try_once=try_once)
                if not granted:
                    return "would_block" if try_once else "timeout"
                self.grants[key] = (sem, count)
                return sem.fencing_token

            return blocking

        async def asynchronous() -> int | str:
            try:
                if self.guards:
                    p = await sem.grant_async(count, timeout=timeout)
                    self.grants[key] = p
                    return p.fencing_token
                await sem.acquire_async(timeout, count=count)
            except (polylock.LockError, ValueError) as e:
                return _outcome(e, try_once=try_once)
            self.grants[key] = (sem, count)
            return sem.fencing_token

        return asynchronous

    def _sem_release_fn(self, c: int, owner: int) -> Callable[[], Any]:
        grant = self.grants.pop((c, owner))
        if isinstance(self.owners, _Threads):

            def blocking() -> str:
                try:
                    if isinstance(grant, polylock.Permits):
                        grant.release()
                    else:
                        grant[0].release(grant[1])
                except (polylock.LockError, ValueError) as e:
                    return _outcome(e)
                return "ok"

            return blocking

        async def asynchronous() -> str:
            try:
                if isinstance(grant, polylock.Permits):
                    await grant.release_async()
                else:
                    await grant[0].release_async(grant[1])
            except (polylock.LockError, ValueError) as e:
                return _outcome(e)
            return "ok"

        return asynchronous

    # ---- the steps ----------------------------------------------------

    def run(self) -> None:
        try:
            for i, step in enumerate(self.sc["steps"]):
                self.ctx = f"{self.sc['name']} on {self.backend} ({self.mode}), step {i} {step}"
                try:
                    getattr(self, "op_" + step["op"])(step)
                except Mismatch:
                    raise
                except Exception as e:
                    raise Mismatch(f"{self.ctx}: {type(e).__name__}: {e}") from e
        finally:
            self.owners.close()
            for c in self.clients:
                c.close()

    def op_acquire(self, step: dict[str, Any]) -> None:
        c, owner = step["client"], step["owner"]
        timeout = step["timeout_ms"] / 1000 if "timeout_ms" in step else None
        started = time.monotonic()
        if step.get("mode") == "permits":
            fn = self._sem_acquire_fn(c, owner, step, timeout)
        else:
            fn = self._acquire_fn(self.lock(c, owner, step), timeout)
        fn = self.history.wrap(c, owner, step, "acquire", self.permits, fn)
        result = self.owners.call((c, owner), fn)
        if "min_elapsed_ms" in step and time.monotonic() - started < step["min_elapsed_ms"] / 1000:
            self.fail("gave up early")
        self.granted(step, result)

    def op_release(self, step: dict[str, Any]) -> None:
        key = (step["client"], step["owner"])
        if step.get("mode") == "permits":
            fn = self._sem_release_fn(*key)
        else:
            fn = self._release_fn(self.lock(*key, step))
        fn = self.history.wrap(*key, step, "release", self.permits, fn)
        self.expect(self.owners.call(key, fn), step["expect"])

    def op_start_acquire(self, step: dict[str, Any]) -> None:
        assert isinstance(self.owners, _Tasks), "start_acquire runs in asyncio mode only"
        c, owner = step["client"], step["owner"]
        if step.get("mode") == "permits":
            fn = self._sem_acquire_fn(c, owner, step, None)
        else:
            fn = self._acquire_fn(self.lock(c, owner, step), None)
        fn = self.history.wrap(c, owner, step, "acquire", self.permits, fn)
        future = self.owners.start((c, owner), fn)
        self.background[step["id"]] = ((c, owner), future)

    def op_await(self, step: dict[str, Any]) -> None:
        _, future = self.background.pop(step["id"])
        try:
            result = future.result(step.get("within_ms", 10_000) / 1000)
        except cf.TimeoutError:
            self.fail("still waiting")
        self.granted(step, result)

    def op_cancel(self, step: dict[str, Any]) -> None:
        assert isinstance(self.owners, _Tasks)
        owner, future = self.background.pop(step["id"])
        self.owners.cancel(owner)
        try:
            result = future.result(STEP_LIMIT)
        except (asyncio.CancelledError, cf.CancelledError):
            return
        self.fail(f"the cancelled acquire ended with {result!r}")

    def op_hold_count(self, step: dict[str, Any]) -> None:
        key = (step["client"], step["owner"])
        if any(o == key and not f.done() for o, f in self.background.values()):
            held = False  # the owner is waiting in an acquire, so it holds nothing
        else:
            held = self.owners.call(key, self._held_fn(self.lock(*key, step)))
        want = step["expect_count"] > 0  # the public API says held or not, not how often
        if held != want:
            self.fail(f"held is {held}")

    def op_server_state(self, step: dict[str, Any]) -> None:
        self.expect("held" if self.raw.held(self.backend, self.name) else "free", step["expect"])

    def op_server_clean(self, step: dict[str, Any]) -> None:
        within = step.get("within_ms", 3000) / 1000
        sem = self.permits is not None

        def left() -> list[str]:
            return self.raw.leftovers(self.backend, self.name, semaphore=sem)

        if not _eventually(lambda: not left(), within):
            self.fail(f"left on the server: {left()}")

    def op_server_permits(self, step: dict[str, Any]) -> None:
        within = step.get("within_ms", 3000) / 1000
        want = step["expect_count"]
        held = lambda: self.raw.permits_held(self.backend, self.name)  # noqa: E731
        if not _eventually(lambda: held() == want, within):
            self.fail(f"{held()} permits held on the server")

    def op_server_waiters(self, step: dict[str, Any]) -> None:
        within = step.get("within_ms", 3000) / 1000
        want = step["expect_count"]
        if not _eventually(lambda: self.raw.waiters(self.backend, self.name) == want, within):
            self.fail(f"{self.raw.waiters(self.backend, self.name)} waiters on the server")

    def op_expire_lease(self, step: dict[str, Any]) -> None:
        if self.permits is not None and self.backend != "zookeeper":
            self.raw.expire_permits(self.backend, self.name)
        elif self.backend != "zookeeper":
            self.raw.redis_of(self.backend).delete(self.name)
        else:
            self.clients[step["client"]]._debug_expire_session()

    def op_await_lost(self, step: dict[str, Any]) -> None:
        c, owner = step["client"], step["owner"]
        if step.get("mode") == "permits":
            grant = self.grants.get((c, owner))
            assert isinstance(grant, polylock.Permits), "await_lost needs the guard shape"
            within = step.get("within_ms", 10_000) / 1000
            if not _eventually(lambda: grant.lost_reason is not None, within):
                self.fail("the permits were not reported lost")
            self.history.lost(c, owner, None)
            if grant.held:
                self.fail("still held after its loss")
            return
        lock = self.lock(c, owner, step)
        within = step.get("within_ms", 10_000) / 1000
        if not self.lost[(c, owner, step.get("mode", "mutex"))].wait(within):
            self.fail("on_lost was not called")
        self.history.lost(c, owner, step.get("mode"))
        if self.owners.call((c, owner), self._held_fn(lock)):
            self.fail("still held after on_lost")

    def op_lock_name(self, step: dict[str, Any]) -> None:
        client = self.clients[0] if self.clients else polylock.connect(self.url)
        try:
            client.lock(step["name"])
            got = "ok"
        except (ValueError, TypeError):
            got = "invalid_name"
        finally:
            if not self.clients:
                client.close()
        self.expect(got, step["expect"])

    def op_connect(self, step: dict[str, Any]) -> None:
        within = step.get("within_ms", 8000) / 1000
        started = time.monotonic()
        try:
            polylock.connect(step["url"], connect_timeout=2.0).close()
            got = "ok"
        except (ValueError, TypeError):
            got = "invalid_url"
        except polylock.LockError as e:
            got = _outcome(e)
        if time.monotonic() - started > within:
            self.fail(f"connect took {time.monotonic() - started:.1f} s")
        self.expect(got, step["expect"])

    def op_sleep(self, step: dict[str, Any]) -> None:
        time.sleep(step["ms"] / 1000)


def _eventually(check: Callable[[], bool], within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


class Raw:
    """The servers, read directly (thread-safe clients)."""

    def __init__(self) -> None:
        self.redis = redis.Redis.from_url(redis_url())
        self.zk = KazooClient(hosts=zk_url().removeprefix("zk://"))
        self.zk.start(timeout=10)
        self.variants = {b: v.inspector(v.url) for b, v in REDIS_VARIANTS.items() if v.url}

    def redis_of(self, backend: str) -> redis.Redis | redis.RedisCluster:
        """Where a Redis backend's locks live: under Sentinel the master,
        on a cluster (a client for) each slot's master."""
        if backend in REDIS_VARIANTS:
            assert backend in self.variants, REDIS_VARIANTS[backend].unset
            return self.variants[backend]
        return self.redis

    def _children(self, name: str) -> list[str]:
        path = name if name.startswith("/") else "/" + name
        return list(self.zk.get_children(path)) if self.zk.exists(path) else []

    def held(self, backend: str, name: str) -> bool:
        if backend != "zookeeper":
            return bool(self.redis_of(backend).exists(name))
        return bool(self._children(name))

    def waiters(self, backend: str, name: str) -> int:
        if backend != "zookeeper":
            return int(self.redis_of(backend).zcard(f"polylock_queue:{{{name}}}"))
        return max(len(self._children(name)) - 1, 0)

    def permit_ids(self, name: str) -> str:
        """Redis: the sorted set of a semaphore's held permit ids."""
        return f"{{{name}}}:timeout"

    def permits_held(self, backend: str, name: str) -> int:
        """Redis: Redisson's set of permit ids; ZooKeeper: Curator's lease nodes."""
        if backend == "zookeeper":
            return len(self._children(f"{name}/leases"))
        return int(self.redis_of(backend).zcard(self.permit_ids(name)))

    def expire_permits(self, backend: str, name: str) -> None:
        """Every held permit's expiry in the past: the next script reclaims it."""
        r = self.redis_of(backend)
        key = self.permit_ids(name)
        for member in r.zrange(key, 0, -1):
            r.zadd(key, {member: 0}, xx=True)

    def leftovers(self, backend: str, name: str, semaphore: bool = False) -> list[str]:
        if semaphore and backend == "zookeeper":
            # Curator's mutex and the leases gone; the record of N stays.
            subs = ("locks", "leases")
            return [f"{sub}/{n}" for sub in subs for n in self._children(f"{name}/{sub}")]
        if semaphore:
            r = self.redis_of(backend)
            keys = [f"polylock_semqueue:{{{name}}}", f"polylock_semqueue_deadline:{{{name}}}"]
            left = [k for k in keys if r.exists(k)]
            held = int(r.zcard(self.permit_ids(name)))
            return left + ([f"{self.permit_ids(name)} ({held} permits)"] if held else [])
        if backend != "zookeeper":
            keys = [name, f"polylock_queue:{{{name}}}", f"polylock_queue_deadline:{{{name}}}"]
            keys += [f"polylock_rwqueue:{{{name}}}", f"polylock_rwqueue_deadline:{{{name}}}"]
            return [k for k in keys if self.redis_of(backend).exists(k)]
        return self._children(name)

    def close(self) -> None:
        self.redis.close()
        for inspector in self.variants.values():
            inspector.close()
        self.zk.stop()
        self.zk.close()


def _master_addr(url: str) -> tuple[str, int]:
    """host and port of the master, as the first answering sentinel names it."""
    rest = url.split("://", 1)[1]
    hosts, master = rest.split("/", 1)
    for hostport in hosts.rsplit("@", 1)[-1].split(","):
        host, port = hostport.rsplit(":", 1)
        try:
            with redis.Redis(host, int(port), socket_timeout=2.0) as s:
                ask = ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", master.split("?")[0])
                named = s.execute_command(*ask)
        except redis.RedisError:
            continue
        if named:
            return named[0].decode(), int(named[1])
    raise AssertionError(f"no sentinel of {url} names a master")


def _run_case(case: tuple[str, str, str], raw: Raw) -> None:
    scenario, backend, mode = case
    sc = json.loads((SCENARIOS / f"{scenario}.json").read_text())
    Run(sc, backend, mode, raw).run()


@pytest.fixture(scope="session")
def conformance_runs(
    request: pytest.FixtureRequest,
) -> Iterator[dict[tuple[str, str, str], cf.Future[None]]]:
    """Starts every selected case at once; each test waits for its own."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_scenario" and hasattr(item, "callspec")
    ]
    selected = [c for c in selected if c[1] not in REDIS_VARIANTS or REDIS_VARIANTS[c[1]].url]
    raw = Raw()
    pool = cf.ThreadPoolExecutor(max_workers=24, thread_name_prefix="scenario")
    runs = {case: pool.submit(_run_case, case, raw) for case in selected}
    yield runs
    pool.shutdown(wait=True)
    raw.close()


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_scenario(
    case: tuple[str, str, str], conformance_runs: dict[tuple[str, str, str], cf.Future[None]]
) -> None:
    variant = REDIS_VARIANTS.get(case[1])
    if variant and not variant.url:
        pytest.skip(variant.unset)
    conformance_runs[case].result(timeout=300)
