package io.polylock;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Stream;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * polylock and Redisson's RLock share the hash layout: each excludes the
 * other, and hand-offs complete both ways at once, well before the lease
 * would have run out: polylock -> Redisson (the release publishes on
 * Redisson's channel), Redisson -> polylock (a queued polylock waiter also
 * listens on Redisson's channel and tries again when Redisson's release
 * publishes there).
 *
 * <p>Every case runs in each way Redis is deployed: one server
 * (POLYLOCK_TEST_REDIS), a Sentinel set (POLYLOCK_TEST_SENTINEL, Redisson's
 * {@code useSentinelServers()}) and a Redis Cluster (POLYLOCK_TEST_CLUSTER,
 * Redisson's {@code useClusterServers()}), each with Redisson's default
 * settings for that mode: on a cluster that is sharded pub/sub, so its
 * waiters hear only an {@code SPUBLISH}. A mode whose variable is unset is
 * skipped, saying which command starts its servers.
 */
@Timeout(120)
class RedissonInteropTest {
    /** A polylock waiter or a Redisson waiter woken by notification is in well before this. */
    private static final long PROMPT_MS = 3_000;
    /** A Redisson holder's lease: ten times {@link #PROMPT_MS}, so only hearing its release is prompt. */
    private static final long REDISSON_LEASE_S = 30;

    private RedissonClient redisson;
    private LockClient client;
    /** RLock is owned by a thread: lock and unlock on this one. */
    private final ExecutorService redissonThread = Executors.newSingleThreadExecutor();

    /** One way of deploying Redis, as polylock (a URL) and Redisson (a config built from it) reach it. */
    record Mode(String name, String env, String start, Function<String, Config> redissonConfig) {
        String url() {
            String v = System.getenv(env);
            Assumptions.assumeTrue(v != null && !v.isEmpty(),
                    env + " is unset: start the " + name + " servers with " + start + " to run this mode");
            return v;
        }

        @Override
        public String toString() {
            return name;
        }
    }

    static Stream<Mode> modes() {
        return Stream.of(
                new Mode("standalone", "POLYLOCK_TEST_REDIS", "eval \"$(scripts/services start)\"", url -> {
                    Config config = new Config();
                    config.useSingleServer().setAddress(url).setConnectionMinimumIdleSize(1)
                            .setSubscriptionConnectionMinimumIdleSize(1);
                    return config;
                }),
                new Mode("sentinel", "POLYLOCK_TEST_SENTINEL", "eval \"$(scripts/services start --sentinel)\"",
                        url -> {
                            Config config = new Config();
                            config.useSentinelServers().setMasterName(masterName(url))
                                    .addSentinelAddress(redisAddresses(url));
                            return config;
                        }),
                new Mode("cluster", "POLYLOCK_TEST_CLUSTER", "eval \"$(scripts/services start --cluster)\"",
                        url -> {
                            Config config = new Config();
                            config.useClusterServers().addNodeAddress(redisAddresses(url));
                            return config;
                        }));
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

    /** Connects both clients to the mode's servers; returns polylock's URL. */
    private String connect(Mode mode) {
        String url = mode.url();
        redisson = Redisson.create(mode.redissonConfig().apply(url));
        client = LockClient.connect(url);
        return url;
    }

    @AfterEach
    void close() {
        redissonThread.shutdownNow();
        if (client != null) {
            client.close();
        }
        if (redisson != null) {
            redisson.shutdown();
        }
    }

    private <T> T onRedissonThread(Callable<T> call) throws Exception {
        return redissonThread.submit(call).get(40, TimeUnit.SECONDS);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void redissonHolderExcludesPolylockThenHandsOff(Mode mode) throws Exception {
        String name = Servers.unique(connect(mode), "redisson-first");
        RLock rlock = redisson.getLock(name);
        onRedissonThread(() -> {
            rlock.lock(REDISSON_LEASE_S, TimeUnit.SECONDS);
            return null;
        });
        DistributedLock lock = client.newLock(name);
        assertFalse(lock.tryLock(300, TimeUnit.MILLISECONDS), "polylock entered while Redisson holds");
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                boolean got = lock.tryLock(35, TimeUnit.SECONDS);
                if (got) {
                    lock.unlock();
                }
                return got;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(200);
        assertFalse(waiter.isDone(), "the polylock waiter did not wait");
        long ms = assertPolylockWokenByRedissonRelease(rlock, waiter);
        System.out.println(mode + ": Redisson -> polylock handoff: " + ms + " ms");
    }

    /**
     * Unlocks Redisson's hold and asserts the polylock waiter got the lock
     * promptly, far sooner than the Redisson lease: it heard the release.
     * Returns how long after the unlock it got it, in ms.
     */
    private long assertPolylockWokenByRedissonRelease(RLock rlock, CompletableFuture<Boolean> waiter)
            throws Exception {
        onRedissonThread(() -> {
            rlock.unlock();
            return null;
        });
        long released = System.nanoTime();
        assertTrue(waiter.get(REDISSON_LEASE_S + 10, TimeUnit.SECONDS), "handoff Redisson -> polylock");
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        assertTrue(ms < PROMPT_MS, "the polylock waiter slept " + ms + " ms after the Redisson release (lease "
                + REDISSON_LEASE_S + " s): it never heard it");
        return ms;
    }

    /**
     * polylock holds for 30 s; a Redisson waiter (told that TTL) is woken by
     * the release itself, well before the lease would have run out.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void polylockHolderExcludesRedissonThenHandsOff(Mode mode) throws Exception {
        String name = Servers.unique(connect(mode), "polylock-first");
        DistributedLock lock = client.newLock(name, Duration.ofSeconds(30));
        lock.lock();
        RLock rlock = redisson.getLock(name);
        assertFalse(onRedissonThread(() -> rlock.tryLock(300, 10_000, TimeUnit.MILLISECONDS)),
                "Redisson entered while polylock holds");
        CompletableFuture<Boolean> waiter = redissonWaiter(rlock);
        Thread.sleep(200);
        assertFalse(waiter.isDone(), "the Redisson waiter did not wait");
        assertWokenByRelease(lock, waiter);
    }

    /**
     * A name with a hash tag: Redisson names its channel
     * redisson_lock__channel:orders{42} (no added braces). A Redisson waiter
     * there hears polylock's release at once, not when the 30 s lease it
     * was told about would have run out.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void redissonWaiterOnABracedNameIsWokenByAPolylockRelease(Mode mode) throws Exception {
        String name = Servers.unique(connect(mode), "orders") + "{42}";
        DistributedLock lock = client.newLock(name, Duration.ofSeconds(30));
        lock.lock();
        RLock rlock = redisson.getLock(name);
        CompletableFuture<Boolean> waiter = redissonWaiter(rlock);
        Thread.sleep(500);
        assertFalse(waiter.isDone(), "the Redisson waiter did not wait");
        assertWokenByRelease(lock, waiter);
    }

    /** A Redisson waiter that takes the lock (10 s lease) within 45 s, then lets go. */
    private static CompletableFuture<Boolean> redissonWaiter(RLock rlock) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                boolean got = rlock.tryLock(45, 10, TimeUnit.SECONDS);
                if (got) {
                    rlock.unlock();
                }
                return got;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
    }

    /** Releases polylock's hold and asserts the Redisson waiter got the lock promptly. */
    private static void assertWokenByRelease(DistributedLock lock, CompletableFuture<Boolean> waiter)
            throws Exception {
        long released = System.nanoTime();
        lock.unlock();
        assertTrue(waiter.get(50, TimeUnit.SECONDS), "handoff polylock -> Redisson");
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        assertTrue(ms < PROMPT_MS, "the Redisson waiter slept " + ms + " ms after the release: it never heard it");
    }

    /**
     * The reverse on the same braced name: Redisson holds (30 s lease), a
     * polylock waiter queues, and Redisson's release, which publishes only on
     * Redisson's channel (redisson_lock__channel:orders{42}), lets it in at
     * once, never while Redisson holds.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void polylockWaiterOnABracedNameIsWokenByARedissonRelease(Mode mode) throws Exception {
        String name = Servers.unique(connect(mode), "orders") + "{42}";
        RLock rlock = redisson.getLock(name);
        onRedissonThread(() -> {
            rlock.lock(REDISSON_LEASE_S, TimeUnit.SECONDS);
            return null;
        });
        DistributedLock lock = client.newLock(name);
        assertFalse(lock.tryLock(300, TimeUnit.MILLISECONDS), "polylock entered while Redisson holds");
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                boolean got = lock.tryLock(REDISSON_LEASE_S + 5, TimeUnit.SECONDS);
                if (got) {
                    lock.unlock();
                }
                return got;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(200);
        assertFalse(waiter.isDone(), "the polylock waiter did not wait");
        assertPolylockWokenByRedissonRelease(rlock, waiter);
    }
}
