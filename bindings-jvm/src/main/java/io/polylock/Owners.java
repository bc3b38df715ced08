package io.polylock;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Owner ids: the unit of reentrancy is the Java thread. Each thread gets a
 * process-unique id on first use, never reused (a dead thread's id could
 * still hold a lock), so {@code Thread.getId()}, which the JDK recycles, is not used.
 */
final class Owners {
    private static final AtomicLong NEXT = new AtomicLong(1);
    private static final ThreadLocal<Long> CURRENT = ThreadLocal.withInitial(NEXT::getAndIncrement);

    private Owners() {}

    static long current() {
        return CURRENT.get();
    }
}
