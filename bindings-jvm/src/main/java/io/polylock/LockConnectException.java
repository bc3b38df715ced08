package io.polylock;

/** The server could not be reached or refused the handshake; the message names the address. */
public class LockConnectException extends LockException {
    private static final long serialVersionUID = 1L;

    public LockConnectException(String message) {
        super(message);
    }
}
