package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.redisson.Redisson;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * polylock's read-write lock against the real anchors on one name: Curator's
 * {@code InterProcessReadWriteLock} (ZooKeeper) and Redisson's
 * {@code RReadWriteLock} (Redis). Their readers share with ours, their
 * writers exclude ours and ours theirs, and a writer queued behind the other
 * library's holder is granted when that holder releases. Each assertion
 * fails if polylock used another node marker, sort rule, hash layout or
 * channel than the anchor's.
 */
@Timeout(120)
class ReadWriteInteropTest {
    private final ExecutorService anchorThread = Executors.newSingleThreadExecutor();
    private final ExecutorService anchorThread2 = Executors.newSingleThreadExecutor();
    private CuratorFramework curator;
    private RedissonClient redisson;
    private LockClient client;

    @AfterEach
    void close() {
        anchorThread.shutdownNow();
        anchorThread2.shutdownNow();
        if (client != null) {
            client.close();
        }
        if (curator != null) {
            curator.close();
        }
        if (redisson != null) {
            redisson.shutdown();
        }
    }

    /** Curator's and Redisson's locks are owned by a thread: use them on one. */
    private static <T> T on(ExecutorService thread, Callable<T> call) throws Exception {
        return thread.submit(call).get(30, TimeUnit.SECONDS);
    }

    private InterProcessReadWriteLock curatorLock(String path) throws Exception {
        curator = CuratorFrameworkFactory.newClient(Servers.zkConnectString(Servers.zkUrl()), new RetryOneTime(100));
        curator.start();
        assertTrue(curator.blockUntilConnected(10, TimeUnit.SECONDS));
        client = LockClient.connect(Servers.zkUrl());
        return new InterProcessReadWriteLock(curator, path);
    }

    private RReadWriteLock redissonLock(String name) {
        Config config = new Config();
        config.useSingleServer().setAddress(Servers.redisUrl()).setConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionMinimumIdleSize(1);
        redisson = Redisson.create(config);
        client = LockClient.connect(Servers.redisUrl());
        return redisson.getReadWriteLock(name);
    }

    /** Runs {@code call} on a thread of its own (an owner that holds nothing yet). */
    private static <T> T otherThread(Callable<T> call) throws Exception {
        ExecutorService t = Executors.newSingleThreadExecutor();
        try {
            return on(t, call);
        } finally {
            t.shutdownNow();
        }
    }

