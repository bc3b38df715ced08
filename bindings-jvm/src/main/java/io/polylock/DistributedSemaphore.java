package io.polylock;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

/**
 * A distributed counting semaphore of {@link #getPermits()} permits, with the method names and
 * meanings of {@link java.util.concurrent.Semaphore}: across threads, clients and processes at
 * most that many permits are held at once (Redisson's {@code RPermitExpirableSemaphore} on the
 * same name included on Redis, Curator's {@code InterProcessSemaphoreV2} on the same path on
 * ZooKeeper). Made by {@link LockClient#newSemaphore(String, int)}.
 *
 * <p>On ZooKeeper the semaphore is Curator's {@code InterProcessSemaphoreV2} layout: an acquire
 * of {@code k} takes Curator's mutex at {@code <path>/locks}, creates {@code k} ephemeral lease
 * nodes {@code <path>/leases/_c_<uuid>-lease-<seq>}, is granted once the leases number at most
 * N (else it waits on their children), and gives the mutex back. Curator's leases and these
 * count together, and each side's release wakes the other's waiters. Curator keeps no record of
 * N; polylock keeps its own, {@code <path>/polylock_permits} (Curator ignores it), so another
 * polylock client of another N is refused, but a Curator client of another N is not.
 *
 * <p>As with {@code java.util.concurrent.Semaphore}, permits belong to the semaphore object, not
 * to a thread: any thread may {@link #release(int)} what another acquired. Each acquire of
 * {@code k} permits is one grant, with its own fencing token and its own lease (renewed while
 * held); {@code release(k)} gives back whole grants (the newest whose counts fit). An acquire waits in line: a
 * large ask is not overtaken by later small ones.
 *
 * <p>Differences from {@code java.util.concurrent.Semaphore}, all because the permits live on a
 * server:
 * <ul>
 * <li>{@link #availablePermits()} reads the server (one round trip), and is stale the moment it
 *     returns. {@link #getHeldPermits()} counts what this object holds.</li>
 * <li>{@code release(k)} gives back only permits this object holds, in whole grants: a count
 *     larger than that, or one that would split a grant (1 of a grant of 2), throws
 *     {@link IllegalArgumentException} and releases nothing. So threads that ask for different
 *     counts should each use a semaphore object of their own ({@code newSemaphore} again: no
 *     I/O), or one thread's {@code release(1)} may meet another's grant of 2. A count of 0, or
 *     more than {@link #getPermits()}, to an acquire is an {@link IllegalArgumentException} as
 *     well.</li>
 * <li>Every client of one name must be made with the same number of permits: an acquire of one
 *     made with another throws {@link LockPermitsMismatchException} and takes nothing.</li>
 * <li>The acquires are fair in the sense above, with no barging {@code tryAcquire()}: a
 *     {@code tryAcquire()} behind a waiting ask returns {@code false}.</li>
 * <li>A grant can be lost (its Redis lease refused or expired, or its client's ZooKeeper
 *     session ended): the {@code release} that gives it back throws {@link LockLostException}.
 *     There is no loss listener yet.</li>
 * </ul>
 *
 * <p>Keep a reference to the object while it holds permits: one that becomes unreachable gives
 * its grants back in the background (nobody could release them any more).
 *
 * <p>Blocking calls wait in slices of at most {@value DistributedLock#SLICE_MS} ms so that
 * {@link Thread#interrupt()} ends them promptly with {@link InterruptedException}; the acquire is
 * withdrawn from the server before that is thrown. If the grant came just as the interrupt did,
 * the call returns normally (the permits are held) and the thread's interrupt status is kept.
 */
public final class DistributedSemaphore {
    private static final Cleaner CLEANER = Cleaner.create();

    private final String name;
    private final int permits;
    private final long handle;

    DistributedSemaphore(String name, int permits, long handle) {
        this.name = name;
        this.permits = permits;
        this.handle = handle;
        // Grants still held when this object becomes unreachable are given back
        // in the background: nobody could release them any more.
        long nativeHandle = handle; // the cleaning action must not capture `this`
        CLEANER.register(this, () -> Native.semFree(nativeHandle));
    }

    /**
     * The semaphore's name.
     * @return the semaphore's name
     */
    public String getName() {
        return name;
    }

    /**
     * The number of permits this semaphore was made with (every client of the name must agree).
     * @return the number of permits this semaphore was made with (every client of the name must agree)
     */
    public int getPermits() {
        return permits;
    }

    /**
     * Waits (interruptibly) for one permit; as {@link #acquire(int) acquire(1)}.
     * @throws InterruptedException if interrupted while waiting; nothing is left queued on the server
     */
    public void acquire() throws InterruptedException {
        acquire(1);
    }

    /**
     * Waits until {@code permits} permits are granted, in one grant. An interrupt ends the wait
     * within about {@value DistributedLock#SLICE_MS} ms with {@link InterruptedException}, and the
     * acquire is withdrawn from the server before this throws.
     *
     * @throws IllegalArgumentException {@code permits} is not 1 to {@link #getPermits()}
     * @throws LockPermitsMismatchException the server records another number of permits
     * @param permits the number of permits
     * @throws InterruptedException if interrupted while waiting; nothing is left queued on the server
     */
    public void acquire(int permits) throws InterruptedException {
        if (!acquire(permits, -1, true)) {
            throw new LockException("semaphore " + name + " did not grant " + permits + " permits"); // no timeout
        }
    }

