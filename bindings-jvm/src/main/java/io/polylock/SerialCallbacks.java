package io.polylock;

import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Runs one source's callbacks on {@link Callbacks#EXECUTOR} one at a time, in
 * the order they were submitted (the shared pool alone would run two of them
 * at once, and a listener's {@code notLeader()} could overtake its
 * {@code isLeader()}). Borrows a pool thread only while callbacks are queued.
 */
final class SerialCallbacks {
    private final Queue<Runnable> queue = new ConcurrentLinkedQueue<>();
    private final AtomicBoolean draining = new AtomicBoolean();

    void execute(Runnable callback) {
        queue.add(callback);
        schedule();
    }

    private void schedule() {
        if (draining.compareAndSet(false, true)) {
            Callbacks.EXECUTOR.execute(this::drain);
        }
    }

    private void drain() {
        try {
            Runnable callback;
            while ((callback = queue.poll()) != null) {
                try {
                    callback.run();
                } catch (RuntimeException | Error e) {
                    Thread t = Thread.currentThread();
                    t.getUncaughtExceptionHandler().uncaughtException(t, e);
                }
            }
        } finally {
            draining.set(false);
        }
        // A callback queued after the last poll but before the flag dropped found it set.
        if (!queue.isEmpty()) {
            schedule();
        }
    }
}
