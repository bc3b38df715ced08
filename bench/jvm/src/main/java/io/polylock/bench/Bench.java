package io.polylock.bench;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.IntFunction;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.polylock.DistributedLock;
import io.polylock.LockClient;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import redis.clients.jedis.Jedis;

/**
 * polylock against Curator (ZooKeeper) and Redisson (Redis), and the floors:
 * one ZooKeeper {@code exists}, one Redis {@code PING}. Uncontended
 * lock+unlock latency, and handoff latency (the holder's unlock until a
 * waiter blocked in lock() on another client and another thread of this JVM
 * returns). Latencies in microseconds. The same latencies for polylock and
 * Redisson on a Sentinel set and on a Redis Cluster, when
 * POLYLOCK_TEST_SENTINEL / POLYLOCK_TEST_CLUSTER name them. Then the Redis
 * server's work per operation for polylock and Redisson ({@link ServerWork};
 * environment BENCH_ONLY_SERVER_WORK=1: print it, write nothing), and
 * throughput: lock+unlock per second across 1,000 distinct locks from one
 * process, 16 threads on random names, for polylock (Redis and ZooKeeper),
 * Redisson and Curator (BENCH_ONLY_THROUGHPUT=1: print it, write nothing).
 * And paced: polylock's, Redisson's and Curator's lock+unlock each after a
 * 2 ms pause, as a service's calls come (BENCH_ONLY_PACED=1: print it, write
 * nothing). Every latency row also has its CPU per operation, this JVM's and
 * the lock server's ({@link Cpu}); and the idle row: one polylock client
 * holding 100 locks, making no calls, in % of one core. BENCH_QUICK=1: every
 * row with few iterations, a smoke test.
 */
public final class Bench {
    static final boolean QUICK = "1".equals(System.getenv("BENCH_QUICK"));
    static final int WARMUP = QUICK ? 30 : 300;
    static final int ITERATIONS = QUICK ? 100 : 2000;
    static final int HANDOFF_WARMUP = QUICK ? 3 : 20;
    static final int HANDOFFS = QUICK ? 10 : 200;
    static final int TP_LOCKS = 1000;
    static final int TP_THREADS = 16;
    static final int TP_WARMUP_MS = QUICK ? 300 : 1000;
    static final int TP_MS = QUICK ? 1000 : 5000;
    static final int WORK_ROUNDS = QUICK ? 3 : 7;
    static final int WORK_UNCONTENDED = QUICK ? 50 : 200;
    static final int WORK_HANDOFFS = QUICK ? 5 : 30;
    static final int IDLE_S = QUICK ? 2 : 10;
    /**
     * Paced rows: each lock+unlock after this pause, as a service's calls
     * come: out of the latency, in the CPU per operation (what a client
     * burns while its caller is away counts against it).
     */
    static final int PACE_MS = 2;
    static final int PACED_ITERATIONS = QUICK ? 50 : 400;
    static final String PACED = "paced lock+unlock (each after a 2 ms pause)";
    /** Before each timed batch, a pause counted nowhere: what the previous batch's system still did ends there. */
    static final int SETTLE_MS = 5;

    /** A lock as the harness drives it: one thread calls lock/unlock. */
    interface Locker {
        void lock() throws Exception;

        void unlock() throws Exception;
    }

    interface Op {
        void run() throws Exception;
    }

    /** Latency (µs) and CPU per operation (µs; NaN: not measured), this JVM's and the lock server's. */
    record Row(String operation, String system, double p50, double p99, int n, double clientCpuUs, double serverCpuUs) {}

    /** One polylock client holding {@code locks} locks, no calls: CPU in % of one core. */
    record Idle(int locks, double seconds, double clientCorePct, double serverCorePct) {}

    record Throughput(String system, double opsPerS) {}

