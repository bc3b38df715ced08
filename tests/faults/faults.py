#!/usr/bin/env python3
"""Cross-language safety under faults.

Worker processes in every available language (demo/workers/<lang>, plus the
Rust worker) contend on one lock; each critical section does a
read-modify-write on a resource that refuses stale fencing tokens and prints
a record (see demo/README.md). Faults are injected while locks are held and
awaited, each repeated --trials times, on loopback servers only:

  sigkill      SIGKILL of the holder: the next waiter is granted within the
               lease (Redis) or the session timeout (ZooKeeper)
  sigstop      SIGSTOP of the holder for twice the lease / session timeout,
               then SIGCONT: its write is refused and it learns it lost
  cut-hold     the holder's connections to the lock server are cut
  cut-acquire  a waiter's connections to the lock server are cut
  restart      redis-server restarted (no persistence) while held and awaited
  replica      the lock's Redis made a replica of another for two seconds
               (REPLICAOF: it answers READONLY and drops its data once synced;
               then REPLICAOF NO ONE) while held and awaited: the holder holds
               past its lease inside the spell, so it is told it lost the lock
  restore-rdb  redis-server SIGKILLed and restarted from an RDB snapshot taken
               while the lock was held, after more grants: the lock and its
               fence counter go back; tokens must still grow
  leader-kill  the leader of the 3-node ZooKeeper ensemble killed (then restarted)
  election-sigstop, election-leader-kill
               sigstop and leader-kill with the workers campaigning in a
               leader election instead of locking (the term is the token):
               a deposed leader's write is refused, it is told it lost the
               leadership, and the next participant leads. Workers of the
               languages in ELECTION_LANGS, three of each
  sem-sigkill  the workers take permits of one semaphore of SEM_PERMITS permits
               instead of the lock (N hold at once, so no resource write); a
               permit holder SIGKILLed per trial: never more than N inside at
               once (records, and a killed holder's grant up to its kill), the
               others go on being granted, free + held permits on the server
               stay N throughout (Redis: no permit lost or made up), and once
               every worker is gone and its lease or session is over no
               permit is held (on Redis and ZooKeeper)

Failover rows (--failover-trials each; skipped when their servers are not
configured; on Sentinel with replica acknowledgement, replicas=1, and each
Sentinel row again in the strict configuration, "redis sentinel strict":
replicas=all and the data nodes' min-replicas-to-write 2, min-replicas-max-lag
1, see failover.py; the cluster at its default, replicas=0):

  sentinel-kill           the Sentinel set's master SIGKILLed while held and
                          awaited; a replica promoted; the old master
                          restarted as a replica before the next trial
  cluster-kill            the Redis Cluster master owning the lock's slot
                          SIGKILLed, its replica promoted; the node restarted
                          and the cluster whole again before the next trial
  sentinel-stale-primary  the Sentinel master SIGSTOPped past the failover
                          timeout, a replica promoted, then SIGCONTed: a stale
                          primary until the sentinels demote it

Each failover row also checks (tests/faults/failover.py): the tokens the
resource accepted strictly increase across every failover; every holder at
the fault still holding when its grant lapsed on the promoted replica (read
from the replica up to its promotion, when nobody can write to it) is told
it lost the lock.

Every loop is bounded in count and time. The checks: no accepted write from
a stale token; the resource's count equals the accepted writes; every
recovery within its bound. Overlapping critical sections are counted and
reported (a paused holder overlaps its successor: fencing is what saves it).

Histories: every worker records its operations (acquire invoked and
returned with its token, each fenced read and write attempted and accepted
or refused, each loss it was told of, release) in a directory per row
(POLYLOCK_HISTORY_DIR); at the end of each row tests/history's histcheck
checks them with Porcupine against the fenced-register model (every row that
writes the resource) and the mutual-exclusion model (a lock has one place,
the semaphore SEM_PERMITS; a holder past the limit must have been told it
lost its grant). A violation fails the row and prints the minimal failing
history; the histories of a failed run are kept. Across a failover the
default Sentinel configuration and a cluster promise fencing only
(docs/guarantees.md): there a mutual-exclusion violation is reported
("VIOLATION (not promised)"), not a failure; the strict Sentinel rows
require both models.

Prints a Markdown table (and writes it to a temporary file, or --out). The
long mode (--long: 200 trials per row, failover rows included) alone writes
tests/faults/RESULTS.md, so that a normal run leaves the tree clean. Exit 0
if every check holds. Needs POLYLOCK_TEST_REDIS, POLYLOCK_TEST_REDIS2,
POLYLOCK_TEST_ZK and POLYLOCK_TEST_ZK_ENSEMBLE (scripts/services start
--ensemble --redis2); the failover rows POLYLOCK_TEST_SENTINEL and
POLYLOCK_TEST_CLUSTER (--sentinel --cluster).
"""

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from itertools import pairwise

