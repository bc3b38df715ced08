package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.ZooKeeper;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * polylock's ZooKeeper semaphore and Curator's {@code InterProcessSemaphoreV2}
 * on one path: both sides' leases count together against N (the lease nodes
 * under {@code <path>/leases}, taken under Curator's mutex at
 * {@code <path>/locks}); each side's release wakes the other's waiter (both
 * watch the children of {@code <path>/leases}); polylock's nodes are named as
 * Curator names its own. Curator does not compare N across processes;
 * polylock records its N in {@code <path>/polylock_permits} and refuses
 * another polylock semaphore of a different N.
 */
@Timeout(120)
class CuratorSemaphoreInteropTest {
    /** A waiter woken by the other side's release is in well before this. */
    private static final long PROMPT_MS = 3_000;
    /** Curator's lease node name: {@code _c_<uuid>-lease-<10-digit sequence>}. */
    private static final Pattern CURATOR_LEASE =
            Pattern.compile("_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lease-[0-9]{10}");

    private CuratorFramework curator;
    private LockClient client;
    private ZooKeeper zk;

    @BeforeEach
    void connect() throws Exception {
        curator = CuratorFrameworkFactory.newClient(Servers.zkConnectString(Servers.zkUrl()), new RetryOneTime(100));
        curator.start();
        assertTrue(curator.blockUntilConnected(10, TimeUnit.SECONDS));
        client = LockClient.connect(Servers.zkUrl());
        zk = Servers.zooKeeper();
    }

    @AfterEach
    void close() throws Exception {
        client.close();
        curator.close();
        zk.close();
    }

    private List<String> leases(String path) throws Exception {
        return Servers.zkChildren(zk, path + "/leases");
    }

    @Test
    void bothSidesLeasesCountTogether() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-semaphore");
        InterProcessSemaphoreV2 theirs = new InterProcessSemaphoreV2(curator, path, 3);
        DistributedSemaphore ours = client.newSemaphore(path, 3);

        // Curator holds N-1: polylock gets the one left, and no more.
        Collection<Lease> two = theirs.acquire(2, 10, TimeUnit.SECONDS);
        assertNotNull(two, "Curator did not get 2 of 3");
        assertFalse(ours.tryAcquire(2), "polylock got 2 while Curator holds 2 of 3");
        assertTrue(ours.tryAcquire(), "polylock did not get the 1 lease Curator left");
        assertFalse(ours.tryAcquire(), "polylock got a 4th lease of 3");
        assertNull(theirs.acquire(1, 200, TimeUnit.MILLISECONDS), "Curator got a 4th lease of 3");
        assertEquals(3, leases(path).size(), "lease nodes while 2 + 1 are held");
        theirs.returnAll(two);
        assertTrue(ours.tryAcquire(2), "the 2 Curator gave back");
        assertEquals(3, ours.getHeldPermits());
        ours.release(3);
        Servers.eventually("polylock's leases gone", () -> {
            try {
                return leases(path).isEmpty();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });

        // polylock holds N-1: Curator gets the one left, and no more.
        ours.acquire(2);
        Lease one = theirs.acquire(10, TimeUnit.SECONDS);
        assertNotNull(one, "Curator did not get the 1 lease polylock left");
        assertNull(theirs.acquire(1, 200, TimeUnit.MILLISECONDS), "Curator got a 4th lease of 3");
        assertFalse(ours.tryAcquire(), "polylock got a 4th lease of 3");
        theirs.returnLease(one);
        assertTrue(ours.tryAcquire(), "the lease Curator returned");
        ours.release(3);
    }