    public static void main(String[] args) throws Exception {
        Path out = Path.of(args.length > 0 ? args[0] : ".");
        String redisUrl = env("POLYLOCK_TEST_REDIS");
        String zkUrl = env("POLYLOCK_TEST_ZK");
        String zkConnect = zkUrl.replaceFirst("^zk://", "");
        URI redis = URI.create(redisUrl);
        String run = "bench-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
        if ("1".equals(System.getenv("BENCH_ONLY_SERVER_WORK"))) {
            serverWork(redisUrl, run + "-work");
            System.exit(0);
        }
        if ("1".equals(System.getenv("BENCH_ONLY_THROUGHPUT"))) {
            throughputs(redisUrl, zkUrl, zkConnect, run + "-tp");
            System.exit(0);
        }
        Cpu.Server redisCpu = Cpu.redis(redisUrl);
        Cpu.Server zkCpu = Cpu.zookeeper();
        if ("1".equals(System.getenv("BENCH_ONLY_PACED"))) {
            paced(redisUrl, redisCpu, zkUrl, zkConnect, zkCpu, run + "-paced"); // each row prints itself
            System.exit(0);
        }
        List<Row> rows = new ArrayList<>();

        // Each group of uncontended rows (a floor, polylock, its peer) runs
        // interleaved (see interleaved()); handoffs run one system at a time.
        // ---- ZooKeeper ----
        ZooKeeper zk = plainZk(zkConnect);
        CuratorFramework ca = curator(zkConnect);
        CuratorFramework cb = curator(zkConnect);
        try (LockClient a = LockClient.connect(zkUrl); LockClient b = LockClient.connect(zkUrl)) {
            String name = "/" + run + "-zk";
            String cname = "/" + run + "-curator";
            Map<String, Row> u = interleaved(zkCpu, "uncontended lock+unlock", Map.of(
                    "ZooKeeper exists", () -> zk.exists("/", false),
                    ZK_RAW_LOCK, lockUnlock(rawZkRequests(zk, "/" + run + "-zk-raw")),
                    "polylock (zk)", lockUnlock(polylock(a, name)),
                    "Curator InterProcessMutex", lockUnlock(curatorLocker(ca, cname))));
            rows.add(floorRow(u.get("ZooKeeper exists")));
            rows.add(u.get(ZK_RAW_LOCK));
            rows.add(u.get("polylock (zk)"));
            rows.add(handoff(zkCpu, "polylock (zk)", polylock(a, name + "-h"), polylock(b, name + "-h")));
            rows.add(u.get("Curator InterProcessMutex"));
            rows.add(handoff(zkCpu, "Curator InterProcessMutex", curatorLocker(ca, cname + "-h"), curatorLocker(cb, cname + "-h")));
            // Read-write locks: a read lock+unlock alone, and a writer's release taken by a blocked reader.
            u = interleaved(zkCpu, RW_READ, Map.of(
                    "polylock (zk)", lockUnlock(locker(a.newReadWriteLock(name + "-rw").readLock())),
                    "Curator InterProcessReadWriteLock",
                    lockUnlock(curatorLocker(new InterProcessReadWriteLock(ca, cname + "-rw").readLock()))));
            rows.add(u.get("polylock (zk)"));
            rows.add(handoff(zkCpu, RW_HANDOFF, "polylock (zk)", locker(a.newReadWriteLock(name + "-rwh").writeLock()),
                    locker(b.newReadWriteLock(name + "-rwh").readLock())));
            rows.add(u.get("Curator InterProcessReadWriteLock"));
            rows.add(handoff(zkCpu, RW_HANDOFF, "Curator InterProcessReadWriteLock",
                    curatorLocker(new InterProcessReadWriteLock(ca, cname + "-rwh").writeLock()),
                    curatorLocker(new InterProcessReadWriteLock(cb, cname + "-rwh").readLock())));
            // Semaphores: one lease of 4 alone, and the holder of a 1-lease semaphore's release taken by a waiter
            // (polylock's ZooKeeper semaphore is Curator's InterProcessSemaphoreV2 layout).
            u = interleaved(zkCpu, SEM_ONE, Map.of(
                    "polylock (zk)", lockUnlock(permits(a.newSemaphore(name + "-sem", 4))),
                    CURATOR_SEMAPHORE, lockUnlock(curatorPermits(ca, cname + "-sem", 4))));
            rows.add(u.get("polylock (zk)"));
            rows.add(handoff(zkCpu, SEM_HANDOFF, "polylock (zk)", permits(a.newSemaphore(name + "-semh", 1)),
                    permits(b.newSemaphore(name + "-semh", 1))));
            rows.add(u.get(CURATOR_SEMAPHORE));
            rows.add(handoff(zkCpu, SEM_HANDOFF, CURATOR_SEMAPHORE, curatorPermits(ca, cname + "-semh", 1),
                    curatorPermits(cb, cname + "-semh", 1)));
        }
        ca.close();
        cb.close();
        zk.close();

        // ---- Redis ----
        RedissonClient ra = redisson(redisUrl);
        RedissonClient rb = redisson(redisUrl);
        try (Jedis jedis = new Jedis(redis.getHost(), redis.getPort());
                LockClient a = LockClient.connect(redisUrl);
                LockClient b = LockClient.connect(redisUrl)) {
            String name = run + "-redis";
            String rname = run + "-redisson";
            List<ScriptCall> scripts = rawScriptCalls(run + "-raw");
            for (ScriptCall c : scripts) {
                jedis.scriptLoad(c.source());
            }
            Map<String, Row> u = interleaved(redisCpu, "uncontended lock+unlock", Map.of(
                    "Redis PING", jedis::ping,
                    RAW_SCRIPTS, () -> scripts.forEach(c -> jedis.evalsha(c.sha(), c.keys(), c.args())),
                    "polylock (redis)", lockUnlock(polylock(a, name)),
                    "Redisson RLock", lockUnlock(redissonLocker(ra, rname))));
            rows.add(floorRow(u.get("Redis PING")));
            rows.add(u.get(RAW_SCRIPTS));
            rows.add(u.get("polylock (redis)"));
            rows.add(handoff(redisCpu, "polylock (redis)", polylock(a, name + "-h"), polylock(b, name + "-h")));
            rows.add(u.get("Redisson RLock"));
            rows.add(handoff(redisCpu, "Redisson RLock", redissonLocker(ra, rname + "-h"), redissonLocker(rb, rname + "-h")));
            u = interleaved(redisCpu, RW_READ, Map.of(
                    "polylock (redis)", lockUnlock(locker(a.newReadWriteLock(name + "-rw").readLock())),
                    "Redisson RReadWriteLock", lockUnlock(redissonLocker(ra.getReadWriteLock(rname + "-rw").readLock()))));
            rows.add(u.get("polylock (redis)"));
            rows.add(handoff(redisCpu, RW_HANDOFF, "polylock (redis)", locker(a.newReadWriteLock(name + "-rwh").writeLock()),
                    locker(b.newReadWriteLock(name + "-rwh").readLock())));
            rows.add(u.get("Redisson RReadWriteLock"));
            rows.add(handoff(redisCpu, RW_HANDOFF, "Redisson RReadWriteLock",
                    redissonLocker(ra.getReadWriteLock(rname + "-rwh").writeLock()),
                    redissonLocker(rb.getReadWriteLock(rname + "-rwh").readLock())));
            // Semaphores: one permit of 4 alone, and the holder of a 1-permit semaphore's release taken by a waiter.
            u = interleaved(redisCpu, SEM_ONE, Map.of(
                    "polylock (redis)", lockUnlock(permits(a.newSemaphore(name + "-sem", 4))),
                    "Redisson RPermitExpirableSemaphore", lockUnlock(redissonPermits(ra, rname + "-sem", 4))));
            rows.add(u.get("polylock (redis)"));
            rows.add(handoff(redisCpu, SEM_HANDOFF, "polylock (redis)", permits(a.newSemaphore(name + "-semh", 1)),
                    permits(b.newSemaphore(name + "-semh", 1))));
            rows.add(u.get("Redisson RPermitExpirableSemaphore"));
            rows.add(handoff(redisCpu, SEM_HANDOFF, "Redisson RPermitExpirableSemaphore", redissonPermits(ra, rname + "-semh", 1),
                    redissonPermits(rb, rname + "-semh", 1)));
        }
        ra.shutdown();
        rb.shutdown();
        rows.addAll(paced(redisUrl, redisCpu, zkUrl, zkConnect, zkCpu, run + "-paced"));
        Idle idle = idle(redisUrl, redisCpu, run + "-idle");

        // ---- Redis as deployed: a Sentinel set and a Redis Cluster ----
        for (Mode mode : modes()) {
            RedissonClient ma = Redisson.create(mode.redisson());
            RedissonClient mb = Redisson.create(mode.redisson());
            try (LockClient a = LockClient.connect(mode.polylockUrl());
                    LockClient b = LockClient.connect(mode.polylockUrl())) {
                String name = run + "-" + mode.label();
                String mname = run + "-redisson-" + mode.label();
                String system = "polylock (" + mode.label() + ")";
                String peer = "Redisson RLock (" + mode.label() + ")";
                Map<String, Row> u = interleaved(Cpu.NONE, "uncontended lock+unlock", Map.of(
                        system, lockUnlock(polylock(a, name)),
                        peer, lockUnlock(redissonLocker(ma, mname))));
                rows.add(u.get(system));
                rows.add(handoff(Cpu.NONE, system, polylock(a, name + "-h"), polylock(b, name + "-h")));
                rows.add(u.get(peer));
                rows.add(handoff(Cpu.NONE, peer, redissonLocker(ma, mname + "-h"), redissonLocker(mb, mname + "-h")));
            }
            ma.shutdown();
            mb.shutdown();
        }

        // Last, after every latency row: the throughput runs leave the
        // servers and this JVM busy for a while after them (ZooKeeper's
        // snapshots, GC), which would slow a latency row measured next.
        List<ServerWork.Work> work = serverWork(redisUrl, run + "-work");
        List<Throughput> tps = throughputs(redisUrl, zkUrl, zkConnect, run + "-tp");

        String md = markdown(rows, tps, work, idle);
        System.out.println(md);
        Files.writeString(out.resolve("results.md"), md);
        Files.writeString(out.resolve("results.json"), json(rows, tps, work, idle));
        System.exit(0);
    }

