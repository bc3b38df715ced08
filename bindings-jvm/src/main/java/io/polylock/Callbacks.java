package io.polylock;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Where user code called back by polylock runs ({@code onLost} handlers,
 * {@code lockAsync} completions): daemon Java threads, never the native
 * runtime's I/O threads, so a slow or blocking callback cannot stall locking.
 */
final class Callbacks {
    private static final AtomicInteger COUNT = new AtomicInteger();
    static final ExecutorService EXECUTOR = Executors.newCachedThreadPool(task -> {
        Thread t = new Thread(task, "polylock-callback-" + COUNT.incrementAndGet());
        t.setDaemon(true);
        return t;
    });

    private Callbacks() {}
}