    @Test
    void polylocksNodesAreCuratorsNodes() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-semaphore-names");
        DistributedSemaphore ours = client.newSemaphore(path, 3);
        ours.acquire(2);
        List<String> mine = leases(path);
        assertEquals(2, mine.size(), "polylock's 2 leases under " + path + "/leases: " + mine);
        for (String node : mine) {
            assertTrue(CURATOR_LEASE.matcher(node).matches(), "not a Curator lease name: " + node);
        }
        List<String> children = Servers.zkChildren(zk, path);
        assertTrue(children.containsAll(List.of("locks", "leases", "polylock_permits")),
                "children of " + path + ": " + children);
        assertEquals(List.of(), Servers.zkChildren(zk, path + "/locks"), "polylock kept Curator's mutex after its grant");
        // Curator's own lease goes beside polylock's, named alike.
        InterProcessSemaphoreV2 theirs = new InterProcessSemaphoreV2(curator, path, 3);
        Lease lease = theirs.acquire(10, TimeUnit.SECONDS);
        List<String> all = new ArrayList<>(leases(path));
        assertEquals(3, all.size(), "leases: " + all);
        all.removeAll(mine);
        assertEquals(1, all.size());
        assertTrue(CURATOR_LEASE.matcher(all.get(0)).matches(), "Curator's own lease name: " + all.get(0));
        theirs.returnLease(lease);
        ours.release(2);
        Servers.eventually("every lease gone", () -> {
            try {
                return leases(path).isEmpty() && Servers.zkChildren(zk, path + "/locks").isEmpty();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
    }

    @Test
    void aCuratorReturnWakesAPolylockWaiter() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-semaphore-wake");
        InterProcessSemaphoreV2 theirs = new InterProcessSemaphoreV2(curator, path, 2);
        DistributedSemaphore ours = client.newSemaphore(path, 2);
        Collection<Lease> both = theirs.acquire(2);
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                return ours.tryAcquire(2, 40, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(300);
        assertFalse(waiter.isDone(), "polylock was granted while Curator holds every lease");
        long released = System.nanoTime();
        theirs.returnAll(both);
        assertTrue(waiter.get(45, TimeUnit.SECONDS), "handoff Curator -> polylock");
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        System.out.println("zookeeper: semaphore Curator -> polylock handoff: " + ms + " ms");
        assertTrue(ms < PROMPT_MS, "the polylock waiter was granted " + ms + " ms after Curator's returnAll");
        assertNull(theirs.acquire(1, 200, TimeUnit.MILLISECONDS), "Curator got a lease polylock holds");
        ours.release(2);
    }

    @Test
    void aPolylockReleaseWakesACuratorWaiter() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-semaphore-woken");
        InterProcessSemaphoreV2 theirs = new InterProcessSemaphoreV2(curator, path, 2);
        DistributedSemaphore ours = client.newSemaphore(path, 2);
        ours.acquire(2);
        CompletableFuture<Lease> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                return theirs.acquire(); // no timeout: only seeing a lease go lets it in
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(300);
        assertFalse(waiter.isDone(), "Curator was granted while polylock holds every lease");
        long released = System.nanoTime();
        ours.release(2);
        Lease lease = waiter.get(60, TimeUnit.SECONDS);
        long ms = Duration.ofNanos(System.nanoTime() - released).toMillis();
        System.out.println("zookeeper: semaphore polylock -> Curator handoff: " + ms + " ms");
        assertTrue(ms < PROMPT_MS, "the Curator waiter was granted " + ms + " ms after polylock's release");
        assertTrue(ours.tryAcquire(), "the one lease Curator's waiter left");
        assertFalse(ours.tryAcquire(), "a 3rd lease of 2");
        theirs.returnLease(lease);
        ours.release();
    }

    @Test
    void polylockRefusesAnotherNumberCuratorDoesNot() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-semaphore-n");
        DistributedSemaphore three = client.newSemaphore(path, 3);
        assertTrue(three.tryAcquire());
        DistributedSemaphore four = client.newSemaphore(path, 4);
        LockPermitsMismatchException e = assertThrows(LockPermitsMismatchException.class,
                () -> four.tryAcquire(1, 1, TimeUnit.SECONDS));
        assertEquals(3, e.getServerPermits());
        assertEquals(4, e.getPermits());
        assertEquals(0, four.getHeldPermits());
        assertEquals(1, leases(path).size(), "the refused acquire left a lease");
        // Curator takes another N as it is told (it keeps no record of N): with 4 it gets 3 beside polylock's 1.
        InterProcessSemaphoreV2 theirs = new InterProcessSemaphoreV2(curator, path, 4);
        Collection<Lease> got = theirs.acquire(3, 10, TimeUnit.SECONDS);
        assertNotNull(got, "Curator with N=4 beside polylock's 1 lease");
        assertEquals(4, leases(path).size());
        theirs.returnAll(got);
        three.release();
    }
}
