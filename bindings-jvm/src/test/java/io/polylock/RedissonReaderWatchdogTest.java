package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.Redisson;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import redis.clients.jedis.Jedis;

/**
 * A polylock reader with a 120 s lease (it renews every 40 s) beside a
 * Redisson reader with Redisson's default 30 s {@code lockWatchdogTimeout},
 * on one {@code RReadWriteLock} name, and a polylock writer waiting.
 * Redisson's watchdog sets the hash and every reader's timeout key, ours
 * included, to 30 s every 10 s. When the Redisson reader unlocks (the hash
 * then lives as long as the longest timeout key left: ours, cut) or its
 * client shuts down without unlocking, the hash would run out before our
 * next renewal, and the writer would be granted while our reader still
 * believed it held the lock. The writer must never be granted before our
 * reader is told it lost the lock; here our reader, having seen the cut at
 * its first renewal, renews in time and keeps the lock.
 *
 * <p>The two ways the Redisson reader ends run at once, on two names: about
 * 90 s in all (the first renewal comes 40 s in; without the fix the writer
 * got in about 75 s in).
 */
@Timeout(180)
class RedissonReaderWatchdogTest {
    private static final Duration OUR_LEASE = Duration.ofSeconds(120);
    /** Redisson's default lockWatchdogTimeout, left as it is. */
    private static final long REDISSON_WATCHDOG_MS = 30_000;

    private final ExecutorService scenarios = Executors.newFixedThreadPool(2);
    private LockClient ourClient;
    private LockClient writerClient;

    @AfterEach
    void close() {
        scenarios.shutdownNow();
        if (ourClient != null) {
            ourClient.close();
        }
        if (writerClient != null) {
            writerClient.close();
        }
    }

    /** How the Redisson reader's hold ends. */
    enum End {
        UNLOCKS, CLIENT_SHUTS_DOWN
    }

    @Test
    void aWriterIsNeverGrantedBeforeOurReaderIsToldWhateverRedissonsReaderDoes() throws Exception {
        ourClient = LockClient.connect(Servers.redisUrl());
        writerClient = LockClient.connect(Servers.redisUrl());
        CompletableFuture<Void> unlocks = CompletableFuture.runAsync(() -> run(End.UNLOCKS), scenarios);
        CompletableFuture<Void> dies = CompletableFuture.runAsync(() -> run(End.CLIENT_SHUTS_DOWN), scenarios);
        // Both scenarios' failures, each in its own words.
        StringBuilder failures = new StringBuilder();
        for (CompletableFuture<Void> scenario : java.util.List.of(unlocks, dies)) {
            try {
                scenario.get(170, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                failures.append(e.getCause()).append('\n');
            }
        }
        assertEquals("", failures.toString());
    }

    private void run(End end) {
        try {
            new Mixed(end).play();
        } catch (Error e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /** One name: our reader, Redisson's reader, our writer, on a clock from {@code t0}. */
    private final class Mixed {
        private final End end;
        private final String name = Servers.unique(Servers.redisUrl(), "redisson-watchdog");
        /** polylock's and Redisson's locks are owned by a thread: each lives on one. */
        private final ExecutorService ourThread = Executors.newSingleThreadExecutor();
        private final ExecutorService redissonThread = Executors.newSingleThreadExecutor();
        private final RedissonClient redisson;
        private final DistributedReadWriteLock ours;
        /** When our reader was told it lost the lock, and when the writer got it (System.nanoTime), or -1. */
        private final AtomicLong lostAt = new AtomicLong(-1);
        private final AtomicLong writerGrantedAt = new AtomicLong(-1);
        private long t0;

        Mixed(End end) {
            this.end = end;
            Config config = new Config();
            config.useSingleServer().setAddress(Servers.redisUrl()).setConnectionMinimumIdleSize(1)
                    .setSubscriptionConnectionMinimumIdleSize(1);
            redisson = Redisson.create(config);
            ours = ourClient.newReadWriteLock(name, OUR_LEASE);
        }

        void play() throws Exception {
            try {
                playOn();
            } finally {
                ourThread.shutdownNow();
                redissonThread.shutdownNow();
                if (!redisson.isShutdown()) {
                    redisson.shutdown();
                }
            }
        }

        private void playOn() throws Exception {
            assertEquals(REDISSON_WATCHDOG_MS, redisson.getConfig().getLockWatchdogTimeout());
            RReadWriteLock theirs = redisson.getReadWriteLock(name);
            ours.readLock().onLost(() -> lostAt.compareAndSet(-1, System.nanoTime()));
            t0 = System.nanoTime();
            on(ourThread, () -> {
                ours.readLock().lock();
                return null;
            });
            String ourKey = "{" + name + "}:" + on(ourThread, () -> ours.readLock().holderIdOfCurrentThread())
                    + ":rwlock_timeout:1";

            sleepUntil(5_000);
            on(redissonThread, () -> {
                theirs.readLock().lock(); // no lease: Redisson's watchdog keeps it
                return null;
            });
            sleepUntil(6_000);
            DistributedLock writer = writerClient.newReadWriteLock(name).writeLock();
            CompletableFuture<Boolean> writerDone = CompletableFuture.supplyAsync(() -> {
                try {
                    boolean got = writer.tryLock(150, TimeUnit.SECONDS);
                    if (got) {
                        writerGrantedAt.set(System.nanoTime());
                        writer.unlock();
                    }
                    return got;
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });

            // Before our first renewal (40 s in): Redisson's watchdog has cut our key.
            sleepUntil(38_000);
            try (Jedis jedis = Servers.jedis()) {
                long left = jedis.pttl(ourKey);
                assertTrue(left > 0 && left <= REDISSON_WATCHDOG_MS,
                        end + ": Redisson's watchdog did not cut our timeout key (" + left + " ms left)");
            }

            sleepUntil(50_000);
            if (end == End.UNLOCKS) {
                on(redissonThread, () -> {
                    theirs.readLock().unlock();
                    return null;
                });
            } else {
                redisson.shutdown(); // no unlock, no more watchdog: its field stays
            }

            // Without the fix the cut hash ran out about 75 s in and the writer got in.
            sleepUntil(90_000);
            long granted = writerGrantedAt.get();
            long lost = lostAt.get();
            if (granted != -1) {
                assertTrue(lost != -1 && lost < granted, end + ": the writer was granted " + ms(granted)
                        + " ms in, our reader told it lost the lock " + (lost == -1 ? "never" : ms(lost) + " ms in"));
            } else {
                assertEquals(-1, lost, end + ": our reader lost the lock although the writer still waits");
                assertTrue(on(ourThread, () -> ours.readLock().isHeldByCurrentThread()), end + ": our reader");
                on(ourThread, () -> {
                    ours.readLock().unlock();
                    return null;
                });
            }
            assertTrue(writerDone.get(20, TimeUnit.SECONDS), end + ": the writer, once our reader is gone");
        }

        private long ms(long nanoTime) {
            return (nanoTime - t0) / 1_000_000;
        }

        private void sleepUntil(long msSinceT0) throws InterruptedException {
            long left = msSinceT0 - ms(System.nanoTime());
            if (left > 0) {
                Thread.sleep(left);
            }
        }
    }

    private static <T> T on(ExecutorService thread, Callable<T> call) throws Exception {
        return thread.submit(call).get(30, TimeUnit.SECONDS);
    }
}
