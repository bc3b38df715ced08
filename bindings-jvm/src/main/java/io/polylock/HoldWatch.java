package io.polylock;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One grant of a {@link DistributedLock} to one thread (its re-entries share it): the native runtime
 * calls {@link #lost} once if the grant is lost, and never after its last hold was released.
 *
 * <p>A watch is made for each acquire and handed to the native side with it, so a loss notice
 * reaches its grant directly, even one that comes before the acquire has returned. A re-entry's
 * watch is never registered there (the grant's first watch stays), nor is a failed acquire's.
 *
 * <p>It turns a loss into Java's ways of stopping work: the futures of
 * {@link DistributedLock#lossFuture()} complete with the loss, and, if the lock interrupts on loss,
 * the thread that holds the grant is interrupted. The unlock that ends the grant's last hold first
 * closes the way to that interrupt ({@link #endInterrupts}), under the same monitor the interrupt is
 * delivered under: so no interrupt lands on the thread after that unlock, even if the runtime's
 * notice raced it.
 */
final class HoldWatch {
    private final DistributedLock lock;
    /** The thread that acquired: the grant's owner id is its. */
    private final Thread holder;
    /** The grant's fencing token; set once granted, before the watch is published in the lock's map. */
    private volatile long token = -1;

    // Guarded by this.
    private LockLostException loss;
    /** The last hold's unlock has begun: no interrupt any more. */
    private boolean interruptsEnded;
    /** Futures handed out and not yet settled; null once settled (a loss, or the last hold's end). */
    private List<CompletableFuture<LockLostException>> futures = new ArrayList<>();

    HoldWatch(DistributedLock lock, Thread holder) {
        this.lock = lock;
        this.holder = holder;
    }

    long token() {
        return token;
    }

    void granted(long fencingToken) {
        token = fencingToken;
    }

    /**
     * Called from native code (upcalls.rs) on a runtime thread when the grant is lost: must not
     * block or throw. Interrupts here, at once; runs futures and {@code onLost} handlers on a
     * callback thread.
     */
    @SuppressWarnings("unused")
    void lost(long owner, String reason) {
        LockLostException e = new LockLostException(
                "lock \"" + lock.name() + "\" was lost: " + reason, lock.name(), reason);
        synchronized (this) {
            if (loss == null) {
                loss = e;
            }
            if (!interruptsEnded && lock.interruptsOnLoss()) {
                holder.interrupt();
            }
        }
        Callbacks.EXECUTOR.execute(() -> {
            settle();
            lock.lossHandlers().runAll();
        });
    }

    /** A loss the unlock of the grant reported before the runtime's notice was delivered. */
    synchronized void recordLoss(LockLostException e) {
        if (loss == null) {
            loss = e;
        }
    }

    /** The last hold's unlock begins: from now on a loss notice interrupts nobody. */
    synchronized void endInterrupts() {
        interruptsEnded = true;
    }

    /**
     * A future of this grant's loss: completed with it if the grant is (or was) lost, cancelled once
     * the grant's last hold was released without a loss.
     */
    CompletableFuture<LockLostException> newFuture() {
        CompletableFuture<LockLostException> f = new CompletableFuture<>();
        LockLostException settledLoss;
        synchronized (this) {
            if (futures != null && loss == null) {
                futures.add(f);
                return f;
            }
            settledLoss = loss;
        }
        settle(f, settledLoss);
        return f;
    }

    /**
     * Settles every future handed out: with the loss if there was one, else (the last hold ended
     * without one) by cancelling it. Idempotent.
     */
    void settle() {
        List<CompletableFuture<LockLostException>> taken;
        LockLostException settledLoss;
        synchronized (this) {
            taken = futures;
            futures = null;
            settledLoss = loss;
        }
        if (taken != null) {
            for (CompletableFuture<LockLostException> f : taken) {
                settle(f, settledLoss);
            }
        }
    }

    private static void settle(CompletableFuture<LockLostException> f, LockLostException settledLoss) {
        if (settledLoss != null) {
            f.complete(settledLoss);
        } else {
            f.cancel(false);
        }
    }
}
