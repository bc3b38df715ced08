package io.polylock.demo;

import io.polylock.ClientOptions;
import io.polylock.DistributedLock;
import io.polylock.DistributedSemaphore;
import io.polylock.LockClient;
import io.polylock.LockLostException;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import redis.clients.jedis.JedisPooled;

/**
 * The Java worker of the demo and the cross-language fault suite; same
 * protocol as runtime/examples/demo_worker.rs (see demo/README.md):
 * {@code --url URL --lock NAME --resource-url REDIS_URL --rounds N --id ID
 * [--hold-ms MS] [--lease-ms MS] [--session-ms MS] [--permits N]}.
 * With --permits it takes one permit of the semaphore of N permits instead
 * of the lock and holds without touching the resource (N hold at once).
 * For each round: lock; print a grant line; read the resource's count; hold
 * for --hold-ms; write count+1 through demo/resource.lua (fencing-checked);
 * unlock (a reported loss is not an error); print the record line.
 * Times: {@link System#nanoTime()}, which is CLOCK_MONOTONIC on Linux.
 * With POLYLOCK_HISTORY_DIR set it also records its operation history there
 * ({@link History}; demo/README.md).
 */
public final class DemoWorker {
    private DemoWorker() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --option value, got " + argv[i]);
            }
            args.put(argv[i], argv[i + 1]);
        }
        String url = required(args, "--url");
        String name = required(args, "--lock");
        String resourceUrl = required(args, "--resource-url");
        int rounds = Integer.parseInt(args.getOrDefault("--rounds", "5"));
        long pid = ProcessHandle.current().pid();
        String id = args.getOrDefault("--id", "java-" + pid);
        long holdMs = Long.parseLong(args.getOrDefault("--hold-ms", "2"));
        ClientOptions options = ClientOptions.defaults()
                .withLease(Duration.ofMillis(Long.parseLong(args.getOrDefault("--lease-ms", "30000"))))
                .withSessionTimeout(Duration.ofMillis(Long.parseLong(args.getOrDefault("--session-ms", "10000"))));
        String backend = url.startsWith("zk") ? "zookeeper" : "redis";
        String resource = "demo:resource:" + backend + ":" + name;
        String script = resourceScript();
        String common = "\"worker\": " + json(id) + ", \"lang\": \"java\", \"backend\": \"" + backend
                + "\", \"pid\": " + pid;
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        History history = new History(id, pid, backend, name, resource);

        AtomicLong losses = new AtomicLong();
        try (JedisPooled redis = new JedisPooled(java.net.URI.create(resourceUrl));
                LockClient client = LockClient.connect(url, options)) {
            if (args.containsKey("--permits")) {
                int permits = Integer.parseInt(args.get("--permits"));
                permitRounds(client.newSemaphore(name, permits), permits, rounds, holdMs, common, out, history);
                return;
            }
            DistributedLock lock = client.newLock(name);
            lock.onLost(losses::incrementAndGet);
            for (int round = 0; round < rounds; round++) {
                history.record("acquire", "call", "");
                lock.lock();
                long lossesBefore = losses.get();
                long token = lock.fencingToken();
                history.record("acquire", "return", "\"token\": " + token);
                long start = System.nanoTime();
                out.println("{\"event\": \"grant\", " + common + ", \"token\": " + token + ", \"t_ns\": " + start + "}");
                out.flush();
                // The fenced read (-1: refused, and so is the write below).
                history.record("read", "call", "\"token\": " + token);
                Object read = redis.eval(script, List.of(resource), List.of(Long.toString(token)));
                long count = read == null ? 0 : Long.parseLong(String.valueOf(read));
                history.record("read", "return", "\"value\": " + count);
                Thread.sleep(holdMs); // widen the window a lost update would need
                history.record("write", "call", "\"token\": " + token + ", \"value\": " + (count + 1));
                Object accepted = redis.eval(script, List.of(resource),
                        List.of(Long.toString(token), Long.toString(count + 1)));
                history.record("write", "return", "\"ok\": " + Long.valueOf(1).equals(accepted));
                long end = System.nanoTime();
                // Lost during the section, or found out on unlock (a paused
                // process learns only when it runs again).
                boolean lost = losses.get() != lossesBefore;
                if (lost) {
                    history.record("lost", "event", "");
                }
                history.record("release", "call", "\"token\": " + token);
                try {
                    lock.unlock();
                } catch (LockLostException e) {
                    lost = true;
                }
                history.record("release", "return", "\"ok\": " + !lost);
                out.println("{" + common + ", \"token\": " + token + ", \"start_ns\": " + start + ", \"end_ns\": " + end
                        + ", \"accepted\": " + Long.valueOf(1).equals(accepted) + ", \"lost\": " + lost + "}");
                out.flush();
            }
        }
        if (out.checkError()) {
            System.exit(1);
        }
    }

    /** The semaphore rounds: a grant line, a hold, a release, a record line. */
    private static void permitRounds(DistributedSemaphore sem, int permits, int rounds, long holdMs, String common,
            PrintStream out, History history) throws InterruptedException, IOException {
        for (int round = 0; round < rounds; round++) {
            history.record("acquire", "call", "\"permits\": " + permits);
            sem.acquire();
            long token = sem.getFencingToken();
            history.record("acquire", "return", "\"token\": " + token);
            long start = System.nanoTime();
            out.println("{\"event\": \"grant\", " + common + ", \"token\": " + token + ", \"t_ns\": " + start + "}");
            out.flush();
            Thread.sleep(holdMs);
            long end = System.nanoTime();
            boolean lost = false;
            history.record("release", "call", "\"token\": " + token);
            try {
                sem.release();
            } catch (LockLostException e) {
                lost = true;
            }
            history.record("release", "return", "\"ok\": " + !lost);
            out.println("{" + common + ", \"token\": " + token + ", \"start_ns\": " + start + ", \"end_ns\": " + end
                    + ", \"accepted\": true, \"lost\": " + lost + "}");
            out.flush();
        }
    }

    /**
     * The operation history for tests/history's histcheck: one JSON line per
     * call, return and reported loss, in POLYLOCK_HISTORY_DIR (nothing when
     * unset). Each line is one write to an unbuffered append-mode file, so a
     * killed worker leaves whole lines (a call without its return: an
     * outcome unknown).
     */
    private static final class History {
        private final java.io.FileOutputStream file;
        private final String common;

        History(String id, long pid, String backend, String lock, String resource) throws IOException {
            String dir = System.getenv("POLYLOCK_HISTORY_DIR");
            file = dir == null || dir.isEmpty() ? null
                    : new java.io.FileOutputStream(java.nio.file.Path.of(dir, id + "-" + pid + ".jsonl").toFile(), true);
            common = "\"client\": " + json(id + "/" + pid) + ", \"backend\": \"" + backend + "\", \"lock\": " + json(lock)
                    + ", \"resource\": " + json(resource);
        }

        /** Records {@code op}'s {@code kind} now, with {@code fields} ("name": value pairs, or empty). */
        void record(String op, String kind, String fields) throws IOException {
            if (file == null) {
                return;
            }
            String line = "{" + common + ", \"op\": \"" + op + "\", \"kind\": \"" + kind + "\", \"t_ns\": "
                    + System.nanoTime() + (fields.isEmpty() ? "" : ", " + fields) + "}\n";
            file.write(line.getBytes(StandardCharsets.UTF_8));
        }
    }

    private static String required(Map<String, String> args, String key) {
        String v = args.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing " + key);
        }
        return v;
    }

    /** demo/resource.lua, copied into the classes by the build. */
    private static String resourceScript() throws IOException {
        try (InputStream in = DemoWorker.class.getResourceAsStream("/resource.lua")) {
            if (in == null) {
                throw new IOException("resource.lua is not on the classpath");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    private static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
