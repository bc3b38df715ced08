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

    public static ClientOptions defaults() {
        return new ClientOptions(null, null, null, null, false);
    }

    /** Test hook, not API: lets {@code LockClient.debugExpireSessionForTests()} partition this client. */
    ClientOptions withDebugFaultsForTests() {
        return new ClientOptions(connectTimeout, requestTimeout, sessionTimeout, lease, true);
    }

    /** How long {@code connect} may take before it fails naming the address. */
    public ClientOptions withConnectTimeout(Duration d) {
        return new ClientOptions(Objects.requireNonNull(d), requestTimeout, sessionTimeout, lease, debugFaults);
    }

    /** Redis: how long one command may take. */
    public ClientOptions withRequestTimeout(Duration d) {
        return new ClientOptions(connectTimeout, Objects.requireNonNull(d), sessionTimeout, lease, debugFaults);
    }

    /** ZooKeeper: the session timeout asked of the server. */
    public ClientOptions withSessionTimeout(Duration d) {
        return new ClientOptions(connectTimeout, requestTimeout, Objects.requireNonNull(d), lease, debugFaults);
    }

    /** Redis: the default lease of this client's locks (renewed every third of it). */
    public ClientOptions withLease(Duration d) {
        return new ClientOptions(connectTimeout, requestTimeout, sessionTimeout, Objects.requireNonNull(d), debugFaults);
    }

    static long millisOrUnset(Duration d) {
        return d == null ? Native.UNSET : d.toMillis();
    }
}
