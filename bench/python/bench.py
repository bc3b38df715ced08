"""polylock against the locks a Python user would pick instead, in one run
against the same servers: uncontended acquire+release latency (back to back,
and paced: each call after a pause, as a service's calls come), and handoff
latency (the holder releases; a waiter blocked in another process returns
from acquire), plus the floor (one round trip to the server), and polylock's
throughput: acquire+release per second across 1,000 distinct locks from one
client, 16 threads using the blocking API. Every latency row also has the
CPU it cost per operation: this process's (user + sys, every thread) and the
lock server's (see ``CpuMeter``). And the idle row: one client holding 100
locks, making no calls, in % of one core.

    python bench/python/bench.py [--quick] [--iterations 1000] [--handoffs 50] [--only-throughput]

``--quick`` (or BENCH_QUICK=1): every row with few iterations, a smoke test.

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


class CpuMeter:
    """CPU time in seconds, user + sys: this process's (every thread: a
    library's background threads and polylock's runtime count with it), and
    each lock server's. Redis: ``INFO cpu`` (the server's threads, its
    background ones included). ZooKeeper: the sum of
    /proc/<pid>/task/*/schedstat (nanoseconds on a CPU, every thread of its
    JVM) of POLYLOCK_BENCH_ZK_PID (bench/run sets it from the pid file of
    scripts/services); without it, ZooKeeper rows have no server figure."""

    def __init__(self) -> None:
        import redis

        self._info = redis.Redis.from_url(_redis_url())
        pid = os.environ.get("POLYLOCK_BENCH_ZK_PID", "")
        self._zk_tasks = Path(f"/proc/{pid}/task") if pid.isdigit() else None

    @staticmethod
    def client() -> float:
        return time.process_time()

    def server(self, backend: str) -> float | None:
        if backend == "redis":
            cpu = self._info.info("cpu")
            return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        if self._zk_tasks is None:
            return None
        total = 0
        for task in self._zk_tasks.iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
        return total / 1e9

    def close(self) -> None:
        self._info.close()


class CpuTally:
    """CPU of one system over the spans it was timed in, summed, per operation."""

    def __init__(self) -> None:
        self.client = 0.0
        self.server: float | None = 0.0
        self.ops = 0

    def add(self, client: float, server: float | None, ops: int) -> None:
        self.client += client
        self.server = None if server is None or self.server is None else self.server + server
        self.ops += ops

    def per_op_us(self) -> dict[str, float | None]:
        n = max(self.ops, 1)
        return {
            "client_cpu_us": round(self.client / n * 1e6, 1),
            "server_cpu_us": None if self.server is None else round(self.server / n * 1e6, 1),
        }


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


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


# Before each timed batch, a pause (not counted anywhere): whatever the
# previous batch's system still did after its last call (a thread going back
# to sleep) ends there, not in this batch's CPU.
SETTLE_S = 0.005


BATCH = 100


# The pause before each paced acquire+release: a service's lock calls
# come between requests, not back to back. The pause is left out of the
# latency and kept in the CPU per operation: what a client burns while the
# caller is away counts against it.
PACE_S = 0.002
# Every lock measured paced too, polylock beside each peer (2 ms a call).
PACED = ("polylock-redis", "redis-py", "python-redis-lock", "pottery", "polylock-zk", "kazoo")


def uncontended(
    libs: list[str],
    names: dict[str, str],
    iterations: int,
    warmup: int,
    meter: CpuMeter,
    pace_s: float = 0.0,
) -> dict[str, dict[str, object]]:
    """Uncontended acquire+release of every library in ``libs``, interleaved:
    batches of ``BATCH`` take turns (the first library of each round
    rotating), so that the machine's load and drift fall on every library
    alike and a ratio of two p50s compares the libraries, not the moments
    they happened to run at. With ``pace_s``, each timed call follows a
    pause that long (not in the latency, in the CPU). Each batch's CPU,
    client and server, is charged to its library."""
    contenders = {lib: make(lib, names[lib]) for lib in libs}
    samples: dict[str, list[int]] = {lib: [] for lib in libs}
    cpu = {lib: CpuTally() for lib in libs}
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
                backend = LIBRARIES[lib][0]
                time.sleep(SETTLE_S)
                s0 = meter.server(backend)
                c0 = meter.client()
                for _ in range(batch):
                    if pace_s:
                        time.sleep(pace_s)
                    t0 = time.perf_counter_ns()
                    c.acquire()
                    c.release()
                    out.append(time.perf_counter_ns() - t0)
                c1 = meter.client()
                cpu[lib].add(c1 - c0, _delta(meter.server(backend), s0), batch)
    finally:
        for c in contenders.values():
            c.close()
    return {lib: percentiles(s) | cpu[lib].per_op_us() for lib, s in samples.items()}


# How long a holder waits, once the waiter is told to acquire, before it
# releases: time for the waiter to block on the server, and the quiet the
# handoff then breaks (threads asleep in both processes and the server). The
# Rust bench waits the same 20 ms, so its handoff breakdown applies here. The
# quiet's length alone moves the figure (the longer, the colder every thread
# and cache it wakes), so every language waits the same.
QUIET_S = 0.02


def _waiter(lib: str, name: str, conn: Connection) -> None:
    """The other process: on "go", block in acquire; report when it returns.
    On "cpu", report this process's CPU time so far."""
    c = make(lib, name)
    conn.send("ready")
    while (msg := conn.recv()) in ("go", "cpu"):
        if msg == "cpu":
            conn.send(time.process_time())
            continue
        c.acquire()
        returned = time.monotonic_ns()  # the same clock as the holder's, same machine
        conn.send(returned)
        c.release()
    c.close()


def handoff(
    lib: str, name: str, rounds: int, meter: CpuMeter, warmup: int = 3
) -> dict[str, object]:
    """Handoff latency, and the CPU per handoff round (the holder's acquire,
    the waiter blocking, the release, the waiter's grant and release, the
    quiet between): both processes' CPU, and the server's."""
    # spawn, not fork: the waiter gets connections of its own, and
    # zookeeper-client cannot connect in a child forked after its parent did.
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_waiter, args=(lib, name, theirs), daemon=True)
    proc.start()
    assert mine.poll(60) and mine.recv() == "ready", f"{lib}: the waiter did not start"
    c = make(lib, name)
    backend = LIBRARIES[lib][0]
    samples = []

    def cpu_now() -> tuple[float | None, float]:
        mine.send("cpu")
        theirs = mine.recv()
        return meter.server(backend), meter.client() + theirs

    start = cpu_now()
    for i in range(warmup + rounds):
        if i == warmup:
            start = cpu_now()
        c.acquire()
        mine.send("go")
        time.sleep(QUIET_S)  # the waiter is now blocked in acquire
        released = time.monotonic_ns()
        c.release()
        returned = mine.recv()
        if i >= warmup:
            samples.append(returned - released)
    end = cpu_now()
    mine.send("stop")
    proc.join(30)
    c.close()
    tally = CpuTally()
    tally.add(end[1] - start[1], _delta(end[0], start[0]), rounds)
    return percentiles(samples) | tally.per_op_us()


def idle(
    url: str, prefix: str, seconds: float, meter: CpuMeter, locks: int = 100
) -> dict[str, object]:
    """One polylock client connected and holding ``locks`` locks (the
    default lease, so its renewals run), making no calls: this process's
    and the server's CPU over ``seconds``, in % of one core."""
    import polylock

    client = polylock.connect(url)
    held = [client.lock(f"{prefix}/{i}") for i in range(locks)]
    for lock in held:
        lock.acquire()
    time.sleep(1.0)  # the acquires' aftermath (unsubscribes, timers armed) settles
    s0, c0, t0 = meter.server("redis"), meter.client(), time.monotonic()
    time.sleep(seconds)
    s1, c1, t1 = meter.server("redis"), meter.client(), time.monotonic()
    for lock in held:
        lock.release()
    client.close()
    span = t1 - t0
    server = _delta(s1, s0)
    return {
        "locks": locks,
        "seconds": round(span, 1),
        "client_core_pct": round((c1 - c0) / span * 100, 3),
        "server_core_pct": None if server is None else round(server / span * 100, 3),
    }


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


METRICS = (("uncontended_us", "back to back"), ("paced_us", "paced"), ("handoff_us", "handoff"))


def _cpu(x: object) -> str:
    return "-" if x is None else f"{x:.1f}"


def table(results: dict[str, dict[str, object]]) -> str:
    """One line per library and metric: latency, CPU per operation (this
    process's, the server's), and polylock's p50 and client CPU over the
    library's."""
    lines = [
        (
            "| library | backend | metric | p50 (µs) | p99 | client CPU µs/op | server CPU µs/op "
            "| polylock/this p50 | polylock/this client CPU |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for lib, r in results.items():
        backend, ref = LIBRARIES[lib]
        for key, metric in METRICS:
            m, ours = r.get(key), results[ref].get(key)
            if not isinstance(m, dict):
                continue
            peer = lib != ref and isinstance(ours, dict)
            rp = ratio(ours["p50"], m["p50"]) if peer else "-"
            rc = (
                ratio(ours["client_cpu_us"], m["client_cpu_us"])
                if peer and m.get("client_cpu_us")
                else "-"
            )
            cpu = f"{_cpu(m.get('client_cpu_us'))} | {_cpu(m.get('server_cpu_us'))}"
            lines.append(
                f"| {LABELS.get(lib, lib)} | {backend} | {metric} "
                f"| {m['p50']:.0f} | {m['p99']:.0f} | {cpu} | {rp} | {rc} |"
            )
    return "\n".join(lines)


# Iterations, pauses and spans of a full run, and of a quick one (a smoke test).
FULL = {"iterations": 1000, "warmup": 100, "handoffs": 50, "paced": 500, "idle_s": 10.0, "tp_s": 3}
QUICK = {"iterations": 100, "warmup": 10, "handoffs": 5, "paced": 50, "idle_s": 2.0, "tp_s": 1}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1")
    ap.add_argument("--iterations", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--handoffs", type=int)
    ap.add_argument("--paced", type=int, help="paced iterations per library")
    ap.add_argument("--idle-seconds", type=float)
    ap.add_argument("--only", nargs="*", default=list(LIBRARIES))
    ap.add_argument("--only-throughput", action="store_true", help="write no files")
    args = ap.parse_args(argv)
    mode = QUICK if args.quick else FULL
    iterations = args.iterations or mode["iterations"]
    warmup = args.warmup if args.warmup is not None else mode["warmup"]
    handoffs = args.handoffs or mode["handoffs"]
    paced_n = args.paced or mode["paced"]
    idle_s = args.idle_seconds or mode["idle_s"]
    run = f"{os.getpid()}-{int(time.time())}"
    meter = CpuMeter()

    def throughputs() -> dict[str, int]:
        tp = {
            b: throughput(url, f"/polylock-bench/throughput-{b}-{run}", seconds=mode["tp_s"])
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
    latency: dict[str, dict[str, object]] = {}
    paced: dict[str, dict[str, object]] = {}
    for backend in dict.fromkeys(LIBRARIES[lib][0] for lib in args.only):
        libs = [lib for lib in args.only if LIBRARIES[lib][0] == backend]
        latency |= uncontended(libs, names, iterations, warmup, meter)
        paced_libs = [lib for lib in PACED if lib in libs]
        if paced_libs:
            paced |= uncontended(
                paced_libs,
                {lib: f"{names[lib]}-paced" for lib in paced_libs},
                paced_n,
                min(warmup, 20),
                meter,
                PACE_S,
            )
    results: dict[str, dict[str, object]] = {}
    for lib in args.only:
        entry: dict[str, object] = {"backend": LIBRARIES[lib][0], "uncontended_us": latency[lib]}
        if lib in paced:
            entry["paced_us"] = paced[lib]
        if not lib.startswith(("floor", "raw")):
            entry["handoff_us"] = handoff(lib, names[lib], handoffs, meter)
        results[lib] = entry
        print(f"{lib}: {entry}", flush=True)
    idle_row = idle(_redis_url(), f"/polylock-bench/idle-{run}", idle_s, meter)
    print(f"idle: {idle_row}", flush=True)
    # Last: its thousands of ZooKeeper writes keep the server busy (its
    # snapshot, the containers' cleanup) for seconds after, on cores the
    # latency rows share.
    tp = throughputs()
    meter.close()
    md = table(results)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "iterations": iterations,
        "paced_iterations": paced_n,
        "handoffs": handoffs,
        "redis": _redis_url(),
        "zookeeper": os.environ["POLYLOCK_TEST_ZK"],
        "zookeeper_pid": os.environ.get("POLYLOCK_BENCH_ZK_PID"),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print("\n" + md)
    (HERE / "results.md").write_text(
        f"Python {meta['python']}, {meta['cpus']} CPUs, loopback servers; "
        f"{iterations} uncontended iterations back to back (each backend's libraries "
        f"interleaved, in batches of {BATCH}); paced: {paced_n} each after a "
        f"{PACE_S * 1000:.0f} ms pause (the pause out of the latency, in the CPU); "
        f"{handoffs} cross-process handoffs (CPU: holder's and waiter's processes per round). "
        "Client CPU: this process's user + sys (every thread) over each timed batch; server CPU: "
        "Redis `INFO cpu`, ZooKeeper's JVM threads from /proc.\n\n"
        + md
        + f"\n\nIdle: one polylock client holding {idle_row['locks']} Redis locks (default lease, "
        + f"renewals running), no calls, {idle_row['seconds']} s: client "
        + f"{idle_row['client_core_pct']:.3f}% of one core, "
        + f"server {_cpu(idle_row['server_core_pct'])}%.\n"
        + "\nThroughput, acquire+release per second across 1,000 distinct locks from one client "
        + f"(16 threads, `with client.lock(name):`, {mode['tp_s']:g} s after 0.5 s warm-up):\n\n"
        + "| backend | ops/s |\n|---|---:|\n"
        + "".join(f"| {b} | {ops} |\n" for b, ops in tp.items())
    )
    (HERE / "results.json").write_text(
        json.dumps({"meta": meta, "results": results, "idle": idle_row, "throughput": tp}, indent=2)
    )


if __name__ == "__main__":
    main()
