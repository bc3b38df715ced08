package io.polylock;

/**
 * The lock was lost while held (lease refused or expired, session expired):
 * whatever ran under it since was not protected. Thrown by the first
 * {@code unlock()} after the loss; {@link DistributedLock#onLost} tells you sooner.
 */
public class LockLostException extends LockException {
    private static final long serialVersionUID = 1L;

    public LockLostException(String message) {
        super(message);
    }
}
