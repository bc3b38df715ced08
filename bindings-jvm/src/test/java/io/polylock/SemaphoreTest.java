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
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import redis.clients.jedis.Jedis;

/**
 * {@link DistributedSemaphore} against the real Redis: the
 * {@code java.util.concurrent.Semaphore} contract where it applies (counted
 * permits, k at once, release from any thread, timeouts, interrupts), the
 * typed refusal of a client with another number of permits, and bad counts.
 * What the server holds is read directly: the permit ids in the sorted set
 * {@code {NAME}:timeout}, the wait queue {@code polylock_semqueue:{NAME}}.
 */
@Timeout(120)
class SemaphoreTest {
    private LockClient a;
    private LockClient b;
    private Jedis redis;
    private String name;

    @BeforeEach
    void connect() {
        a = LockClient.connect(Servers.redisUrl());
        b = LockClient.connect(Servers.redisUrl());
        redis = Servers.jedis();
        name = Servers.unique(Servers.redisUrl(), "semaphore");
    }

    @AfterEach
    void close() {
        a.close();
        b.close();
        redis.close();
    }

    /** Permits held on the server, by anyone. */
    private long serverPermits() {
        return redis.zcard("{" + name + "}:timeout");
    }

    private boolean queueLeft() {
        return redis.exists("polylock_semqueue:{" + name + "}") || redis.exists("polylock_semqueue_deadline:{" + name + "}");
    }

    @Test
    void permitsAreCountedAcrossClientsAndTakenKAtOnce() throws Exception {
        DistributedSemaphore ours = a.newSemaphore(name, 3);
        DistributedSemaphore theirs = b.newSemaphore(name, 3);
        assertEquals(3, ours.getPermits());
        assertEquals(name, ours.getName());
        assertEquals(3, theirs.availablePermits(), "a fresh semaphore has every permit free");
        ours.acquire(2);
        long first = ours.getFencingToken();
        assertEquals(2, ours.getHeldPermits());
        assertEquals(1, theirs.availablePermits(), "another client's view of the free permits");
        assertEquals(2, serverPermits(), "a grant of 2 holds 2 permit ids on the server");
        assertFalse(theirs.tryAcquire(2), "2 granted while only 1 is free");
        assertTrue(theirs.tryAcquire(), "1 of 1 free not granted");
        assertTrue(theirs.getFencingToken() > first, "tokens grow");
        assertFalse(ours.tryAcquire(), "a 4th permit of 3");
        assertFalse(theirs.tryAcquire(1, 200, TimeUnit.MILLISECONDS), "a 4th permit of 3, waiting");
        assertEquals(3, serverPermits());
        ours.release(2);
        assertEquals(0, ours.getHeldPermits());
        assertEquals(1, serverPermits());
        assertTrue(ours.tryAcquire(2), "2 freed, 2 not granted");
        assertThrows(IllegalArgumentException.class, () -> ours.release(1), "1 of a grant of 2 released");
        assertEquals(2, ours.getHeldPermits(), "a refused release gave something back");
        ours.release(2);
        theirs.release();
        assertEquals(0, serverPermits());
        assertThrows(IllegalMonitorStateException.class, ours::getFencingToken);
        Servers.eventually("no queue left", () -> !queueLeft());
    }

