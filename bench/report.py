#!/usr/bin/env python3
"""Builds bench/REPORT.md and bench/latency.png from the results each
language's benchmark wrote (bench/<lang>/results.json). Every conclusion is a
ratio between figures of one run: polylock over the floor (raw round trips
from the same language) and polylock over each peer library, in latency and
in CPU per operation (the client process's and the lock server's). The
target table's verdicts are computed here from those figures.

BENCH_REPORT_NOTE (optional): a sentence about the run (e.g. the machine was
shared) put in the report's header."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(lang):
    path = os.path.join(HERE, lang, "results.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def row(lang, backend, system, metric, p50, p99, polylock=False, client_cpu=None, server_cpu=None):
    """One figure of one run; CPU in µs per operation (None: not measured)."""
    return {"lang": lang, "backend": backend, "system": system, "metric": metric,
            "p50": p50, "p99": p99, "polylock": polylock, "client_cpu": client_cpu, "server_cpu": server_cpu}


# polylock's own two scripts issued raw on the language's client (no
# polylock code): the protocol's floor, a row of each run but not a peer.
RAW_SCRIPTS = "raw: polylock's scripts, no polylock code"
# Java's uncontended ZooKeeper floor of the same kind (bench/jvm Bench.ZK_RAW_LOCK).
RAW_ZK = "raw: polylock's zookeeper requests pipelined, no polylock code"


# The naive ZooKeeper lock issued raw from Rust: its three requests one after
# another (what a hand-written lock does: issue 16's baseline), and with
# create + getChildren pipelined, the getChildren setting a children watch
# (polylock's own sequence, with no polylock code).
NAIVE_SEQUENTIAL = "naive raw lock (create, getChildren, delete, one after another)"
NAIVE_PIPELINED = "naive raw lock (create+watched getChildren pipelined, delete)"


# The waiter's client's hops in the Redis handoff breakdown (bench/rust
# `handoff_breakdown`, stamped by polylock::trace), in order.
CLIENT_HOPS = (
    ("read_p50_us", "the waiter's pub/sub connection has read the message"),
    ("report_taken_p50_us", "the waiter's executor has it (the connection sent it over)"),
    ("grant_sent_p50_us", "its table's grant is handed to the caller's channel"),
    ("commands_started_p50_us", "the commands the table asked for after the grant (the unsubscribe) are started"),
    ("report_done_p50_us", "their replies' task is spawned: the executor is done with the message"),
)

# The raw floor of a ZooKeeper handoff (bench/rust `zk_handoff_floor`).
ZK_FLOOR = "floor: raw delete to watch event"


def rust_rows(d):
    lat = d.get("latency", d)
    names = {
        "redis PING (raw round trip)": ("redis", "floor: redis PING", "floor", False),
        "redis raw: polylock's acquire + leave scripts, no runtime": ("redis", RAW_SCRIPTS, "uncontended", False),
        "polylock redis acquire+release": ("redis", "polylock", "uncontended", True),
        "polylock redis acquire+release, paced (2 ms pause)": ("redis", "polylock", "paced", True),
        "redis raw: polylock's acquire + leave scripts, no runtime, paced (2 ms pause)":
            ("redis", RAW_SCRIPTS, "paced", False),
        "polylock zookeeper acquire+release, paced (2 ms pause)": ("zookeeper", "polylock", "paced", True),
        "zookeeper naive lock raw: create+watched getChildren pipelined, delete, paced (2 ms pause)":
            ("zookeeper", NAIVE_PIPELINED, "paced", False),
        "polylock redis handoff (waiter in another process)": ("redis", "polylock", "handoff", True),
        "zookeeper exists (raw round trip)": ("zookeeper", "floor: zookeeper exists", "floor", False),
        "zookeeper naive lock raw: create, getChildren, delete, one after another": ("zookeeper", NAIVE_SEQUENTIAL, "uncontended", False),
        "zookeeper naive lock raw: create+watched getChildren pipelined, delete": ("zookeeper", NAIVE_PIPELINED, "uncontended", False),
        "polylock zookeeper acquire+release": ("zookeeper", "polylock", "uncontended", True),
        "polylock zookeeper handoff (waiter in another process)": ("zookeeper", "polylock", "handoff", True),
        "zookeeper raw handoff: delete to the watch event on another session": ("zookeeper", ZK_FLOOR, "handoff", False),
    }
    out = []
    for k, v in lat.items():
        if k in names:
            b, s, m, p = names[k]
            out.append(row("rust", b, s, m, v["p50_us"], v["p99_us"], p,
                           v.get("client_cpu_us"), v.get("server_cpu_us")))
    return out


def python_rows(d):
    out = []

    def add(b, system, metric, m, poly=False):
        out.append(row("python", b, system, metric, m["p50"], m["p99"], poly,
                       m.get("client_cpu_us"), m.get("server_cpu_us")))

    for name, r in d["results"].items():
        b = r["backend"]
        poly = name.startswith("polylock")
        system = "polylock" if poly else name
        if name.startswith("floor"):
            add(b, name, "floor", r["uncontended_us"])
            continue
        if name == "raw-scripts":
            add(b, RAW_SCRIPTS, "uncontended", r["uncontended_us"])
            if r.get("paced_us"):
                add(b, RAW_SCRIPTS, "paced", r["paced_us"])
            continue
        for key, metric in (("uncontended_us", "uncontended"), ("paced_us", "paced"), ("handoff_us", "handoff")):
            if r.get(key):
                add(b, system, metric, r[key], poly)
    return out


def node_rows(d):
    out = []
    for b in ("redis", "zookeeper"):
        for name, r in d.get(b, {}).items():
            poly = name == "polylock"
            for metric in ("uncontended", "paced", "handoff"):
                if metric in r:
                    m = r[metric]
                    out.append(row("node", b, name, metric, m["p50"] * 1000, m["p99"] * 1000, poly,
                                   m.get("clientCpuUs"), m.get("serverCpuUs")))
    floor = d.get("floor", {})
    if "p50" in floor:  # one floor: ioredis PING
        out.append(row("node", "redis", "floor: ioredis PING", "floor", floor["p50"] * 1000, floor["p99"] * 1000,
                       client_cpu=floor.get("clientCpuUs"), server_cpu=floor.get("serverCpuUs")))
    raw = d.get("rawScripts", {})
    if "p50" in raw:
        out.append(row("node", "redis", RAW_SCRIPTS, "uncontended", raw["p50"] * 1000, raw["p99"] * 1000,
                       client_cpu=raw.get("clientCpuUs"), server_cpu=raw.get("serverCpuUs")))
    return out


# Read-write lock and semaphore rows of the java run (bench/jvm Bench.RW_READ,
# RW_HANDOFF, SEM_ONE, SEM_HANDOFF): reported in a section of their own,
# beside the same primitives of the same libraries, never mixed into the
# mutex rows and targets.
RW_OPERATIONS = (
    "uncontended read lock+unlock",
    "handoff writer -> blocked reader (another client)",
    "uncontended permit acquire+release",
    "handoff permit holder -> blocked acquirer (another client)",
)


def jvm_rows(d):
    out = []
    for r in d:
        op, system = r["operation"], r["system"]
        if op in ("throughput", "idle") or op.startswith("server work") or op in RW_OPERATIONS:
            continue
        b = "zookeeper" if ("zk" in system.lower() or "zookeeper" in system.lower() or "curator" in system.lower()) else "redis"
        for mode in MODES:  # "Redisson RLock (redis+cluster)": the mode is the backend
            if system.endswith(f" ({mode})"):
                b, system = mode, system[: -len(f" ({mode})")]
        poly = system.startswith("polylock")
        metric = ("floor" if op.startswith("floor") else "handoff" if op.startswith("handoff")
                  else "paced" if op.startswith("paced") else "uncontended")
        name = "polylock" if poly else (f"floor: {system}" if metric == "floor" else system)
        out.append(row("java", b, name, metric, r["p50_us"], r["p99_us"], poly,
                       r.get("client_cpu_us"), r.get("server_cpu_us")))
    return out


def idle_row(lang, d):
    """{client_core_pct, server_core_pct, locks, seconds} of the language's idle row, or None."""
    if lang == "jvm":
        r = next((r for r in d if r.get("operation") == "idle"), None)
    elif lang == "node":
        i = d.get("idle")
        r = i and {"locks": i["locks"], "seconds": i["seconds"], "client_core_pct": i["clientCorePct"],
                   "server_core_pct": i["serverCorePct"]}
    else:
        r = d.get("idle")
    return r or None


