package io.polylock;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Receives a lock's loss notices from the native runtime (one per lost
 * hold) and runs the {@code onLost} handlers on a callback thread.
 */
final class LossListener {
    private final List<Runnable> handlers = new CopyOnWriteArrayList<>();

    void add(Runnable handler) {
        handlers.add(handler);
    }

    /** Called from native code (see upcalls.rs); must not block or throw. */
    @SuppressWarnings("unused")
    void lost(long owner, String reason) {
        Callbacks.EXECUTOR.execute(() -> {
            for (Runnable handler : handlers) {
                try {
                    handler.run();
                } catch (RuntimeException | Error e) {
                    Thread t = Thread.currentThread();
                    t.getUncaughtExceptionHandler().uncaughtException(t, e);
                }
            }
        });
    }
}
