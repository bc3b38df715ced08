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

    private final String lockName;
    private final int serverPermits;
    private final int permits;

    public LockPermitsMismatchException(String message, String lockName, int serverPermits, int permits) {
        super(message);
        this.lockName = lockName;
        this.serverPermits = serverPermits;
        this.permits = permits;
    }

    /** The semaphore's name. */
    public String lockName() {
        return lockName;
    }

    /** The number of permits the server records for the name. */
    public int getServerPermits() {
        return serverPermits;
    }

    /** The number of permits the refused semaphore was made with. */
    public int getPermits() {
        return permits;
    }
}