    /** Waits, uninterruptibly, for one permit; as {@link #acquireUninterruptibly(int) acquireUninterruptibly(1)}. */
    public void acquireUninterruptibly() {
        acquireUninterruptibly(1);
    }

    /**
     * Waits until {@code permits} permits are granted; an interrupt meanwhile does not end the
     * wait and is kept for the caller.
     * @param permits the number of permits
     */
    public void acquireUninterruptibly(int permits) {
        try {
            if (!acquire(permits, -1, false)) {
                throw new LockException("semaphore " + name + " did not grant " + permits + " permits");
            }
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible acquire was interrupted", e); // never thrown
        }
    }

    /**
     * One try for one permit, no waiting; as {@link #tryAcquire(int) tryAcquire(1)}.
     * @return true if the permits are now held
     */
    public boolean tryAcquire() {
        return tryAcquire(1);
    }

    /**
     * One try for {@code permits} permits, no waiting: true if they are now held.
     * @param permits the number of permits
     * @return true if the permits are now held
     */
    public boolean tryAcquire(int permits) {
        try {
            return acquire(permits, 0, false);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible acquire was interrupted", e); // never thrown
        }
    }

    /**
     * Waits up to {@code timeout} for one permit; as {@link #tryAcquire(int, long, TimeUnit)}.
     * @param timeout how long to wait at most
     * @param unit the unit of {@code timeout}
     * @return true if the permits are now held
     * @throws InterruptedException if interrupted while waiting; nothing is left queued on the server
     */
    public boolean tryAcquire(long timeout, TimeUnit unit) throws InterruptedException {
        return tryAcquire(1, timeout, unit);
    }

    /**
     * Waits up to {@code timeout} (interruptibly) for {@code permits} permits in one grant: true if
     * they are now held, false if not granted in time (the wait leaves nothing on the server).
     * @param permits the number of permits
     * @param timeout how long to wait at most
     * @param unit the unit of {@code timeout}
     * @return true if the permits are now held
     * @throws InterruptedException if interrupted while waiting; nothing is left queued on the server
     */
    public boolean tryAcquire(int permits, long timeout, TimeUnit unit) throws InterruptedException {
        Objects.requireNonNull(unit, "unit");
        return acquire(permits, Math.max(0, unit.toNanos(timeout)), true);
    }

    /** Gives back one permit; as {@link #release(int) release(1)}. */
    public void release() {
        release(1);
    }

    /**
     * Gives back {@code permits} permits held by this semaphore object (the newest grants whose counts fit), and
     * waits until the server has them back; waiters are woken (Redisson's too).
     *
     * @throws IllegalArgumentException fewer permits are held here, or the count would split a
     *     grant; nothing is released
     * @throws LockLostException a grant given back was lost meanwhile (the others are released)
     * @param permits the number of permits
     */
    public void release(int permits) {
        try {
            Native.semRelease(handle, permits);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * The fencing token of the newest grant held by this semaphore object: larger than every
     * earlier grant's of this name. Right after an acquire, on a semaphore object no other thread
     * acquires through, that is the acquire's.
     *
     * @throws IllegalMonitorStateException no permits are held here
     * @return the fencing token of the newest grant held by this semaphore object
     */
    public long getFencingToken() {
        long token;
        try {
            token = Native.semNewestToken(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
        if (token < 0) {
            throw new IllegalMonitorStateException("no permits of semaphore " + name + " are held here");
        }
        return token;
    }

    /**
     * The permits free now on the server, taken by no client (one read of the server, as
     * Redisson's {@code availablePermits}). As {@code java.util.concurrent.Semaphore}'s, for
     * debugging and monitoring: it may be stale by the time it returns.
     * @return the permits free now on the server, taken by no client (one read of the server, as Redisson's {@code availablePermits})
     */
    public int availablePermits() {
        try {
            return Native.semAvailable(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * How many permits this semaphore object holds (acquired through it and not released).
     * @return how many permits this semaphore object holds (acquired through it and not released)
     */
    public int getHeldPermits() {
        try {
            return Native.semHeldPermits(handle);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    @Override
    public String toString() {
        return "DistributedSemaphore(" + name + ", " + permits + " permits)";
    }

    /**
     * One acquire of {@code count} permits; timeoutNanos &lt; 0 waits forever, 0 tries once. An
     * interruptible one throws on an interrupt (after withdrawing the acquire); an uninterruptible
     * one keeps the interrupt for the caller.
     */
    private boolean acquire(int count, long timeoutNanos, boolean interruptible) throws InterruptedException {
        if (interruptible && Thread.interrupted()) {
            throw new InterruptedException();
        }
        boolean interrupted = false;
        long pending = Native.semAcquireStart(handle, count, timeoutNanos);
        try {
            while (true) {
                long r = Native.semAcquireWait(pending, DistributedLock.SLICE_MS);
                if (r != Native.STILL_WAITING) {
                    return r != Native.NOT_GRANTED;
                }
                if (Thread.interrupted()) {
                    interrupted = true;
                    if (interruptible) {
                        if (Native.semAcquireCancel(pending) != Native.NOT_GRANTED) {
                            return true; // granted as the interrupt came: held, interrupt kept (finally)
                        }
                        interrupted = false;
                        throw new InterruptedException("interrupted while waiting for " + count
                                + " permits of semaphore " + name);
                    }
                }
            }
        } finally {
            Native.semAcquireFree(pending); // cancels a still-running acquire, server side included
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
            Reference.reachabilityFence(this);
        }
    }
}