# Each language's peers for the CPU and latency targets (issue 45): the
# libraries a user of that language would pick instead, per backend.
TARGET_PEERS = {
    "python": {"redis": ("redis-py", "python-redis-lock"), "zookeeper": ("kazoo",)},
    "node": {"redis": ("redlock", "redis-semaphore")},
    "java": {"redis": ("Redisson RLock",), "zookeeper": ("Curator InterProcessMutex",)},
}
IDLE_LIMIT_PCT = 0.5


def throughput(lang, d):
    """{backend: acquire+release per second} across 1,000 locks from one client process."""
    if lang == "rust":
        return {b: v for b in ("redis", "zookeeper") if (v := d.get("extra", {}).get(f"throughput_{b}")) is not None}
    if lang == "jvm":
        return {("zookeeper" if "zk" in r["system"] else "redis"): r["ops_per_s"] for r in d
                if r["operation"] == "throughput" and r["system"].startswith("polylock")}
    return d.get("throughput", {})


def jvm_peer_throughput(d):
    """[(backend, peer, polylock ops/s, peer ops/s)]: the JVM run's peers beside polylock, same process and run."""
    ops = {r["system"]: r["ops_per_s"] for r in d if r["operation"] == "throughput"}
    pairs = (("redis", "polylock (redis)", "Redisson RLock"), ("zookeeper", "polylock (zk)", "Curator InterProcessMutex"))
    return [(b, peer, ops[ours], ops[peer]) for b, ours, peer in pairs if ours in ops and peer in ops]


# The JVM run's throughput floor: a lock's ZooKeeper requests sent raw by the
# same threads (bench/jvm's rawZkRequests), the most the server gives a lock.
JVM_ZK_RAW = "floor: a lock's ZooKeeper requests, raw"


