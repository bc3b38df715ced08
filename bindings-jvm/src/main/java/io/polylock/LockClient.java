package io.polylock;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A connection to one Redis server or ZooKeeper ensemble, shared by every
 * lock made from it. Thread-safe. Close it when done: {@link #close()}
 * releases the locks it holds and fails pending acquires with
 * {@link LockClosedException}.
 *
 * <pre>{@code
 * try (LockClient client = LockClient.connect("zk://127.0.0.1:2181")) {
 *     DistributedLock lock = client.newLock("/locks/orders-42");
 *     lock.lock();
 *     try { ... } finally { lock.unlock(); }
 * }
 * }</pre>
 */
public final class LockClient implements AutoCloseable {
    private volatile long handle;
    /** Readers use the handle; close() takes it away. */
    private final ReadWriteLock closing = new ReentrantReadWriteLock();
    private final String url;

    private LockClient(long handle, String url) {
        this.handle = handle;
        this.url = url;
    }

    /**
     * Connects with default options. URLs: {@code redis://[user:pass@]host:port[/db]},
     * {@code rediss://...?ca=PATH},
     * {@code redis+sentinel://[user:pass@]h1:26379,h2:26379/MASTER[?replicas=K]} (or
     * {@code rediss+sentinel://}), {@code redis+cluster://[user:pass@]h1:7000,h2:7001[?replicas=K]} (or
     * {@code rediss+cluster://}), {@code zk://[user:pass@]h1:2181,h2:2181[/chroot]},
     * {@code zks://...?ca=PATH}.
     *
     * @throws IllegalArgumentException the URL is malformed (the message says which part)
     * @throws LockConnectException the server is unreachable within the connect timeout
     * @param url the connection string
     * @return a connected client
     */
    public static LockClient connect(String url) {
        return connect(url, ClientOptions.defaults());
    }

    /**
     * Connects with the given options; see {@link #connect(String)}.
     * @param url the connection string
     * @param options timeouts and the Redis lease
     * @return a connected client
     */
    public static LockClient connect(String url, ClientOptions options) {
        Objects.requireNonNull(url, "url");
        Objects.requireNonNull(options, "options");
        long h = Native.clientConnect(url,
                ClientOptions.millisOrUnset(options.connectTimeout),
                ClientOptions.millisOrUnset(options.requestTimeout),
                ClientOptions.millisOrUnset(options.sessionTimeout),
                ClientOptions.millisOrUnset(options.lease),
                options.debugFaults);
        return new LockClient(h, url.replaceAll("//[^@/]*@", "//***@"));
    }

    /**
     * A lock named {@code name} (a ZooKeeper path such as {@code /locks/a}, or
     * any Redis key). No I/O.
     *
     * @throws IllegalArgumentException the name is empty, too long or malformed
     * @param name the lock's name (a ZooKeeper path, or any Redis key)
     * @return the lock (no I/O)
     */
    public DistributedLock newLock(String name) {
        return newLock(name, null);
    }

    /**
     * A lock with its own Redis lease (renewed every third of it while held;
     * ignored by ZooKeeper, where the session plays that part). {@code null}:
     * the client's lease.
     * @param name the lock's name (a ZooKeeper path, or any Redis key)
     * @param lease the Redis lease, or {@code null} for the client's
     * @return the lock (no I/O)
     */
    public DistributedLock newLock(String name, Duration lease) {
        Objects.requireNonNull(name, "name");
        long leaseMs = lease == null ? Native.UNSET : lease.toMillis();
        return withHandle(h -> new DistributedLock(name, Native.lockNew(h, name, leaseMs)));
    }

    /**
     * A read-write lock named {@code name}: {@code readLock()} and
     * {@code writeLock()} are {@link DistributedLock}s. Use a name either as a
     * mutex or as a read-write lock: their server layouts differ. No I/O.
     *
     * @throws IllegalArgumentException the name is empty, too long or malformed
     * @param name the lock's name (a ZooKeeper path, or any Redis key)
     * @return the read-write lock (no I/O)
     */
    public DistributedReadWriteLock newReadWriteLock(String name) {
        return newReadWriteLock(name, null);
    }

    /**
     * {@link #newReadWriteLock(String)} with its own Redis lease for both halves ({@code null}: the client's).
     * @param name the lock's name (a ZooKeeper path, or any Redis key)
     * @param lease the Redis lease, or {@code null} for the client's
     * @return the read-write lock (no I/O)
     */
    public DistributedReadWriteLock newReadWriteLock(String name, Duration lease) {
        Objects.requireNonNull(name, "name");
        long leaseMs = lease == null ? Native.UNSET : lease.toMillis();
        return withHandle(h -> new DistributedReadWriteLock(name,
                new DistributedLock(name, Native.lockNewReadWrite(h, name, leaseMs, false)),
                new DistributedLock(name, Native.lockNewReadWrite(h, name, leaseMs, true))));
    }

    /**
     * A counting semaphore named {@code name} of {@code permits} permits (Redisson's
     * {@code RPermitExpirableSemaphore} layout on Redis, Curator's {@code InterProcessSemaphoreV2}
     * layout on ZooKeeper, where {@code name} is the path): every client of one name must be made
     * with the same number; an acquire of a client made with another throws
     * {@link LockPermitsMismatchException} and takes nothing. No I/O.
     *
     * @throws IllegalArgumentException the name is malformed, or {@code permits} is not positive
     * @param name the lock's name (a ZooKeeper path, or any Redis key)
     * @param permits the number of permits
     * @return the semaphore (no I/O)
     */
    public DistributedSemaphore newSemaphore(String name, int permits) {
        return newSemaphore(name, permits, null);
    }

    /**
     * {@link #newSemaphore(String, int)} with its own Redis lease for each grant (renewed every
     * third of it while held; {@code null}: the client's lease).
     * @param name the lock's name (a ZooKeeper path, or any Redis key)
     * @param permits the number of permits
     * @param lease the Redis lease, or {@code null} for the client's
     * @return the semaphore (no I/O)
     */
    public DistributedSemaphore newSemaphore(String name, int permits, Duration lease) {
        Objects.requireNonNull(name, "name");
        long leaseMs = lease == null ? Native.UNSET : lease.toMillis();
        return withHandle(h -> new DistributedSemaphore(name, permits, Native.semNew(h, name, permits, leaseMs)));
    }

    /**
     * A participant in the leader election {@code name}, shaped like Curator's {@code LeaderLatch}:
     * {@link LeaderElection#start()} joins, {@link LeaderElection#await()} waits to lead,
     * {@link LeaderElection#close()} leaves. On ZooKeeper {@code name} is the latch path and the
     * participant is a {@code LeaderLatch} node, so Curator latches on that path take part in the same
     * election; on Redis the leader holds the name's lock, so use a name either as a lock or as an
     * election. Each call makes a new participant. No I/O.
     *
     * @throws IllegalArgumentException the name is empty, too long or malformed
     * @param name the election's name (a ZooKeeper path, or any Redis key)
     * @return a participant, not yet started
     */
    public LeaderElection election(String name) {
        return election(name, null);
    }

    /**
     * {@link #election(String)} with its own Redis lease for the leadership (renewed every third of it
     * while leading; ignored by ZooKeeper, where the session plays that part). {@code null}: the client's.
     * @param name the election's name (a ZooKeeper path, or any Redis key)
     * @param lease the Redis lease, or {@code null} for the client's
     * @return a participant, not yet started
     */
    public LeaderElection election(String name, Duration lease) {
        Objects.requireNonNull(name, "name");
        long leaseMs = lease == null ? Native.UNSET : lease.toMillis();
        return withHandle(h -> new LeaderElection(name, Native.electionNew(h, name, leaseMs)));
    }

    /**
     * {@code "redis"} or {@code "zookeeper"}.
     * @return {@code "redis"} or {@code "zookeeper"}
     */
    public String backend() {
        return withHandle(Native::clientBackend);
    }

    /**
     * This client's random id, as in its Redis hash fields and ZooKeeper node data.
     * @return this client's random id, as in its Redis hash fields and ZooKeeper node data
     */
    public String id() {
        return withHandle(Native::clientId);
    }

    /**
     * Test hook, not API: ends this client's ZooKeeper session from the server
     * side, as an expiry after a network partition would (it cuts the client
     * off for the session timeout plus a second). Its locks are lost. Needs a
     * client connected with {@code ClientOptions.withDebugFaultsForTests()}.
     */
    void debugExpireSessionForTests() {
        withHandle(h -> {
            Native.clientExpireSession(h);
            return null;
        });
    }

    /** Releases held locks, fails pending acquires, closes the connections. Idempotent. */
    @Override
    public void close() {
        closing.writeLock().lock();
        try {
            if (handle != 0) {
                long h = handle;
                handle = 0;
                Native.clientClose(h);
            }
        } finally {
            closing.writeLock().unlock();
        }
    }

    @Override
    public String toString() {
        return "LockClient(" + url + (handle == 0 ? ", closed)" : ")");
    }

    private interface HandleUse<T> {
        T apply(long handle);
    }

    private <T> T withHandle(HandleUse<T> use) {
        closing.readLock().lock();
        try {
            if (handle == 0) {
                throw new LockClosedException("the client is closed");
            }
            return use.apply(handle);
        } finally {
            closing.readLock().unlock();
        }
    }
}
