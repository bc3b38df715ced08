package io.polylock;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
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
 * session expired): {@link #onLost} handlers run, the futures of
 * {@link #lossFuture()} complete, the holding thread is interrupted if
 * {@link #interruptOnLoss(boolean)} is on, and each {@code unlock()} of the
 * lost holds throws {@link LockLostException}.
 */
public final class DistributedLock implements Lock {
    /** Longest uninterrupted native wait; bounds the reaction to interrupts. */
    static final long SLICE_MS = 50;
    private static final Cleaner CLEANER = Cleaner.create();

    private final String name;
    private final long handle;
    private final LossHandlers lossHandlers = new LossHandlers();
    /**
     * Each owner's newest grant (its re-entries share it), from the grant until the unlock that
     * ends its last hold. Only the owner's own acquires and unlocks change its entry.
     */
    private final ConcurrentHashMap<Long, HoldWatch> grants = new ConcurrentHashMap<>();
    private volatile boolean interruptOnLoss;

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
        long owner = Owners.current();
        HoldWatch watch = new HoldWatch(this, Thread.currentThread());
        long pending = Native.acquireStart(handle, owner, -1);
        try {
            while (true) {
                long r = Native.acquireWait(pending, SLICE_MS, watch);
                if (r != Native.STILL_WAITING) {
                    grantedOrFail(r, owner, watch);
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
        long owner = Owners.current();
        HoldWatch watch = new HoldWatch(this, Thread.currentThread());
        long pending = Native.acquireStart(handle, owner, 0);
        try {
            while (true) {
                long r = Native.acquireWait(pending, SLICE_MS, watch);
                if (r != Native.STILL_WAITING) {
                    return grantedOrFalse(r, owner, watch);
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
        long owner = Owners.current();
        HoldWatch watch = new HoldWatch(this, Thread.currentThread());
        AsyncAcquire async = new AsyncAcquire(this, owner, watch);
        async.started(Native.acquireAsync(handle, owner, async, watch));
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
        lossHandlers.add(Objects.requireNonNull(handler, "handler"));
    }

    /**
     * A future of the loss of the calling thread's current hold (its re-entries share it): it
     * completes, on a polylock callback thread, with the {@link LockLostException} that describes
     * the loss ({@link LockLostException#reason()}) if the hold is lost, at once if it already was.
     * The unlock that ends the hold's last re-entry without a loss <b>cancels</b> it (so
     * {@code thenRun}-style stages never run, and {@code get()} throws
     * {@link java.util.concurrent.CancellationException}). Each call returns a new future:
     * completing or cancelling it changes nothing else.
     *
     * <pre>{@code
     * lock.lock();
     * lock.lossFuture().thenAccept(lost -> worker.cancel(true)); // stop the work the lock guards
     * }</pre>
     *
     * @return a future completed with the loss of the calling thread's hold
     * @throws IllegalMonitorStateException the calling thread holds no grant of this lock (a
     *     lost grant counts until an {@code unlock()} has reported its loss)
     */
    public CompletableFuture<LockLostException> lossFuture() {
        HoldWatch watch = grants.get(Owners.current());
        if (watch == null) {
            throw new IllegalMonitorStateException("lock " + name + " is not held by this thread");
        }
        return watch.newFuture();
    }

    /**
     * Opt-in (off by default): when a hold of this lock is lost, interrupt the thread that holds it,
     * from the runtime's loss notice itself (no callback thread in between). A holder cut off from
     * the server, or whose renewals stall, is told at its loss deadline, which comes before the
     * server can grant the lock to anyone else. The holder's blocking calls ({@code sleep},
     * {@code wait}, {@code Future.get}, interruptible I/O, {@link #lockInterruptibly()} of other
     * locks) then throw {@link InterruptedException}, and its {@code unlock()} throws
     * {@link LockLostException} as always. The interrupt never reaches a thread once the unlock of
     * its hold's last re-entry has begun: a loss after that interrupts nobody. For
     * {@link #lockAsync()}, the holding thread is the one that called it. Applies to every thread's
     * holds of this lock object, from the next loss on.
     *
     * @param enabled whether a loss interrupts the holding thread
     * @return this lock, for chaining ({@code client.newLock(name).interruptOnLoss(true)})
     */
    public DistributedLock interruptOnLoss(boolean enabled) {
        interruptOnLoss = enabled;
        return this;
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
        long owner = Owners.current();
        HoldWatch watch = new HoldWatch(this, Thread.currentThread());
        long pending = Native.acquireStart(handle, owner, timeoutNanos);
        try {
            while (true) {
                long r = Native.acquireWait(pending, SLICE_MS, watch);
                if (r != Native.STILL_WAITING) {
                    return grantedOrFalse(r, owner, watch);
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

    private boolean grantedOrFalse(long r, long owner, HoldWatch watch) {
        if (r == Native.NOT_GRANTED) {
            return false;
        }
        granted(owner, watch, r);
        return true;
    }

    private void grantedOrFail(long r, long owner, HoldWatch watch) {
        if (!grantedOrFalse(r, owner, watch)) {
            throw new LockException("lock " + name + " was not granted");
        }
    }

    /**
     * Records the acquire's grant of fencing token {@code token} to {@code owner}: a new grant's
     * watch becomes the owner's; a re-entry (the owner's grant's token again) keeps the grant's
     * first watch, the one the runtime reports its loss to.
     */
    void granted(long owner, HoldWatch watch, long token) {
        HoldWatch current = grants.get(owner);
        if (current == null || current.token() != token) {
            watch.granted(token);
            grants.put(owner, watch);
        }
    }

    /**
     * Ends one hold of {@code owner}. The unlock of a grant's last hold (or of a lost grant) first
     * ends the interrupts of that grant's loss, and then settles its loss futures: with the loss if
     * the release reports one, else by cancelling them.
     */
    void releaseAs(long owner) {
        HoldWatch watch = grants.get(owner);
        // 0 once the grant is lost: then this unlock reports the loss and the grant is done with.
        boolean endsGrant = watch != null && Native.lockGrantHoldCount(handle, owner, watch.token()) <= 1;
        if (endsGrant) {
            watch.endInterrupts();
            grants.remove(owner, watch);
        }
        try {
            Native.release(handle, owner);
        } catch (LockLostException e) {
            if (endsGrant) {
                watch.recordLoss(e);
            }
            throw e;
        } finally {
            if (endsGrant) {
                watch.settle();
            }
            Reference.reachabilityFence(this);
        }
    }

    boolean interruptsOnLoss() {
        return interruptOnLoss;
    }

    LossHandlers lossHandlers() {
        return lossHandlers;
    }
}
