package io.polylock;

import java.time.Duration;
import java.util.Objects;

/**
 * Connection settings for {@link LockClient#connect(String, ClientOptions)}.
 * An option left unset keeps the runtime's default (connect 5 s, request 5 s,
 * ZooKeeper session 10 s, Redis lease 30 s). Immutable; each {@code with}
 * returns a copy.
 */
public final class ClientOptions {
    final Duration connectTimeout;
    final Duration requestTimeout;
    final Duration sessionTimeout;
    final Duration lease;
    /** Tests only: route ZooKeeper through a cuttable proxy (see debugExpireSessionForTests). */
    final boolean debugFaults;

    private ClientOptions(Duration connectTimeout, Duration requestTimeout, Duration sessionTimeout, Duration lease,
                          boolean debugFaults) {
        this.connectTimeout = connectTimeout;
        this.requestTimeout = requestTimeout;
        this.sessionTimeout = sessionTimeout;
        this.lease = lease;
        this.debugFaults = debugFaults;
    }

    /**
     * The defaults: 5 s connect and request timeouts, a 10 s ZooKeeper session, a 30 s Redis lease.
     * @return the default options
     */
    public static ClientOptions defaults() {
        return new ClientOptions(null, null, null, null, false);
    }

    /** Test hook, not API: lets {@code LockClient.debugExpireSessionForTests()} partition this client. */
    ClientOptions withDebugFaultsForTests() {
        return new ClientOptions(connectTimeout, requestTimeout, sessionTimeout, lease, true);
    }

    /**
     * How long {@code connect} may take before it fails naming the address.
     * @param d the duration
     * @return new options with this connect timeout
     */
    public ClientOptions withConnectTimeout(Duration d) {
        return new ClientOptions(Objects.requireNonNull(d), requestTimeout, sessionTimeout, lease, debugFaults);
    }

    /**
     * Redis: how long one command may take.
     * @param d the duration
     * @return new options with this request timeout
     */
    public ClientOptions withRequestTimeout(Duration d) {
        return new ClientOptions(connectTimeout, Objects.requireNonNull(d), sessionTimeout, lease, debugFaults);
    }

    /**
     * ZooKeeper: the session timeout asked of the server.
     * @param d the duration
     * @return new options with this session timeout
     */
    public ClientOptions withSessionTimeout(Duration d) {
        return new ClientOptions(connectTimeout, requestTimeout, Objects.requireNonNull(d), lease, debugFaults);
    }

    /**
     * Redis: the default lease of this client's locks (renewed every third of it).
     * @param d the duration
     * @return new options with this lease
     */
    public ClientOptions withLease(Duration d) {
        return new ClientOptions(connectTimeout, requestTimeout, sessionTimeout, Objects.requireNonNull(d), debugFaults);
    }

    static long millisOrUnset(Duration d) {
        return d == null ? Native.UNSET : d.toMillis();
    }
}