import failover

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVICES = os.path.join(ROOT, "scripts", "services")
LEASE_MS = 1000
SESSION_MS = 2000
HOLD_MS = 60
# The replica row: the holder's critical section outlasts its lease (so it
# must be told it lost the lock, whose data the spell drops) and ends well
# inside the spell, during which nobody can be granted: its write lands before
# a successor reads the resource (a holder that writes after being told it
# lost the lock would otherwise cause a lost update no fencing can catch).
REPLICA_HOLD_MS = 1200
REPLICA_SPELL_S = 2.0
# The semaphore row: permits of one semaphore, fewer than the workers.
SEM_PERMITS = 2
# The worker languages whose workers campaign with --election (the election rows).
ELECTION_LANGS = {"rust"}
# The long mode's trials per row, failover rows included.
LONG_TRIALS = 200
RESULTS = os.path.join(ROOT, "tests", "faults", "RESULTS.md")


def now_ns():
    return time.monotonic_ns()


def redis_cli(url, *args):
    out = subprocess.run(["redis-cli", "-u", url, *args], capture_output=True, text=True, timeout=30, check=False)
    return out.stdout.strip()


def port_of(url):
    return int(url.split("://", 1)[1].split("/", 1)[0].split(",")[0].rsplit(":", 1)[1])


class Worker:
    """One worker process; its lines go to the pool's queue."""

    def __init__(self, pool, lang, cmd, index):
        self.pool, self.lang, self.index = pool, lang, index
        self.id = f"{lang}-{index}"
        args = [
            *cmd, "--url", pool.url, "--lock", pool.lock, "--resource-url", pool.resource_url,
            "--rounds", "1000000", "--id", self.id, "--hold-ms", str(pool.hold_ms),
            "--lease-ms", str(LEASE_MS), "--session-ms", str(SESSION_MS),
        ]
        if pool.permits:
            args += ["--permits", str(pool.permits)]
        if pool.election:
            args += ["--election"]
        env = {**os.environ, "POLYLOCK_HISTORY_DIR": pool.history_dir}
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, env=env
        )
        self.pid = self.proc.pid
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                ev["_seen_ns"] = now_ns()
                self.pool.events.put((self, ev))

    def signal(self, sig):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self):
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Pool:
    """Workers of every language contending on one lock on one server."""

    def __init__(self, backend, url, langs, resource_url, history_dir, hold_ms=HOLD_MS, permits=None, election=False):
        self.backend, self.url, self.resource_url = backend, url, resource_url
        self.hold_ms, self.permits, self.election = hold_ms, permits, election
        self.history_dir = history_dir
        os.makedirs(history_dir, exist_ok=True)
        self.lock = f"faults/{backend.replace(' ', '-')}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.resource = f"demo:resource:{'zookeeper' if url.startswith('zk') else 'redis'}:{self.lock}"
        self.events = queue.Queue()
        self.records, self.grants = [], []
        self.langs = langs
        self.workers = [Worker(self, lang, cmd, i) for i, (lang, cmd) in enumerate(langs)]
        self.holder = None  # (worker, grant event) of the newest grant without a record

    def respawn(self, w):
        w.stop()
        lang, cmd = self.langs[w.index]
        nw = Worker(self, lang, cmd, w.index)
        self.workers[w.index] = nw
        return nw

    def next_event(self, deadline_ns):
        left = (deadline_ns - now_ns()) / 1e9
        if left <= 0:
            return None
        try:
            w, ev = self.events.get(timeout=left)
        except queue.Empty:
            return None
        if ev.get("event") == "grant":
            self.grants.append(ev)
            self.holder = (w, ev)
        else:
            self.records.append(ev)
            if self.holder and self.holder[1]["token"] == ev["token"]:
                self.holder = None
        return w, ev

    def wait_grant(self, timeout_s, exclude=None, by=None, after_ns=0):
        """The next grant made after `after_ns` (to a worker other than
        `exclude`, or to `by`), or None."""
        deadline = now_ns() + int(timeout_s * 1e9)
        while True:
            got = self.next_event(deadline)
            if got is None:
                return None
            w, ev = got
            if ev.get("event") != "grant":
                continue
            if exclude is not None and w.pid == exclude.pid:
                continue
            if by is not None and w.pid != by.pid:
                continue
            if ev["t_ns"] < after_ns:
                continue
            return w, ev

    def wait_record(self, token, timeout_s):
        deadline = now_ns() + int(timeout_s * 1e9)
        for r in self.records:
            if r["token"] == token:
                return r
        while True:
            got = self.next_event(deadline)
            if got is None:
                return None
            if got[1].get("event") != "grant" and got[1]["token"] == token:
                return got[1]

    def drain(self, seconds):
        deadline = now_ns() + int(seconds * 1e9)
        while self.next_event(deadline) is not None:
            pass

    def close(self):
        for w in self.workers:
            w.stop()
        self.drain(0.5)

    def verify(self):
        """Stale writes accepted, overlaps, and the count check."""
        accepted = sorted((r for r in self.records if r["accepted"]), key=lambda r: r["end_ns"])
        stale, top = 0, 0
        for r in accepted:
            if r["token"] < top:
                stale += 1
            top = max(top, r["token"])
        spans = sorted(self.records, key=lambda r: r["start_ns"])
        overlaps = sum(1 for a, b in pairwise(spans) if b["start_ns"] < a["end_ns"])
        count = int(redis_cli(self.resource_url, "HGET", self.resource, "count") or 0)
        acc = int(redis_cli(self.resource_url, "HGET", self.resource, "accepted") or 0)
        refused = int(redis_cli(self.resource_url, "HGET", self.resource, "refused") or 0)
        redis_cli(self.resource_url, "DEL", self.resource)
        problems = []
        if count != acc:
            problems.append(f"resource count {count} but {acc} accepted writes (a lost update)")
        return stale, overlaps, refused, problems


