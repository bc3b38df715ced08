package io.polylock;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * polylock and Redisson's RLock share the hash layout: each excludes the
 * other, and hand-offs complete both ways (Redisson -> polylock within the
 * Redisson lease at worst, as polylock waiters listen on their own channel).
 */
@Timeout(120)
class RedissonInteropTest {
    private RedissonClient redisson;
    private LockClient client;
    /** RLock is owned by a thread: lock and unlock on this one. */
    private final ExecutorService redissonThread = Executors.newSingleThreadExecutor();

    @BeforeEach
    void connect() {
        Config config = new Config();
        config.useSingleServer().setAddress(Servers.redisUrl()).setConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionMinimumIdleSize(1);
        redisson = Redisson.create(config);
        client = LockClient.connect(Servers.redisUrl());
    }

    @AfterEach
    void close() {
        redissonThread.shutdownNow();
        client.close();
        redisson.shutdown();
    }

    private <T> T onRedissonThread(java.util.concurrent.Callable<T> call) throws Exception {
        return redissonThread.submit(call).get(40, TimeUnit.SECONDS);
    }

    @Test
    void redissonHolderExcludesPolylockThenHandsOff() throws Exception {
        String name = Servers.unique(Servers.redisUrl(), "redisson-first");
        RLock rlock = redisson.getLock(name);
        onRedissonThread(() -> {
            rlock.lock(5, TimeUnit.SECONDS); // a short lease bounds the handoff
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
        onRedissonThread(() -> {
            rlock.unlock();
            return null;
        });
        long started = System.nanoTime();
        assertTrue(waiter.get(40, TimeUnit.SECONDS), "handoff Redisson -> polylock");
        System.out.println("Redisson -> polylock handoff: "
                + Duration.ofNanos(System.nanoTime() - started).toMillis() + " ms");
    }

    @Test
    void polylockHolderExcludesRedissonThenHandsOff() throws Exception {
        String name = Servers.unique(Servers.redisUrl(), "polylock-first");
        DistributedLock lock = client.newLock(name);
        lock.lock();
        RLock rlock = redisson.getLock(name);
        assertFalse(onRedissonThread(() -> rlock.tryLock(300, 10_000, TimeUnit.MILLISECONDS)),
                "Redisson entered while polylock holds");
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                boolean got = rlock.tryLock(20, 10, TimeUnit.SECONDS);
                if (got) {
                    rlock.unlock();
                }
                return got;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(200);
        assertFalse(waiter.isDone(), "the Redisson waiter did not wait");
        lock.unlock();
        assertTrue(waiter.get(25, TimeUnit.SECONDS), "handoff polylock -> Redisson");
    }

    /**
     * A name with a hash tag: Redisson names its channel
     * redisson_lock__channel:orders{42} (no added braces). A Redisson waiter
     * there hears polylock's release at once, not when the 30 s lease it
     * was told about would have run out.
     */
    @Test
    void redissonWaiterOnABracedNameIsWokenByAPolylockRelease() throws Exception {
        String name = Servers.unique(Servers.redisUrl(), "orders") + "{42}";
        DistributedLock lock = client.newLock(name, Duration.ofSeconds(30));
        lock.lock();
        RLock rlock = redisson.getLock(name);
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
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
        Thread.sleep(500);
        assertFalse(waiter.isDone(), "the Redisson waiter did not wait");
        long released = System.nanoTime();
        lock.unlock();
        assertTrue(waiter.get(50, TimeUnit.SECONDS), "handoff polylock -> Redisson");
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        assertTrue(ms < 3_000, "the Redisson waiter slept " + ms + " ms after the release: it never heard it");
    }

    /**
     * The reverse on the same braced name: Redisson holds, a polylock waiter
     * queues, and Redisson's release lets it in within the Redisson lease
     * (polylock waiters listen on their own channel, so a Redisson release,
     * which publishes only on Redisson's, is found by their retry at the
     * holder's expiry), never later and never while Redisson holds.
     */
    @Test
    void polylockWaiterOnABracedNameGetsARedissonLockWithinItsLease() throws Exception {
        String name = Servers.unique(Servers.redisUrl(), "orders") + "{42}";
        RLock rlock = redisson.getLock(name);
        onRedissonThread(() -> {
            rlock.lock(3, TimeUnit.SECONDS);
            return null;
        });
        long locked = System.nanoTime();
        DistributedLock lock = client.newLock(name);
        assertFalse(lock.tryLock(300, TimeUnit.MILLISECONDS), "polylock entered while Redisson holds");
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                boolean got = lock.tryLock(20, TimeUnit.SECONDS);
                if (got) {
                    lock.unlock();
                }
                return got;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        onRedissonThread(() -> {
            rlock.unlock();
            return null;
        });
        assertTrue(waiter.get(25, TimeUnit.SECONDS), "handoff Redisson -> polylock");
        long ms = Duration.ofNanos(System.nanoTime() - locked).toMillis();
        assertTrue(ms < 3_000 + 1_000, "granted " + ms + " ms after Redisson locked with a 3 s lease");
    }
}
