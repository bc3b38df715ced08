package io.polylock;

/**
 * The acquire's time ran out while the server kept refusing with a transient
 * error (Redis {@code BUSY}, {@code LOADING}, {@code READONLY}, ...; ZooKeeper
 * throttling): thrown by {@code tryLock(time, unit)} and {@code tryLock()},
 * which return {@code false} only when the lock is held by someone else.
 * {@link #reply()} is the server's last answer.
 */
public class LockUnavailableException extends LockException {
    private static final long serialVersionUID = 1L;

    /** The server's last reply. */
    private final String reply;

    /**
     * Creates the exception.
     * @param message what happened
     * @param reply the server's last reply
     */
    public LockUnavailableException(String message, String reply) {
        super(message);
        this.reply = reply;
    }

    /**
     * The server's last reply, e.g. {@code "BUSY Redis is busy running a script. ..."}.
     * @return the server's last reply, e.g
     */
    public String reply() {
        return reply;
    }
}