    // ---- Sentinel and Cluster -------------------------------------------

    /**
     * One way Redis is deployed, as polylock (a URL) and Redisson (its config
     * for that mode, defaults otherwise) reach it; {@code label} names the
     * mode in the rows.
     */
    record Mode(String label, String polylockUrl, Config redisson) {}

    /**
     * The modes whose servers are named (POLYLOCK_TEST_SENTINEL,
     * POLYLOCK_TEST_CLUSTER; bench/run starts them). Both sides have replicas
     * acknowledge each lock and unlock: polylock by {@code replicas=1},
     * Redisson by its default {@code checkLockSyncedSlaves} (a pipelined
     * WAIT for the replicas it knows of: two under this Sentinel set, one per
     * master on this cluster).
     */
    static List<Mode> modes() {
        List<Mode> modes = new ArrayList<>();
        String sentinel = System.getenv("POLYLOCK_TEST_SENTINEL");
        if (sentinel != null && !sentinel.isEmpty()) {
            Config config = new Config();
            config.useSentinelServers().setMasterName(masterName(sentinel)).addSentinelAddress(redisAddresses(sentinel));
            modes.add(new Mode("redis+sentinel", withReplicas(sentinel), config));
        } else {
            System.err.println("no Sentinel rows: POLYLOCK_TEST_SENTINEL is unset (scripts/services start --sentinel)");
        }
        String cluster = System.getenv("POLYLOCK_TEST_CLUSTER");
        if (cluster != null && !cluster.isEmpty()) {
            Config config = new Config();
            config.useClusterServers().addNodeAddress(redisAddresses(cluster));
            modes.add(new Mode("redis+cluster", withReplicas(cluster), config));
        } else {
            System.err.println("no Cluster rows: POLYLOCK_TEST_CLUSTER is unset (scripts/services start-cluster)");
        }
        return modes;
    }

    static String withReplicas(String url) {
        return url + (url.contains("?") ? "&" : "?") + "replicas=1";
    }

    /** {@code redis://host:port} of each host of a redis+sentinel:// or redis+cluster:// URL. */
    static String[] redisAddresses(String url) {
        String rest = url.substring(url.indexOf("://") + 3);
        String hosts = rest.substring(rest.lastIndexOf('@') + 1).split("[/?]")[0];
        return Arrays.stream(hosts.split(",")).map(h -> "redis://" + h).toArray(String[]::new);
    }

    /** The master name of a redis+sentinel:// URL. */
    static String masterName(String url) {
        String rest = url.substring(url.indexOf("://") + 3);
        return rest.substring(rest.indexOf('/') + 1).split("\\?")[0];
    }

    // ---- the systems ----------------------------------------------------

    static Locker polylock(LockClient client, String name) {
        return locker(client.newLock(name));
    }

    /** Any java.util.concurrent Lock: polylock's mutex or a half of its read-write lock. */
    static Locker locker(java.util.concurrent.locks.Lock lock) {
        return new Locker() {
            public void lock() {
                lock.lock();
            }

            public void unlock() {
                lock.unlock();
            }
        };
    }

    static Locker curatorLocker(CuratorFramework c, String path) {
        return curatorLocker(new InterProcessMutex(c, path));
    }

    /** A Curator mutex: InterProcessMutex, or a half of InterProcessReadWriteLock. */
    static Locker curatorLocker(InterProcessMutex m) {
        return new Locker() {
            public void lock() throws Exception {
                m.acquire();
            }

            public void unlock() throws Exception {
                m.release();
            }
        };
    }

    static Locker redissonLocker(RedissonClient r, String name) {
        return redissonLocker(r.getLock(name));
    }

