"""The failover rows of the fault suite (faults.py): a Sentinel master
SIGKILLed, a Redis Cluster master SIGKILLed, a Sentinel master SIGSTOPped
into a stale primary.

Each trial: while the lock is held and awaited, the master serving it fails;
the replica that will take over is read (ROLE and the lock key's PTTL) until
it is promoted, when nobody can write to it, so its last reading as a replica
says whether the new master has the grant of the holder at the fault. After
the next grant (the recovery time) the servers are healed and checked whole
before the next trial. Checks: every holder of a grant the new master lacked
is told it lost the lock; the first grant after the failover has a token above
every earlier one. faults.py adds the row's stale-write and count checks and
the strictly increasing tokens of the accepted writes.

The Sentinel rows run in two configurations (docs/deployment.md, "Redis
Sentinel: the strict configuration"): the default one (`replicas=1` in the
URL) and the strict one: `replicas=all` in the URL, and on every data node
`min-replicas-to-write` = the two replicas with `min-replicas-max-lag` 1 s, so
that a master short of a replica grants and renews nothing. The strict set
refuses writes from the fault until the failed node is back as a replica, so
there the set is healed before the next grant is awaited.
"""

import os
import signal
import socket
import subprocess
import time

HOST = "127.0.0.1"
SERVICES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "services")
WATCH_EVERY_S = 0.02
PROMOTION_BOUND_S = 20
HEAL_BOUND_S = 40
# The workers' critical section on these rows: past the 1 s lease (the holder
# at the fault, whose renewals fail, must be told it lost the lock) and, with
# the fault a quarter into it, over before a promoted replica can grant (the
# sentinels wait 1 s, a cluster node 1.5 s, before failing a master over): a
# holder that writes after being told would otherwise cause a lost update no
# fencing can catch (faults.py's replica row has the same reasoning).
HOLD_MS = 1200
# The strict Sentinel configuration's server side: every replica of the set
# (it has two) connected and acknowledging within a second, or the master
# refuses writes (NOREPLICAS).
STRICT_MIN_REPLICAS = 2
STRICT_MAX_LAG_S = 1


class RedisError(Exception):
    pass


