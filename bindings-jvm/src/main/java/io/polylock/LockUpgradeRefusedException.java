package io.polylock;

/**
 * A thread that holds the read lock of a {@link DistributedReadWriteLock}
 * asked for its write lock: refused at once (Curator and Redisson would wait
 * for themselves forever). Release the read lock first. The read hold is
 * untouched. The opposite, taking the read lock while holding the write
 * lock (a downgrade), is allowed.
 */
public class LockUpgradeRefusedException extends LockException {
    private static final long serialVersionUID = 1L;

    /** The lock's name, or null. */
    private final String lockName;

    /**
     * Creates the exception.
     * @param message what happened
     * @param lockName the lock's name, or null
     */
    public LockUpgradeRefusedException(String message, String lockName) {
        super(message);
        this.lockName = lockName;
    }

    /**
     * The lock's name.
     * @return the lock's name
     */
    public String lockName() {
        return lockName;
    }
}
