package io.polylock;

/**
 * Owner ids: the unit of reentrancy is the Java thread. Each thread gets a
 * process-unique id on first use, never reused (a dead thread's id could
 * still hold a lock), so {@code Thread.getId()}, which the JDK recycles, is not used.
 * The ids come from the runtime's one process-wide allocator, shared with any
 * other polylock binding loaded in this process.
 */
final class Owners {
    private static final ThreadLocal<Long> CURRENT = ThreadLocal.withInitial(Native::freshOwnerId);

    private Owners() {}

    static long current() {
        return CURRENT.get();
    }
}
