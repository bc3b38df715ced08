package io.polylock;

/** The {@link LockClient} was closed: its locks were released and pending acquires failed. */
public class LockClosedException extends LockException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     * @param message what happened
     */
    public LockClosedException(String message) {
        super(message);
    }
}