def services(*args):
    """Runs a scripts/services subcommand; a failure is an error of the suite."""
    subprocess.run(["bash", SERVICES, *args], capture_output=True, timeout=60, check=True)


def cut_connections(pid, port):
    """Closes every TCP connection of `pid` to 127.0.0.1:`port` (ss -K)."""
    out = subprocess.run(["ss", "-tnpH", "dst", f"127.0.0.1:{port}"], capture_output=True, text=True, check=False).stdout
    killed = 0
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        local = line.split()[3]
        sport = local.rsplit(":", 1)[1]
        subprocess.run(
            ["ss", "-K", "src", "127.0.0.1", "sport", "=", f":{sport}", "dst", "127.0.0.1", "dport", "=", f":{port}"],
            capture_output=True,
            check=False,
        )
        killed += 1
    return killed


class Result:
    def __init__(self, fault, backend):
        self.fault, self.backend = fault, backend
        self.trials = 0
        self.recoveries = []
        self.failures = []
        self.stale = self.overlaps = self.refused = 0
        self.lacked = self.told = None  # failover rows: holders of a grant the new master lacked, told Lost
        self.notes = []
        self.faults_ns = []  # failover rows: when each fault was injected (monotonic ns)
        self.skipped = None
        self.seconds = 0.0
        self.checker = "-"  # histcheck's verdict per model

    def check_history(self, histcheck, history_dir, models, not_promised=()):
        """Runs histcheck (Porcupine) over the row's histories; a violation,
        an undecided check or a missing history fails the row, except a
        violation of a model in `not_promised` (what the row's configuration
        does not promise: it is reported in the table, the row still passes)."""
        try:
            out = subprocess.run(
                [histcheck, "-models", models, history_dir], capture_output=True, text=True, timeout=1800, check=False
            )
            text, failed = out.stdout + out.stderr, out.returncode != 0
        except subprocess.TimeoutExpired:
            text, failed = "histcheck did not finish within 30 minutes\n", True
        verdicts = {}
        for line in text.splitlines():
            if line.startswith("histcheck ") and ": " in line:
                model = line.split()[1]
                state = line.rsplit(": ", 1)[1].split()[0]
                if verdicts.get(model) in (None, "linearizable"):
                    verdicts[model] = state
        short = {"linearizable": "ok", "VIOLATION": "VIOLATION", "UNDECIDED": "undecided"}
        self.checker = ", ".join(
            f"{m} {short.get(v, v)}{' (not promised)' if m in not_promised and v == 'VIOLATION' else ''}"
            for m, v in sorted(verdicts.items())
        ) or "no history"
        promised = [m for m in models.split(",") if m not in not_promised]
        if failed and all(verdicts.get(m) == "linearizable" for m in promised):
            print(text, end="", flush=True)
            failed = False
        if failed:
            self.failures.append(f"histcheck ({self.checker}), see {history_dir}")
            print(text, end="", flush=True)
        return failed

    def row(self):
        if self.skipped:
            return f"| {self.fault} | {self.backend} | 0 | - | - | - | - | - | - | - | skipped ({self.skipped}) |"
        worst = f"{max(self.recoveries) / 1e6:.0f}" if self.recoveries else "-"
        lost = "-" if self.lacked is None else f"{self.lacked} / {self.told}"
        return (
            f"| {self.fault} | {self.backend} | {self.trials} | {self.stale} | {self.refused} | "
            f"{self.overlaps} | {lost} | {worst} | {self.checker} | {self.seconds:.0f} | "
            f"{'ok' if not self.failures else 'FAILED'} |"
        )