class Redis:
    """A minimal RESP2 connection to a loopback server (the suite needs no client library)."""

    def __init__(self, port, timeout=1.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def call(self, *args):
        words = [str(a).encode() for a in args]
        self.sock.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
        return self._reply()

    def _reply(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.reader.read(n + 2)[:-2].decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError(f"unexpected reply {line!r}")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def call(port, *args):
    """One command on a fresh connection; None when the server does not answer."""
    try:
        conn = Redis(port)
    except OSError:
        return None
    try:
        return conn.call(*args)
    except (OSError, ConnectionError, RedisError):
        return None
    finally:
        conn.close()


def info(port, section):
    """INFO `section` as a dict ({} when the server does not answer)."""
    text = call(port, "INFO", section) or ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def services(*args):
    out = subprocess.run(["bash", SERVICES, *args], capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/services {' '.join(args)}: {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout.strip()


def wait_until(what, check, bound_s):
    """Polls `check` until it returns a true value; raises naming `what` past the bound."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(WATCH_EVERY_S)
    raise RuntimeError(f"{what} not within {bound_s} s")


def url_ports(url):
    return [int(h.rsplit(":", 1)[1]) for h in url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split(",")]


class Promotion:
    """What the watch saw: the promoted node, when, and when the grant held at
    the fault lapsed there (None: the new master still had it)."""

    def __init__(self, port, seen_ns, lapsed_ns):
        self.port, self.seen_ns, self.lapsed_ns = port, seen_ns, lapsed_ns


def lapse(readings, seen_ns):
    """When the lock key lapsed on a replica promoted at `seen_ns`, from its
    (time, PTTL) readings as a replica (None if it was still there): its
    expiry, or the first reading if no reading ever found it."""
    present = [(t, pttl) for t, pttl in readings if pttl != -2]
    if not present:
        return readings[0][0] if readings else seen_ns
    t, pttl = present[-1]
    if pttl == -1 or readings[-1][1] != -2 and t + pttl * 1_000_000 >= seen_ns:
        return None
    return t + pttl * 1_000_000


def watch_promotion(candidates, key, cluster):
    """Reads ROLE and the PTTL of `key` on every candidate replica until one
    says master (until then nobody can write to it)."""
    conns, readings = {}, {port: [] for port in candidates}
    deadline = time.monotonic() + PROMOTION_BOUND_S
    try:
        while time.monotonic() < deadline:
            for port in candidates:
                try:
                    if port not in conns:
                        conns[port] = Redis(port)
                        if cluster:
                            conns[port].call("READONLY")
                    role = conns[port].call("ROLE")[0]
                    if role == "master":
                        seen = time.monotonic_ns()
                        return Promotion(port, seen, lapse(readings[port], seen))
                    t = time.monotonic_ns()
                    readings[port].append((t, conns[port].call("PTTL", key)))
                except (OSError, ConnectionError, RedisError):
                    conn = conns.pop(port, None)
                    if conn is not None:
                        conn.close()
            time.sleep(WATCH_EVERY_S)
    finally:
        for c in conns.values():
            c.close()
    return None


class SentinelTarget:
    """The Sentinel set of POLYLOCK_TEST_SENTINEL; `stale` pauses the master
    instead of killing it; `strict` runs the set in the strict configuration
    (see the module docs) and puts it back to the default at `finish`."""

    def __init__(self, url, stale, strict=False):
        self.sentinels = url_ports(url)
        self.name = url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
        self.stale = stale
        self.strict = strict
        self.heal_before_next_grant = strict
        self.cluster = False
        self.data_nodes = set()

    def master(self):
        for p in self.sentinels:
            addr = call(p, "SENTINEL", "get-master-addr-by-name", self.name)
            if addr:
                return int(addr[1])
        return None

    def sentinel_field(self, port, field):
        reply = call(port, "SENTINEL", "master", self.name) or []
        fields = dict(zip(reply[::2], reply[1::2]))
        return fields.get(field)

    def online_replicas(self, master):
        rep = info(master, "replication")
        return [
            int(v.split("port=", 1)[1].split(",", 1)[0])
            for k, v in rep.items()
            if k.startswith("slave") and "state=online" in v
        ]

    def moved(self):
        """Every sentinel names one master, not the failed one."""
        named = {(call(p, "SENTINEL", "get-master-addr-by-name", self.name) or [None, None])[1] for p in self.sentinels}
        return len(named) == 1 and None not in named and int(named.pop()) != self.failed

    def whole(self):
        """Master and two online replicas, as every sentinel sees it."""
        master = self.master()
        if master is None or len(self.online_replicas(master)) != 2:
            return False
        for p in self.sentinels:
            addr = call(p, "SENTINEL", "get-master-addr-by-name", self.name)
            if not addr or int(addr[1]) != master:
                return False
            if self.sentinel_field(p, "num-slaves") != "2" or self.sentinel_field(p, "flags") != "master":
                return False
        return True

    def prepare(self, lock):
        wait_until("the Sentinel set whole", self.whole, HEAL_BOUND_S)
        master = self.master()
        self.failed = master
        self.pid = int(info(master, "server")["process_id"])
        replicas = self.online_replicas(master)
        self.data_nodes |= {master, *replicas}
        if self.strict:
            # On every node, since any may be promoted; again each trial,
            # since a restarted node starts from its command line.
            self.min_replicas(self.data_nodes, STRICT_MIN_REPLICAS, STRICT_MAX_LAG_S)
        return replicas

    def min_replicas(self, ports, count, max_lag_s):
        for port in ports:
            for param, value in (("min-replicas-to-write", count), ("min-replicas-max-lag", max_lag_s)):
                if call(port, "CONFIG", "SET", param, value) != "OK":
                    raise RuntimeError(f"CONFIG SET {param} {value} on {port} failed")

    def finish(self):
        """Back to the default configuration (Redis's own defaults)."""
        if self.strict:
            wait_until("the Sentinel set whole", self.whole, HEAL_BOUND_S)
            self.min_replicas(self.data_nodes, 0, 10)

    def inject(self):
        os.kill(self.pid, signal.SIGSTOP if self.stale else signal.SIGKILL)

    def after_promotion(self, t0_ns):
        if not self.stale:
            return
        # Paused past the failover timeout, then resumed: a primary still
        # serving its old data to whoever still talks to it, until the
        # sentinels make it a replica of the new master.
        timeout_ms = int(self.sentinel_field(self.sentinels[0], "failover-timeout") or 0)
        time.sleep(max(0.0, t0_ns / 1e9 + timeout_ms / 1000 + 0.1 - time.monotonic_ns() / 1e9))
        self.resume()
        self.resumed_ns = time.monotonic_ns()

    def resume(self):
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def heal(self):
        """Returns the stale-primary window in ms (None for a kill)."""
        window = None
        if self.stale:

            def demoted():
                return (call(self.failed, "ROLE") or ["?"])[0] == "slave"

            wait_until("the stale primary demoted", demoted, HEAL_BOUND_S)
            window = (time.monotonic_ns() - self.resumed_ns) / 1e6
        else:
            # `start --sentinel` restarts the node as a replica of the master the
            # first answering sentinel names: one not yet told of the failover
            # would have it restarted as an empty master.
            wait_until("every sentinel naming the new master", self.moved, HEAL_BOUND_S)
            services("start", "--sentinel")
        wait_until("the Sentinel set whole again", self.whole, HEAL_BOUND_S)
        return window


class ClusterTarget:
    """The Redis Cluster of POLYLOCK_TEST_CLUSTER: the master of the lock's slot is killed."""

    stale = False
    cluster = True
    heal_before_next_grant = False

    def __init__(self, url):
        self.seeds = url_ports(url)
        self.known = []

    def nodes(self):
        """[(id, port, flags, master id, link state, slot ranges)] from the first answering seed or node."""
        for p in self.seeds + self.known:
            text = call(p, "CLUSTER", "NODES")
            if text:
                rows = []
                for line in text.splitlines():
                    f = line.split()
                    rows.append((f[0], int(f[1].split("@")[0].rsplit(":", 1)[1]), f[2], f[3], f[7], f[8:]))
                self.known = [r[1] for r in rows]
                return rows
        return []

    def whole(self):
        """Every slot served, every node connected, every replica's link up."""
        nodes = self.nodes()
        if len(nodes) != 6 or any("fail" in n[2] or n[4] != "connected" for n in nodes):
            return False
        cinfo = dict(line.split(":", 1) for line in (call(nodes[0][1], "CLUSTER", "INFO") or "").splitlines() if ":" in line)
        if cinfo.get("cluster_state") != "ok" or cinfo.get("cluster_slots_ok") != "16384":
            return False
        replicas = [n for n in nodes if "slave" in n[2]]
        return len(replicas) == 3 and all(info(n[1], "replication").get("master_link_status") == "up" for n in replicas)

    def prepare(self, lock):
        wait_until("the cluster whole", self.whole, HEAL_BOUND_S)
        slot = call(self.seeds[0], "CLUSTER", "KEYSLOT", lock)
        nodes = self.nodes()
        owner = next(n for n in nodes if "master" in n[2] and any(_in_range(slot, r) for r in n[5]))
        self.failed = owner[1]
        self.pid = int(info(self.failed, "server")["process_id"])
        return [n[1] for n in nodes if n[3] == owner[0]]

    def inject(self):
        os.kill(self.pid, signal.SIGKILL)

    def finish(self):
        pass

    def after_promotion(self, t0_ns):
        pass

    def resume(self):
        pass

    def heal(self):
        services("cluster-node-start", str(self.failed))
        wait_until("the cluster whole again", self.whole, HEAL_BOUND_S)
        return None


def _in_range(slot, spec):
    if spec.startswith("["):  # a slot being migrated
        return False
    lo, _, hi = spec.partition("-")
    return int(lo) <= slot <= int(hi or lo)


def run_failover(target, pool, trials, result, bound_s):
    """Runs `trials` failovers of `target` under the pool's lock; fills `result`."""
    result.lacked = result.told = result.ambiguous = 0
    windows = []
    for _ in range(trials):
        try:
            candidates = target.prepare(pool.lock)
        except (RuntimeError, StopIteration) as e:
            result.failures.append(f"trial {result.trials + 1}: {e}")
            return
        got = pool.wait_grant(30, after_ns=time.monotonic_ns())
        if got is None:
            result.failures.append("no grant within 30 s before a trial")
            return
        result.trials += 1
        time.sleep(pool.hold_ms / 4000)  # inside the critical section, waiters queued
        t0 = time.monotonic_ns()
        result.faults_ns.append(t0)
        try:
            target.inject()
            promotion = watch_promotion(candidates, pool.lock, target.cluster)
            target.after_promotion(t0)
        finally:
            target.resume()
        if promotion is None:
            result.failures.append(f"trial {result.trials}: no replica of {candidates} promoted")
            return

        def heal():
            try:
                window = target.heal()
            except RuntimeError as e:
                result.failures.append(f"trial {result.trials}: {e}")
                return False
            if window is not None:
                windows.append(window)
            return True

        # A strict set grants nothing until the failed node is back (grants
        # made meanwhile are queued and read in order all the same).
        if target.heal_before_next_grant and not heal():
            return
        nxt = pool.wait_grant(bound_s, after_ns=t0)
        if nxt is None:
            result.failures.append(f"trial {result.trials}: no grant within {bound_s} s after the fault")
        else:
            result.recoveries.append(nxt[1]["t_ns"] - t0)
            before = [g["token"] for g in pool.grants if g["t_ns"] < t0]
            if before and nxt[1]["token"] <= max(before):
                result.failures.append(f"trial {result.trials}: token {nxt[1]['token']} after {max(before)}")
        if not target.heal_before_next_grant and not heal():
            return
        check_holders(pool, t0, promotion, result)
    result.notes.append(
        f"holders of a grant the new master lacked: {result.lacked}, told Lost: {result.told} "
        f"(released as it lapsed: {result.ambiguous})"
    )
    if windows:
        result.notes.append(f"stale primary until demoted: worst {max(windows):.0f} ms")


def check_holders(pool, t0, promotion, result):
    """Every holder at the fault still holding when its grant lapsed on the
    promoted node is told Lost. (One that released before, inside its lease,
    ended its grant in time: the unlock the new master no longer needs is no
    loss.)"""
    if promotion.lapsed_ns is None:
        return
    pool.drain(0.2)
    recorded_before = {r["token"] for r in pool.records if r["_seen_ns"] < t0}
    for g in [g for g in pool.grants if g["t_ns"] < t0 and g["token"] not in recorded_before]:
        rec = pool.wait_record(g["token"], 20)
        if rec is None:
            result.failures.append(f"trial {result.trials}: no record from {g['worker']} (token {g['token']})")
            continue
        if rec["_seen_ns"] < promotion.lapsed_ns:
            continue  # released before the lapse
        if rec["end_ns"] <= promotion.lapsed_ns:
            result.ambiguous += 1  # released around the lapse: either answer is right
            continue
        result.lacked += 1
        if rec["lost"]:
            result.told += 1
        else:
            result.failures.append(
                f"trial {result.trials}: {g['worker']} held past the lapse of its grant on the new master "
                "and was not told Lost"
            )


def strict_token_breaks(records):
    """Accepted writes, in the order they ended, whose token is not above the one before."""
    accepted = sorted((r for r in records if r["accepted"]), key=lambda r: r["end_ns"])
    return sum(1 for a, b in zip(accepted, accepted[1:]) if b["token"] <= a["token"])
