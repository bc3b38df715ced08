package io.polylock;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** polylock and Curator's InterProcessMutex exclude each other on one path and hand off both ways. */
@Timeout(120)
class CuratorInteropTest {
    private CuratorFramework curator;
    private LockClient client;
    /** InterProcessMutex is owned by a thread: acquire and release on this one. */
    private final ExecutorService curatorThread = Executors.newSingleThreadExecutor();

    @BeforeEach
    void connect() throws Exception {
        curator = CuratorFrameworkFactory.newClient(Servers.zkConnectString(Servers.zkUrl()), new RetryOneTime(100));
        curator.start();
        assertTrue(curator.blockUntilConnected(10, TimeUnit.SECONDS));
        client = LockClient.connect(Servers.zkUrl());
    }

    @AfterEach
    void close() {
        curatorThread.shutdownNow();
        client.close();
        curator.close();
    }

    private <T> T onCuratorThread(java.util.concurrent.Callable<T> call) throws Exception {
        return curatorThread.submit(call).get(30, TimeUnit.SECONDS);
    }

    @Test
    void curatorHolderExcludesPolylockThenHandsOff() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "curator-first");
        InterProcessMutex mutex = new InterProcessMutex(curator, path);
        onCuratorThread(() -> {
            mutex.acquire();
            return null;
        });
        DistributedLock lock = client.newLock(path);
        assertFalse(lock.tryLock(300, TimeUnit.MILLISECONDS), "polylock entered while Curator holds");
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            lock.lock(); // blocked until Curator releases
            boolean held = lock.isHeldByCurrentThread();
            lock.unlock();
            return held;
        });
        Thread.sleep(200);
        assertFalse(waiter.isDone(), "the polylock waiter did not wait");
        onCuratorThread(() -> {
            mutex.release();
            return null;
        });
        assertTrue(waiter.get(20, TimeUnit.SECONDS), "handoff Curator -> polylock");
    }

    @Test
    void polylockHolderExcludesCuratorThenHandsOff() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "polylock-first");
        DistributedLock lock = client.newLock(path);
        lock.lock();
        InterProcessMutex mutex = new InterProcessMutex(curator, path);
        assertFalse(onCuratorThread(() -> mutex.acquire(300, TimeUnit.MILLISECONDS)),
                "Curator entered while polylock holds");
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                boolean got = mutex.acquire(20, TimeUnit.SECONDS);
                if (got) {
                    mutex.release();
                }
                return got;
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(200);
        assertFalse(waiter.isDone(), "the Curator waiter did not wait");
        lock.unlock();
        assertTrue(waiter.get(25, TimeUnit.SECONDS), "handoff polylock -> Curator");
    }
}