def replica_spell(url, primary_url):
    """Makes the Redis at `url` a replica of `primary_url` for REPLICA_SPELL_S
    seconds (at least until it has synced, which drops its data), then a
    primary again. Returns whether it synced."""
    started = time.monotonic()
    delay = redis_cli(primary_url, "CONFIG", "GET", "repl-diskless-sync-delay").splitlines()[-1:] or ["5"]
    redis_cli(primary_url, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
    # Loaded from the socket: no dump.rdb left behind for the restart row to load.
    redis_cli(url, "CONFIG", "SET", "repl-diskless-load", "swapdb")
    host, port = primary_url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    synced = False
    try:
        redis_cli(url, "REPLICAOF", host, port)
        while time.monotonic() - started < 10:
            if "master_link_status:up" in redis_cli(url, "INFO", "replication"):
                synced = True
                break
            time.sleep(0.02)
        time.sleep(max(0.0, REPLICA_SPELL_S - (time.monotonic() - started)))
    finally:
        redis_cli(url, "REPLICAOF", "NO", "ONE")
        redis_cli(url, "CONFIG", "SET", "repl-diskless-load", "disabled")
        redis_cli(primary_url, "CONFIG", "SET", "repl-diskless-sync-delay", delay[0])
    return synced


def write_called_after(pool, w, token, t_ns):
    """Whether worker `w` began its resource write under `token` after
    `t_ns`, by its recorded history (None: no such write recorded)."""
    path = os.path.join(pool.history_dir, f"{w.id}-{w.pid}.jsonl")
    try:
        with open(path) as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("op") == "write" and ev.get("kind") == "call" and ev.get("token") == token:
                    return ev["t_ns"] > t_ns
    except OSError:
        pass
    return None


def run_fault(fault, pool, trials, result, bound_s, lock_port):
    """Runs `trials` trials of one fault on a pool; fills `result`."""
    redone = 0
    while result.trials < trials:
        # A grant made from now on: one read from the queue could be a
        # section long over (the reader lags on a busy machine).
        got = pool.wait_grant(30, after_ns=now_ns())
        if got is None:
            result.failures.append("no grant within 30 s before a trial")
            return
        w, grant = got
        result.trials += 1
        time.sleep(HOLD_MS / 4000)  # inside the critical section
        t0 = now_ns()
        victim = w
        if fault == "sigkill":
            w.signal(signal.SIGKILL)
            nxt = pool.wait_grant(bound_s, exclude=w, after_ns=t0)
            pool.respawn(w)
        elif fault == "sigstop":
            w.signal(signal.SIGSTOP)
            nxt = pool.wait_grant(bound_s, exclude=w, after_ns=t0)
            pause = 2 * (LEASE_MS if pool.backend == "redis" else SESSION_MS) / 1000
            time.sleep(max(0.0, pause - (now_ns() - t0) / 1e9))
            w.signal(signal.SIGCONT)
            rec = pool.wait_record(grant["token"], 15)
            if rec is not None and not write_called_after(pool, w, grant["token"], t0) and redone < trials:
                # The pause came after the holder's write had begun (a busy
                # machine ran the section past the quarter before the
                # signal): not a paused holder's write, so the trial is run again.
                result.trials -= 1
                redone += 1
                continue
            if rec is None:
                result.failures.append(f"{w.id}: no record after SIGCONT")
            else:
                if rec["accepted"]:
                    result.failures.append(f"{w.id}: a paused holder's write was accepted")
                if not rec["lost"]:
                    result.failures.append(f"{w.id}: a paused holder was not told it lost the lock")
        elif fault == "cut-hold":
            cut_connections(w.pid, lock_port)
            nxt = pool.wait_grant(bound_s, after_ns=t0)
        elif fault == "cut-acquire":
            waiters = [x for x in pool.workers if x.pid != w.pid]
            victim = waiters[result.trials % len(waiters)]
            cut_connections(victim.pid, lock_port)
            nxt = pool.wait_grant(bound_s, by=victim, after_ns=t0)
        elif fault == "restart":
            subprocess.run(["bash", SERVICES, "restart-redis", "redis2"], capture_output=True, timeout=60, check=False)
            nxt = pool.wait_grant(bound_s, after_ns=now_ns())
        elif fault == "replica":
            if not replica_spell(pool.url, pool.resource_url):
                result.failures.append(f"trial {result.trials}: the replica never synced")
            nxt = pool.wait_grant(bound_s, after_ns=now_ns())
            rec = pool.wait_record(grant["token"], 15)
            if rec is None:
                result.failures.append(f"{w.id}: no record from the holder across the replica spell")
            elif not rec["lost"]:
                result.failures.append(f"{w.id}: a holder whose lock was dropped was not told it lost it")
        elif fault == "restore-rdb":
            services("snapshot-redis", "redis2")
            # More grants after the snapshot: what the restore takes back.
            for _ in range(2):
                if pool.wait_grant(bound_s, after_ns=now_ns()) is None:
                    result.failures.append(f"trial {result.trials}: no grant after the snapshot")
            t0 = now_ns()
            services("restore-redis", "redis2")
            nxt = pool.wait_grant(bound_s, after_ns=now_ns())
            if nxt is not None:
                before = max(g["token"] for g in pool.grants if g is not nxt[1])
                if nxt[1]["token"] <= before:
                    result.failures.append(f"trial {result.trials}: token {nxt[1]['token']} after {before}")
        elif fault == "leader-kill":
            leader = subprocess.run(["bash", SERVICES, "zk-leader"], capture_output=True, text=True, timeout=60, check=False)
            port = leader.stdout.strip()
            subprocess.run(["bash", SERVICES, "kill-zk", port], capture_output=True, timeout=60, check=False)
            nxt = pool.wait_grant(bound_s, after_ns=now_ns())
            subprocess.run(["bash", SERVICES, "start-zk", port], capture_output=True, timeout=120, check=False)
        else:
            raise ValueError(fault)
        if redone:
            result.notes = [f"{redone} trials run again (paused after the write had begun)"]
        if nxt is None:
            who = f" to {victim.id}" if fault == "cut-acquire" else ""
            result.failures.append(f"trial {result.trials}: no grant{who} within {bound_s} s after the fault")
        else:
            result.recoveries.append(nxt[1]["t_ns"] - t0)


def status_permits(url, name):
    """(held, total) permits of a semaphore as `polylock status` reads them (either backend)."""
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    cli = os.path.join(target, "release", "polylock")
    out = subprocess.run(
        [cli, "status", name, "--url", url], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    for line in out.splitlines():
        if line.endswith(" permits held"):
            held, _, total = line.split(": ", 1)[1].split()[:3]
            return int(held), int(total)
    raise RuntimeError(f"polylock status {name}: {out!r}")


def permits_on_server(url, name):
    """(free, held) permits of a Redis semaphore: the counter at the name and
    the set of held permit ids (expired ones included until a script reclaims them)."""
    free = redis_cli(url, "GET", name).strip()
    held = redis_cli(url, "ZCARD", "{" + name + "}:timeout").strip()
    return int(free or 0), int(held or 0)


def most_inside(pool, killed):
    """The most permit holders inside at once: every record's section, and
    each killed holder's grant without a record up to its kill."""
    spans = [(r["start_ns"], r["end_ns"]) for r in pool.records]
    recorded = {r["token"] for r in pool.records}
    spans += [(g["t_ns"], at) for g, at in killed if g["token"] not in recorded]
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    inside = most = 0
    for _, step in edges:
        inside += step
        most = max(most, inside)
    return most


def run_semaphore_row(pool, trials, result, bound_s):
    """sem-sigkill: see the module docs."""
    # Every language's worker up and granted once first (a JVM starts slowly).
    deadline = now_ns() + 60 * 10**9
    while {lang for lang, _ in pool.langs} - {g["lang"] for g in pool.grants}:
        if pool.next_event(deadline) is None:
            break
    killed = []
    for _ in range(trials):
        got = pool.wait_grant(30)
        if got is None:
            result.failures.append("no permit granted within 30 s before a trial")
            return
        w, grant = got
        result.trials += 1
        time.sleep(pool.hold_ms / 4000)  # inside the critical section
        t0 = now_ns()
        w.signal(signal.SIGKILL)
        killed.append((grant, t0))
        nxt = pool.wait_grant(bound_s, exclude=w, after_ns=t0)
        pool.respawn(w)
        if nxt is None:
            result.failures.append(f"trial {result.trials}: no permit granted within {bound_s} s after the kill")
        else:
            result.recoveries.append(nxt[1]["t_ns"] - t0)
        if pool.backend == "redis":
            free, held = permits_on_server(pool.url, pool.lock)
            if free + held != pool.permits:
                result.failures.append(f"trial {result.trials}: {free} free + {held} held permits, not {pool.permits}")
    silent = sorted({lang for lang, _ in pool.langs} - {g["lang"] for g in pool.grants})
    if silent:
        result.failures.append(f"no permit granted to the {', '.join(silent)} workers")
    most = most_inside(pool, killed)
    result.notes.append(f"at most {most} of {pool.permits} inside")
    result.overlaps = most
    if most > pool.permits:
        result.failures.append(f"{most} permit holders inside at once, {pool.permits} permits")
    for w in pool.workers:
        w.stop()
    # Every worker is gone: once its lease (Redis) or session (ZooKeeper) is
    # over, no permit may be left held (a status read counts the live ones).
    time.sleep((LEASE_MS if pool.backend == "redis" else SESSION_MS) / 1000 + 1.0)
    held, total = status_permits(pool.url, pool.lock)
    if held or total != pool.permits:
        result.failures.append(f"{held} of {total} permits still held after every holder died")


def available_workers(only=None):
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    langs = [("rust", [os.path.join(target, "release", "examples", "demo_worker")])]
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "polylock", "--example", "demo_worker"], check=True, cwd=ROOT
    )
    # `polylock status`, which the semaphore row reads the server's permits with.
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "polylock-cli"], check=True, cwd=ROOT)
    for lang in ("python", "node", "java"):
        if only is not None and lang not in only:
            continue
        run = os.path.join(ROOT, "demo", "workers", lang, "run")
        if os.access(run, os.X_OK) and subprocess.run([run, "--prepare"], cwd=ROOT, check=False).returncode == 0:
            langs.append((lang, [run]))
    return langs