    /** A Redisson lock: RLock, or a half of RReadWriteLock. */
    static Locker redissonLocker(RLock l) {
        return new Locker() {
            public void lock() {
                l.lock();
            }

            public void unlock() {
                l.unlock();
            }
        };
    }

    // ---- measurements ---------------------------------------------------

    /**
     * The Redis server's work ({@link ServerWork}) per uncontended lock+unlock
     * and per handoff, polylock and Redisson (default config) taking turns,
     * each on clients of its own, on the one server of POLYLOCK_TEST_REDIS that nothing else
     * of this benchmark uses meanwhile.
     */
    static List<ServerWork.Work> serverWork(String redisUrl, String prefix) throws Exception {
        URI redis = URI.create(redisUrl);
        List<ServerWork.Work> out = new ArrayList<>();
        try (Jedis jedis = new Jedis(redis.getHost(), redis.getPort())) {
            ServerWork sw = new ServerWork(jedis);
            String name = prefix + "-polylock";
            RedissonClient ru = redisson(redisUrl);
            try (LockClient a = LockClient.connect(redisUrl)) {
                out.addAll(List.of(sw.uncontended(List.of("polylock (redis)", "Redisson RLock"),
                        List.of(polylock(a, name), redissonLocker(ru, prefix + "-redisson")),
                        WORK_ROUNDS, WORK_UNCONTENDED)));
            } finally {
                ru.shutdown();
            }
            // Fresh Redisson clients for the handoffs: the watchdog timers the
            // uncontended lock()s armed die with their client.
            RedissonClient ra = redisson(redisUrl);
            RedissonClient rb = redisson(redisUrl);
            try (LockClient a = LockClient.connect(redisUrl); LockClient b = LockClient.connect(redisUrl)) {
                out.addAll(List.of(sw.handoff(List.of("polylock (redis)", "Redisson RLock"),
                        List.of(polylock(a, name + "-h"), redissonLocker(ra, prefix + "-redisson-h")),
                        List.of(polylock(b, name + "-h"), redissonLocker(rb, prefix + "-redisson-h")),
                        WORK_HANDOFFS)));
            } finally {
                ra.shutdown();
                rb.shutdown();
            }
        }
        return out;
    }

    static final String SEM_ONE = "uncontended permit acquire+release";
    static final String SEM_HANDOFF = "handoff permit holder -> blocked acquirer (another client)";

    /** One permit of a polylock semaphore at a time. */
    static Locker permits(io.polylock.DistributedSemaphore sem) {
        return new Locker() {
            public void lock() throws Exception {
                sem.acquire();
            }

            public void unlock() {
                sem.release();
            }
        };
    }

    /**
     * One permit of a Redisson RPermitExpirableSemaphore of {@code n} permits
     * (trySetPermits), with a lease as polylock's (30 s): Redisson's permit
     * ids expire, ours are renewed.
     */
    static Locker redissonPermits(RedissonClient r, String name, int n) {
        org.redisson.api.RPermitExpirableSemaphore sem = r.getPermitExpirableSemaphore(name);
        sem.trySetPermits(n);
        return new Locker() {
            private String id;

            public void lock() throws Exception {
                id = sem.acquire(30, TimeUnit.SECONDS);
            }

            public void unlock() {
                sem.release(id);
            }
        };
    }

    static final String CURATOR_SEMAPHORE = "Curator InterProcessSemaphoreV2";

    /** One lease of a Curator InterProcessSemaphoreV2 of {@code n} leases: acquire() a Lease, returnLease it. */
    static Locker curatorPermits(CuratorFramework c, String path, int n) {
        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(c, path, n);
        return new Locker() {
            private Lease lease;

            public void lock() throws Exception {
                lease = sem.acquire();
            }

            public void unlock() {
                sem.returnLease(lease);
            }
        };
    }

    static final String RW_READ = "uncontended read lock+unlock";
    static final String RW_HANDOFF = "handoff writer -> blocked reader (another client)";

    /** One lock+unlock as a timed op. */
    static Op lockUnlock(Locker l) {
        return () -> {
            l.lock();
            l.unlock();
        };
    }

    /** A floor's samples as its row ("floor: 1 round trip"). */
    static Row floorRow(Row r) {
        return new Row("floor: 1 round trip", r.system(), r.p50(), r.p99(), r.n(), r.clientCpuUs(), r.serverCpuUs());
    }

    /**
     * polylock's and Redisson's lock+unlock on Redis, then polylock's and
     * Curator's on ZooKeeper, each after {@link #PACE_MS} of quiet, taking
     * turns; each backend's clients closed before the next one's run.
     */
    static List<Row> paced(String redisUrl, Cpu.Server redisCpu, String zkUrl, String zkConnect, Cpu.Server zkCpu,
            String name) throws Exception {
        List<Row> rows = new ArrayList<>();
        RedissonClient r = redisson(redisUrl);
        try (LockClient c = LockClient.connect(redisUrl)) {
            Map<String, Op> ops = Map.of(
                    "polylock (redis)", lockUnlock(polylock(c, name)),
                    "Redisson RLock", lockUnlock(redissonLocker(r, name + "-redisson")));
            rows.addAll(interleaved(redisCpu, PACED, ops, PACED_ITERATIONS, 50, PACE_MS).values());
        } finally {
            r.shutdown();
        }
        try (CuratorFramework cf = curator(zkConnect); LockClient c = LockClient.connect(zkUrl)) {
            Map<String, Op> ops = Map.of(
                    "polylock (zk)", lockUnlock(polylock(c, "/" + name + "-zk")),
                    "Curator InterProcessMutex", lockUnlock(curatorLocker(cf, "/" + name + "-curator")));
            rows.addAll(interleaved(zkCpu, PACED, ops, PACED_ITERATIONS, 50, PACE_MS).values());
        }
        return rows;
    }

