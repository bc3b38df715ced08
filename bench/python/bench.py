"""polylock against the locks a Python user would pick instead, in one run
against the same servers: uncontended acquire+release latency (back to back,
and paced: each call after a pause, as a service's calls come), and handoff
latency (the holder releases; a waiter blocked in another process returns
from acquire), plus the floor (one round trip to the server), and polylock's
throughput: acquire+release per second across 1,000 distinct locks from one
client, 16 threads using the blocking API.

    python bench/python/bench.py [--iterations 1000] [--handoffs 50] [--only-throughput]

Needs POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK. Writes a Markdown table to
stdout and bench/python/results.md, raw percentiles to results.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass
class Contender:
    """One library's lock in one process: acquire, release, close."""

    acquire: Callable[[], object]
    release: Callable[[], object]
    close: Callable[[], object]


def _redis_url() -> str:
    return os.environ["POLYLOCK_TEST_REDIS"]


def _zk_hosts() -> str:
    return os.environ["POLYLOCK_TEST_ZK"].removeprefix("zk://")


def make(lib: str, name: str) -> Contender:
    """Builds ``lib``'s lock on ``name`` with its own connection, with the
    library's defaults (polling intervals included: that is what users get)."""
    if lib in ("polylock-redis", "polylock-zk"):
        import polylock

        url = _redis_url() if lib == "polylock-redis" else os.environ["POLYLOCK_TEST_ZK"]
        client = polylock.connect(url)
        lock = client.lock(name)
        return Contender(lock.acquire, lock.release, client.close)
    if lib in ("redis-py", "python-redis-lock", "pottery", "floor-redis", "raw-scripts"):
        import redis

        r = redis.Redis.from_url(_redis_url())
        if lib == "raw-scripts":
            # By SHA1, as polylock sends them once the server has them.
            scripts = raw_script_calls(name)
            for c in scripts:
                r.script_load(c["source"])
            calls = [[c["sha"], len(c["keys"]), *c["keys"], *c["args"]] for c in scripts]

            def both() -> None:
                for call in calls:
                    r.execute_command("EVALSHA", *call)

            return Contender(both, lambda: None, r.close)
        if lib == "redis-py":
            rl = r.lock(name, timeout=30)
            return Contender(rl.acquire, rl.release, r.close)
        if lib == "python-redis-lock":
            import redis_lock

            pl = redis_lock.Lock(r, name, expire=30)
            return Contender(pl.acquire, pl.release, r.close)
        if lib == "pottery":
            from pottery import Redlock

            red = Redlock(key=name, masters={r}, auto_release_time=30)
            return Contender(red.acquire, red.release, r.close)
        return Contender(r.ping, lambda: None, r.close)
    if lib in ("kazoo", "floor-zk"):
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=_zk_hosts())
        zk.start(timeout=10)

        def stop() -> None:
            zk.stop()
            zk.close()

        if lib == "kazoo":
            kl = zk.Lock(name)
            return Contender(kl.acquire, kl.release, stop)
        return Contender(lambda: zk.exists("/"), lambda: None, stop)
    raise ValueError(f"unknown library {lib!r}")


def raw_script_calls(name: str) -> list[dict[str, object]]:
    """polylock's uncontended acquire and release on ``name`` as the two script
    calls its runtime sends, from the Rust benchmark binary (one definition for
    every language; run.sh builds it)."""
    target = os.environ.get("CARGO_TARGET_DIR", str(HERE.parent.parent / "target"))
    out = subprocess.run(
        [f"{target}/release/polylock-bench", "--print-raw-scripts", name],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


# Each peer with the polylock backend it is compared with.
LIBRARIES = {
    "polylock-redis": ("redis", "polylock-redis"),
    "redis-py": ("redis", "polylock-redis"),
    "python-redis-lock": ("redis", "polylock-redis"),
    "pottery": ("redis", "polylock-redis"),
    "floor-redis": ("redis", "polylock-redis"),
    "raw-scripts": ("redis", "polylock-redis"),
    "polylock-zk": ("zookeeper", "polylock-zk"),
    "kazoo": ("zookeeper", "polylock-zk"),
    "floor-zk": ("zookeeper", "polylock-zk"),
}
LABELS = {
    "floor-redis": "floor: redis-py PING",
    "raw-scripts": "raw: polylock's two scripts over redis-py",
    "floor-zk": "floor: kazoo exists",
    "pottery": "pottery Redlock",
    "redis-py": "redis-py Lock",
    "kazoo": "kazoo Lock",
}


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    s = sorted(samples_ns)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] / 1000, 1)

    return {"p50": at(0.50), "p99": at(0.99), "n": len(s)}


BATCH = 100