# What the Porcupine column means, under every table.
CHECKER_NOTE = (
    "Porcupine check: tests/history's histcheck over every worker's recorded operations, per row: "
    "`fence` is the fenced-register model (a read or write with token t goes through only if no "
    "greater token went through before; a read returns the count the accepted writes left), "
    "`mutex` the mutual-exclusion model (one holder of a lock, at most the permits of the semaphore, "
    "unless the extra holder was told it lost its grant); `ok`: linearizable. `(not promised)`: a "
    "failover row's overlap of holders, which its configuration's guarantee (fencing) allows; reported, "
    "not a failure.\n"
)


def build_histcheck(into):
    """Builds tests/history's histcheck (Porcupine, from the Go module proxy) into `into`."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary = os.path.join(into, "histcheck")
    subprocess.run([go, "build", "-o", binary, "./cmd/histcheck"], cwd=os.path.join(ROOT, "tests", "history"), check=True)
    return binary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--trials", type=int, help=f"trials per fault and backend (default 20; {LONG_TRIALS} in the long mode)"
    )
    ap.add_argument(
        "--failover-trials",
        type=int,
        help="trials per failover row (sentinel-kill, cluster-kill, sentinel-stale-primary; "
        f"default half of --trials; ./scripts/test passes 10, 8 under CI; {LONG_TRIALS} in the long mode)",
    )
    ap.add_argument(
        "--long",
        action="store_true",
        help=f"the long mode: {LONG_TRIALS} trials per row, failover rows included (unless given), "
        "and the table written to tests/faults/RESULTS.md (unless --out)",
    )
    ap.add_argument(
        "--only",
        help="comma-separated faults to run (a Sentinel row in one configuration: sentinel-kill:strict, "
        "sentinel-stale-primary:default, ...)",
    )
    ap.add_argument("--langs", help="comma-separated worker languages besides rust (default: every one available)")
    ap.add_argument("--out", help="where to write the table (default: a temporary file; the long mode: RESULTS.md)")
    ap.add_argument("--dump", help="directory to write each failover row's grants, records and fault times to")
    ap.add_argument("--histcheck", help="tests/history's histcheck binary (default: built here with go)")
    ap.add_argument("--history-dir", help="where the workers record their histories (default: a temporary directory)")
    args = ap.parse_args()
    if args.trials is None:
        args.trials = LONG_TRIALS if args.long else 20
    if args.failover_trials is None and args.long:
        args.failover_trials = LONG_TRIALS
    history_root = args.history_dir or tempfile.mkdtemp(prefix="polylock-fault-histories-")
    os.makedirs(history_root, exist_ok=True)
    histcheck = args.histcheck or build_histcheck(history_root)
    env = os.environ
    resource_url = env["POLYLOCK_TEST_REDIS"]
    langs = available_workers(None if args.langs is None else set(args.langs.split(",")))
    print(f"workers: {', '.join(lang for lang, _ in langs)}", flush=True)
    plan = [
        # fault, backend label, lock server URL, recovery bound (s)
        ("sigkill", "redis", env["POLYLOCK_TEST_REDIS2"], LEASE_MS / 1000 + 2),
        ("sigstop", "redis", env["POLYLOCK_TEST_REDIS2"], LEASE_MS / 1000 + 2),
        ("cut-hold", "redis", env["POLYLOCK_TEST_REDIS2"], 10),
        ("cut-acquire", "redis", env["POLYLOCK_TEST_REDIS2"], 20),
        ("restart", "redis", env["POLYLOCK_TEST_REDIS2"], 10),
        ("replica", "redis", env["POLYLOCK_TEST_REDIS2"], 10),
        ("restore-rdb", "redis", env["POLYLOCK_TEST_REDIS2"], 10),
        ("sigkill", "zookeeper", env["POLYLOCK_TEST_ZK"], SESSION_MS / 1000 + 3),
        ("sigstop", "zookeeper", env["POLYLOCK_TEST_ZK"], SESSION_MS / 1000 + 3),
        ("cut-hold", "zookeeper", env["POLYLOCK_TEST_ZK"], 10),
        ("cut-acquire", "zookeeper", env["POLYLOCK_TEST_ZK"], 20),
        ("leader-kill", "zookeeper ensemble", env["POLYLOCK_TEST_ZK_ENSEMBLE"], 15),
        ("sem-sigkill", "redis", env["POLYLOCK_TEST_REDIS2"], LEASE_MS / 1000 + 2),
        ("sem-sigkill", "zookeeper", env["POLYLOCK_TEST_ZK"], SESSION_MS / 1000 + 3),
        ("election-sigstop", "redis", env["POLYLOCK_TEST_REDIS2"], LEASE_MS / 1000 + 2),
        ("election-sigstop", "zookeeper", env["POLYLOCK_TEST_ZK"], SESSION_MS / 1000 + 3),
        ("election-leader-kill", "zookeeper ensemble", env["POLYLOCK_TEST_ZK_ENSEMBLE"], 15),
    ]
    failover_trials = args.failover_trials if args.failover_trials is not None else max(1, args.trials // 2)
    sentinel, cluster = env.get("POLYLOCK_TEST_SENTINEL"), env.get("POLYLOCK_TEST_CLUSTER")
    strict = None
    if sentinel:
        # Replica acknowledgement on (WAIT 1 after every grant, renewal and hand-off). The cluster
        # keeps its default (replicas=0): with one replica per master, WAIT 1 could not be met
        # between a master's death and its restart.
        sentinel, strict = (f"{sentinel}{'&' if '?' in sentinel else '?'}replicas={k}" for k in ("1", "all"))
    # fault, backend label, lock server URL (None: not configured), recovery bound (s), the servers to fail.
    # The strict rows' recovery counts the failed node's return (see failover.py).
    failovers = [
        ("sentinel-kill", "redis sentinel", sentinel, 15, lambda url: failover.SentinelTarget(url, stale=False)),
        ("sentinel-kill", "redis sentinel strict", strict, 15,
         lambda url: failover.SentinelTarget(url, stale=False, strict=True)),
        ("cluster-kill", "redis cluster", cluster, 15, failover.ClusterTarget),
        ("sentinel-stale-primary", "redis sentinel", sentinel, 15, lambda url: failover.SentinelTarget(url, stale=True)),
        ("sentinel-stale-primary", "redis sentinel strict", strict, 15,
         lambda url: failover.SentinelTarget(url, stale=True, strict=True)),
    ]
    if args.only:
        keep = set(args.only.split(","))
        plan = [p for p in plan if p[0] in keep]
        # A Sentinel row alone in one configuration: sentinel-kill:strict, sentinel-kill:default.
        failovers = [
            p for p in failovers if p[0] in keep or f"{p[0]}:{'strict' if 'strict' in p[1] else 'default'}" in keep
        ]
    results = []
    started = time.time()

    def row_dir(fault, backend):
        return os.path.join(history_root, f"{len(results):02d}-{fault}-{backend.replace(' ', '-')}")

    for fault, backend, url, bound in plan:
        res = Result(fault, backend)
        semaphore = fault.startswith("sem-")
        election = fault.startswith("election-")
        hold = REPLICA_HOLD_MS if fault == "replica" else HOLD_MS
        # The semaphore row: two workers per language (at least four), more than there are permits.
        workers = (langs * 4)[: max(4, 2 * len(langs))] if semaphore else langs
        if election:
            workers = [lang for lang in langs if lang[0] in ELECTION_LANGS] * 3
        history_dir = row_dir(fault, backend)
        pool = Pool(
            backend, url, workers, resource_url, history_dir, hold,
            permits=SEM_PERMITS if semaphore else None, election=election,
        )
        t = time.time()
        try:
            if pool.wait_grant(60) is None:
                res.failures.append("the workers never got the lock")
            elif semaphore:
                run_semaphore_row(pool, args.trials, res, bound)
            elif election:
                # The lock rows' faults, on leaderships; half the trials (a pause costs seconds).
                run_fault(fault.removeprefix("election-"), pool, max(3, args.trials // 2), res, bound, port_of(url))
            else:
                run_fault(fault, pool, args.trials, res, bound, port_of(url))
        finally:
            pool.close()
        if not semaphore:
            # The resource's checks; the semaphore row has N writers at once and checks its own.
            res.stale, res.overlaps, res.refused, problems = pool.verify()
            res.failures += problems
        if res.stale:
            res.failures.append(f"{res.stale} stale writes accepted")
        # Semaphore holders do not write the resource: exclusion (N places) only.
        res.check_history(histcheck, history_dir, "mutex" if semaphore else "fence,mutex")
        res.seconds = time.time() - t
        results.append(res)
        notes = "".join(f"{n}, " for n in res.notes)
        print(f"{fault} on {backend}: {res.trials} trials in {res.seconds:.0f} s, {notes}"
              f"{'ok' if not res.failures else 'FAILED: ' + '; '.join(res.failures[:3])}", flush=True)
    for fault, backend, url, bound, make_target in failovers:
        res = Result(fault, backend)
        results.append(res)
        if url is None:
            res.skipped = "POLYLOCK_TEST_CLUSTER not set" if "cluster" in fault else "POLYLOCK_TEST_SENTINEL not set"
            print(f"{fault} on {backend}: skipped, {res.skipped} (scripts/services start --sentinel --cluster)", flush=True)
            continue
        history_dir = row_dir(fault, backend)
        pool = Pool(backend, url, langs, resource_url, history_dir, failover.HOLD_MS)
        t = time.time()
        target = make_target(url)
        try:
            if pool.wait_grant(60) is None:
                res.failures.append("the workers never got the lock")
            else:
                failover.run_failover(target, pool, failover_trials, res, bound)
        finally:
            pool.close()
            try:
                target.finish()
            except RuntimeError as e:
                res.failures.append(f"putting the servers back: {e}")
        breaks = failover.strict_token_breaks(pool.records)
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, f"{fault}-{backend.replace(' ', '-')}.json"), "w") as f:
                json.dump({"faults_ns": res.faults_ns, "grants": pool.grants, "records": pool.records}, f)
        res.stale, res.overlaps, res.refused, problems = pool.verify()
        res.failures += problems
        if res.stale:
            res.failures.append(f"{res.stale} stale writes accepted")
        if breaks:
            res.failures.append(f"{breaks} accepted writes whose token was not above the one before")
        if res.lacked != res.told:
            res.failures.append(f"{res.lacked} holders of a grant the new master lacked, {res.told} told Lost")
        # Across a failover the default Sentinel configuration and a cluster promise fencing only
        # (docs/guarantees.md): two holders are counted and checked for, but fail the row only in
        # the strict Sentinel configuration.
        not_promised = ("mutex",) if backend in ("redis sentinel", "redis cluster") else ()
        res.check_history(histcheck, history_dir, "fence,mutex", not_promised)
        res.seconds = time.time() - t
        print(f"{fault} on {backend}: {res.trials} trials in {res.seconds:.0f} s, {'; '.join(res.notes)}, "
              f"{'ok' if not res.failures else 'FAILED: ' + '; '.join(res.failures[:3])}", flush=True)
    table = [
        "| fault | backend | trials | stale writes accepted | stale writes refused | overlapping sections (fencing off) "
        "| holders of a grant the new master lacked / told Lost | worst recovery ms | Porcupine check "
        "| row s | result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ] + [r.row() for r in results]
    text = (
        f"Workers: {', '.join(lang for lang, _ in langs)}; Redis lease {LEASE_MS} ms, ZooKeeper session "
        f"{SESSION_MS} ms, critical section {HOLD_MS} ms; {args.trials} trials per row, {failover_trials} per failover row "
        f"(critical section {failover.HOLD_MS} ms there, replicas=1 on Sentinel; \"redis sentinel strict\": "
        f"replicas=all, min-replicas-to-write {failover.STRICT_MIN_REPLICAS}, min-replicas-max-lag "
        f"{failover.STRICT_MAX_LAG_S} s); sem-sigkill: {SEM_PERMITS} permits, "
        f"its overlapping column is the most permit holders inside at once; "
        f"{time.time() - started:.0f} s in all.\n\n" + "\n".join(table) + "\n\n" + CHECKER_NOTE
    )
    print(text)
    failed = [r for r in results if r.failures]
    skipped = [r for r in results if r.skipped]
    passed = len(results) - len(failed) - len(skipped)
    out = args.out or (RESULTS if args.long else tempfile.mkstemp(prefix="polylock-faults-", suffix=".md")[1])
    with open(out, "w") as f:
        f.write("# Cross-language fault suite: the long mode's latest run\n\n`tests/run --long` (or "
                "`python3 tests/faults/faults.py --long`).\n\n" + text)
    print(f"table written to {out}")
    if failed:
        print(f"histories kept in {history_root}")
    elif not args.history_dir:
        shutil.rmtree(history_root, ignore_errors=True)
    print(f"faults: {passed} passed, {len(failed)} failed, {len(skipped)} skipped")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