    /**
     * One polylock client connected and holding 100 Redis locks (the default
     * lease, so its renewals run), making no calls: this JVM's and the
     * server's CPU over {@link #IDLE_S}, in % of one core.
     */
    static Idle idle(String redisUrl, Cpu.Server redisCpu, String prefix) throws Exception {
        int locks = 100;
        try (LockClient c = LockClient.connect(redisUrl)) {
            List<DistributedLock> held = new ArrayList<>();
            for (int i = 0; i < locks; i++) {
                DistributedLock l = c.newLock(prefix + "/" + i);
                l.lock();
                held.add(l);
            }
            Thread.sleep(1000); // the acquires' aftermath settles
            double s0 = redisCpu.micros();
            double c0 = Cpu.client();
            long t0 = System.nanoTime();
            Thread.sleep(IDLE_S * 1000L);
            double c1 = Cpu.client();
            double seconds = (System.nanoTime() - t0) / 1e9;
            double s1 = redisCpu.micros();
            held.forEach(DistributedLock::unlock);
            Idle idle = new Idle(locks, seconds, (c1 - c0) / 1e6 / seconds * 100, (s1 - s0) / 1e6 / seconds * 100);
            System.err.printf(Locale.ROOT, "idle: %d locks held %.1f s: client %.3f%% of a core, server %.3f%%%n",
                    locks, seconds, idle.clientCorePct(), idle.serverCorePct());
            return idle;
        }
    }

    /** Iterations per batch of {@link #interleaved}. */
    static final int BATCH = 100;

    /**
     * Times each op ITERATIONS times after WARMUP runs, in batches of BATCH
     * that take turns (the first op of each round rotating), so that the
     * machine's load and drift and the JIT's progress fall on every op alike
     * and a ratio of their p50s compares the systems, not the moments they
     * happened to run at. Keyed by system; the systems take their first
     * turns in name order.
     */
    static Map<String, Row> interleaved(Cpu.Server server, String operation, Map<String, Op> ops) throws Exception {
        return interleaved(server, operation, ops, ITERATIONS, BATCH, 0);
    }

    /**
     * {@link #interleaved(Cpu.Server, String, Map)} with each op after
     * {@code pauseMs} of quiet (out of the latency, in the CPU) when it is
     * not 0. Each batch's CPU, this JVM's and {@code server}'s, is charged to
     * its system.
     */
    static Map<String, Row> interleaved(Cpu.Server server, String operation, Map<String, Op> ops, int iterations,
            int batch, int pauseMs) throws Exception {
        List<String> systems = new ArrayList<>(new java.util.TreeSet<>(ops.keySet()));
        for (String system : systems) {
            for (int i = 0; i < WARMUP; i++) {
                ops.get(system).run();
            }
        }
        Map<String, long[]> ns = new LinkedHashMap<>();
        Map<String, Cpu.Tally> cpu = new LinkedHashMap<>();
        systems.forEach(system -> {
            ns.put(system, new long[iterations]);
            cpu.put(system, new Cpu.Tally());
        });
        for (int round = 0; round * batch < iterations; round++) {
            int from = round * batch;
            int to = Math.min(iterations, from + batch);
            for (int k = 0; k < systems.size(); k++) {
                String system = systems.get((round + k) % systems.size());
                Op op = ops.get(system);
                long[] out = ns.get(system);
                Thread.sleep(SETTLE_MS);
                cpu.get(system).span(server, to - from, () -> {
                    for (int i = from; i < to; i++) {
                        if (pauseMs > 0) {
                            Thread.sleep(pauseMs);
                        }
                        long t0 = System.nanoTime();
                        op.run();
                        out[i] = System.nanoTime() - t0;
                    }
                });
            }
        }
        Map<String, Row> rows = new LinkedHashMap<>();
        ns.forEach((system, samples) -> rows.put(system, row(operation, system, samples, cpu.get(system))));
        return rows;
    }

    /**
     * The holder (this thread) holds; a waiter thread on another client blocks
     * in lock(); the holder unlocks at t0; the waiter returns at t1.
     */
    static Row handoff(Cpu.Server server, String system, Locker holder, Locker waiter) throws Exception {
        return handoff(server, "handoff (another client, another thread)", system, holder, waiter);
    }

