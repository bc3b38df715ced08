package io.polylock.bench;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import redis.clients.jedis.Jedis;

/**
 * The work one Redis server does for a lock operation, from its own
 * {@code INFO commandstats}: calls and microseconds of every command, those
 * run inside scripts included (so a script's usec also holds the usec of
 * the commands it ran, as the server counts them), {@code INFO} itself left
 * out. The same method as runtime/tests/server_work.rs: each snapshot is
 * taken once the server has been quiet for {@value #QUIET_MS} ms, so what a
 * client still sends after its call returned (an unsubscribe after a grant)
 * counts with the operation and nothing of the setup does. The counts are
 * server-wide: nothing else may use this server meanwhile.
 *
 * <p>Uncontended rounds also take the server's CPU time ({@code INFO cpu},
 * user + sys): everything the server did, including what commandstats
 * leaves out (reading and parsing requests, hashing an {@code EVAL}'s
 * source, answering), and the snapshots' own {@code INFO} calls and the
 * server's timer, alike for every system.
 */
final class ServerWork {
    static final long QUIET_MS = 200;

    /** Calls and usec per command name, cumulative since the server started. */
    record Stats(Map<String, long[]> perCommand) {
        /** Equal calls everywhere: no command ran between the two snapshots. */
        boolean sameCalls(Stats o) {
            if (!perCommand.keySet().equals(o.perCommand.keySet())) {
                return false;
            }
            return perCommand.entrySet().stream().allMatch(e -> e.getValue()[0] == o.perCommand.get(e.getKey())[0]);
        }
    }

    /**
     * What the server did per operation over {@code n}: calls and usec in
     * all, and per command name ({calls, usec}); {@code how} says whether a
     * mean or a median of single operations.
     */
    record Work(String operation, String system, double calls, double usec, double cpuUs, int n, String how,
            Map<String, double[]> perCommand) {
        /** "cmd=calls ..." (with usec: "cmd=calls/usec ..."). */
        String breakdown(boolean withUsec) {
            StringBuilder sb = new StringBuilder();
            perCommand.forEach((cmd, v) -> sb.append(sb.length() == 0 ? "" : " ").append(cmd).append('=')
                    .append(number(v[0])).append(withUsec ? "/" + number(v[1]) : ""));
            return sb.toString();
        }

        private static String number(double x) {
            return String.format(Locale.ROOT, x == Math.rint(x) ? "%.0f" : "%.2f", x);
        }
    }

    private final Jedis info;

    ServerWork(Jedis info) {
        this.info = info;
    }

    /** The server's CPU time so far, user + sys, in µs. */
    long cpuUs() {
        double seconds = 0;
        for (String line : info.info("cpu").split("\r?\n")) {
            if (line.startsWith("used_cpu_user:") || line.startsWith("used_cpu_sys:")) {
                seconds += Double.parseDouble(line.substring(line.indexOf(':') + 1).trim());
            }
        }
        return Math.round(seconds * 1e6);
    }

    Stats snapshot() {
        Map<String, long[]> per = new TreeMap<>();
        for (String line : info.info("commandstats").split("\r?\n")) {
            if (!line.startsWith("cmdstat_")) {
                continue;
            }
            String[] nameRest = line.substring("cmdstat_".length()).split(":", 2);
            if (nameRest[0].equals("info")) {
                continue;
            }
            long calls = 0;
            long usec = 0;
            for (String kv : nameRest[1].split(",")) {
                if (kv.startsWith("calls=")) {
                    calls = Long.parseLong(kv.substring(6));
                } else if (kv.startsWith("usec=")) {
                    usec = Long.parseLong(kv.substring(5));
                }
            }
            per.put(nameRest[0], new long[] {calls, usec});
        }
        return new Stats(per);
    }

