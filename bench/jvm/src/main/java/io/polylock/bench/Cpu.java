package io.polylock.bench;

import java.io.IOException;
import java.net.URI;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;

import redis.clients.jedis.Jedis;

/**
 * CPU time beside latency. This process's: the time on a CPU of every thread
 * of the JVM, Java and native alike (the sum of
 * /proc/self/task/*&#47;schedstat, in nanoseconds;
 * {@code OperatingSystemMXBean.getProcessCpuTime()} counts in 10 ms clock
 * ticks here, too coarse for a batch of calls), so a library's background
 * threads (Redisson's Netty event loops, Curator's and ZooKeeper's threads,
 * polylock's native runtime) count with the calls they serve, and so do the
 * JVM's own (JIT, GC). A thread's time counts while it lives: a thread that
 * ends within a span takes its time with it. A lock server's: Redis {@code INFO cpu}
 * (used_cpu_user + used_cpu_sys, its background threads included);
 * ZooKeeper: the sum of /proc/&lt;pid&gt;/task/*&#47;schedstat (nanoseconds on
 * a CPU, every thread of its JVM) of POLYLOCK_BENCH_ZK_PID (bench/run sets it
 * from scripts/services' pid file).
 */
final class Cpu {
    private Cpu() {}

    /** One lock server's CPU time so far, in µs, or NaN when it is not known. */
    interface Server {
        double micros();
    }

    static final Server NONE = () -> Double.NaN;

    private static final Server SELF = threadsOf(Path.of("/proc/self/task"));

    /** This JVM's CPU time so far, in µs (its living threads'). */
    static double client() {
        return SELF.micros();
    }

    /** The CPU time of the living threads under {@code tasks} (a /proc/PID/task directory), in µs. */
    private static Server threadsOf(Path tasks) {
        return () -> {
            long ns = 0;
            try (DirectoryStream<Path> dir = Files.newDirectoryStream(tasks)) {
                for (Path task : dir) {
                    try {
                        ns += Long.parseLong(Files.readString(task.resolve("schedstat")).trim().split(" ")[0]);
                    } catch (IOException | NumberFormatException e) {
                        // a thread that ended meanwhile
                    }
                }
            } catch (IOException e) {
                return Double.NaN;
            }
            return ns / 1000.0;
        };
    }

    /** The Redis server of {@code url}, read over a connection of its own (one INFO per reading). */
    static Server redis(String url) {
        URI u = URI.create(url);
        Jedis jedis = new Jedis(u.getHost(), u.getPort());
        return () -> {
            synchronized (jedis) {
                double seconds = 0;
                for (String line : jedis.info("cpu").split("\r?\n")) {
                    if (line.startsWith("used_cpu_user:") || line.startsWith("used_cpu_sys:")) {
                        seconds += Double.parseDouble(line.substring(line.indexOf(':') + 1).trim());
                    }
                }
                return seconds * 1e6;
            }
        };
    }

    /** The ZooKeeper server of POLYLOCK_BENCH_ZK_PID, or {@link #NONE}. */
    static Server zookeeper() {
        String pid = System.getenv("POLYLOCK_BENCH_ZK_PID");
        if (pid == null || !pid.matches("\\d+")) {
            return NONE;
        }
        return threadsOf(Path.of("/proc", pid, "task"));
    }

    /** CPU of one row over the spans it was timed in, summed. */
    static final class Tally {
        double client;
        double server;
        long ops;

        /** Runs {@code body} ({@code ops} operations) as one span: the server read first and last. */
        void span(Server s, long ops, Bench.Op body) throws Exception {
            double s0 = s.micros();
            double c0 = client();
            body.run();
            double c1 = client();
            double s1 = s.micros();
            add(c1 - c0, s1 - s0, ops);
        }

        void add(double clientUs, double serverUs, long n) {
            client += clientUs;
            server += serverUs; // NaN stays NaN
            ops += n;
        }

        double clientPerOp() {
            return ops == 0 ? Double.NaN : client / ops;
        }

        double serverPerOp() {
            return ops == 0 ? Double.NaN : server / ops;
        }
    }
}