    /**
     * Also the CPU per handoff round (the holder's lock, the waiter queuing,
     * the unlock, the waiter's grant and unlock, the 10 ms between): this
     * JVM's (both threads) and the server's, over the timed rounds.
     */
    static Row handoff(Cpu.Server server, String operation, String system, Locker holder, Locker waiter)
            throws Exception {
        SynchronousQueue<Long> acquiredAt = new SynchronousQueue<>();
        SynchronousQueue<Boolean> go = new SynchronousQueue<>();
        Thread w = new Thread(() -> {
            try {
                while (go.take()) {
                    waiter.lock();
                    long t1 = System.nanoTime();
                    waiter.unlock();
                    acquiredAt.put(t1);
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
        }, "bench-waiter");
        w.start();
        int total = HANDOFF_WARMUP + HANDOFFS;
        long[] ns = new long[HANDOFFS];
        double s0 = Double.NaN;
        double c0 = Double.NaN;
        for (int i = 0; i < total; i++) {
            if (i == HANDOFF_WARMUP) {
                s0 = server.micros();
                c0 = Cpu.client();
            }
            holder.lock();
            go.put(true);
            Thread.sleep(10); // let the waiter queue up on the server
            long t0 = System.nanoTime();
            holder.unlock();
            Long t1 = acquiredAt.poll(60, TimeUnit.SECONDS);
            if (t1 == null) {
                throw new IllegalStateException(system + ": no handoff within 60 s");
            }
            if (i >= HANDOFF_WARMUP) {
                ns[i - HANDOFF_WARMUP] = t1 - t0;
            }
        }
        double c1 = Cpu.client();
        double s1 = server.micros();
        go.put(false);
        w.join();
        Cpu.Tally cpu = new Cpu.Tally();
        cpu.add(c1 - c0, s1 - s0, HANDOFFS);
        return row(operation, system, ns, cpu);
    }

    /**
     * Throughput of the four systems in this one process, one after the
     * other: each library as it is normally used, one client shared by the
     * threads. polylock: one {@link LockClient} per backend (its defaults).
     * Redisson: one RedissonClient, default config (single server, default
     * codec and thread pools). Curator: one CuratorFramework (RetryOneTime),
     * an InterProcessMutex per name. Every lock object is shared by all the
     * threads: each of the three is owned per thread, like ReentrantLock.
     */
    static List<Throughput> throughputs(String redisUrl, String zkUrl, String zkConnect, String prefix)
            throws Exception {
        List<Throughput> tps = new ArrayList<>();
        try (LockClient client = LockClient.connect(redisUrl)) {
            tps.add(throughput("polylock (redis)", i -> polylock(client, prefix + "-redis/" + i)));
        }
        RedissonClient redisson = redisson(redisUrl);
        try {
            tps.add(throughput("Redisson RLock", i -> redissonLocker(redisson, prefix + "-redisson/" + i)));
        } finally {
            redisson.shutdown();
        }
        try (LockClient client = LockClient.connect(zkUrl)) {
            tps.add(throughput("polylock (zk)", i -> polylock(client, "/" + prefix + "-zk/" + i)));
        }
        try (CuratorFramework curator = curator(zkConnect)) {
            tps.add(throughput("Curator InterProcessMutex", i -> curatorLocker(curator, "/" + prefix + "-curator/" + i)));
        }
        ZooKeeper zk = plainZk(zkConnect);
        try {
            zk.create("/" + prefix + "-raw", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
            tps.add(throughput(ZK_RAW_REQUESTS, i -> rawZkRequests(zk, "/" + prefix + "-raw/" + i)));
        } finally {
            zk.close();
        }
        return tps;
    }

    static final String ZK_RAW_REQUESTS = "floor: a lock's ZooKeeper requests, raw";

    /** The uncontended rows of polylock's own requests, sent with no polylock code (as in the other languages' reports). */
    static final String RAW_SCRIPTS = "raw: polylock's scripts, no polylock code";
    static final String ZK_RAW_LOCK = "raw: polylock's zookeeper requests pipelined, no polylock code";

    /** One of polylock's script calls: by SHA1, as polylock sends them once the server has the script. */
    record ScriptCall(String source, String sha, List<String> keys, List<String> args) {}

    /**
     * polylock's uncontended acquire and release on {@code name} as the two
     * script calls its runtime sends, from the Rust benchmark binary (one
     * definition for every language; bench/jvm/run.sh builds it).
     */
    static List<ScriptCall> rawScriptCalls(String name) throws Exception {
        String target = System.getenv().getOrDefault("CARGO_TARGET_DIR", Path.of("target").toAbsolutePath().toString());
        Process p = new ProcessBuilder(target + "/release/polylock-bench", "--print-raw-scripts", name)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        byte[] json = p.getInputStream().readAllBytes();
        if (p.waitFor() != 0) {
            throw new IllegalStateException("polylock-bench --print-raw-scripts failed");
        }
        List<ScriptCall> calls = new ArrayList<>();
        for (JsonNode c : new ObjectMapper().readTree(json)) {
            calls.add(new ScriptCall(c.get("source").asText(), c.get("sha").asText(),
                    strings(c.get("keys")), strings(c.get("args"))));
        }
        return calls;
    }

    static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    /** The raw floor's children watch: its event is received and dropped, as polylock's holder drops it. */
    static final Watcher IGNORED = event -> { };

    /**
     * Not a lock: polylock's requests, with no library and no waiting:
     * create an ephemeral sequential child and, pipelined behind it on the
     * same session, getChildren of its parent setting a children watch (as
     * polylock's does, for its holder's notice of losing its node; Curator's
     * sets none); then delete the child, which fires that watch. Two writes
     * and a read: run by the same threads on the same names, what the
     * server gives any lock driven by these threads, so a lock's throughput
     * is read against it (more requests in flight would raise it for all).
     */
    static Locker rawZkRequests(ZooKeeper zk, String path) {
        try {
            zk.create(path, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        } catch (Exception e) {
            throw new IllegalStateException("cannot create " + path, e);
        }
        ThreadLocal<String> mine = new ThreadLocal<>();
        return new Locker() {
            public void lock() throws Exception {
                CompletableFuture<String> created = new CompletableFuture<>();
                zk.create(path + "/lock-", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL_SEQUENTIAL,
                        (rc, p, ctx, name) -> {
                            if (rc == 0) {
                                created.complete(name);
                            } else {
                                created.completeExceptionally(KeeperException.create(KeeperException.Code.get(rc), p));
                            }
                        }, null);
                zk.getChildren(path, IGNORED);
                mine.set(created.get());
            }

            public void unlock() throws Exception {
                zk.delete(mine.get(), -1);
            }
        };
    }

    /**
     * lock+unlock per second across TP_LOCKS locks ({@code lockFor(i)}, made
     * once): TP_THREADS threads, each taking a random lock each time (so two
     * threads sometimes want the same one, as real callers do); counted for
     * TP_MS after TP_WARMUP_MS.
     */
    static Throughput throughput(String system, IntFunction<Locker> lockFor) throws Exception {
        Locker[] locks = new Locker[TP_LOCKS];
        for (int i = 0; i < TP_LOCKS; i++) {
            locks[i] = lockFor.apply(i);
        }
        LongAdder done = new LongAdder();
        AtomicBoolean running = new AtomicBoolean(true);
        AtomicReference<Exception> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < TP_THREADS; t++) {
            Thread th = new Thread(() -> {
                ThreadLocalRandom random = ThreadLocalRandom.current();
                try {
                    while (running.get()) {
                        Locker l = locks[random.nextInt(TP_LOCKS)];
                        l.lock();
                        l.unlock();
                        done.increment();
                    }
                } catch (Exception e) {
                    failure.compareAndSet(null, e);
                    running.set(false);
                }
            }, "bench-throughput-" + t);
            th.start();
            threads.add(th);
        }
        Thread.sleep(TP_WARMUP_MS);
        long n0 = done.sum();
        long t0 = System.nanoTime();
        Thread.sleep(TP_MS);
        double ops = (done.sum() - n0) / ((System.nanoTime() - t0) / 1e9);
        running.set(false);
        for (Thread th : threads) {
            th.join();
        }
        if (failure.get() != null) {
            throw new IllegalStateException(system + ": throughput run failed", failure.get());
        }
        System.err.printf(Locale.ROOT, "%-40s %-28s %9.0f lock+unlock/s%n", "throughput", system, ops);
        return new Throughput(system, ops);
    }

    static Row row(String operation, String system, long[] ns, Cpu.Tally cpu) {
        long[] s = ns.clone();
        Arrays.sort(s);
        double p50 = s[(int) Math.floor(0.50 * (s.length - 1))] / 1000.0;
        double p99 = s[(int) Math.floor(0.99 * (s.length - 1))] / 1000.0;
        System.err.printf(Locale.ROOT, "%-40s %-28s p50 %9.1f us  p99 %9.1f us  cpu %7.1f / %7.1f us%n", operation,
                system, p50, p99, cpu.clientPerOp(), cpu.serverPerOp());
        return new Row(operation, system, p50, p99, s.length, cpu.clientPerOp(), cpu.serverPerOp());
    }

    /** A CPU cell: µs per op, "-" when not measured. */
    static String cpuCell(double us) {
        return Double.isNaN(us) ? "-" : String.format(Locale.ROOT, "%.1f", us);
    }

    /** A JSON number, null when not measured. */
    static String jsonNumber(double x) {
        return Double.isNaN(x) ? "null" : String.format(Locale.ROOT, "%.2f", x);
    }

    // ---- output -----------------------------------------------------------

    /** Ratios: polylock over the anchor library of its backend, and every row over its backend's floor. */
    static String markdown(List<Row> rows, List<Throughput> tps, List<ServerWork.Work> work, Idle idle) {
        Map<String, Row> by = new LinkedHashMap<>();
        for (Row r : rows) {
            by.put(r.operation() + "|" + r.system(), r);
        }
        StringBuilder sb = new StringBuilder();
        sb.append("| operation | system | p50 µs | p99 µs | p99/p50 | client CPU µs/op | server CPU µs/op | p50 vs floor "
                + "| p50 vs Curator/Redisson | client CPU vs Curator/Redisson |\n");
        sb.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Row r : rows) {
            boolean zkSide = r.system().contains("zk") || r.system().contains("Curator") || r.system().toLowerCase(Locale.ROOT).contains("zookeeper");
            Row floor = by.get("floor: 1 round trip|" + (zkSide ? "ZooKeeper exists" : "Redis PING"));
            boolean rw = r.operation().equals(RW_READ) || r.operation().equals(RW_HANDOFF);
            boolean sem = r.operation().equals(SEM_ONE) || r.operation().equals(SEM_HANDOFF);
            String anchorName = zkSide
                    ? (sem ? CURATOR_SEMAPHORE : rw ? "Curator InterProcessReadWriteLock" : "Curator InterProcessMutex")
                    : (sem ? "Redisson RPermitExpirableSemaphore" : rw ? "Redisson RReadWriteLock" : "Redisson RLock")
                            + modeSuffix(r.system());
            Row anchor = by.get(r.operation() + "|" + anchorName);
            String vsAnchor = r.system().startsWith("polylock") && anchor != null
                    ? String.format(Locale.ROOT, "%.2fx", r.p50() / anchor.p50()) : "";
            String cpuVsAnchor = r.system().startsWith("polylock") && anchor != null && !Double.isNaN(r.clientCpuUs())
                    ? String.format(Locale.ROOT, "%.2fx", r.clientCpuUs() / anchor.clientCpuUs()) : "";
            String vsFloor = r.operation().startsWith("floor") ? "1.00x"
                    : String.format(Locale.ROOT, "%.1fx", r.p50() / floor.p50());
            sb.append(String.format(Locale.ROOT, "| %s | %s | %.0f | %.0f | %.1f | %s | %s | %s | %s | %s |%n",
                    r.operation(), r.system(), r.p50(), r.p99(), r.p99() / r.p50(), cpuCell(r.clientCpuUs()),
                    cpuCell(r.serverCpuUs()), vsFloor, vsAnchor, cpuVsAnchor));
        }
        sb.append(String.format(Locale.ROOT, "%nClient CPU: this JVM's user + sys (every thread: the libraries' "
                + "background threads, JIT and GC included) over each timed batch, per operation; handoff: per round, "
                + "both threads. Server CPU: Redis `INFO cpu`, ZooKeeper's JVM threads from /proc (none for the "
                + "Sentinel and Cluster rows). Paced: each call after a %d ms pause, out of the latency, in the CPU.%n",
                PACE_MS));
        sb.append(String.format(Locale.ROOT, "%nIdle: one polylock client holding %d Redis locks (default lease, "
                + "renewals running), no calls, %.1f s: client %.3f%% of one core, server %.3f%%.%n",
                idle.locks(), idle.seconds(), idle.clientCorePct(), idle.serverCorePct()));
        sb.append(String.format(Locale.ROOT, "%nUncontended: %d iterations after %d warm-up, each group of rows (the floor, polylock and its peer) "
                + "interleaved in batches of %d that take turns; handoff: %d after %d, "
                + "waiter on a second client in another thread of the same JVM. Loopback servers, 2 cores. "
                + "redis+sentinel / redis+cluster rows: polylock with replicas=1, Redisson with its Sentinel / Cluster "
                + "config and default checkLockSyncedSlaves (a WAIT for its known replicas).%n",
                ITERATIONS, WARMUP, BATCH, HANDOFFS, HANDOFF_WARMUP));
        sb.append(String.format(Locale.ROOT, "%nThroughput, lock+unlock per second across %d distinct locks from one "
                + "process (%d threads, each `lock()`/`unlock()` of a random one of the locks, %d s after %d ms warm-up; "
                + "one client shared by the threads: polylock's LockClient, Redisson's default config, one "
                + "CuratorFramework):%n%n| system | ops/s | polylock (same backend) / this |%n|---|---:|---:|%n",
                TP_LOCKS, TP_THREADS, TP_MS / 1000, TP_WARMUP_MS));
        for (Throughput t : tps) {
            String ours = t.system().contains("Curator") || t.system().contains("zk") || t.system().contains("ZooKeeper") ? "polylock (zk)" : "polylock (redis)";
            String vs = tps.stream().filter(o -> o.system().equals(ours) && !o.system().equals(t.system()))
                    .map(o -> String.format(Locale.ROOT, "%.2fx", o.opsPerS() / t.opsPerS())).findFirst().orElse("");
            sb.append(String.format(Locale.ROOT, "| %s | %.0f | %s |%n", t.system(), t.opsPerS(), vs));
        }
        sb.append(String.format(Locale.ROOT, "%nRedis server work per operation (`INFO commandstats` deltas on one "
                + "server: every command, those inside scripts included, `INFO` left out; each snapshot after %d ms "
                + "without a command; uncontended: the mean of %d in a row, each followed by a %d ms pause, the median of %d such rounds "
                + "taken by polylock and Redisson in turn; queue and handoff: the median of %d "
                + "one by one, as the clients' background work (Redisson's watchdog timers and PINGs) lands in "
                + "some of them; server CPU: `INFO cpu`, user + sys, uncontended rounds only):%n%n"
                + "| operation | system | commands | usec | polylock / Redisson usec | server CPU µs | commands run |%n"
                + "|---|---|---:|---:|---:|---:|---|%n", ServerWork.QUIET_MS, WORK_UNCONTENDED,
                TimeUnit.NANOSECONDS.toMillis(ServerWork.PACE_NANOS), WORK_ROUNDS, WORK_HANDOFFS));
        for (ServerWork.Work w : work) {
            String vs = w.system().startsWith("polylock") ? work.stream()
                    .filter(o -> o.operation().equals(w.operation()) && o.system().startsWith("Redisson"))
                    .map(o -> String.format(Locale.ROOT, "%.2fx", w.usec() / o.usec())).findFirst().orElse("") : "";
            String cpu = Double.isNaN(w.cpuUs()) ? "" : String.format(Locale.ROOT, "%.1f", w.cpuUs());
            sb.append(String.format(Locale.ROOT, "| %s | %s | %.1f | %.1f | %s | %s | %s |%n",
                    w.operation(), w.system(), w.calls(), w.usec(), vs, cpu, w.breakdown(false)));
        }
        return sb.toString();
    }

    /** " (redis+sentinel)" or " (redis+cluster)" for a row of that mode, else "". */
    static String modeSuffix(String system) {
        for (String mode : List.of("redis+sentinel", "redis+cluster")) {
            if (system.endsWith("(" + mode + ")")) {
                return " (" + mode + ")";
            }
        }
        return "";
    }

    static String json(List<Row> rows, List<Throughput> tps, List<ServerWork.Work> work, Idle idle) {
        List<String> entries = new ArrayList<>();
        for (Row r : rows) {
            entries.add(String.format(Locale.ROOT,
                    "  {\"operation\": \"%s\", \"system\": \"%s\", \"p50_us\": %.1f, \"p99_us\": %.1f, \"n\": %d, "
                            + "\"client_cpu_us\": %s, \"server_cpu_us\": %s}",
                    r.operation(), r.system(), r.p50(), r.p99(), r.n(), jsonNumber(r.clientCpuUs()),
                    jsonNumber(r.serverCpuUs())));
        }
        entries.add(String.format(Locale.ROOT,
                "  {\"operation\": \"idle\", \"system\": \"polylock (redis)\", \"locks\": %d, \"seconds\": %.1f, "
                        + "\"client_core_pct\": %s, \"server_core_pct\": %s, \"quick\": %b}",
                idle.locks(), idle.seconds(), jsonNumber(idle.clientCorePct()), jsonNumber(idle.serverCorePct()), QUICK));
        for (Throughput t : tps) {
            entries.add(String.format(Locale.ROOT,
                    "  {\"operation\": \"throughput\", \"system\": \"%s\", \"ops_per_s\": %.0f, \"threads\": %d, \"locks\": %d}",
                    t.system(), t.opsPerS(), TP_THREADS, TP_LOCKS));
        }
        for (ServerWork.Work w : work) {
            List<String> per = new ArrayList<>();
            w.perCommand().forEach((cmd, v) -> per.add(String.format(Locale.ROOT, "\"%s\": [%.2f, %.2f]", cmd, v[0], v[1])));
            String cpu = Double.isNaN(w.cpuUs()) ? "" : String.format(Locale.ROOT, "\"cpu_us\": %.2f, ", w.cpuUs());
            entries.add(String.format(Locale.ROOT,
                    "  {\"operation\": \"server work: %s\", \"system\": \"%s\", \"calls\": %.2f, \"usec\": %.2f, "
                            + "%s\"n\": %d, \"of\": \"%s\", \"commands\": {%s}}",
                    w.operation(), w.system(), w.calls(), w.usec(), cpu, w.n(), w.how(), String.join(", ", per)));
        }
        return "[\n" + String.join(",\n", entries) + "\n]\n";
    }

    // ---- clients ----------------------------------------------------------

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException(name + " is not set: eval \"$(scripts/services env)\"");
        }
        return v;
    }

    static ZooKeeper plainZk(String connect) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(connect, 10_000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                up.countDown();
            }
        });
        if (!up.await(10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("cannot connect to ZooKeeper at " + connect);
        }
        return zk;
    }

    static CuratorFramework curator(String connect) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.newClient(connect, new RetryOneTime(100));
        c.start();
        c.blockUntilConnected(10, TimeUnit.SECONDS);
        return c;
    }

    static RedissonClient redisson(String url) {
        Config config = new Config();
        config.useSingleServer().setAddress(url);
        return Redisson.create(config);
    }
}