# The pause before each paced acquire+release: a service's lock calls
# come between requests, not back to back. Longer than the 1 ms after which
# polylock's threads stop polling for the next call (runtime/src/blocking),
# so every paced call is a quiet one, as most calls in a service are.
PACE_S = 0.002
# The Redis libraries measured paced too (a few seconds: 2 ms a call).
PACED = ("polylock-redis", "redis-py", "python-redis-lock")


def uncontended(
    libs: list[str], names: dict[str, str], iterations: int, warmup: int, pace_s: float = 0.0
) -> dict[str, dict[str, float]]:
    """Uncontended acquire+release of every library in ``libs``, interleaved:
    batches of ``BATCH`` take turns (the first library of each round
    rotating), so that the machine's load and drift fall on every library
    alike and a ratio of two p50s compares the libraries, not the moments
    they happened to run at. With ``pace_s``, each timed call follows a
    pause that long (not timed)."""
    contenders = {lib: make(lib, names[lib]) for lib in libs}
    samples: dict[str, list[int]] = {lib: [] for lib in libs}
    try:
        for c in contenders.values():
            for _ in range(warmup):
                c.acquire()
                c.release()
        for r in range(-(-iterations // BATCH)):
            batch = min(BATCH, iterations - r * BATCH)
            for k in range(len(libs)):
                lib = libs[(r + k) % len(libs)]
                c, out = contenders[lib], samples[lib]
                for _ in range(batch):
                    if pace_s:
                        time.sleep(pace_s)
                    t0 = time.perf_counter_ns()
                    c.acquire()
                    c.release()
                    out.append(time.perf_counter_ns() - t0)
    finally:
        for c in contenders.values():
            c.close()
    return {lib: percentiles(s) for lib, s in samples.items()}


# How long a holder waits, once the waiter is told to acquire, before it
# releases: time for the waiter to block on the server, and the quiet the
# handoff then breaks (threads asleep in both processes and the server). The
# Rust bench waits the same 20 ms, so its handoff breakdown applies here. The
# quiet's length alone moves the figure: Python holder, Rust waiter, the same
# code, p50 424-444 us after 20 ms and 641-667 us after 50 ms on this machine.
QUIET_S = 0.02


def _waiter(lib: str, name: str, conn: Connection) -> None:
    """The other process: on "go", block in acquire; report when it returns."""
    c = make(lib, name)
    conn.send("ready")
    while conn.recv() == "go":
        c.acquire()
        returned = time.monotonic_ns()  # the same clock as the holder's, same machine
        conn.send(returned)
        c.release()
    c.close()


def handoff(lib: str, name: str, rounds: int, warmup: int = 3) -> dict[str, float]:
    # spawn, not fork: the waiter gets connections of its own, and
    # zookeeper-client cannot connect in a child forked after its parent did.
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_waiter, args=(lib, name, theirs), daemon=True)
    proc.start()
    assert mine.poll(60) and mine.recv() == "ready", f"{lib}: the waiter did not start"
    c = make(lib, name)
    samples = []
    for i in range(warmup + rounds):
        c.acquire()
        mine.send("go")
        time.sleep(QUIET_S)  # the waiter is now blocked in acquire
        released = time.monotonic_ns()
        c.release()
        returned = mine.recv()
        if i >= warmup:
            samples.append(returned - released)
    mine.send("stop")
    proc.join(30)
    c.close()
    return percentiles(samples)


def throughput(
    url: str, prefix: str, threads: int = 16, locks: int = 1000, seconds: float = 3.0
) -> int:
    """polylock acquire+release per second across ``locks`` names from one
    client: ``threads`` threads, each walking its own slice of the names;
    counted for ``seconds`` after half a second of warm-up."""
    import polylock

    client = polylock.connect(url)
    names = [f"{prefix}/{i}" for i in range(locks)]
    counts = [0] * threads
    stop = threading.Event()

    def loop(t: int) -> None:
        for name in itertools.cycle(names[t::threads]):
            if stop.is_set():
                return
            with client.lock(name):
                pass
            counts[t] += 1

    workers = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    time.sleep(0.5)
    n0, t0 = sum(counts), time.perf_counter()
    time.sleep(seconds)
    n1, t1 = sum(counts), time.perf_counter()
    stop.set()
    for w in workers:
        w.join()
    client.close()
    return round((n1 - n0) / (t1 - t0))


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs else "-"


def table(results: dict[str, dict[str, object]]) -> str:
    lines = [
        (
            "| library | backend | uncontended p50 (µs) | p99 | paced p50 (µs) | p99 "
            "| handoff p50 (µs) | p99 | polylock/peer uncontended p50 | polylock/peer paced p50 "
            "| polylock/peer handoff p50 |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lib, r in results.items():
        backend, ref = LIBRARIES[lib]
        u, h, pc = r["uncontended_us"], r.get("handoff_us"), r.get("paced_us")
        ru, rh = results[ref]["uncontended_us"], results[ref].get("handoff_us")
        rpc = results[ref].get("paced_us")
        assert isinstance(u, dict) and isinstance(ru, dict)
        hp50 = f"{h['p50']:.0f}" if isinstance(h, dict) else "-"
        hp99 = f"{h['p99']:.0f}" if isinstance(h, dict) else "-"
        pp50 = f"{pc['p50']:.0f}" if isinstance(pc, dict) else "-"
        pp99 = f"{pc['p99']:.0f}" if isinstance(pc, dict) else "-"
        peer = lib != ref
        rpaced = (
            ratio(rpc["p50"], pc["p50"])
            if peer and isinstance(pc, dict) and isinstance(rpc, dict)
            else "-"
        )
        rhandoff = (
            ratio(rh["p50"], h["p50"])
            if peer and isinstance(h, dict) and isinstance(rh, dict)
            else "-"
        )
        lines.append(
            f"| {LABELS.get(lib, lib)} | {backend} | {u['p50']:.0f} | {u['p99']:.0f} "
            f"| {pp50} | {pp99} | {hp50} | {hp99} "
            f"| {ratio(ru['p50'], u['p50']) if peer else '-'} | {rpaced} | {rhandoff} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--handoffs", type=int, default=50)
    ap.add_argument("--only", nargs="*", default=list(LIBRARIES))
    ap.add_argument("--only-throughput", action="store_true", help="write no files")
    args = ap.parse_args(argv)
    run = f"{os.getpid()}-{int(time.time())}"

    def throughputs() -> dict[str, int]:
        tp = {
            b: throughput(url, f"/polylock-bench/throughput-{b}-{run}")
            for b, url in (("redis", _redis_url()), ("zookeeper", os.environ["POLYLOCK_TEST_ZK"]))
        }
        print(
            f"throughput (acquire+release/s, 1,000 locks, 16 threads, one client): {tp}", flush=True
        )
        return tp

    if args.only_throughput:
        throughputs()
        return
    names = {lib: f"/polylock-bench/{lib}-{run}" for lib in args.only}
    # Each backend's libraries (its floor included) measured interleaved.
    latency: dict[str, dict[str, float]] = {}
    for backend in dict.fromkeys(LIBRARIES[lib][0] for lib in args.only):
        libs = [lib for lib in args.only if LIBRARIES[lib][0] == backend]
        latency |= uncontended(libs, names, args.iterations, args.warmup)
    paced_libs = [lib for lib in PACED if lib in args.only]
    paced = (
        uncontended(
            paced_libs,
            {lib: f"{names[lib]}-paced" for lib in paced_libs},
            min(args.iterations, 500),
            20,
            PACE_S,
        )
        if len(paced_libs) > 1
        else {}
    )
    results: dict[str, dict[str, object]] = {}
    for lib in args.only:
        entry: dict[str, object] = {"backend": LIBRARIES[lib][0], "uncontended_us": latency[lib]}
        if lib in paced:
            entry["paced_us"] = paced[lib]
        if not lib.startswith(("floor", "raw")):
            entry["handoff_us"] = handoff(lib, names[lib], args.handoffs)
        results[lib] = entry
        print(f"{lib}: {entry}", flush=True)
    # Last: its thousands of ZooKeeper writes keep the server busy (its
    # snapshot, the containers' cleanup) for seconds after, on cores the
    # latency rows share.
    tp = throughputs()
    md = table(results)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "iterations": args.iterations,
        "handoffs": args.handoffs,
        "redis": _redis_url(),
        "zookeeper": os.environ["POLYLOCK_TEST_ZK"],
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print("\n" + md)
    (HERE / "results.md").write_text(
        f"Python {meta['python']}, {meta['cpus']} CPUs, loopback servers; "
        f"{args.iterations} uncontended iterations (each backend's libraries interleaved, "
        f"in batches of {BATCH}; paced: {', '.join(paced_libs)} again, each call after a "
        f"{PACE_S * 1000:.0f} ms pause), {args.handoffs} cross-process handoffs.\n\n"
        + md
        + "\n\nThroughput, acquire+release per second across 1,000 distinct locks from one client "
        + "(16 threads, `with client.lock(name):`, 3 s after 0.5 s warm-up):\n\n"
        + "| backend | ops/s |\n|---|---:|\n"
        + "".join(f"| {b} | {ops} |\n" for b, ops in tp.items())
    )
    (HERE / "results.json").write_text(
        json.dumps({"meta": meta, "results": results, "throughput": tp}, indent=2)
    )


if __name__ == "__main__":
    main()
