package io.polylock;

/**
 * The JNI entry points of bindings-jvm/native (exports.rs). Handles are
 * opaque pointers to Rust values; each is freed exactly once by its owner.
 * Every method throws at most one exception, mapped in errors.rs.
 */
final class Native {
    /** "Not set" for optional numbers (the runtime's default applies). */
    static final long UNSET = Long.MIN_VALUE;
    /** {@link #acquireWait}: the wait slice ended before a result. */
    static final long STILL_WAITING = -1;
    /** {@link #acquireWait}: not granted within the acquire's timeout. */
    static final long NOT_GRANTED = -2;

    static {
        NativeLoader.load();
        init();
    }

    private Native() {}

    private static native void init();

    /** A new owner id from the runtime's process-wide allocator: positive, never reused. */
    static native long freshOwnerId();

    static native long clientConnect(String url, long connectTimeoutMs, long requestTimeoutMs,
                                     long sessionTimeoutMs, long leaseMs, boolean debugFaults);

    static native void clientClose(long client);

    static native String clientBackend(long client);

    static native String clientId(long client);

    static native void clientExpireSession(long client);

    static native long lockNew(long client, String name, long leaseMs);

    /** One half of the read-write lock {@code name}: the write half if {@code write}. */
    static native long lockNewReadWrite(long client, String name, long leaseMs, boolean write);

    static native void lockFree(long lock);

    static native int lockHoldCount(long lock, long owner);

    /** The fencing token of the owner's current grant, or -1 if it holds none. */
    static native long lockFencingToken(long lock, long owner);

    /** How many holds the owner has of its current grant if that grant's fencing token is {@code token}, else 0. */
    static native int lockGrantHoldCount(long lock, long owner, long token);

    static native boolean lockHeldLocally(long lock);

    static native String lockHolderId(long lock, long owner);

    static native void release(long lock, long owner);

    /** timeoutNanos: negative waits forever, 0 tries once. Returns a pending-acquire handle. */
    static native long acquireStart(long lock, long owner, long timeoutNanos);

    /**
     * Waits up to millis: the fencing token (>= 0), {@link #STILL_WAITING} or {@link #NOT_GRANTED}.
     * A new grant reports its loss to {@code watch.lost} (a re-entry's watch is not used).
     */
    static native long acquireWait(long pending, long millis, HoldWatch watch);

    /** Cancels the acquire if it still runs (a raced grant is released) and frees the handle. */
    static native void acquireFree(long pending);

    /** Starts an acquire whose result goes to {@code completion.done}; returns its handle. */
    static native long acquireAsync(long lock, long owner, AsyncAcquire completion, HoldWatch watch);

    /** Cancels an async acquire unless it completed, and frees the handle. */
    static native void asyncFree(long pending);

    /** The semaphore {@code name} of {@code permits} permits ({@code leaseMs}: {@link #UNSET} for the client's lease). */
    static native long semNew(long client, String name, int permits, long leaseMs);

    /** Frees a semaphore handle; grants still held in it are given back in the background. */
    static native void semFree(long sem);

    /** Gives back {@code count} permits held in the semaphore, newest grants first. */
    static native void semRelease(long sem, int count);

    /** The fencing token of the newest grant held in the semaphore, or -1. */
    static native long semNewestToken(long sem);

    /** The permits free on the server now, by every client (one read). */
    static native int semAvailable(long sem);

    /** Permits held in the semaphore, by every thread that uses it. */
    static native int semHeldPermits(long sem);

    /** timeoutNanos: negative waits forever, 0 tries once. Returns a pending-acquire handle. */
    static native long semAcquireStart(long sem, int count, long timeoutNanos);

    /** Waits up to millis: the fencing token (>= 0), {@link #STILL_WAITING} or {@link #NOT_GRANTED}. */
    static native long semAcquireWait(long pending, long millis);

    /** Withdraws the acquire if it still runs: the token of a grant that raced it, or {@link #NOT_GRANTED}. */
    static native long semAcquireCancel(long pending);

    /** Cancels the acquire if it still runs and frees the handle. */
    static native void semAcquireFree(long pending);

    /** The election {@code name} ({@code leaseMs}: {@link #UNSET} for the client's lease). No I/O. */
    static native long electionNew(long client, String name, long leaseMs);

    static native void electionFree(long election);

    /** Who leads now, by every client (one read of the server), or null when nobody does. */
    static native LeaderElection.Leader electionLeader(long election);

    /**
     * Starts taking part in the election until {@link #campaignEnd}: the runtime calls
     * {@code events.elected}, {@code events.lost} and {@code events.failed}. Returns the campaign's handle.
     */
    static native long campaignStart(long election, LeaderElection events);

    /** Withdraws the campaign or resigns its leadership, waiting for the server, and frees the handle. */
    static native void campaignEnd(long campaign);
}
