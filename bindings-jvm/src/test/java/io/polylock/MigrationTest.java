package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;

import org.apache.zookeeper.ZooKeeper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Migration from a hand-written ZooKeeper lock: the same code, written
 * against java.util.concurrent.locks.Lock, passes with either; the change is
 * the one line that makes the lock (see docs/migrating/zkdistributelock.md).
 */
@Timeout(120)
class MigrationTest {
    private static final int THREADS = 16;
    private static final int ROUNDS = 25;

    /** Code as written against the hand-written lock: it only sees a Lock. */
    static long runOrders(Lock lock) throws InterruptedException {
        long[] orders = {0}; // unsynchronised on purpose: the lock protects it
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < THREADS; t++) {
            Thread thread = new Thread(() -> {
                try {
                    for (int i = 0; i < ROUNDS; i++) {
                        lock.lock();
                        try {
                            long v = orders[0];
                            Thread.yield();
                            orders[0] = v + 1;
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
        return orders[0];
    }

    @Test
    void before_handWrittenZkDistributeLock() throws Exception {
        ZooKeeper zk = Servers.zooKeeper();
        try {
            String path = "/" + Servers.unique(Servers.zkUrl(), "migration").replace('/', '-');
            Lock lock = new ZkDistributeLock(zk, path);
            assertEquals(THREADS * ROUNDS, runOrders(lock));
        } finally {
            zk.close();
        }
    }

    @Test
    void after_polylock() throws Exception {
        try (LockClient client = LockClient.connect(Servers.zkUrl())) {
            String path = "/" + Servers.unique(Servers.zkUrl(), "migration").replace('/', '-');
            Lock lock = client.newLock(path);
            assertEquals(THREADS * ROUNDS, runOrders(lock));
        }
    }
}