def jvm_floor_throughput(d):
    """{backend: ops/s} of the JVM run's raw-request floors."""
    ops = [r["ops_per_s"] for r in d if r["operation"] == "throughput" and r["system"] == JVM_ZK_RAW]
    return {"zookeeper": ops[0]} if ops else {}


def jvm_rw_rows(d):
    """The read-write lock and semaphore rows: [(operation, system, p50, p99, polylock p50 / this p50 or None)]."""
    rows = [r for r in d if r["operation"] in RW_OPERATIONS]
    out = []
    for r in rows:
        zk = "zk" in r["system"] or "Curator" in r["system"]
        ours = next((o for o in rows if o["operation"] == r["operation"]
                     and o["system"] == ("polylock (zk)" if zk else "polylock (redis)")), None)
        ratio = None if r["system"].startswith("polylock") or ours is None else ours["p50_us"] / r["p50_us"]
        out.append((r["operation"], r["system"], r["p50_us"], r["p99_us"], ratio))
    return out


def jvm_server_work(d):
    """The JVM run's Redis server work rows: {(operation, system): row}."""
    return {(r["operation"][len("server work: "):], r["system"]): r for r in d
            if r["operation"].startswith("server work: ")}


# Redis as deployed (JVM rows): each its own backend, compared within itself.
MODES = ("redis+sentinel", "redis+cluster")

# How each language's benchmark drives its one client.
CONCURRENCY = {"rust": "64 tasks", "python": "16 threads, blocking API", "node": "64 async loops",
               "java": "16 threads, lock()/unlock() of random locks"}


def fmt(x):
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def cpu_cell(x):
    return "-" if x is None else f"{x:.1f}"


def issue45_targets(rows, idles, find):
    """The targets of issue 45, each (target, met, figure), from this run's figures."""
    out = []
    for lang, backends in TARGET_PEERS.items():
        for b, names in backends.items():
            for metric, what in (("uncontended", "back to back"), ("paced", "paced")):
                ours = find(lang, b, metric, system="polylock")
                peers = [p for n in names if (p := find(lang, b, metric, system=n)) and p["client_cpu"] is not None]
                if not ours or ours["client_cpu"] is None or not peers:
                    continue
                best = min(peers, key=lambda p: p["client_cpu"])
                out.append((f"{lang}: {b} client CPU per acquire+release, {what}, at most the best peer's",
                            ours["client_cpu"] <= best["client_cpu"],
                            (f"{ours['client_cpu']:.1f} vs {best['client_cpu']:.1f} µs ({best['system']}): "
                             f"{ours['client_cpu'] / best['client_cpu']:.2f}×")))
            for metric in ("uncontended", "handoff"):
                ours = find(lang, b, metric, system="polylock")
                peers = [p for n in names if (p := find(lang, b, metric, system=n))]
                if not ours or not peers:
                    continue
                best = min(peers, key=lambda p: p["p50"])
                figure = f"{ours['p50'] / best['p50']:.2f}× ({fmt(ours['p50'])} vs {fmt(best['p50'])} µs, {best['system']})"
                paced = find(lang, b, "paced", system="polylock")
                if paced and paced["client_cpu"] is not None:
                    # Nothing spinning: the same client's CPU when its caller pauses.
                    figure += f"; polylock's paced client CPU {paced['client_cpu']:.1f} µs per call"
                out.append((f"{lang}: {b} {metric} p50 at most 1.0× the best peer's", ours["p50"] <= best["p50"], figure))
    for lang, i in idles.items():
        out.append((f"{lang}: an idle client holding {i['locks']} locks uses under {IDLE_LIMIT_PCT}% of a core",
                    i["client_core_pct"] < IDLE_LIMIT_PCT,
                    (f"{i['client_core_pct']:.3f}% over {i['seconds']:.0f} s (server "
                     f"{'-' if i.get('server_core_pct') is None else format(i['server_core_pct'], '.3f')}%)")))
    return out


