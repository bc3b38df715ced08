package io.polylock;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

/**
 * The kind of hand-written ZooKeeper lock the migration guide starts from:
 * one EPHEMERAL node at the lock path; whoever creates it holds the lock,
 * every waiter watches it and races to re-create it when it goes (a herd),
 * no fencing, no reentrancy, no loss notice. Kept faithful on purpose.
 */
final class ZkDistributeLock implements Lock {
    private final ZooKeeper zk;
    private final String path;

    ZkDistributeLock(ZooKeeper zk, String path) {
        this.zk = zk;
        this.path = path;
    }

    @Override
    public void lock() {
        try {
            lockInterruptibly();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        while (true) {
            try {
                zk.create(path, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL);
                return;
            } catch (KeeperException.NodeExistsException held) {
                CountDownLatch gone = new CountDownLatch(1);
                try {
                    if (zk.exists(path, event -> gone.countDown()) != null) {
                        gone.await();
                    }
                } catch (KeeperException e) {
                    throw new IllegalStateException(e);
                }
            } catch (KeeperException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    @Override
    public void unlock() {
        try {
            zk.delete(path, -1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        } catch (KeeperException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public boolean tryLock() {
        throw new UnsupportedOperationException();
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) {
        throw new UnsupportedOperationException();
    }

    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException();
    }
}
