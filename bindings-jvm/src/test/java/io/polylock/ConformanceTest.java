package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import java.util.stream.Stream;

import org.apache.zookeeper.ZooKeeper;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.UnifiedJedis;

/**
 * Runs every scenario of tests/conformance/ (see its README) through the
 * public Java API, on each backend it lists: one dynamic test per scenario
 * and backend, all started at once and checked one by one.
 *
 * <p>Owners are Java threads: each (client, owner number) gets its own
 * single-thread executor, and every lock call of that owner runs there. One
 * thread per client, not one per number: reentrancy is per client, so owner
 * 1 of client 0 and owner 1 of client 1 are two holders anyway, and a thread
 * blocked on one client's lock could not release the other's (as
 * {@code waiter-granted-on-release} needs). Outcomes map as:
 * {@code granted}/{@code ok} = the call returned (true); {@code would_block}
 * = {@code tryLock()} returned false; {@code timeout} = {@code tryLock(t, unit)}
 * returned false; {@code not_held} = {@link IllegalMonitorStateException};
 * {@code lost} = {@link LockLostException}; {@code invalid_name} (from
 * {@code newLock}) and {@code invalid_url} (from {@code connect}) =
 * {@link IllegalArgumentException}; {@code connect_error} =
 * {@link LockConnectException}. {@code await_lost} = an {@code onLost}
 * handler of that client's lock ran after the owner's grant.
 *
 * <p>Scenarios with {@code start_acquire} run in two modes. {@code threads}:
 * the owner's thread waits in {@code lockInterruptibly()} and {@code cancel}
 * interrupts it; a {@code hold_count} of an owner whose thread is blocked
 * there cannot be asked through the public API ({@code getHoldCount()}
 * answers for the calling thread only, as in {@code ReentrantLock}), so that
 * step is skipped in this mode and reported. {@code async}: the owner's
 * thread calls {@code lockAsync()} and stays free; {@code await} waits for
 * the future, {@code cancel} cancels it.
 *
 * <p>Semaphore scenarios ({@code "permits": N}, steps in {@code "mode": "permits"}): each
 * (client, owner, number of permits) gets its own {@link DistributedSemaphore} from
 * {@code newSemaphore(name, N)}, used on the owner's thread; an owner's grant is
 * {@code acquire(count)} / {@code tryAcquire(count)} / {@code tryAcquire(count, t, unit)} on it,
 * and {@code release} gives it back with {@code release(count)} on the same object.
 * {@code permits_mismatch} = {@link LockPermitsMismatchException}; {@code invalid_option} = an
 * {@link IllegalArgumentException} from an acquire. They run in {@code threads} mode only:
 * {@code DistributedSemaphore}, like {@code java.util.concurrent.Semaphore}, has no async
 * acquire. {@code await_lost} is not expressible (the semaphore has no loss listener: the
 * runtime's {@code Semaphore} does not hand out a held grant's loss signal): it is reported, and
 * waits out one lease on Redis (the grant's renewal, every third of it, finds the loss), or the
 * session timeout on ZooKeeper (the loss there is the session's end), so that the
 * {@code release} that expects {@code lost} checks the loss. On ZooKeeper the semaphore is
 * Curator's {@code InterProcessSemaphoreV2} layout: {@code server_permits} counts the children of
 * {@code <path>/leases}, and {@code server_clean} wants none under {@code <path>/locks} nor
 * {@code <path>/leases} (polylock's record of N, {@code <path>/polylock_permits}, stays).
 *
 * <p>Backends {@code sentinel} and {@code cluster} ({@link #redisVariants}):
 * every Redis scenario once more through the {@code redis+sentinel://} URL of
 * POLYLOCK_TEST_SENTINEL ({@code scripts/services start --sentinel}) and the
 * {@code redis+cluster://} URL of POLYLOCK_TEST_CLUSTER ({@code
 * scripts/services start --cluster}), same expected results; the {@code
 * server_*} and {@code expire_lease} steps look at the master the sentinels
 * name, or on the cluster through a {@code JedisCluster}, which sends each
 * key's command to the master of its slot. No scenario is left out there
 * (the {@code connect} steps name their own URLs). Skipped, saying why, when
 * the variable is unset.
 */
class ConformanceTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Duration STEP_LIMIT = Duration.ofSeconds(60);
    /** Every scenario client's ZooKeeper session timeout. */
    private static final Duration SESSION_TIMEOUT = Duration.ofSeconds(2);
    /**
     * Scenarios at once. Every scenario started together (over 300 with
     * the Sentinel and Cluster passes) made a loaded 2-core machine answer a
     * free ZooKeeper lock's try later than its 1 s: the scenarios' own
     * timings are what they check, so they run at most this many at a time.
     */
    private static final int PARALLEL_SCENARIOS = 24;
    private static final ExecutorService SCENARIOS = Executors.newFixedThreadPool(PARALLEL_SCENARIOS, r -> {
        Thread t = new Thread(r, "conformance-scenario");
        t.setDaemon(true);
        return t;
    });
    /** A scenario's helper tasks (a connect step's attempt), never queued behind scenarios. */
    private static final ExecutorService RUNNERS = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "conformance-step");
        t.setDaemon(true);
        return t;
    });
    /** Per Redis backend, the client that reads the servers holding its locks. */
    private static final Map<String, UnifiedJedis> INSPECTORS = new HashMap<>();
    private static ZooKeeper zk;

    /**
     * A Redis deployment on which every Redis scenario runs once more: its URL
     * (null when its variable is unset, and its runs are skipped saying
     * {@code unset}), and the client that reads the servers holding its locks.
     */
    private record Variant(String backend, String url, String unset, Function<String, UnifiedJedis> inspector) {}

    /** The Redis deployments besides the single server. */
    private static List<Variant> redisVariants() {
        return List.of(
                new Variant("sentinel", Servers.sentinelUrl(),
                        "POLYLOCK_TEST_SENTINEL is unset: run scripts/services start --sentinel",
                        url -> new JedisPooled(Servers.sentinelMaster(url))),
                new Variant("cluster", Servers.clusterUrl(),
                        "POLYLOCK_TEST_CLUSTER is unset: run scripts/services start --cluster", Servers::cluster));
    }

    @AfterAll
    static void closeInspectors() throws Exception {
        for (UnifiedJedis inspector : INSPECTORS.values()) {
            inspector.close();
        }
        if (zk != null) {
            zk.close();
        }
    }

    @TestFactory
    Stream<DynamicTest> everyScenarioOnEveryBackend() throws Exception {
        INSPECTORS.put("redis", new JedisPooled(java.net.URI.create(Servers.redisUrl())));
        zk = Servers.zooKeeper();
        Map<String, Variant> variants = new LinkedHashMap<>();
        for (Variant v : redisVariants()) {
            variants.put(v.backend(), v);
            if (v.url() != null) {
                INSPECTORS.put(v.backend(), v.inspector().apply(v.url()));
            }
        }
        Path dir = Paths.get(System.getProperty("polylock.conformanceDir", "../tests/conformance"));
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) {
            files = s.filter(p -> p.toString().endsWith(".json")).sorted().toList();
        }
        assertTrue(files.size() >= 20, "expected at least 20 scenarios in " + dir.toAbsolutePath() + ", found "
                + files.size());
        List<DynamicTest> tests = new ArrayList<>();
        for (Path f : files) {
            JsonNode sc = JSON.readTree(f.toFile());
            boolean background = sc.get("steps").findValuesAsText("op").contains("start_acquire");
            // A semaphore has no async acquire (nor has java.util.concurrent.Semaphore): threads mode only.
            List<String> modes = !background ? List.of("threads")
                    : sc.has("permits") ? List.of("threads") : List.of("threads", "async");
            List<String> backends = new ArrayList<>();
            for (JsonNode b : sc.get("backends")) {
                String backend = b.asText().equals("any") ? "redis" : b.asText();
                backends.add(backend);
                if (backend.equals("redis")) {
                    backends.addAll(variants.keySet());
                }
            }
            for (String backend : backends) {
              for (String mode : modes) {
                String title = sc.get("name").asText() + " on " + backend + (background ? " (" + mode + ")" : "");
                Variant variant = variants.get(backend);
                if (variant != null && variant.url() == null) {
                    tests.add(DynamicTest.dynamicTest(title, () -> Assumptions.assumeTrue(false, variant.unset())));
                    continue;
                }
                String url = variant != null ? variant.url() : switch (backend) {
                    case "redis" -> Servers.redisUrl();
                    case "zookeeper" -> Servers.zkUrl();
                    default -> throw new IllegalArgumentException(f + ": unknown backend " + backend);
                };
                CompletableFuture<Void> run = CompletableFuture.runAsync(() -> {
                    try {
                        new Run(sc, backend, url, mode).run();
                    } catch (Exception e) {
                        throw new java.util.concurrent.CompletionException(e);
                    }
                }, SCENARIOS);
                tests.add(DynamicTest.dynamicTest(title, () -> {
                    try {
                        run.get(3, TimeUnit.MINUTES);
                    } catch (ExecutionException e) {
                        Throwable cause = e.getCause() instanceof java.util.concurrent.CompletionException c
                                && c.getCause() != null ? c.getCause() : e.getCause();
                        throw new AssertionError(title + ": " + cause, cause);
                    }
                }));
              }
            }
        }
        return tests.stream();
    }

    /** The outcome name of an exception thrown by the public API. */
    private static String outcome(Throwable e, String illegalArgument) {
        if (e instanceof IllegalMonitorStateException) {
            return "not_held";
        }
        if (e instanceof LockLostException) {
            return "lost";
        }
        if (e instanceof LockConnectException) {
            return "connect_error";
        }
        if (e instanceof LockUpgradeRefusedException) {
            return "upgrade_refused";
        }
        if (e instanceof LockPermitsMismatchException) {
            return "permits_mismatch";
        }
        if (e instanceof IllegalArgumentException) {
            return illegalArgument;
        }
        return "other_error: " + e;
    }

    /** One scenario on one backend. */
    private static final class Run {
        final JsonNode sc;
        final String scenario;
        final String backend;
        final String url;
        final String mode;
        final String name;
        /** Where the server_* steps look at Redis: under Sentinel the master, on a cluster each slot's master. */
        final UnifiedJedis inspector;
        final List<LockClient> clients = new ArrayList<>();
        final List<DistributedLock> locks = new ArrayList<>();
        /** Each client's read-write lock of the same name (steps with a "mode"). */
        final List<DistributedReadWriteLock> rwLocks = new ArrayList<>();
        /** onLost notices per client's lock (one lock per client and scenario). */
        final List<AtomicLong> losses = new ArrayList<>();
        final Map<String, ExecutorService> owners = new HashMap<>();
        final Map<String, Long> tokens = new HashMap<>();
        final Map<String, Background> background = new HashMap<>();
        /** Per (client, owner): the client's loss count when that owner was granted. */
        final Map<String, Long> lossesAtGrant = new HashMap<>();
        /** The scenario's number of permits (semaphore scenarios), else 0. */
        final int permits;
        /** Per (client, owner, number of permits): that owner's semaphore object. */
        final Map<String, DistributedSemaphore> semaphores = new HashMap<>();
        /** Per (client, owner): the grant it holds, on which semaphore object and of how many permits. */
        final Map<String, Grant> grants = new HashMap<>();
        /** The lock steps' operation history (POLYLOCK_HISTORY_DIR), for histcheck. */
        final ConformanceHistory history;

        record Grant(DistributedSemaphore sem, int count) {}

        /**
         * A background acquire: the owner's thread in lockInterruptibly() (or in a semaphore's
         * acquire, {@code grant} then being what it asked for), or its lockAsync() future.
         */
        record Background(int client, int owner, DistributedLock lock, Future<String[]> waiting, CompletableFuture<Void> async,
                Grant grant, JsonNode step) {}

        Run(JsonNode sc, String backend, String url, String mode) {
            this.mode = mode;
            this.sc = sc;
            this.scenario = sc.get("name").asText();
            this.backend = backend;
            this.url = url;
            this.name = Servers.unique(url, "conformance-" + scenario);
            this.inspector = INSPECTORS.get(backend);
            this.permits = sc.path("permits").asInt(0);
            this.history = new ConformanceHistory(backend, name);
        }

        void run() throws Exception {
            ClientOptions opts = ClientOptions.defaults().withSessionTimeout(SESSION_TIMEOUT)
                    .withDebugFaultsForTests();
            if (sc.has("lease_ms")) {
                opts = opts.withLease(Duration.ofMillis(sc.get("lease_ms").asLong()));
            }
            try {
                for (int i = 0; i < sc.path("clients").asInt(0); i++) {
                    LockClient c = LockClient.connect(url, opts);
                    clients.add(c);
                    DistributedLock lock = c.newLock(name);
                    DistributedReadWriteLock rw = c.newReadWriteLock(name);
                    AtomicLong lost = new AtomicLong();
                    for (DistributedLock l : List.of(lock, rw.readLock(), rw.writeLock())) {
                        l.onLost(() -> {
                            synchronized (lost) {
                                lost.incrementAndGet();
                                lost.notifyAll();
                            }
                        });
                    }
                    locks.add(lock);
                    rwLocks.add(rw);
                    losses.add(lost);
                }
                int i = 0;
                for (JsonNode step : sc.get("steps")) {
                    step(step, scenario + " on " + backend + ", step " + i++ + " " + step);
                }
            } finally {
                for (ExecutorService e : owners.values()) {
                    e.shutdownNow();
                }
                for (LockClient c : clients) {
                    c.close();
                }
            }
        }

        /** Runs {@code body} on the owner's thread and waits for it. */
        <T> T as(int client, int owner, Callable<T> body) throws Exception {
            try {
                return thread(client, owner).submit(body).get(STEP_LIMIT.toMillis(), TimeUnit.MILLISECONDS);
            } catch (ExecutionException e) {
                if (e.getCause() instanceof Exception x) {
                    throw x;
                }
                throw e;
            }
        }

        ExecutorService thread(int client, int owner) {
            return owners.computeIfAbsent(client + "/" + owner, o -> Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "conformance-" + scenario + "-client/owner-" + o);
                t.setDaemon(true);
                return t;
            }));
        }

        /** A grant on the owner's thread: {"granted", token}, or the refusal's outcome name. */
        String[] acquireOnOwnerThread(DistributedLock lock, JsonNode timeoutMs) throws InterruptedException {
            try {
                if (timeoutMs == null || timeoutMs.isNull()) {
                    lock.lockInterruptibly();
                } else if (timeoutMs.asLong() == 0) {
                    if (!lock.tryLock()) {
                        return new String[] {"would_block"};
                    }
                } else if (!lock.tryLock(timeoutMs.asLong(), TimeUnit.MILLISECONDS)) {
                    return new String[] {"timeout"};
                }
            } catch (RuntimeException e) {
                return new String[] {outcome(e, "other_error: " + e)};
            }
            return new String[] {"granted", Long.toString(lock.fencingToken())};
        }

        /** A semaphore grant on the owner's thread: {"granted", token}, or the refusal's outcome name. */
        String[] acquirePermitsOnOwnerThread(Grant ask, JsonNode timeoutMs) throws InterruptedException {
            DistributedSemaphore sem = ask.sem();
            try {
                if (timeoutMs == null || timeoutMs.isNull()) {
                    sem.acquire(ask.count());
                } else if (timeoutMs.asLong() == 0) {
                    if (!sem.tryAcquire(ask.count())) {
                        return new String[] {"would_block"};
                    }
                } else if (!sem.tryAcquire(ask.count(), timeoutMs.asLong(), TimeUnit.MILLISECONDS)) {
                    return new String[] {"timeout"};
                }
            } catch (RuntimeException e) {
                return new String[] {outcome(e, "invalid_option")};
            }
            // One semaphore object per owner, and an owner holds one grant at a time: its newest is this one.
            return new String[] {"granted", Long.toString(sem.getFencingToken())};
        }

        /** What a permits step asks for: the owner's semaphore object of the step's number, and the count. */
        Grant ask(int c, int owner, JsonNode step) {
            int n = step.path("permits").asInt(permits);
            DistributedSemaphore sem = semaphores.computeIfAbsent(c + "/" + owner + "/" + n,
                    k -> clients.get(c).newSemaphore(name, n));
            return new Grant(sem, step.path("count").asInt(1));
        }

        /** The steps on the lock in {@code "mode": "permits"}: one grant per (client, owner). */
        void permitsStep(String op, int c, int owner, JsonNode step, String expect, String ctx) throws Exception {
            String key = c + "/" + owner;
            switch (op) {
                case "acquire" -> {
                    Grant ask = ask(c, owner, step);
                    long started = System.nanoTime();
                    history.acquireCall(c, owner, step, permits);
                    String[] r = as(c, owner, () -> acquirePermitsOnOwnerThread(ask, step.get("timeout_ms")));
                    history.acquireReturn(c, owner, step, r);
                    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
                    assertEquals(expect, r[0], ctx);
                    if (step.has("min_elapsed_ms")) {
                        assertTrue(elapsedMs >= step.get("min_elapsed_ms").asLong(),
                                ctx + ": gave up early, after " + elapsedMs + " ms");
                    }
                    if (r[0].equals("granted")) {
                        grants.put(key, ask);
                        long token = Long.parseLong(r[1]);
                        checkToken(step, token, ctx);
                        if (step.has("save_token")) {
                            tokens.put(step.get("save_token").asText(), token);
                        }
                    }
                }
                case "release" -> {
                    Grant g = grants.remove(key);
                    Grant release = g != null ? g : ask(c, owner, step);
                    history.releaseCall(c, owner, step);
                    String got = as(c, owner, () -> {
                        try {
                            release.sem().release(release.count());
                            return "ok";
                        } catch (IllegalArgumentException e) {
                            return "not_held"; // more than this owner's semaphore object holds
                        } catch (RuntimeException e) {
                            return outcome(e, "other_error: " + e);
                        }
                    });
                    history.releaseReturn(c, owner, step, got);
                    assertEquals(expect, got, ctx);
                }
                case "start_acquire" -> {
                    Grant ask = ask(c, owner, step);
                    history.acquireCall(c, owner, step, permits);
                    Future<String[]> waiting = thread(c, owner).submit(
                            () -> acquirePermitsOnOwnerThread(ask, step.get("timeout_ms")));
                    background.put(step.get("id").asText(), new Background(c, owner, null, waiting, null, ask, step));
                }
                case "await_lost" -> {
                    // Not expressible: no loss listener. Wait out one lease (the grant's renewal runs every
                    // third of it and finds the loss), so that the release expecting `lost` checks it.
                    // On ZooKeeper the loss is the session's end (expire_lease): wait out the session timeout.
                    boolean zkSession = backend.equals("zookeeper");
                    long lease = zkSession ? SESSION_TIMEOUT.toMillis() : sc.path("lease_ms").asLong(30_000);
                    long wait = Math.min(step.path("within_ms").asLong(10_000), lease + 300);
                    System.err.println("conformance: not expressible in Java: " + ctx + ": DistributedSemaphore "
                            + "has no loss listener (the runtime's Semaphore does not hand out a held grant's loss "
                            + "signal); waiting " + wait + " ms for the " + (zkSession ? "session's end" : "renewal")
                            + " to be seen, which the release that expects lost then checks");
                    Thread.sleep(wait);
                }
                default -> fail(ctx + ": " + op + " has no permits mode");
            }
        }

        void checkToken(JsonNode step, long token, String ctx) {
            if (step.has("token_eq")) {
                String k = step.get("token_eq").asText();
                assertEquals((long) tokens.get(k), token, ctx + ": token_eq " + k);
            }
            if (step.has("token_gt")) {
                String k = step.get("token_gt").asText();
                assertTrue(token > tokens.get(k), ctx + ": token " + token + " not > " + k + "=" + tokens.get(k));
            }
        }

        /** Client {@code c}'s lock in the step's mode: the mutex, or a half of the read-write lock. */
        DistributedLock lockFor(int c, JsonNode step) {
            return switch (step.path("mode").asText("")) {
                case "" -> locks.get(c);
                case "read" -> rwLocks.get(c).readLock();
                case "write" -> rwLocks.get(c).writeLock();
                default -> throw new IllegalArgumentException("unknown mode " + step.get("mode"));
            };
        }

        void step(JsonNode step, String ctx) throws Exception {
            String op = step.get("op").asText();
            int c = step.path("client").asInt(0);
            int owner = step.path("owner").asInt(0);
            String expect = step.path("expect").asText("");
            if (step.path("mode").asText("").equals("permits")) {
                permitsStep(op, c, owner, step, expect, ctx);
                return;
            }
            switch (op) {
                case "acquire" -> {
                    DistributedLock lock = lockFor(c, step);
                    long before = losses.get(c).get();
                    long started = System.nanoTime();
                    history.acquireCall(c, owner, step, permits);
                    String[] r = as(c, owner, () -> acquireOnOwnerThread(lock, step.get("timeout_ms")));
                    history.acquireReturn(c, owner, step, r);
                    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
                    assertEquals(expect, r[0], ctx);
                    if (step.has("min_elapsed_ms")) {
                        assertTrue(elapsedMs >= step.get("min_elapsed_ms").asLong(),
                                ctx + ": gave up early, after " + elapsedMs + " ms");
                    }
                    if (r[0].equals("granted")) {
                        long token = Long.parseLong(r[1]);
                        lossesAtGrant.put(c + "/" + owner, before);
                        checkToken(step, token, ctx);
                        if (step.has("save_token")) {
                            tokens.put(step.get("save_token").asText(), token);
                        }
                    }
                }
                case "release" -> {
                    DistributedLock lock = lockFor(c, step);
                    history.releaseCall(c, owner, step);
                    String got = as(c, owner, () -> {
                        try {
                            lock.unlock();
                            return "ok";
                        } catch (RuntimeException e) {
                            return outcome(e, "other_error: " + e);
                        }
                    });
                    history.releaseReturn(c, owner, step, got);
                    assertEquals(expect, got, ctx);
                }
                case "start_acquire" -> {
                    DistributedLock lock = lockFor(c, step);
                    history.acquireCall(c, owner, step, permits);
                    Background b = mode.equals("async")
                            ? new Background(c, owner, lock, null, as(c, owner, lock::lockAsync), null, step)
                            : new Background(c, owner, lock,
                                    thread(c, owner).submit(() -> acquireOnOwnerThread(lock, step.get("timeout_ms"))), null,
                                    null, step);
                    background.put(step.get("id").asText(), b);
                }
                case "await" -> {
                    Background b = background.remove(step.get("id").asText());
                    long within = step.path("within_ms").asLong(10_000);
                    String[] r;
                    try {
                        if (b.async() == null) {
                            r = b.waiting().get(within, TimeUnit.MILLISECONDS);
                        } else {
                            try {
                                b.async().get(within, TimeUnit.MILLISECONDS);
                                r = new String[] {"granted", Long.toString(as(b.client(), b.owner(), b.lock()::fencingToken))};
                            } catch (ExecutionException e) {
                                r = new String[] {outcome(e.getCause(), "other_error: " + e.getCause())};
                            }
                        }
                    } catch (TimeoutException e) {
                        throw new AssertionError(ctx + ": still waiting after " + within + " ms");
                    }
                    // Stamped when the step has the answer: later than the grant, which keeps the interval whole.
                    history.acquireReturn(b.client(), b.owner(), b.step(), r);
                    assertEquals(expect, r[0], ctx);
                    if (r[0].equals("granted")) {
                        if (b.grant() != null) {
                            grants.put(b.client() + "/" + b.owner(), b.grant());
                        }
                        checkToken(step, Long.parseLong(r[1]), ctx);
                    }
                }
                case "cancel" -> {
                    // Interrupts the owner's thread in lockInterruptibly(), which
                    // withdraws the acquire before it returns: wait for that.
                    Background b = background.remove(step.get("id").asText());
                    if (b.async() != null) {
                        assertTrue(b.async().cancel(true), ctx + ": the acquire had already completed");
                    } else {
                        b.waiting().cancel(true);
                        as(b.client(), b.owner(), () -> null);
                    }
                    // Whether it was granted before the cancel is unknown to the history: an error return.
                    history.acquireReturn(b.client(), b.owner(), b.step(), new String[] {"cancelled"});
                }
                case "hold_count" -> {
                    DistributedLock lock = lockFor(c, step);
                    if (background.values().stream().anyMatch(b -> b.client() == c && b.owner() == owner && b.waiting() != null)) {
                        System.err.println("conformance: not expressible in Java: " + ctx + " (" + mode
                                + " mode): the owner's thread is blocked in lockInterruptibly(), and getHoldCount() "
                                + "answers for the calling thread only; checked in async mode instead");
                        return;
                    }
                    int n = as(c, owner, lock::getHoldCount);
                    assertEquals(step.get("expect_count").asInt(), n, ctx);
                }
                case "server_state" -> assertEquals(expect.equals("held"), serverHeld(), ctx);
                case "server_clean" -> {
                    long within = step.path("within_ms").asLong(3000);
                    if (!eventually(within, this::serverClean)) {
                        fail(ctx + ": left on the server: " + leftovers());
                    }
                }
                case "server_waiters" -> {
                    long want = step.get("expect_count").asLong();
                    long within = step.path("within_ms").asLong(3000);
                    if (!eventually(within, () -> serverWaiters() == want)) {
                        fail(ctx + ": " + serverWaiters() + " waiters on the server");
                    }
                }
                case "server_permits" -> {
                    long want = step.get("expect_count").asLong();
                    long within = step.path("within_ms").asLong(3000);
                    if (!eventually(within, () -> serverPermits() == want)) {
                        fail(ctx + ": " + serverPermits() + " permits held on the server");
                    }
                }
                case "expire_lease" -> {
                    if (!backend.equals("zookeeper") && permits > 0) {
                        // Every held permit id expired: the next script reclaims it.
                        for (String id : inspector.zrange(permitTimeouts(), 0, -1)) {
                            inspector.zadd(permitTimeouts(), 0, id);
                        }
                    } else if (!backend.equals("zookeeper")) {
                        inspector.del(name);
                    } else {
                        clients.get(c).debugExpireSessionForTests();
                    }
                }
                case "await_lost" -> {
                    Long before = lossesAtGrant.get(c + "/" + owner);
                    assertTrue(before != null, ctx + ": await_lost needs a grant");
                    AtomicLong lost = losses.get(c);
                    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(step.path("within_ms").asLong(10_000));
                    synchronized (lost) {
                        while (lost.get() == before) {
                            long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                            if (left <= 0) {
                                fail(ctx + ": loss not reported");
                            }
                            lost.wait(left);
                        }
                    }
                    history.lost(c, owner, step);
                }
                case "lock_name" -> {
                    String lockName = step.get("name").asText();
                    String got;
                    LockClient temp = clients.isEmpty() ? LockClient.connect(url) : null;
                    try {
                        (temp != null ? temp : clients.get(0)).newLock(lockName);
                        got = "ok";
                    } catch (RuntimeException e) {
                        got = outcome(e, "invalid_name");
                    } finally {
                        if (temp != null) {
                            temp.close();
                        }
                    }
                    assertEquals(expect, got, ctx);
                }
                case "connect" -> {
                    String u = step.get("url").asText();
                    long within = step.path("within_ms").asLong(8000);
                    ClientOptions quick = ClientOptions.defaults().withConnectTimeout(Duration.ofSeconds(2));
                    Future<String> f = RUNNERS.submit(() -> {
                        try (LockClient ignored = LockClient.connect(u, quick)) {
                            return "ok";
                        } catch (RuntimeException e) {
                            return outcome(e, "invalid_url");
                        }
                    });
                    String got;
                    try {
                        got = f.get(within, TimeUnit.MILLISECONDS);
                    } catch (TimeoutException e) {
                        throw new AssertionError(ctx + ": connect hung");
                    }
                    assertEquals(expect, got, ctx);
                }
                case "sleep" -> Thread.sleep(step.get("ms").asLong());
                default -> fail(ctx + ": unknown op " + op);
            }
        }

        String zkPath() {
            return name.startsWith("/") ? name : "/" + name;
        }

        List<String> zkChildren() {
            return zkChildren(zkPath());
        }

        List<String> zkChildren(String path) {
            try {
                return Servers.zkChildren(zk, path);
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        }

        boolean serverHeld() {
            return backend.equals("zookeeper") ? !zkChildren().isEmpty() : inspector.exists(name);
        }

        long serverWaiters() {
            return backend.equals("zookeeper") ? Math.max(0, zkChildren().size() - 1)
                    : inspector.zcard("polylock_queue:{" + name + "}");
        }

        String leftovers() {
            if (backend.equals("zookeeper") && permits > 0) {
                // Curator's mutex and the lease nodes gone; the record of N (polylock_permits) stays.
                List<String> left = new ArrayList<>();
                for (String parent : List.of("/locks", "/leases")) {
                    for (String child : zkChildren(zkPath() + parent)) {
                        left.add(zkPath() + parent + "/" + child);
                    }
                }
                return left.toString();
            }
            if (backend.equals("zookeeper")) {
                return zkChildren().toString();
            }
            List<String> left = new ArrayList<>();
            List<String> keys = new ArrayList<>(List.of("polylock_queue:{" + name + "}",
                    "polylock_queue_deadline:{" + name + "}", "polylock_rwqueue:{" + name + "}",
                    "polylock_rwqueue_deadline:{" + name + "}"));
            if (permits > 0) {
                // The counter of free permits at the name stays, as Redisson's does; no permit may be held.
                keys.addAll(List.of("polylock_semqueue:{" + name + "}", "polylock_semqueue_deadline:{" + name + "}"));
                long held = serverPermits();
                if (held > 0) {
                    left.add(permitTimeouts() + " (" + held + " held)");
                }
            } else {
                keys.add(0, name);
            }
            for (String k : keys) {
                if (inspector.exists(k)) {
                    left.add(k);
                }
            }
            return left.toString();
        }

        /** Redisson's sorted set of held permit ids, scored by expiry: {@code {NAME}:timeout}. */
        String permitTimeouts() {
            return name.contains("{") ? name + ":timeout" : "{" + name + "}:timeout";
        }

        /** Permits held on the server, by anyone: Redisson's permit ids, or Curator's lease nodes. */
        long serverPermits() {
            if (backend.equals("zookeeper")) {
                return zkChildren(zkPath() + "/leases").size();
            }
            return inspector.zcard(permitTimeouts());
        }

        boolean serverClean() {
            return leftovers().equals("[]");
        }

        static boolean eventually(long withinMs, BooleanSupplier condition) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(withinMs);
            while (!condition.getAsBoolean()) {
                if (System.nanoTime() > deadline) {
                    return false;
                }
                Thread.sleep(20);
            }
            return true;
        }
    }
}
