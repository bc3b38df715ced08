package io.polylock;

/** The server could not be reached or refused the handshake; the message names the address. */
public class LockConnectException extends LockException {
    private static final long serialVersionUID = 1L;

    /** The address that failed, e.g. {@code "127.0.0.1:6379"}; null when unknown. */
    private final String address;

    /**
     * Creates the exception.
     * @param message what happened
     */
    public LockConnectException(String message) {
        this(message, null);
    }

    /**
     * Creates the exception.
     * @param message what happened
     * @param address the address that failed, or null
     */
    public LockConnectException(String message, String address) {
        super(message);
        this.address = address;
    }

    /**
     * The address that could not be reached, e.g. {@code "127.0.0.1:6379"}, or null.
     * @return the address that could not be reached, e.g
     */
    public String address() {
        return address;
    }
}
