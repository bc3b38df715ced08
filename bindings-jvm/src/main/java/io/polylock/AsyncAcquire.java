package io.polylock;

import java.util.concurrent.CompletableFuture;

/**
 * One {@code lockAsync()}: the future the caller holds, and the native
 * acquire behind it. Cancelling the future cancels the acquire; a grant that
 * raced the cancel is released, so a cancelled future never leaves a hold.
 */
final class AsyncAcquire {
    final CompletableFuture<Void> future = new CompletableFuture<>();
    private final DistributedLock lock;
    private final long owner;
    /** The grant's loss watch, handed to the native acquire; the lock records it on the grant. */
    private final HoldWatch watch;
    private long handle;        // guarded by this; 0 until started, and after freeing
    private boolean finished;   // guarded by this: done() ran, or the future was cancelled

    AsyncAcquire(DistributedLock lock, long owner, HoldWatch watch) {
        this.lock = lock;
        this.owner = owner;
        this.watch = watch;
        future.whenComplete((v, e) -> {
            if (future.isCancelled()) {
                finish();
            }
        });
    }

    /** Records the native handle; frees it at once if the acquire already ended. */
    synchronized void started(long nativeHandle) {
        handle = nativeHandle;
        if (finished) {
            free();
        }
    }

    /** Called from native code on a runtime thread: hand over to a callback thread at once. */
    @SuppressWarnings("unused")
    void done(long token, Throwable error) {
        Callbacks.EXECUTOR.execute(() -> {
            finish();
            if (error != null) {
                future.completeExceptionally(error);
            } else {
                lock.granted(owner, watch, token); // before the future: its stages may ask lossFuture()
                if (!future.complete(null)) {
                    lock.releaseAs(owner); // cancelled meanwhile: nobody will unlock this hold
                }
            }
        });
    }

    private synchronized void finish() {
        finished = true;
        free();
    }

    private void free() {
        if (handle != 0) {
            long h = handle;
            handle = 0;
            Native.asyncFree(h);
        }
    }
}
