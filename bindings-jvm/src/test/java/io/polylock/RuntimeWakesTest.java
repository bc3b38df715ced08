package io.polylock;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.DoublePredicate;
import java.util.function.LongSupplier;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Hot-path cost guard (issue 16), counted and not timed: how often the
 * runtime's thread goes to sleep or wakes (tokio's park and unpark count)
 * per uncontended lock+unlock; and how many of the Java thread's waits end
 * while it spins (never sleeping for the answer).
 *
 * <p>{@code lock()} hands its acquire to the runtime's one worker and waits
 * for the outcome on a channel; {@code unlock()} runs the release on the
 * Java thread, its request and reply carried by the worker. Left to itself,
 * the worker wakes for each request and its reply and sleeps after each: 8
 * per lock+unlock; on ZooKeeper, the create's and the pipelined
 * getChildren's replies can come apart (2 more) and the watch our delete
 * fires can wake it once more (12). Counted: 5.9 on Redis, 6.3 to 9.1 on
 * ZooKeeper; the former runtime (2 workers, a tokio timer armed per wait)
 * made 10.5 and 19.7. A change that brings either back, or adds a hop,
 * fails here and must say why.
 *
 * <p>In a busy spell of quick calls the worker is not left to itself: a
 * spinner task keeps it awake while they are in flight
 * (polylock::blocking::hot_worker), so a Redis lock+unlock wakes nothing:
 * 0 to 0.1 counts. A ZooKeeper write waits for the disk, longer than the
 * spinner's 400 µs window, so there nothing spins and the counts are the ones
 * above. BOUND: those most, with a little slack.
 */
@Timeout(120)
class RuntimeWakesTest {
    private static final int ROUNDS = 200;
    private static final Map<String, Double> BOUND = Map.of("redis", 1.0, "zk", 12.5);

    static java.util.stream.Stream<String> backends() {
        return Servers.both();
    }

    @ParameterizedTest
    @MethodSource("backends")
    void anUncontendedLockUnlockWakesTheRuntimeThreadAFewTimes(String url) throws Exception {
        double bound = BOUND.get(url.startsWith("redis") ? "redis" : "zk");
        double perRound = perLockUnlock(url, "wakes", Native::runtimeWakes, n -> n <= bound);
        System.out.printf("runtime wake-ups per lock+unlock on %s: %.2f%n", url, perRound);
        assertTrue(perRound <= bound,
                String.format("%.2f runtime wake-ups per lock+unlock (at most %.1f); %d contended yields, %s",
                        perRound, bound, Native.contendedYields(), Native.hotCounts()));
    }

    /**
     * In a busy loop both waits of a Redis lock+unlock end while the Java
     * thread spins: lock()'s for its grant and unlock()'s for its reply
     * (polylock::blocking::block_on). With tokio's block_on the unlock
     * slept and was woken for every reply: 1.0 spins per lock+unlock, and
     * about 60 µs more per lock+unlock on the 2-core machine.
     */
    @Test
    void aBusyLockUnlockLoopOnRedisTakesBothOutcomesWhileSpinning() throws Exception {
        String url = Servers.redisUrl();
        double perRound = perLockUnlock(url, "spins", Native::callerSpins, n -> n >= 1.5);
        System.out.printf("outcomes taken spinning per lock+unlock on %s: %.2f%n", url, perRound);
        assertTrue(perRound >= 1.5,
                String.format("%.2f outcomes taken spinning per lock+unlock (at least 1.5: lock and unlock); %d contended yields, %s",
                        perRound, Native.contendedYields(), Native.hotCounts()));
    }

    /** Batches are looked for in an uncontended spell for this long. */
    private static final long QUIET_WINDOW_MS = 20_000;
    /** Uncontended batches that all fall short fail the test. */
    private static final int QUIET_NEEDED = 5;

    /**
     * How much {@code counter} grows per lock+unlock in a busy loop of
     * ROUNDS on a fresh lock of {@code url}, after a warm-up. What is
     * counted is an uncontended machine's: another process taking the
     * cores pauses spinning for a while (polylock::blocking::spin::
     * yield_core: a batch with a contended yield; a test before this one
     * runs servers and children), and a slow spell of the machine can end
     * the spinners' spells without a reply. So batches run until one is
     * {@code enough}, for up to QUIET_WINDOW_MS, with a pause after a
     * contended one; QUIET_NEEDED uncontended batches that all fall short
     * end it (the caller's assertion fails), and a machine whose cores
     * other processes kept busy throughout skips the test.
     */
    private static double perLockUnlock(String url, String name, LongSupplier counter, DoublePredicate enough)
            throws Exception {
        try (LockClient client = LockClient.connect(url)) {
            java.util.concurrent.locks.Lock lock = client.newLock(Servers.unique(url, name));
            for (int i = 0; i < 20; i++) {
                lock.lock();
                lock.unlock();
            }
            double perRound = Double.NaN;
            int quiet = 0;
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUIET_WINDOW_MS);
            while (System.nanoTime() < end) {
                long contended = Native.contendedYields();
                long before = counter.getAsLong();
                for (int i = 0; i < ROUNDS; i++) {
                    lock.lock();
                    lock.unlock();
                }
                perRound = (counter.getAsLong() - before) / (double) ROUNDS;
                boolean uncontended = Native.contendedYields() == contended;
                quiet += uncontended ? 1 : 0;
                if (enough.test(perRound) || (uncontended && quiet >= QUIET_NEEDED)) {
                    return perRound;
                }
                if (!uncontended) {
                    Thread.sleep(200);
                }
            }
            Assumptions.assumeTrue(false, String.format(
                    "other processes had the cores for %d s: %d uncontended batches; last %.2f %s per lock+unlock",
                    QUIET_WINDOW_MS / 1000, quiet, perRound, name));
            return perRound;
        }
    }
}