def main():
    rows, extra, missing, tput, jvm, breakdown, idles, quick = [], {}, [], {}, None, None, {}, []
    for lang, conv in (("rust", rust_rows), ("python", python_rows), ("node", node_rows), ("jvm", jvm_rows)):
        d = load(lang)
        if d is None:
            missing.append(lang)
            continue
        try:
            rows += conv(d)
            tput["java" if lang == "jvm" else lang] = throughput(lang, d)
            if (i := idle_row(lang, d)) is not None:
                idles["java" if lang == "jvm" else lang] = i
                if i.get("quick"):
                    quick.append("java")
            if isinstance(d, dict) and (d.get("quick") or d.get("meta", {}).get("quick")
                                        or d.get("settings", {}).get("QUICK")):
                quick.append(lang)
        except (KeyError, TypeError) as e:
            print(f"warning: cannot read bench/{lang}/results.json: {e!r}", file=sys.stderr)
            missing.append(lang)
        if lang == "rust" and isinstance(d, dict):
            extra = d.get("extra", {})
            breakdown = d.get("handoff_breakdown")
        if lang == "jvm" and isinstance(d, list):
            jvm = d

    def _when_and_what():
        """When the report was written, and from which commit of the code."""
        import datetime
        import subprocess

        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        try:
            rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            rev = "unknown"
        return f"{when}, code at commit {rev}, `bench/run`"

    def find(lang, backend, metric, polylock=None, system=None):
        for r in rows:
            if r["lang"] == lang and r["backend"] == backend and r["metric"] == metric:
                if polylock is not None and r["polylock"] != polylock:
                    continue
                if system is not None and r["system"] != system:
                    continue
                return r
        return None

    note = os.environ.get("BENCH_REPORT_NOTE", "").strip()
    md = ["# polylock benchmark report", "",
          f"Run: {_when_and_what()}.", "",
          "Produced by `bench/run` (servers on loopback, one machine of 2 cores); rerun it with `bench/run` (every",
          "language), `bench/run rust node` (some of them), or `bench/run --quick` (every row, few iterations: a smoke",
          "test, not figures to keep). Conclusions are ratios of figures from the same run; absolute times vary",
          "with the machine. Latencies in µs.",
          "",
          *([f"**This run:** {note}", ""] if note else []),
          *([f"**Quick mode** (few iterations, smoke test only): {', '.join(sorted(set(quick)))}.", ""]
            if quick else []),
          "CPU per operation, beside every latency: `client` is the benchmark process's own CPU time, user + sys",
          "of every thread (Rust `getrusage`, Python `time.process_time()`, Node `process.cpuUsage()`, Java the",
          "sum of `/proc/self/task/*/schedstat`, its native threads included), over exactly the timed batches of",
          "the row, divided by its operations (Java's runs in Maven's JVM, `exec:java`: Maven's idle threads",
          "count too); `server` is the lock server's over the same batches: Redis `INFO cpu` (`used_cpu_user`",
          "+ `used_cpu_sys`, its background threads included), ZooKeeper the sum of `/proc/<pid>/task/*/schedstat`",
          "of its JVM. Each batch follows a 5 ms pause counted nowhere, so a previous batch's system winds down",
          "outside it; rows of one group run interleaved, each batch charged to its own system, with every",
          "system of the group connected (idle peers' background threads, e.g. Redisson's Netty loops, cost",
          "whoever runs, alike for all). Java's figure includes the JVM's own threads (JIT, GC). Handoff CPU is",
          "per round: the holder's and the waiter's (another process in Rust, Python and Node; another thread",
          "of the same JVM in Java) over the whole round, the quiet before the release included. Each server",
          "figure includes one `INFO` (Redis) per batch of 100. The servers are the benchmark's own: nothing",
          "else ran on them.",
          "",
          "Backends `redis+sentinel` and `redis+cluster` (java): polylock with `replicas=1` and Redisson with its",
          "Sentinel / Cluster config and default `checkLockSyncedSlaves`, so both have replicas acknowledge each",
          "lock and unlock.",
          "Metric `paced` (every language): uncontended acquire+release, each call after a 2 ms pause, as a",
          "service's calls come; the pause is out of the latency and in the CPU per operation (what a client",
          "burns while its caller is away counts against it). `uncontended` is back to back.",
          "Idle: one polylock client connected and holding 100 Redis locks (default lease, so its renewals run),",
          "making no calls; its process's CPU over the span (10 s; 2 s in quick mode) in % of one core.",
          ""]
    langs = sorted({r["lang"] for r in rows}, key=["rust", "python", "node", "java"].index)
    targets = []
    for lang in langs:
        md += [f"## {lang}", "", ("| backend | metric | system | p50 | p99 | p99/p50 | client CPU µs/op | server CPU µs/op "
                                  "| polylock p50 / this p50 | polylock client CPU / this |"),
               "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted((r for r in rows if r["lang"] == lang), key=lambda r: (r["backend"], ["floor", "uncontended", "paced", "handoff"].index(r["metric"]), not r["polylock"])):
            poly = find(lang, r["backend"], r["metric"] if r["metric"] != "floor" else "uncontended", polylock=True)
            ratio = "" if (r["polylock"] or poly is None) else f"{poly['p50'] / r['p50']:.2f}"
            cpu_ratio = ("" if (r["polylock"] or poly is None or not r["client_cpu"] or poly["client_cpu"] is None)
                         else f"{poly['client_cpu'] / r['client_cpu']:.2f}")
            md.append(f"| {r['backend']} | {r['metric']} | {r['system']} | {fmt(r['p50'])} | {fmt(r['p99'])} "
                      f"| {r['p99'] / r['p50']:.1f} | {cpu_cell(r['client_cpu'])} | {cpu_cell(r['server_cpu'])} | {ratio} "
                      f"| {cpu_ratio} |")
        md.append("")
        if lang in idles:
            i = idles[lang]
            server = "-" if i.get("server_core_pct") is None else f"{i['server_core_pct']:.3f}%"
            md += [(f"Idle ({lang}): {i['locks']} locks held, no calls, {i['seconds']:.0f} s: client "
                    f"{i['client_core_pct']:.3f}% of one core, server {server}."), ""]
        # Targets for this language.
        floor = find(lang, "redis", "floor")
        poly_u = find(lang, "redis", "uncontended", polylock=True)
        if floor and poly_u:
            limit = 1.1 if lang == "rust" else 1.3
            ratio = poly_u["p50"] / (2 * floor["p50"])
            figure = f"{ratio:.2f}× ({fmt(poly_u['p50'])} µs vs 2 × {fmt(floor['p50'])} µs)"
            raw = find(lang, "redis", "uncontended", system=RAW_SCRIPTS)
            if ratio > limit and raw and raw["p50"] > limit * 2 * floor["p50"]:
                # What the server's running the two scripts costs, on the
                # language's own client, before any polylock code.
                figure += (f"; polylock's two scripts issued raw, no polylock code, take "
                           f"{raw['p50'] / (2 * floor['p50']):.2f}× ({fmt(raw['p50'])} µs)")
            targets.append((f"{lang}: Redis uncontended acquire+release within {limit}× two raw round trips",
                            ratio <= limit, figure))
        for b in ("redis", "zookeeper", *MODES):
            for metric in ("uncontended", "paced", "handoff"):
                p = find(lang, b, metric, polylock=True)
                peers = [r for r in rows if r["lang"] == lang and r["backend"] == b and r["metric"] == metric
                         and not r["polylock"]
                         and not r["system"].startswith(("naive", "polylock", "floor", "raw:"))]
                if p and peers:
                    worst = max(p["p50"] / q["p50"] for q in peers)
                    targets.append((f"{lang}: faster than every {b} peer on {metric} p50", worst < 1.0,
                                    ", ".join(f"{p['p50'] / q['p50']:.2f}× {q['system']}" for q in peers)))
                if p and peers and metric == "uncontended":
                    best = min(peers, key=lambda q: q["p99"] / q["p50"])
                    spread = p["p99"] / p["p50"]
                    # Beside the ratio, the p99s themselves: a faster p50 alone
                    # makes the ratio worse.
                    lowest = min(peers, key=lambda q: q["p99"])
                    targets.append((f"{lang}: {b} uncontended p99/p50 no worse than the best peer's",
                                    spread <= best["p99"] / best["p50"],
                                    (f"{spread:.1f} vs {best['p99'] / best['p50']:.1f} ({best['system']}); p99 "
                                     f"{fmt(p['p99'])} µs, the lowest peer p99 {fmt(lowest['p99'])} µs "
                                     f"({lowest['system']})")))
    # Issue 16's ratio targets, each as that issue states it (p50 over p50, same run).
    for lang, b, metric, peer, limit in (
        ("python", "redis", "handoff", "python-redis-lock", 0.5),
        ("python", "redis", "uncontended", "redis-py", 0.6),
        ("node", "redis", "uncontended", "redlock", 0.9),
        ("node", "redis", "uncontended", "redis-semaphore", 0.9),
        ("java", "redis", "uncontended", "Redisson RLock", 0.8),
        ("java", "redis", "handoff", "Redisson RLock", 0.6),
        ("java", "zookeeper", "uncontended", "Curator InterProcessMutex", 0.8),
        ("java", "zookeeper", "handoff", "Curator InterProcessMutex", 0.8),
    ):
        ours, theirs = find(lang, b, metric, system="polylock"), find(lang, b, metric, system=peer)
        if ours and theirs:
            ratio = ours["p50"] / theirs["p50"]
            figure = f"{ratio:.2f}× ({fmt(ours['p50'])} vs {fmt(theirs['p50'])} µs)"
            # An uncontended acquire+release needs at least two round trips
            # (one each). The language's floor ran interleaved with both
            # systems, so a target below two of them is below what any lock
            # on this server could do in this run: say so beside the figure.
            floor, goal = find(lang, b, "floor"), limit * theirs["p50"]
            raw = find(lang, b, metric, system=RAW_ZK if b == "zookeeper" else RAW_SCRIPTS)
            if metric == "uncontended" and floor and goal < 2 * floor["p50"]:
                figure += (f"; the target, {fmt(goal)} µs, is below two of this run's raw round trips "
                           f"(2 × {fmt(floor['p50'])} µs)")
            elif raw and goal < raw["p50"]:
                what = "requests pipelined" if b == "zookeeper" else "two scripts"
                figure += (f"; the target, {fmt(goal)} µs, is below polylock's {what} issued raw "
                           f"in this run ({fmt(raw['p50'])} µs)")
            targets.append((f"{lang}: {b} {metric} p50 at most {limit}× {peer}'s", ratio <= limit, figure))
    rf, ru = find("rust", "redis", "floor"), find("rust", "redis", "uncontended", system="polylock")
    if rf and ru:
        ratio = ru["p50"] / (2 * rf["p50"])
        figure = f"{ratio:.2f}×"
        raw = find("rust", "redis", "uncontended", system=RAW_SCRIPTS)
        if ratio > 1.2 and raw and raw["p50"] > 1.2 * 2 * rf["p50"]:
            # The two scripts, sent raw by the same process, interleaved:
            # what the server's running them costs before any polylock code.
            figure += (f"; polylock's two scripts issued raw, no polylock code, take {raw['p50'] / (2 * rf['p50']):.2f}× "
                       "in this run: the rest of the way to two PINGs is the server running the scripts")
        targets.append(("rust: Redis uncontended acquire+release within 1.2× two PINGs", ratio <= 1.2, figure))
    rf, rh = find("rust", "redis", "floor"), find("rust", "redis", "handoff", polylock=True)
    if rf and rh:
        figure = f"{rh['p50'] / rf['p50']:.1f} round trips"
        cold = (breakdown or {}).get("cold_ping_p50_us")
        if cold and rh["p50"] > 3 * rf["p50"]:
            # Each handoff follows a quiet spell (the waiter must be queued
            # first); a PING after the same quiet is the honest unit.
            figure += (f"; {rh['p50'] / cold:.1f} cold ones: a handoff follows 20 ms of quiet, after which one PING "
                       f"takes {cold / rf['p50']:.1f} hot ones here (see the breakdown above)")
        targets.append(("Redis handoff within 3 raw round trips (Rust)", rh["p50"] <= 3 * rf["p50"], figure))
    zf, zh = find("rust", "zookeeper", "floor"), find("rust", "zookeeper", "handoff", polylock=True)
    if zf and zh:
        figure = f"{zh['p50'] / zf['p50']:.1f} round trips"
        raw = find("rust", "zookeeper", "handoff", system=ZK_FLOOR)
        if raw and raw["p50"] > 3 * zf["p50"]:
            # Any ZooKeeper lock hands over by a delete (a logged write) and
            # the watch event it fires; after the handoff's quiet, that alone
            # is past the target.
            figure += (f"; the target, {fmt(3 * zf['p50'])} µs, is below a raw delete and the watch event it fires "
                       f"after the same quiet, no lock code ({fmt(raw['p50'])} µs, {raw['p50'] / zf['p50']:.1f} round "
                       f"trips), which polylock's handoff takes {zh['p50'] / raw['p50']:.2f}× of")
        targets.append(("ZooKeeper handoff within 3 ZooKeeper round trips (Rust)", zh["p50"] <= 3 * zf["p50"], figure))
    zs = find("rust", "zookeeper", "uncontended", system=NAIVE_SEQUENTIAL)
    zn = find("rust", "zookeeper", "uncontended", system=NAIVE_PIPELINED)
    zp = find("rust", "zookeeper", "uncontended", polylock=True)
    if zn and zp:
        targets.append(("ZooKeeper uncontended no slower than its own requests pipelined raw (Rust)",
                        zp["p50"] <= zn["p50"], f"{zp['p50'] / zn['p50']:.2f}×"))
    if zs and zp:
        figure = f"{zp['p50'] / zs['p50']:.2f}× ({fmt(zp['p50'])} vs {fmt(zs['p50'])} µs)"
        if zn and zn["p50"] > 0.7 * zs["p50"]:
            # Pipelining saves only the getChildren's round trip: the create and
            # the delete are writes (a quorum and a log sync each), which any
            # ZooKeeper lock makes.
            figure += (f"; the target, {fmt(0.7 * zs['p50'])} µs, is below the same requests pipelined raw "
                       f"in this run ({fmt(zn['p50'])} µs: a create and a delete, the two writes of any lock)")
        targets.append(("ZooKeeper uncontended at most 0.7× the naive lock, one request after another (Rust)",
                        zp["p50"] <= 0.7 * zs["p50"], figure))
    if breakdown and rf:
        b = breakdown
        md += ["## Where a Redis handoff's time goes (Rust, waiter in another process)", "",
               ("p50 µs from the holder's release call, over the same handoffs; the message's arrival is stamped in "
               "the waiter's process by a raw `PSUBSCRIBE` socket read by a thread of its own. Each handoff follows "
               "20 ms of quiet, so it wakes idle threads in both processes and in the server; the cold PING is a raw "
               "PING after the same quiet, the floor of one such round trip."), "",
               "| step | at (µs) |", "|---|---:|",
               f"| the handoff's message reaches the waiter's process (release request, script, publish) | {b['pushed_p50_us']:.0f} |",
               f"| the holder's release returns | {b['released_p50_us']:.0f} |",
               *[f"| {step} | {b[key]:.0f} |" for key, step in CLIENT_HOPS if key in b],
               f"| the waiter's acquire returns | {b['granted_p50_us']:.0f} |",
               f"| (the waiter's client, from the message to the caller) | {b['granted_p50_us'] - b['pushed_p50_us']:.0f} |",
               f"| hot PING / cold PING | {rf['p50']:.0f} / {b['cold_ping_p50_us']:.0f} |",
               "",
               (f"The handoff is {b['granted_p50_us'] / rf['p50']:.1f} hot PINGs and "
               f"{b['granted_p50_us'] / b['cold_ping_p50_us']:.1f} cold ones: its floor is a cold request and a "
               "cold push, about two cold round trips."), ""]
    herd = {k: v for k, v in extra.items() if k.startswith("herd_")}
    if herd:
        md += ["## Herd: server work per handoff as waiters grow (Rust clients)", "",
               "| waiters | Redis client requests | Redis commands incl. inside scripts | ZooKeeper packets received |",
               "|---:|---:|---:|---:|"]
        for k in sorted(herd, key=lambda k: int(k.split("_")[1])):
            v = herd[k]
            md.append(f"| {k.split('_')[1]} | {v.get('redis_requests', 0):.1f} | {v.get('redis_commands', 0):.1f} | {v.get('zookeeper_packets', 0):.1f} |")
        md.append("")
        vals = [v.get("redis_requests", 0) for v in herd.values()] + [v.get("zookeeper_packets", 0) for v in herd.values()]
        by_waiters = sorted(herd, key=lambda k: int(k.split("_")[1]))
        first, last = herd[by_waiters[0]], herd[by_waiters[-1]]
        flat = all(last[k] <= first[k] * 1.25 + 0.5 for k in first)
        targets.append(("Server commands per handoff independent of the number of waiters", flat and bool(vals),
                        f"1 → {by_waiters[-1].split('_')[1]} waiters: "
                        + ", ".join(f"{k} {first[k]:.1f} → {last[k]:.1f}" for k in first)))
    if any(tput.values()):
        md += ["## Throughput: acquire+release per second across 1,000 distinct locks from one client process", "",
               "| language | concurrency | Redis ops/s | ZooKeeper ops/s |", "|---|---|---:|---:|"]
        for lang, t in tput.items():
            if t:
                cells = [f"{t[b]:.0f}" if b in t else "" for b in ("redis", "zookeeper")]
                md.append(f"| {lang} | {CONCURRENCY[lang]} | {' | '.join(cells)} |")
        md.append("")
    if jvm:
        peers = jvm_peer_throughput(jvm)
        if peers:
            md += ["## Throughput beside the peers (java, one process, 16 threads on 1,000 locks, same run)", "",
                   ("polylock: one `LockClient` per backend; Redisson: one `RedissonClient`, default config (single "
                    "server, default codec and thread pools); Curator: one `CuratorFramework` shared by the threads, an "
                    "`InterProcessMutex` per name. Every lock object is shared by the threads (each is owned per "
                    "thread)."), "",
                   ("Floor (ZooKeeper): polylock's requests, sent raw by the same threads on the same names with no "
                    "library and no waiting: an ephemeral sequential create with getChildren pipelined behind it "
                    "(setting a children watch, as polylock's does; Curator's sets none), then a delete. Two writes "
                    "per lock: what the server gives any lock driven by these 16 threads on this machine."), "",
                   "| backend | peer | polylock ops/s | peer ops/s | polylock / peer | floor ops/s | polylock / floor |",
                   "|---|---|---:|---:|---:|---:|---:|"]
            floors = jvm_floor_throughput(jvm)
            for b, peer, ours, theirs in peers:
                floor = floors.get(b)
                cells = f"{floor:.0f} | {ours / floor:.2f}× |" if floor else " | |"
                md.append(f"| {b} | {peer} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f}× | {cells}")
                figure = f"{ours / theirs:.2f}× ({ours:.0f} vs {theirs:.0f} ops/s)"
                if floor and 1.5 * theirs > floor:
                    figure += (f"; the target, {1.5 * theirs:.0f} ops/s, is above the same requests sent raw in this "
                               f"run ({floor:.0f} ops/s)")
                targets.append((f"java: throughput over 1,000 locks at least 1.5× {peer}", ours >= 1.5 * theirs, figure))
                if floor:
                    targets.append((f"java: {b} throughput over 1,000 locks at least 0.9× its raw requests'",
                                    ours >= 0.9 * floor, f"{ours / floor:.2f}× ({ours:.0f} vs {floor:.0f} ops/s)"))
            md.append("")
        rw = jvm_rw_rows(jvm)
        if rw:
            md += ["## Read-write locks and semaphores (java, beside Curator's and Redisson's, same run)", "",
                   "| operation | system | p50 | p99 | polylock p50 / this p50 |", "|---|---|---:|---:|---:|"]
            md += [f"| {op} | {system} | {fmt(p50)} | {fmt(p99)} | {'' if ratio is None else f'{ratio:.2f}'} |"
                   for op, system, p50, p99, ratio in rw]
            md.append("")
        work = jvm_server_work(jvm)
        if work:
            md += ["## Redis server work per operation (java clients, one Redis server)", "",
                   ("`INFO commandstats` deltas: calls and usec of every command, those run inside scripts included "
                    "(a script's usec already holds its commands' usec, as the server counts them), `INFO` left out; "
                    "each snapshot after 200 ms without a command (the method of runtime/tests/server_work.rs). "
                    "Uncontended: the mean of a run in a row, each lock+unlock followed by the same 1 ms pause, the "
                    "median of 7 such runs that polylock and Redisson take in turn (paced, because a server's usec "
                    "per command grows the colder its caches: back to back, the faster client would keep the server "
                    "warmer and be charged less for the same commands); queue (a waiter's `lock()` until it waits) "
                    "and handoff (the holder's unlock until the waiter holds): the median of single ones, the two "
                    "systems taking turns, each between quiet snapshots (so a single script's usec there includes a "
                    "cold server's start). Server CPU (uncontended only): `INFO cpu`, user + sys, over the same "
                    "runs, the median run's: all the server did, what commandstats leaves out included (reading "
                    "and parsing a request, hashing an `EVAL`'s source, answering), the snapshots' own `INFO` calls "
                    "alike for both."), "",
                   ("| operation | system | commands | usec | polylock / Redisson usec | server CPU µs "
                    "| polylock / Redisson CPU | commands run |"),
                   "|---|---|---:|---:|---:|---:|---:|---|"]
            for (op, system), r in work.items():
                other = work.get((op, "Redisson RLock"))
                ours = system.startswith("polylock") and other
                ratio = f"{r['usec'] / other['usec']:.2f}×" if ours else ""
                cpu = f"{r['cpu_us']:.1f}" if "cpu_us" in r else ""
                cpu_ratio = f"{r['cpu_us'] / other['cpu_us']:.2f}×" if ours and "cpu_us" in r and "cpu_us" in other else ""
                cmds = " ".join(f"{c}={v[0]:g}" for c, v in r["commands"].items())
                md.append(f"| {op} | {system} | {r['calls']:g} | {r['usec']:.1f} | {ratio} | {cpu} | {cpu_ratio} "
                          f"| {cmds} |")
            md.append("")
            for op, label in (("uncontended lock+unlock", "uncontended acquire+release"),
                              ("handoff (release to grant)", "handoff")):
                ours, theirs = work.get((op, "polylock (redis)")), work.get((op, "Redisson RLock"))
                if ours and theirs:
                    targets.append((f"java: Redis server usec per {label} at most Redisson RLock's",
                                    ours["usec"] <= theirs["usec"],
                                    (f"{ours['usec'] / theirs['usec']:.2f}× ({ours['usec']:.1f} vs "
                                     f"{theirs['usec']:.1f} usec; {ours['calls']:g} vs {theirs['calls']:g} commands)")))
                if ours and theirs and "cpu_us" in ours and "cpu_us" in theirs:
                    targets.append((f"java: Redis server CPU per {label} at most Redisson RLock's",
                                    ours["cpu_us"] <= theirs["cpu_us"],
                                    (f"{ours['cpu_us'] / theirs['cpu_us']:.2f}× ({ours['cpu_us']:.1f} vs "
                                     f"{theirs['cpu_us']:.1f} µs of `INFO cpu`, everything the server did)")))
    if "memory" in extra:
        m = extra["memory"]
        summary = (
            f"{m['bytes_per_held']:.0f} bytes per held lock, {m['bytes_per_waiting']:.0f} bytes per waiting lock; "
            f"{m['threads_before']} threads before and {m['threads_renewing_10k']} while 10,000 leases are renewed "
            "(one timer task renews every lease: no thread or task per lock)."
        )
        md += ["## Client memory and threads (Rust, Redis, 10,000 locks)", "", summary, ""]
    md += ["## CPU and latency targets (issue 45)", "",
           ("Each computed from this run's figures. Peers: Python redis-py and python-redis-lock (Redis), kazoo "
            "(ZooKeeper); Node redlock and redis-semaphore over ioredis; Java Redisson (Redis) and Curator "
            "(ZooKeeper). polylock is Node's native addon (polylock-wasm is reported, not targeted). The latency "
            "targets' figures carry polylock's paced client CPU: a client that spun to be fast would show it there."),
           "", "| target | met | figure |", "|---|---|---|"]
    md += [f"| {t} | {'met' if ok else '**not met**'} | {fig} |" for t, ok, fig in issue45_targets(rows, idles, find)]
    md += ["", "## Targets", "", "| target | met | figure |", "|---|---|---|"]
    md += [f"| {t} | {'yes' if ok else '**no**'} | {fig} |" for t, ok, fig in targets]
    if missing:
        md += ["", f"Not in this report (no results): {', '.join(missing)}."]
    md += ["", "![latency distributions](latency.png)", ""]
    with open(os.path.join(HERE, "REPORT.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    chart(rows)


def chart(rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
        return
    panels = [(lang, b) for lang in ["rust", "python", "node", "java"] for b in ("redis", "zookeeper", *MODES)
              if any(r["lang"] == lang and r["backend"] == b for r in rows)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.2 * len(panels)), squeeze=False)
    for ax, (lang, b) in zip(axes[:, 0], panels):
        rs = sorted((r for r in rows if r["lang"] == lang and r["backend"] == b),
                    key=lambda r: (["floor", "uncontended", "paced", "handoff"].index(r["metric"]), not r["polylock"]))
        labels = [r["system"] if r["metric"] == "floor" else f"{r['metric']}: {r['system']}" for r in rs]
        y = range(len(rs))
        ax.barh(y, [r["p99"] for r in rs], color=["#f4a582" if r["polylock"] else "#cccccc" for r in rs], label="p99")
        ax.barh(y, [r["p50"] for r in rs], color=["#ca0020" if r["polylock"] else "#666666" for r in rs], label="p50")
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xscale("log")
        ax.set_title(f"{lang} / {b}: latency µs (dark p50, light p99; red = polylock)", fontsize=9)
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "latency.png"), dpi=90)


if __name__ == "__main__":
    main()
