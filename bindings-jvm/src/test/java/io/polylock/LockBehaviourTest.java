package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** The java.util.concurrent.locks.Lock contract, on both backends. */
@Timeout(120)
class LockBehaviourTest {

    static java.util.stream.Stream<String> backends() {
        return Servers.both();
    }

    @ParameterizedTest
    @MethodSource("backends")
    void thirtyTwoThreadsOverFourClientsLoseNoUpdate(String url) throws Exception {
        String name = Servers.unique(url, "counter");
        List<LockClient> clients = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            clients.add(LockClient.connect(url));
        }
        try {
            long[] counter = {0}; // deliberately unsynchronised: only the lock protects it
            List<Thread> threads = new ArrayList<>();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            for (int t = 0; t < 32; t++) {
                java.util.concurrent.locks.Lock lock = clients.get(t % 4).newLock(name);
                Thread thread = new Thread(() -> {
                    try {
                        for (int i = 0; i < 100; i++) {
                            lock.lock();
                            try {
                                long v = counter[0];
                                Thread.yield();
                                counter[0] = v + 1;
                            } finally {
                                lock.unlock();
                            }
                        }
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    }
                });
                threads.add(thread);
                thread.start();
            }
            for (Thread thread : threads) {
                thread.join();
            }
            if (failure.get() != null) {
                throw new AssertionError("a worker failed", failure.get());
            }
            assertEquals(3200, counter[0], "lost updates");
        } finally {
            clients.forEach(LockClient::close);
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    void reentrantPerThreadLikeReentrantLock(String url) throws Exception {
        try (LockClient a = LockClient.connect(url); LockClient b = LockClient.connect(url)) {
            String name = Servers.unique(url, "reentry");
            DistributedLock lock = a.newLock(name);
            DistributedLock theirs = b.newLock(name);
            assertFalse(lock.isHeldByCurrentThread());
            lock.lock();
            long token = lock.fencingToken();
            assertTrue(lock.tryLock());
            assertTrue(lock.tryLock(1, TimeUnit.SECONDS));
            assertEquals(3, lock.getHoldCount());
            assertEquals(token, lock.fencingToken(), "re-entry is the same grant");

            // Another thread of the same client is another owner.
            CompletableFuture<Boolean> otherThread = CompletableFuture.supplyAsync(() -> {
                boolean got = lock.tryLock();
                assertThrows(IllegalMonitorStateException.class, lock::unlock);
                return got;
            });
            assertFalse(otherThread.get(10, TimeUnit.SECONDS), "another thread must not enter");

            lock.unlock();
            lock.unlock();
            assertEquals(1, lock.getHoldCount());
            assertFalse(theirs.tryLock(), "still held after 2 of 3 unlocks");
            lock.unlock();
            assertEquals(0, lock.getHoldCount());
            assertThrows(IllegalMonitorStateException.class, lock::unlock, "unlock when not held");
            assertThrows(IllegalMonitorStateException.class, lock::fencingToken);

            assertTrue(theirs.tryLock(10, TimeUnit.SECONDS));
            assertTrue(theirs.fencingToken() > token, "fencing tokens increase");
            theirs.unlock();
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    void tryLockTimesOutAndLeavesNothing(String url) throws Exception {
        try (LockClient holder = LockClient.connect(url); LockClient waiter = LockClient.connect(url)) {
            String name = Servers.unique(url, "timeout");
            DistributedLock held = holder.newLock(name);
            held.lock();
            DistributedLock lock = waiter.newLock(name);
            long started = System.nanoTime();
            assertFalse(lock.tryLock(300, TimeUnit.MILLISECONDS));
            assertTrue(System.nanoTime() - started >= TimeUnit.MILLISECONDS.toNanos(300), "gave up early");
            assertFalse(lock.tryLock(), "no-wait try");
            assertFalse(lock.isHeldByCurrentThread());
            assertOnlyHolderLeft(url, name, waiter);
            held.unlock();
            assertTrue(lock.tryLock(10, TimeUnit.SECONDS), "free after the holder's unlock");
            lock.unlock();
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    void interruptEndsLockInterruptiblyAndLeavesNothing(String url) throws Exception {
        try (LockClient holder = LockClient.connect(url); LockClient waiter = LockClient.connect(url)) {
            String name = Servers.unique(url, "interrupt");
            DistributedLock held = holder.newLock(name);
            held.lock();
            DistributedLock lock = waiter.newLock(name);
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            CountDownLatch waiting = new CountDownLatch(1);
            Thread t = new Thread(() -> {
                try {
                    waiting.countDown();
                    lock.lockInterruptibly();
                    outcome.set(new AssertionError("acquired a held lock"));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            t.start();
            waiting.await();
            // Let the waiter register on the server: its interrupt must withdraw it.
            Servers.eventually("the waiter is queued", () -> contenders(url, name) >= 2 || !t.isAlive());
            long interruptedAt = System.nanoTime();
            t.interrupt();
            t.join(5_000);
            long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - interruptedAt);
            assertFalse(t.isAlive(), "the interrupt did not end the wait");
            assertTrue(outcome.get() instanceof InterruptedException, "got " + outcome.get());
            assertTrue(elapsedMs < 1000, "took " + elapsedMs + " ms");
            assertFalse(lock.isLocked(), "the interrupted waiter holds nothing");
            held.unlock();
            // The withdrawn waiter is not granted: nothing of ours is left once the holder is gone.
            Servers.eventually("nothing left after the holder's unlock", () -> contenders(url, name) == 0);
            assertFalse(lock.isLocked());
        }
    }

    /**
     * The strict form of the interrupt test: the withdrawn waiter leaves the
     * server queue while the holder still holds, and before
     * lockInterruptibly() throws (looked at at once, as after Curator's and
     * Redisson's interrupted acquires).
     */
    @ParameterizedTest
    @MethodSource("backends")
    void interruptWithdrawsTheWaiterWhileTheLockIsStillHeld(String url) throws Exception {
        try (LockClient holder = LockClient.connect(url); LockClient waiter = LockClient.connect(url)) {
            String name = Servers.unique(url, "interrupt-strict");
            DistributedLock held = holder.newLock(name);
            held.lock();
            DistributedLock lock = waiter.newLock(name);
            Thread t = new Thread(() -> {
                try {
                    lock.lockInterruptibly();
                } catch (InterruptedException expected) {
                    // the point of the test
                }
            });
            t.start();
            Servers.eventually("the waiter is queued", () -> contenders(url, name) >= 2);
            t.interrupt();
            t.join(5_000);
            assertEquals(1, contenders(url, name), "the interrupted waiter is still queued: " + describe(url, name));
            assertOnlyHolderLeft(url, name, waiter);
            held.unlock();
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    void lockAsyncCompletesForTheCallingThread(String url) throws Exception {
        try (LockClient holder = LockClient.connect(url); LockClient client = LockClient.connect(url)) {
            String name = Servers.unique(url, "async");
            DistributedLock held = holder.newLock(name);
            held.lock();
            DistributedLock lock = client.newLock(name);
            CompletableFuture<Void> f = lock.lockAsync();
            assertFalse(waitDone(f, 300), "completed while another client holds it");
            held.unlock();
            f.get(10, TimeUnit.SECONDS);
            assertTrue(lock.isHeldByCurrentThread(), "the caller of lockAsync() is the owner");
            assertTrue(lock.fencingToken() > 0);
            lock.unlock();

            // Cancelling a pending lockAsync withdraws it.
            held.lock();
            CompletableFuture<Void> cancelled = lock.lockAsync();
            assertTrue(cancelled.cancel(true));
            held.unlock();
            Servers.eventually("the cancelled acquire is withdrawn", () -> contenders(url, name) == 0);
            assertTrue(lock.tryLock(10, TimeUnit.SECONDS));
            assertEquals(1, lock.getHoldCount(), "the cancelled acquire left no hold");
            lock.unlock();
        }
    }

    @Test
    void badInputGivesIllegalArgumentException() {
        IllegalArgumentException url = assertThrows(IllegalArgumentException.class,
                () -> LockClient.connect("mysql://127.0.0.1:3306"));
        assertTrue(url.getMessage().contains("mysql"), url.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LockClient.connect("redis://"));
        try (LockClient client = LockClient.connect(Servers.redisUrl())) {
            IllegalArgumentException name = assertThrows(IllegalArgumentException.class, () -> client.newLock(""));
            assertTrue(name.getMessage().contains("empty"), name.getMessage());
            assertThrows(IllegalArgumentException.class, () -> client.newLock("x".repeat(100_000)));
            assertThrows(IllegalArgumentException.class, () -> client.newLock("lease", Duration.ZERO));
            assertThrows(UnsupportedOperationException.class, () -> client.newLock("c").newCondition());
            assertThrows(IllegalArgumentException.class, client::debugExpireSessionForTests,
                    "session expiry is ZooKeeper's");
        }
        try (LockClient zk = LockClient.connect(Servers.zkUrl())) {
            assertThrows(IllegalArgumentException.class, () -> zk.newLock("no-leading-slash//double"));
        }
    }

    @Test
    void unreachableServerGivesLockConnectExceptionNamingTheAddress() {
        ClientOptions fast = ClientOptions.defaults().withConnectTimeout(Duration.ofSeconds(2));
        for (String url : List.of("redis://127.0.0.1:1", "zk://127.0.0.1:1")) {
            LockConnectException e = assertThrows(LockConnectException.class, () -> LockClient.connect(url, fast));
            assertTrue(e.getMessage().contains("127.0.0.1:1"), e.getMessage());
            assertEquals("127.0.0.1:1", e.address(), "the address, passed as a field");
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    void closeReleasesHoldsAndFailsLaterCalls(String url) throws Exception {
        String name = Servers.unique(url, "close");
        LockClient client = LockClient.connect(url);
        DistributedLock lock = client.newLock(name);
        lock.lock();
        client.close();
        client.close(); // idempotent
        assertThrows(LockClosedException.class, () -> client.newLock(name));
        assertThrows(LockClosedException.class, lock::lock);
        try (LockClient other = LockClient.connect(url)) {
            DistributedLock theirs = other.newLock(name);
            assertTrue(theirs.tryLock(10, TimeUnit.SECONDS), "close() released the hold");
            theirs.unlock();
        }
    }

    // ---- helpers ---------------------------------------------------------

    private static boolean waitDone(CompletableFuture<?> f, long millis) throws InterruptedException {
        try {
            f.get(millis, TimeUnit.MILLISECONDS);
            return true;
        } catch (java.util.concurrent.TimeoutException e) {
            return false;
        } catch (java.util.concurrent.ExecutionException e) {
            throw new AssertionError(e.getCause());
        }
    }

    /** Contenders on the server: ZooKeeper nodes, or Redis holder + queued waiters. */
    static int contenders(String url, String name) {
        try {
            if (Servers.isZk(url)) {
                try (var zk = new AutoCloseableZk()) {
                    return Servers.zkChildren(zk.zk, name).size();
                }
            }
            try (var jedis = Servers.jedis()) {
                int holder = jedis.exists(name) ? 1 : 0;
                return holder + (int) jedis.zcard("polylock_queue:{" + name + "}");
            }
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }

    /** What the server has for a lock, for failure messages. */
    static String describe(String url, String name) {
        try {
            if (Servers.isZk(url)) {
                try (var zk = new AutoCloseableZk()) {
                    return "children " + Servers.zkChildren(zk.zk, name);
                }
            }
            try (var jedis = Servers.jedis()) {
                return "hash " + jedis.hgetAll(name) + ", queue " + jedis.zrangeWithScores("polylock_queue:{" + name + "}", 0, -1);
            }
        } catch (Exception e) {
            return e.toString();
        }
    }

    /** The waiter client withdrew everything: only the holder remains. */
    static void assertOnlyHolderLeft(String url, String name, LockClient waiter) throws Exception {
        try {
            Servers.eventually("only the holder left on " + name, () -> contenders(url, name) == 1);
        } catch (AssertionError e) {
            throw new AssertionError(e.getMessage() + "; on the server: " + describe(url, name), e);
        }
        if (!Servers.isZk(url)) {
            try (var jedis = Servers.jedis()) {
                for (String field : jedis.hkeys(name)) {
                    assertFalse(field.startsWith(waiter.id()), "the waiter holds " + field);
                }
            }
        }
    }

    private static final class AutoCloseableZk implements AutoCloseable {
        final org.apache.zookeeper.ZooKeeper zk;

        AutoCloseableZk() throws Exception {
            zk = Servers.zooKeeper();
        }

        @Override
        public void close() {
            try {
                zk.close();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
