package io.polylock;

/**
 * The lock was lost while held (lease refused or expired, session expired):
 * whatever ran under it since was not protected. Thrown by the first
 * {@code unlock()} after the loss; {@link DistributedLock#onLost} tells you sooner.
 */
public class LockLostException extends LockException {
    private static final long serialVersionUID = 1L;

    /** The lock's name, or null. */
    private final String lockName;
    /** Why the lock was lost, or null. */
    private final String reason;

    /**
     * Creates the exception.
     * @param message what happened
     */
    public LockLostException(String message) {
        this(message, null, null);
    }

    /**
     * Creates the exception.
     * @param message what happened
     * @param lockName the lock's name, or null
     * @param reason why the lock was lost, or null
     */
    public LockLostException(String message, String lockName, String reason) {
        super(message);
        this.lockName = lockName;
        this.reason = reason;
    }

    /**
     * The name of the lock that was lost, or null.
     * @return the name of the lock that was lost, or null
     */
    public String lockName() {
        return lockName;
    }

    /**
     * Why, as the runtime reported it (e.g. {@code "ZooKeeper session expired"}), or null.
     * @return why, as the runtime reported it (e.g
     */
    public String reason() {
        return reason;
    }
}