    /** {@code call} on {@code thread}, in the background (an anchor's waiter). */
    private static CompletableFuture<Boolean> inBackground(ExecutorService thread, Callable<Boolean> call) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return on(thread, call);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
    }

    /** A polylock acquire in the background; true once granted (and released). */
    private static CompletableFuture<Boolean> waiter(Lock lock) {
        return CompletableFuture.supplyAsync(() -> {
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
    }

    @Test
    void curatorReadersShareWithOursAndWritersExcludeBothWays() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-rw");
        InterProcessReadWriteLock theirs = curatorLock(path);
        DistributedReadWriteLock ours = client.newReadWriteLock(path);

        on(anchorThread, () -> {
            theirs.readLock().acquire();
            return null;
        });
        assertTrue(ours.readLock().tryLock(), "our reader beside Curator's reader");
        assertFalse(otherThread(() -> ours.writeLock().tryLock(300, TimeUnit.MILLISECONDS)),
                "our writer (another thread) beside Curator's reader");
        assertFalse(on(anchorThread2, () -> theirs.writeLock().acquire(300, TimeUnit.MILLISECONDS)),
                "Curator's writer beside our reader");
        ours.readLock().unlock();
        CompletableFuture<Boolean> ourWriter = waiter(ours.writeLock());
        Thread.sleep(300);
        assertFalse(ourWriter.isDone(), "our writer did not wait for Curator's reader");
        on(anchorThread, () -> {
            theirs.readLock().release();
            return null;
        });
        assertTrue(ourWriter.get(20, TimeUnit.SECONDS), "handoff Curator reader -> our writer");

        ours.writeLock().lock();
        assertFalse(on(anchorThread, () -> theirs.readLock().acquire(300, TimeUnit.MILLISECONDS)),
                "Curator's reader beside our writer");
        CompletableFuture<Boolean> theirWriter = inBackground(anchorThread2, () -> {
            boolean got = theirs.writeLock().acquire(20, TimeUnit.SECONDS);
            if (got) {
                theirs.writeLock().release();
            }
            return got;
        });
        Thread.sleep(300);
        assertFalse(theirWriter.isDone(), "Curator's writer did not wait for ours");
        ours.writeLock().unlock();
        assertTrue(theirWriter.get(25, TimeUnit.SECONDS), "handoff our writer -> Curator's writer");
        org.apache.zookeeper.ZooKeeper zk = Servers.zooKeeper();
        try {
            Servers.eventually("no node left on " + path, () -> {
                try {
                    return Servers.zkChildren(zk, path).isEmpty();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
        } finally {
            zk.close();
        }
    }

    /** A Curator writer queued behind a reader blocks our later reader, as it blocks Curator's. */
    @Test
    void aQueuedCuratorWriterBlocksOurNewReader() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-rw-queue");
        InterProcessReadWriteLock theirs = curatorLock(path);
        DistributedReadWriteLock ours = client.newReadWriteLock(path);
        DistributedLock firstReader = client.newReadWriteLock(path).readLock();
        firstReader.lock();
        CompletableFuture<Boolean> theirWriter = inBackground(anchorThread, () -> {
            boolean got = theirs.writeLock().acquire(20, TimeUnit.SECONDS);
            if (got) {
                theirs.writeLock().release();
            }
            return got;
        });
        Thread.sleep(300);
        CompletableFuture<Boolean> lateReader = CompletableFuture.supplyAsync(() -> ours.readLock().tryLock());
        assertFalse(lateReader.get(10, TimeUnit.SECONDS), "our reader got in ahead of Curator's queued writer");
        firstReader.unlock();
        assertTrue(theirWriter.get(20, TimeUnit.SECONDS));
    }

    @Test
    void redissonReadersShareWithOursAndWritersExcludeBothWays() throws Exception {
        String name = Servers.unique(Servers.redisUrl(), "redisson-rw");
        RReadWriteLock theirs = redissonLock(name);
        DistributedReadWriteLock ours = client.newReadWriteLock(name);

        on(anchorThread, () -> {
            theirs.readLock().lock();
            return null;
        });
        assertTrue(ours.readLock().tryLock(), "our reader beside Redisson's reader");
        assertFalse(otherThread(() -> ours.writeLock().tryLock(300, TimeUnit.MILLISECONDS)),
                "our writer (another thread) beside Redisson's reader");
        assertFalse(on(anchorThread2, () -> theirs.writeLock().tryLock(300, TimeUnit.MILLISECONDS)),
                "Redisson's writer beside our reader");
        ours.readLock().unlock();
        assertEquals("read", redisson.getMap(name, org.redisson.client.codec.StringCodec.INSTANCE).get("mode"),
                "our reader's release left Redisson's reader in place");
        CompletableFuture<Boolean> ourWriter = waiter(ours.writeLock());
        Thread.sleep(300);
        assertFalse(ourWriter.isDone(), "our writer did not wait for Redisson's reader");
        on(anchorThread, () -> {
            theirs.readLock().unlock();
            return null;
        });
        assertTrue(ourWriter.get(5, TimeUnit.SECONDS), "Redisson's read release wakes our writer promptly");

        ours.writeLock().lock();
        assertFalse(on(anchorThread, () -> theirs.readLock().tryLock(300, TimeUnit.MILLISECONDS)),
                "Redisson's reader beside our writer");
        CompletableFuture<Boolean> theirWriter = inBackground(anchorThread2, () -> {
            boolean got = theirs.writeLock().tryLock(20, TimeUnit.SECONDS);
            if (got) {
                theirs.writeLock().unlock();
            }
            return got;
        });
        Thread.sleep(300);
        assertFalse(theirWriter.isDone(), "Redisson's writer did not wait for ours");
        ours.writeLock().unlock();
        assertTrue(theirWriter.get(5, TimeUnit.SECONDS), "our write release wakes Redisson's writer promptly");
    }

    /** Upgrade is refused at once with the typed exception; downgrade is allowed. */
    @Test
    void upgradeIsRefusedAndDowngradeAllowed() throws Exception {
        client = LockClient.connect(Servers.zkUrl());
        DistributedReadWriteLock rw = client.newReadWriteLock(Servers.unique(Servers.zkUrl(), "rw-rules"));
        rw.readLock().lock();
        LockUpgradeRefusedException e = assertThrows(LockUpgradeRefusedException.class, () -> rw.writeLock().lock());
        assertEquals(rw.name(), e.lockName());
        assertEquals(1, rw.readLock().getHoldCount());
        rw.readLock().unlock();
        rw.writeLock().lock();
        rw.readLock().lock();
        rw.writeLock().unlock();
        assertEquals(1, rw.readLock().getHoldCount(), "the read hold outlives the write hold");
        assertFalse(CompletableFuture.supplyAsync(() -> rw.writeLock().tryLock()).get(10, TimeUnit.SECONDS),
                "another thread's writer beside the downgraded reader");
        assertTrue(rw.readLock().fencingToken() > 0);
        rw.readLock().unlock();
    }
}
