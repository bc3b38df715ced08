package io.polylock;

/**
 * A {@link DistributedSemaphore} was made with another number of permits than
 * the server records for its name (by polylock's first acquire, or by
 * Redisson's {@code trySetPermits}; on ZooKeeper in {@code <path>/polylock_permits},
 * which Curator neither writes nor reads): its acquire is refused, and nothing was
 * taken or changed. Every client of one name must agree on the number.
 */
public class LockPermitsMismatchException extends LockException {
    private static final long serialVersionUID = 1L;

    /** The lock's name, or null. */
    private final String lockName;
    /** The number of permits the server records. */
    private final int serverPermits;
    /** The number of permits. */
    private final int permits;

    /**
     * Creates the exception.
     * @param message what happened
     * @param lockName the lock's name, or null
     * @param serverPermits the number of permits the server records
     * @param permits the number of permits
     */
    public LockPermitsMismatchException(String message, String lockName, int serverPermits, int permits) {
        super(message);
        this.lockName = lockName;
        this.serverPermits = serverPermits;
        this.permits = permits;
    }

    /**
     * The semaphore's name.
     * @return the semaphore's name
     */
    public String lockName() {
        return lockName;
    }

    /**
     * The number of permits the server records for the name.
     * @return the number of permits the server records for the name
     */
    public int getServerPermits() {
        return serverPermits;
    }

    /**
     * The number of permits the refused semaphore was made with.
     * @return the number of permits the refused semaphore was made with
     */
    public int getPermits() {
        return permits;
    }
}
