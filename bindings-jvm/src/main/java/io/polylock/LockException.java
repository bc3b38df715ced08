package io.polylock;

/**
 * Base of polylock's own exceptions. Unchecked, like the failures of
 * {@link java.util.concurrent.locks.Lock}'s methods.
 *
 * <p>Misuse maps to the JDK's exceptions instead: a bad URL, lock name or
 * option is an {@link IllegalArgumentException}; {@code unlock()} by a thread
 * that does not hold the lock is an {@link IllegalMonitorStateException}.
 */
public class LockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     * @param message what happened
     */
    public LockException(String message) {
        super(message);
    }
}
