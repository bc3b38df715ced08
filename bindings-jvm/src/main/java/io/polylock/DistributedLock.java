package io.polylock;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A distributed lock that behaves like {@link java.util.concurrent.locks.ReentrantLock}:
 * reentrant per Java thread (n {@code lock()}s need n {@code unlock()}s), and
 * {@code unlock()} by a thread that does not hold it throws
 * {@link IllegalMonitorStateException}. Exclusion holds across threads,
 * clients and processes, Rust, Python, Node and Curator/Redisson included.
 *
 * <p>Blocking calls wait in slices of at most {@value #SLICE_MS} ms so that
 * {@link #lockInterruptibly()} and {@link #tryLock(long, TimeUnit)} answer
 * {@link Thread#interrupt()} promptly; the acquire is then cancelled and
 * leaves nothing on the server.
 *
 * <p>A held lock can be lost (a Redis lease refused or expired, a ZooKeeper
 * session expired): {@link #onLost} handlers run, and each {@code unlock()} of the
 * lost holds throws {@link LockLostException}.
 */
public final class DistributedLock implements Lock {
    /** Longest uninterrupted native wait; bounds the reaction to interrupts. */
    static final long SLICE_MS = 50;
    private static final Cleaner CLEANER = Cleaner.create();

    private final String name;
    private final long handle;
    private final LossListener listener = new LossListener();

    DistributedLock(String name, long handle) {
        this.name = name;
        this.handle = handle;
        // The native lock handle holds only a reference count on the client:
        // freeing it while a hold lives leaves the hold to its client.
        long nativeHandle = handle; // the cleaning action must not capture `this`
        CLEANER.register(this, () -> Native.lockFree(nativeHandle));
    }

    /**
     * The lock's name.
     * @return the lock's name
     */
    public String name() {
        return name;
    }

    /** Waits, uninterruptibly, until the calling thread holds the lock (re-entry: at once). */
    @Override
    public void lock() {
        boolean interrupted = false;
        long pending = Native.acquireStart(handle, Owners.current(), -1);
        try {
            while (true) {
                long r = Native.acquireWait(pending, SLICE_MS, listener);
                if (r != Native.STILL_WAITING) {
                    grantedOrFail(r);
                    return;
                }
                interrupted |= Thread.interrupted();
            }
        } finally {
            Native.acquireFree(pending);
            if (interrupted) {
                Thread.currentThread().interrupt(); // as the Lock contract says: kept for the caller
            }
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Like {@link #lock()}, but an interrupt ends the wait within about
     * {@value #SLICE_MS} ms with {@link InterruptedException}; the acquire is
     * withdrawn from the server before this returns.
     */
    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (!acquire(-1)) {
            throw new LockException("lock " + name + " was not granted"); // unreachable: no timeout
        }
    }

    /** One try, no waiting: true if the calling thread now holds the lock. */
    @Override
    public boolean tryLock() {
        long pending = Native.acquireStart(handle, Owners.current(), 0);
        try {
            while (true) {
                long r = Native.acquireWait(pending, SLICE_MS, listener);
                if (r != Native.STILL_WAITING) {
                    return grantedOrFalse(r);
                }
            }
        } finally {
            Native.acquireFree(pending);
            Reference.reachabilityFence(this);
        }
    }

    /** Waits up to {@code time} (interruptibly): true if the calling thread now holds the lock. */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        Objects.requireNonNull(unit, "unit");
        return acquire(Math.max(0, unit.toNanos(time)));
    }

    /**
     * Ends one hold of the calling thread; the last one waits until the server
     * has released the lock.
     *
     * @throws IllegalMonitorStateException the calling thread does not hold the lock
     * @throws LockLostException the hold was lost meanwhile (reported once per hold)
     */
    @Override
    public void unlock() {
        releaseAs(Owners.current());
    }

    /**
     * Acquires for the calling thread without blocking it. The future completes
     * (on a polylock callback thread) once the lock is held <b>by the thread that
     * called {@code lockAsync()}</b>: that thread must {@code unlock()} it, and
     * re-entry counts as for {@link #lock()}. Cancelling the future withdraws the
     * acquire; if the grant raced the cancel it is released. Completes
     * exceptionally with {@link LockClosedException} if the client closes first.
     * @return a future completed once the lock is held for the calling thread
     */
    public CompletableFuture<Void> lockAsync() {
        AsyncAcquire async = new AsyncAcquire(this, Owners.current());
        async.started(Native.acquireAsync(handle, Owners.current(), async, listener));
        return async.future;
    }

    /**
     * The fencing token of the calling thread's hold: larger than any earlier grant's.
     * @return the fencing token of the calling thread's hold
     */
    public long fencingToken() {
        long token;
        try {
            token = Native.lockFencingToken(handle, Owners.current()); // -1: no current grant
        } finally {
            Reference.reachabilityFence(this);
        }
        if (token < 0) {
            throw new IllegalMonitorStateException("lock " + name + " is not held by this thread");
        }
        return token;
    }

    /**
     * As {@link java.util.concurrent.locks.ReentrantLock#isHeldByCurrentThread()}.
     * @return whether the calling thread holds the lock
     */
    public boolean isHeldByCurrentThread() {
        return getHoldCount() > 0;
    }

    /**
     * How many times the calling thread holds the lock (0: not at all).
     * @return how many times the calling thread holds the lock (0
     */
    public int getHoldCount() {
        try {
            return Native.lockHoldCount(handle, Owners.current());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Held by any thread of this client (not: anywhere)?
     * @return whether any thread of this client holds the lock
     */
    public boolean isLocked() {
        try {
            return Native.lockHeldLocally(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Runs {@code handler} (on a polylock callback thread) each time a hold of
     * this lock is lost: the Redis lease was refused or expired, or the
     * ZooKeeper session expired. Stop touching the protected resource.
     * @param handler what to run on a loss
     */
    public void onLost(Runnable handler) {
        listener.add(Objects.requireNonNull(handler, "handler"));
    }

    /**
     * Not supported: a {@link Condition} would need a distributed wait/notify
     * that neither Redis nor ZooKeeper locks provide.
     */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("polylock locks are distributed and have no Condition: waiting "
                + "on one would need a distributed wait/notify that neither Redis nor ZooKeeper locks provide; "
                + "use a queue or a local Condition inside the critical section");
    }

    /**
     * How the calling thread's grants are recorded on the server: the Redis hash field, the ZooKeeper
     * node data (diagnostics, tests).
     */
    String holderIdOfCurrentThread() {
        return Native.lockHolderId(handle, Owners.current());
    }

    @Override
    public String toString() {
        return "DistributedLock(" + name + ")";
    }

    // ---- shared by the acquire paths -------------------------------------

    /** An interruptible acquire; timeoutNanos < 0 waits forever. */
    private boolean acquire(long timeoutNanos) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        long pending = Native.acquireStart(handle, Owners.current(), timeoutNanos);
        try {
            while (true) {
                long r = Native.acquireWait(pending, SLICE_MS, listener);
                if (r != Native.STILL_WAITING) {
                    return grantedOrFalse(r);
                }
                if (Thread.interrupted()) {
                    throw new InterruptedException("interrupted while waiting for lock " + name);
                }
            }
        } finally {
            Native.acquireFree(pending); // cancels a still-running acquire, server side included
            Reference.reachabilityFence(this);
        }
    }

    private boolean grantedOrFalse(long r) {
        return r != Native.NOT_GRANTED;
    }

    private void grantedOrFail(long r) {
        if (!grantedOrFalse(r)) {
            throw new LockException("lock " + name + " was not granted");
        }
    }

    void releaseAs(long owner) {
        try {
            Native.release(handle, owner);
        } finally {
            Reference.reachabilityFence(this);
        }
    }
}
