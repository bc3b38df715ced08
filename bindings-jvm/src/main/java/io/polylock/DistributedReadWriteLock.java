package io.polylock;

import java.util.concurrent.locks.ReadWriteLock;

/**
 * A distributed read-write lock: many readers or one writer, across threads,
 * clients and processes (Curator's {@code InterProcessReadWriteLock} layout on
 * ZooKeeper, Redisson's {@code RReadWriteLock} on Redis, so their clients and
 * polylock's exclude each other as their own do). Each half is a full
 * {@link DistributedLock}: reentrant per thread, a fencing token on every
 * grant, loss listeners, loss futures and the opt-in interrupt on loss,
 * interruptible and timed waits.
 *
 * <p>A waiting writer blocks readers that come after it, so readers cannot
 * starve a writer. A thread holding the write lock may take the read lock
 * (downgrade) and keep it after unlocking the write lock. A thread holding
 * the read lock that asks for the write lock gets
 * {@link LockUpgradeRefusedException} at once.
 */
public final class DistributedReadWriteLock implements ReadWriteLock {
    private final String name;
    private final DistributedLock read;
    private final DistributedLock write;

    DistributedReadWriteLock(String name, DistributedLock read, DistributedLock write) {
        this.name = name;
        this.read = read;
        this.write = write;
    }

    /**
     * The lock's name.
     * @return the lock's name
     */
    public String name() {
        return name;
    }

    /** The shared half. */
    @Override
    public DistributedLock readLock() {
        return read;
    }

    /** The exclusive half. */
    @Override
    public DistributedLock writeLock() {
        return write;
    }
}