    @Test
    void neverMoreHoldersThanPermits() throws Exception {
        int permits = 3;
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            // One object per thread: release(k) gives back that object's newest grants, which
            // on an object shared by threads asking for other counts could be another size.
            DistributedSemaphore sem = (t % 2 == 0 ? a : b).newSemaphore(name, permits);
            int k = t % 4 == 3 ? 2 : 1; // some ask for 2 at once
            Thread thread = new Thread(() -> {
                try {
                    for (int i = 0; i < 10; i++) {
                        sem.acquire(k);
                        int now = inside.addAndGet(k);
                        most.accumulateAndGet(now, Math::max);
                        Thread.sleep(5);
                        inside.addAndGet(-k);
                        sem.release(k);
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
        assertTrue(most.get() <= permits, most.get() + " permits held at once of " + permits);
        assertTrue(most.get() > 1, "never more than one holder: the permits were not shared");
        assertEquals(0, serverPermits());
    }

    @Test
    void anotherThreadReleasesAndWakesAWaiter() throws Exception {
        DistributedSemaphore ours = a.newSemaphore(name, 1);
        DistributedSemaphore theirs = b.newSemaphore(name, 1);
        Thread acquirer = new Thread(() -> ours.acquireUninterruptibly());
        acquirer.start();
        acquirer.join();
        assertEquals(1, ours.getHeldPermits());
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                return theirs.tryAcquire(20, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(300);
        assertFalse(waiter.isDone(), "granted while the one permit is held");
        long released = System.nanoTime();
        ours.release(); // this thread did not acquire: permits are the semaphore's, not a thread's
        assertTrue(waiter.get(20, TimeUnit.SECONDS));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - released);
        assertTrue(ms < 3000, "the waiter was granted " + ms + " ms after the release");
        theirs.release();
        assertThrows(IllegalArgumentException.class, theirs::release, "released a permit not held");
    }

    @Test
    void aTimedOutAskLeavesNothing() throws Exception {
        DistributedSemaphore ours = a.newSemaphore(name, 1);
        DistributedSemaphore theirs = b.newSemaphore(name, 1);
        ours.acquire();
        long started = System.nanoTime();
        assertFalse(theirs.tryAcquire(1, 400, TimeUnit.MILLISECONDS));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        assertTrue(ms >= 350, "gave up after " + ms + " ms of 400");
        assertEquals(0, theirs.getHeldPermits());
        Servers.eventually("the timed-out ask leaves the queue", () -> !queueLeft());
        ours.release();
        Thread.sleep(200);
        assertEquals(0, serverPermits(), "the timed-out ask was granted after all");
        assertTrue(theirs.tryAcquire(), "the freed permit not granted");
        theirs.release();
    }

    @Test
    void anInterruptWithdrawsTheWait() throws Exception {
        DistributedSemaphore ours = a.newSemaphore(name, 2);
        DistributedSemaphore theirs = b.newSemaphore(name, 2);
        ours.acquire(2);
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(1);
        Thread waiter = new Thread(() -> {
            try {
                theirs.acquire();
            } catch (Throwable e) {
                thrown.set(e);
            } finally {
                done.countDown();
            }
        });
        waiter.start();
        Servers.eventually("the waiter queues", () -> redis.exists("polylock_semqueue:{" + name + "}"));
        long interrupted = System.nanoTime();
        waiter.interrupt();
        assertTrue(done.await(5, TimeUnit.SECONDS), "the interrupt did not end the wait");
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - interrupted);
        assertTrue(thrown.get() instanceof InterruptedException, "threw " + thrown.get());
        assertTrue(ms < 1000, "took " + ms + " ms to answer the interrupt");
        assertFalse(queueLeft(), "the withdrawn wait is still queued");
        ours.release(2);
        Thread.sleep(200);
        assertEquals(0, serverPermits(), "the withdrawn wait was granted");
        assertEquals(0, theirs.getHeldPermits());

        // An already interrupted thread does not wait at all; an uninterruptible acquire keeps the interrupt.
        Thread.currentThread().interrupt();
        assertThrows(InterruptedException.class, () -> theirs.acquire());
        Thread.currentThread().interrupt();
        theirs.acquireUninterruptibly(2);
        assertTrue(Thread.interrupted(), "the interrupt was not kept");
        theirs.release(2);
    }

    @Test
    void anotherNumberOfPermitsIsRefusedAndTakesNothing() throws Exception {
        DistributedSemaphore ours = a.newSemaphore(name, 3);
        DistributedSemaphore wrong = b.newSemaphore(name, 4);
        ours.acquire();
        LockPermitsMismatchException e = assertThrows(LockPermitsMismatchException.class,
                () -> wrong.tryAcquire(1, 1, TimeUnit.SECONDS));
        assertEquals(3, e.getServerPermits());
        assertEquals(4, e.getPermits());
        assertEquals(name, e.lockName());
        assertTrue(e instanceof LockException);
        assertThrows(LockPermitsMismatchException.class, wrong::tryAcquire);
        assertEquals(0, wrong.getHeldPermits());
        assertEquals(1, serverPermits(), "the refused client took a permit");
        assertFalse(queueLeft(), "the refused client is queued");
        DistributedSemaphore right = b.newSemaphore(name, 3);
        assertTrue(right.tryAcquire(2), "the two free permits");
        right.release(2);
        ours.release();
    }

    @Test
    void badCountsAreIllegalArguments() throws Exception {
        DistributedSemaphore sem = a.newSemaphore(name, 3);
        assertThrows(IllegalArgumentException.class, () -> sem.acquire(0));
        assertThrows(IllegalArgumentException.class, () -> sem.acquire(4));
        assertThrows(IllegalArgumentException.class, () -> sem.tryAcquire(-1));
        assertThrows(IllegalArgumentException.class, () -> sem.tryAcquire(4, 1, TimeUnit.SECONDS));
        assertThrows(IllegalArgumentException.class, () -> sem.release(-1));
        assertThrows(IllegalArgumentException.class, () -> sem.release(1), "released a permit never taken");
        assertThrows(IllegalArgumentException.class, () -> a.newSemaphore(name, 0));
        assertThrows(IllegalArgumentException.class, () -> a.newSemaphore(name, -2));
        assertThrows(IllegalArgumentException.class, () -> a.newSemaphore("", 2));
        assertEquals(0, serverPermits());
        assertFalse(queueLeft());
        assertTrue(sem.tryAcquire(3), "all permits after the refusals");
        sem.release(3);
    }

    @Test
    void aLostGrantIsReportedByItsRelease() throws Exception {
        DistributedSemaphore ours = a.newSemaphore(name, 1, Duration.ofSeconds(1));
        ours.acquire();
        for (String id : redis.zrange("{" + name + "}:timeout", 0, -1)) {
            redis.zadd("{" + name + "}:timeout", 0, id); // expired: the next script reclaims it
        }
        DistributedSemaphore theirs = b.newSemaphore(name, 1);
        assertTrue(theirs.tryAcquire(5, TimeUnit.SECONDS), "the expired permit was not reclaimed");
        // A release reports a loss its grant's renewal (every third of the lease) found; one
        // that merely finds the permit gone is a release like any (as the lock's).
        Thread.sleep(1500);
        LockLostException e = assertThrows(LockLostException.class, ours::release);
        assertEquals(name, e.lockName());
        assertEquals(0, ours.getHeldPermits());
        theirs.release();
    }

    @Test
    void anUnreachableSemaphoreGivesItsPermitsBack() throws Exception {
        acquireAndForget();
        assertEquals(1, serverPermits());
        Servers.eventually("the forgotten semaphore's permit is given back", () -> {
            System.gc();
            return serverPermits() == 0;
        });
        assertTrue(b.newSemaphore(name, 1).tryAcquire(), "the permit given back");
    }

    private void acquireAndForget() throws InterruptedException {
        a.newSemaphore(name, 1).acquire();
    }

    @Test
    void aClosedClientsSemaphoreThrowsLockClosed() {
        DistributedSemaphore sem = a.newSemaphore(name, 2);
        a.close();
        assertThrows(LockClosedException.class, sem::tryAcquire);
        assertThrows(LockClosedException.class, () -> a.newSemaphore(name, 2));
    }
}
