package io.polylock;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A lock's {@code onLost} handlers. A lost grant's {@link HoldWatch} runs them on a callback
 * thread, once per lost grant.
 */
final class LossHandlers {
    private final List<Runnable> handlers = new CopyOnWriteArrayList<>();

    void add(Runnable handler) {
        handlers.add(handler);
    }

    /** Runs every handler on the calling (callback) thread; one that throws does not stop the others. */
    void runAll() {
        for (Runnable handler : handlers) {
            try {
                handler.run();
            } catch (RuntimeException | Error e) {
                Thread t = Thread.currentThread();
                t.getUncaughtExceptionHandler().uncaughtException(t, e);
            }
        }
    }
}
