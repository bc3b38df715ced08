package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.redisson.Redisson;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;

/**
 * polylock's semaphore and Redisson's {@code RPermitExpirableSemaphore} on
 * one name: a Redisson client sets the permits ({@code trySetPermits(N)}),
 * and both sides' grants count together against N; each side's release wakes
 * the other's waiter at once (Redisson's waiters listen on
 * {@code redisson_sc:{NAME}}, polylock's hear that channel too); a polylock
 * semaphore made with another N than Redisson's is refused. Runs in each
 * Redis mode of {@link RedissonInteropTest#modes()} (one server, Sentinel,
 * Cluster with Redisson's default sharded pub/sub), skipping those whose
 * servers are not named.
 */
@Timeout(120)
class SemaphoreInteropTest {
    /** A waiter woken by the other side's release is in well before this. */
    private static final long PROMPT_MS = 3_000;

    private RedissonClient redisson;
    private LockClient client;

    @AfterEach
    void close() {
        if (client != null) {
            client.close();
        }
        if (redisson != null) {
            redisson.shutdown();
        }
    }

    static java.util.stream.Stream<RedissonInteropTest.Mode> modes() {
        return RedissonInteropTest.modes();
    }

    /** Connects both clients; Redisson sets {@code permits} on a fresh name, returned. */
    private String connect(RedissonInteropTest.Mode mode, int permits) {
        String url = mode.url();
        redisson = Redisson.create(mode.redissonConfig().apply(url));
        client = LockClient.connect(url);
        String name = Servers.unique(url, "redisson-semaphore");
        assertTrue(redisson.getPermitExpirableSemaphore(name).trySetPermits(permits));
        return name;
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void bothSidesPermitsCountTogether(RedissonInteropTest.Mode mode) throws Exception {
        String name = connect(mode, 3);
        RPermitExpirableSemaphore theirs = redisson.getPermitExpirableSemaphore(name);
        DistributedSemaphore ours = client.newSemaphore(name, 3);

        // Redisson holds N-1: polylock gets the one left, and no more.
        List<String> two = theirs.tryAcquire(2, 0, 60_000, TimeUnit.MILLISECONDS);
        assertNotNull(two, "Redisson did not get 2 of 3");
        assertFalse(ours.tryAcquire(2), "polylock got 2 while Redisson holds 2 of 3");
        assertTrue(ours.tryAcquire(), "polylock did not get the 1 permit Redisson left");
        assertFalse(ours.tryAcquire(), "polylock got a 4th permit of 3");
        assertNull(theirs.tryAcquire(), "Redisson got a 4th permit of 3");
        assertEquals(0, theirs.availablePermits(), "Redisson sees free permits");
        theirs.release(two);
        assertTrue(ours.tryAcquire(2), "the 2 Redisson gave back");
        assertEquals(3, ours.getHeldPermits());
        ours.release(3);
        assertEquals(3, theirs.availablePermits(), "polylock's release did not give Redisson its permits back");

        // polylock holds N-1: Redisson gets the one left, and no more.
        ours.acquire(2);
        String one = theirs.tryAcquire(0, 60_000, TimeUnit.MILLISECONDS);
        assertNotNull(one, "Redisson did not get the 1 permit polylock left");
        assertNull(theirs.tryAcquire(), "Redisson got a 4th permit of 3");
        assertFalse(ours.tryAcquire(), "polylock got a 4th permit of 3");
        theirs.release(one);
        ours.release(2);
        assertEquals(3, theirs.availablePermits());
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRedissonReleaseWakesAPolylockWaiter(RedissonInteropTest.Mode mode) throws Exception {
        String name = connect(mode, 2);
        RPermitExpirableSemaphore theirs = redisson.getPermitExpirableSemaphore(name);
        DistributedSemaphore ours = client.newSemaphore(name, 2);
        // Redisson's permits never expire here: only hearing the release lets polylock in.
        List<String> both = theirs.acquire(2);
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                return ours.tryAcquire(2, 40, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(300);
        assertFalse(waiter.isDone(), "polylock was granted while Redisson holds every permit");
        long released = System.nanoTime();
        theirs.release(both);
        assertTrue(waiter.get(45, TimeUnit.SECONDS), "handoff Redisson -> polylock");
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        System.out.println(mode + ": semaphore Redisson -> polylock handoff: " + ms + " ms");
        assertTrue(ms < PROMPT_MS, "the polylock waiter was granted " + ms + " ms after Redisson's release");
        assertEquals(0, theirs.availablePermits());
        ours.release(2);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aPolylockReleaseWakesARedissonWaiter(RedissonInteropTest.Mode mode) throws Exception {
        String name = connect(mode, 2);
        RPermitExpirableSemaphore theirs = redisson.getPermitExpirableSemaphore(name);
        // A 30 s lease: a Redisson waiter that did not hear the release would sleep until it ends.
        DistributedSemaphore ours = client.newSemaphore(name, 2, Duration.ofSeconds(30));
        ours.acquire(2);
        CompletableFuture<String> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                return theirs.acquire();
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(300);
        assertFalse(waiter.isDone(), "Redisson was granted while polylock holds every permit");
        long released = System.nanoTime();
        ours.release(2);
        String id = waiter.get(60, TimeUnit.SECONDS);
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        System.out.println(mode + ": semaphore polylock -> Redisson handoff: " + ms + " ms");
        assertTrue(ms < PROMPT_MS, "the Redisson waiter was granted " + ms + " ms after polylock's release");
        assertTrue(ours.tryAcquire(), "the one permit Redisson's waiter left");
        assertFalse(ours.tryAcquire(), "a 3rd permit of 2");
        theirs.release(id);
        ours.release();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void anotherNumberThanRedissonsIsRefused(RedissonInteropTest.Mode mode) throws Exception {
        String name = connect(mode, 3);
        RPermitExpirableSemaphore theirs = redisson.getPermitExpirableSemaphore(name);
        String held = theirs.acquire();
        DistributedSemaphore wrong = client.newSemaphore(name, 4);
        LockPermitsMismatchException e = assertThrows(LockPermitsMismatchException.class,
                () -> wrong.tryAcquire(1, 1, TimeUnit.SECONDS));
        assertEquals(3, e.getServerPermits());
        assertEquals(4, e.getPermits());
        assertEquals(0, wrong.getHeldPermits());
        assertEquals(2, theirs.availablePermits(), "the refused acquire took or changed permits");
        DistributedSemaphore right = client.newSemaphore(name, 3);
        assertTrue(right.tryAcquire(2), "the 2 permits Redisson left");
        right.release(2);
        theirs.release(held);
        assertEquals(3, theirs.availablePermits());
    }
}
