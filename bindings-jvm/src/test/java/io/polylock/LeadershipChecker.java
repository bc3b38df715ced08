package io.polylock;

import java.util.List;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

/**
 * Samples participants' "I lead" flags ({@code hasLeadership()}) from a thread
 * of its own while leaders come and go, and counts the rounds in which two
 * of them led at one moment.
 *
 * <p>Each round reads every flag twice, in the same order. A participant read
 * true both times led throughout between its two reads (a flip and a flip
 * back would need two handovers, each a server round trip, within the
 * round's few reads), and those spans of any two participants overlap, so
 * two such participants in one round led at one moment. A flag read true
 * once may just have turned, and is not counted: reads of several flags are
 * not one atomic snapshot.
 */
final class LeadershipChecker implements AutoCloseable {
    /** Between rounds: often enough to see an overlap of any real length, without spinning a core. */
    private static final long PAUSE_NANOS = 200_000;

    private final List<BooleanSupplier> flags;
    private final Thread thread;
    private volatile boolean stop;
    private volatile int overlaps;
    private volatile long rounds;
    /** Which participants a round saw leading (read true twice). */
    private final boolean[] seenLeading;

    LeadershipChecker(List<BooleanSupplier> flags) {
        this.flags = List.copyOf(flags);
        this.seenLeading = new boolean[flags.size()];
        this.thread = new Thread(this::run, "leadership-checker");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    private void run() {
        int n = flags.size();
        boolean[] firstRead = new boolean[n];
        while (!stop) {
            for (int i = 0; i < n; i++) {
                firstRead[i] = flags.get(i).getAsBoolean();
            }
            int leading = 0;
            for (int i = 0; i < n; i++) {
                if (flags.get(i).getAsBoolean() && firstRead[i]) {
                    leading++;
                    seenLeading[i] = true;
                }
            }
            if (leading > 1) {
                overlaps++;
            }
            rounds++;
            LockSupport.parkNanos(PAUSE_NANOS);
        }
    }

    /** Rounds in which two participants led at one moment. */
    int overlaps() {
        return overlaps;
    }

    /**
     * Whether a round saw participant {@code i} lead: proof that the checker
     * sampled while it led. Read after {@link #close()} (its join publishes the flags).
     */
    boolean sawLeading(int i) {
        return seenLeading[i];
    }

    /**
     * Waits until two more rounds ran: they read the flags as they are now, so a
     * leadership the caller just saw begin is sampled (however busy the machine).
     */
    void sampleNow() throws InterruptedException {
        long target = rounds + 2;
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (rounds < target && thread.isAlive()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the leadership checker did not run for 10 s");
            }
            Thread.sleep(1);
        }
    }

    /** Samples the flags as they are now, then stops. */
    @Override
    public void close() throws InterruptedException {
        sampleNow();
        stop = true;
        thread.join(5000);
    }
}