    /**
     * The stats once no command ran for QUIET_MS; with {@code changedFrom},
     * only after at least one command ran since that snapshot (a call begun
     * on another thread has reached the server).
     */
    Stats settled(Stats changedFrom) throws InterruptedException {
        Stats last = snapshot();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            Thread.sleep(QUIET_MS);
            Stats now = snapshot();
            if (now.sameCalls(last) && (changedFrom == null || !now.sameCalls(changedFrom))) {
                return now;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the Redis server never went quiet (is something else using it?)");
            }
            last = now;
        }
    }

    /** after - before, per command that ran: {calls, usec}. */
    static Map<String, long[]> delta(Stats before, Stats after) {
        Map<String, long[]> d = new TreeMap<>();
        after.perCommand().forEach((cmd, a) -> {
            long[] b = before.perCommand().getOrDefault(cmd, new long[2]);
            if (a[0] > b[0]) {
                d.put(cmd, new long[] {a[0] - b[0], a[1] - b[1]});
            }
        });
        return d;
    }

    static long total(Map<String, long[]> d, int i) {
        return d.values().stream().mapToLong(v -> v[i]).sum();
    }

    static Work report(Work w) {
        System.err.printf(Locale.ROOT, "%-40s %-28s %6.1f commands %7.1f usec %7.1f CPU us, %s of %d  (calls/usec: %s)%n",
                w.operation(), w.system(), w.calls(), w.usec(), w.cpuUs(), w.how(), w.n(), w.breakdown(true));
        return w;
    }

    /**
     * The mean per operation of {@code d}, the work of {@code n} operations
     * in a row, with {@code cpuUs} the server's CPU time over them.
     */
    static Work mean(String operation, String system, Map<String, long[]> d, long cpuUs, int n) {
        Map<String, double[]> per = new TreeMap<>();
        d.forEach((cmd, v) -> per.put(cmd, new double[] {v[0] / (double) n, v[1] / (double) n}));
        return report(new Work(operation, system, total(d, 0) / (double) n, total(d, 1) / (double) n,
                cpuUs / (double) n, n, "mean", per));
    }

    /**
     * The median of single operations' work: calls and usec each their own
     * median, the commands those of the operation with the median calls.
     * A median, not a mean, because a client's background work lands in some
     * of the windows: Redisson's lock watchdog (each lock() of 3.45 arms a
     * timer that renews whatever the client holds 10 s later) and its
     * connection PINGs (every 30 s per pooled connection).
     */
    static Work median(String operation, String system, List<Map<String, long[]>> ops) {
        List<Map<String, long[]>> byCalls = new ArrayList<>(ops);
        byCalls.sort(Comparator.comparingLong(d -> total(d, 0)));
        Map<String, long[]> mid = byCalls.get(byCalls.size() / 2);
        long[] usec = ops.stream().mapToLong(d -> total(d, 1)).sorted().toArray();
        Map<String, double[]> per = new TreeMap<>();
        mid.forEach((cmd, v) -> per.put(cmd, new double[] {v[0], v[1]}));
        return report(new Work(operation, system, total(mid, 0), usec[usec.length / 2], Double.NaN, ops.size(),
                "median", per));
    }

    /** The pause after each uncontended lock+unlock: see {@link #uncontended}. */
    static final long PACE_NANOS = TimeUnit.MILLISECONDS.toNanos(1);

    /**
     * Per uncontended lock+unlock: {@code rounds} rounds of each system in
     * turn (A, B, A, B, ...), each round {@code n} lock+unlocks between two
     * quiet snapshots, every one followed by the same pause of PACE_NANOS;
     * per system, the round with the median usec, and the median round's
     * CPU time (of its own rounds, as for usec). Paced and taken in turns
     * because a server's usec per command depends on how warm its caches are:
     * back to back, the faster client would keep the server warmer and so be
     * charged less for the same commands, and a drift over the run (the
     * machine's other load, the JIT) would land on whichever system ran then.
     */
    Work[] uncontended(List<String> systems, List<Bench.Locker> locks, int rounds, int n) throws Exception {
        List<List<Map<String, long[]>>> perSystem = new ArrayList<>();
        List<List<Long>> cpu = new ArrayList<>();
        for (Bench.Locker lock : locks) {
            lock.lock();
            lock.unlock();
            perSystem.add(new ArrayList<>());
            cpu.add(new ArrayList<>());
        }
        for (int r = 0; r < rounds; r++) {
            for (int s = 0; s < locks.size(); s++) {
                Bench.Locker lock = locks.get(s);
                Stats before = settled(null);
                long cpuBefore = cpuUs();
                for (int i = 0; i < n; i++) {
                    lock.lock();
                    lock.unlock();
                    LockSupport.parkNanos(PACE_NANOS);
                }
                Stats after = settled(null);
                cpu.get(s).add(cpuUs() - cpuBefore);
                perSystem.get(s).add(delta(before, after));
            }
        }
        Work[] out = new Work[locks.size()];
        for (int s = 0; s < locks.size(); s++) {
            List<Map<String, long[]>> byUsec = new ArrayList<>(perSystem.get(s));
            byUsec.sort(Comparator.comparingLong(d -> total(d, 1)));
            long medianCpu = cpu.get(s).stream().sorted().toList().get(rounds / 2);
            out[s] = mean("uncontended lock+unlock", systems.get(s), byUsec.get(byUsec.size() / 2), medianCpu, n);
        }
        return out;
    }

    /**
     * Per handoff, the median of {@code n} per system (after one unmeasured
     * each), the systems taking turns handoff by handoff (so a drift over
     * the run lands on all of them alike). One handoff: the holder holds;
     * quiet; a waiter on another client and thread calls lock(); quiet (it
     * now waits: "queue", what waiting costs the server); the holder unlocks
     * and the waiter's lock() returns; quiet ("handoff", release to grant,
     * as runtime/tests/server_work.rs counts it). The waiter's own unlock is
     * not counted. Returns {queue, handoff} of each system in turn.
     */
    Work[] handoff(List<String> systems, List<Bench.Locker> holders, List<Bench.Locker> waiters, int n)
            throws Exception {
        List<Waiter> ws = new ArrayList<>();
        List<List<Map<String, long[]>>> queue = new ArrayList<>();
        List<List<Map<String, long[]>>> handoff = new ArrayList<>();
        for (int s = 0; s < systems.size(); s++) {
            ws.add(new Waiter(systems.get(s), waiters.get(s)));
            queue.add(new ArrayList<>());
            handoff.add(new ArrayList<>());
        }
        try {
            for (int i = 0; i <= n; i++) {
                for (int s = 0; s < systems.size(); s++) {
                    Bench.Locker holder = holders.get(s);
                    Waiter w = ws.get(s);
                    holder.lock();
                    Stats s0 = settled(null);
                    w.say("lock");
                    Stats s1 = settled(s0);
                    holder.unlock();
                    w.expect("granted");
                    Stats s2 = settled(null);
                    w.say("unlock");
                    w.expect("released");
                    if (i > 0) {
                        queue.get(s).add(delta(s0, s1));
                        handoff.get(s).add(delta(s1, s2));
                    }
                }
            }
        } finally {
            for (Waiter w : ws) {
                w.stop();
            }
        }
        Work[] out = new Work[2 * systems.size()];
        for (int s = 0; s < systems.size(); s++) {
            out[2 * s] = median("waiter queues behind the holder", systems.get(s), queue.get(s));
            out[2 * s + 1] = median("handoff (release to grant)", systems.get(s), handoff.get(s));
        }
        return out;
    }

    /** A thread that locks and unlocks {@code lock} when told to, and says when it did. */
    private static final class Waiter {
        private final String system;
        private final SynchronousQueue<String> toWaiter = new SynchronousQueue<>();
        private final SynchronousQueue<String> fromWaiter = new SynchronousQueue<>();
        private final Thread thread;

        Waiter(String system, Bench.Locker lock) {
            this.system = system;
            thread = new Thread(() -> {
                try {
                    while (toWaiter.take().equals("lock")) {
                        lock.lock();
                        fromWaiter.put("granted");
                        toWaiter.take(); // "unlock"
                        lock.unlock();
                        fromWaiter.put("released");
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                    fromWaiter.offer("failed");
                }
            }, "bench-work-waiter");
            thread.start();
        }

        void say(String what) throws InterruptedException {
            toWaiter.put(what);
        }

        void expect(String what) throws InterruptedException {
            ServerWork.expect(fromWaiter, what, system);
        }

        void stop() throws InterruptedException {
            if (toWaiter.offer("stop", 60, TimeUnit.SECONDS)) {
                thread.join();
            }
        }
    }

    private static void expect(SynchronousQueue<String> from, String what, String system) throws InterruptedException {
        String got = from.poll(60, TimeUnit.SECONDS);
        if (!Objects.equals(got, what)) {
            throw new IllegalStateException(system + ": waiter said " + got + ", not " + what);
        }
    }
}
