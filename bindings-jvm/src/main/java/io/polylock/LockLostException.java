package io.polylock;

/**
 * The lock was lost while held (lease refused or expired, session expired):
 * whatever ran under it since was not protected. Thrown by the first
 * {@code unlock()} after the loss; {@link DistributedLock#onLost} tells you sooner.
 */
public class LockLostException extends LockException {
    private static final long serialVersionUID = 1L;

    private final String lockName;
    private final String reason;

    public LockLostException(String message) {
        this(message, null, null);
    }

    public LockLostException(String message, String lockName, String reason) {
        super(message);
        this.lockName = lockName;
        this.reason = reason;
    }

    /** The name of the lock that was lost, or null. */
    public String lockName() {
        return lockName;
    }

    /** Why, as the runtime reported it (e.g. {@code "ZooKeeper session expired"}), or null. */
    public String reason() {
        return reason;
    }
}
