package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;

import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * polylock leaves the host process alone: while thousands of calls run, no
 * thread of the JVM has its CPU affinity changed, and an idle client that
 * holds locks burns next to no CPU.
 */
@Timeout(120)
class HostProcessTest {
    static Stream<String> urls() {
        return Stream.of(Servers.redisUrl(), Servers.zkUrl());
    }

    /** Every thread of this process and its allowed CPUs, from /proc. */
    private static Map<String, String> masks() {
        Map<String, String> masks = new ConcurrentHashMap<>();
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path task : (Iterable<Path>) tasks::iterator) {
                try {
                    for (String line : Files.readAllLines(task.resolve("status"))) {
                        if (line.startsWith("Cpus_allowed_list:")) {
                            masks.put(task.getFileName().toString(), line.split(":", 2)[1].trim());
                        }
                    }
                } catch (NoSuchFileException ended) {
                    // the thread ended meanwhile
                }
            }
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
        return masks;
    }

    @ParameterizedTest
    @MethodSource("urls")
    void noThreadAffinityChangesWhileThousandsOfCallsRun(String url) throws Exception {
        // The JVM's main thread is the process's own task: its mask is the process's.
        String expected = masks().get(String.valueOf(ProcessHandle.current().pid()));
        Map<String, String> changed = new ConcurrentHashMap<>();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicInteger samples = new AtomicInteger();
        Thread sampler = new Thread(() -> {
            while (!stop.get()) {
                masks().forEach((tid, mask) -> {
                    if (!mask.equals(expected)) {
                        changed.put(tid, mask);
                    }
                });
                samples.incrementAndGet();
                try {
                    Thread.sleep(0, 500_000);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "affinity-sampler");
        sampler.start();
        try (LockClient client = LockClient.connect(url)) {
            DistributedLock lock = client.newLock(Servers.unique(url, "affinity"));
            // Back to back, then paced as a service's calls come (2 ms, 10 ms).
            long[][] modes = {{0, 1600}, {2, 500}, {10, 300}};
            for (long[] mode : modes) {
                for (int i = 0; i < mode[1]; i++) {
                    lock.lock();
                    lock.unlock();
                    if (mode[0] > 0) {
                        Thread.sleep(mode[0]);
                    }
                }
            }
        } finally {
            stop.set(true);
            sampler.join();
        }
        assertTrue(samples.get() > 100, "the sampler ran " + samples.get() + " times only");
        assertEquals(Map.of(), changed, "threads whose CPUs changed from " + expected);
    }

    @ParameterizedTest
    @MethodSource("urls")
    void anIdleClientHolding100LocksUsesAlmostNoCpu(String url) throws Exception {
        // In a JVM of its own, as a service's client is: this one carries
        // other test classes' clients (Redisson's event loops among them).
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        System.getProperties().stringPropertyNames().stream()
                .filter(k -> k.startsWith("polylock."))
                .forEach(k -> command.add("-D" + k + "=" + System.getProperty(k)));
        command.add(IdleClientMain.class.getName());
        command.add(url);
        command.add(Servers.unique(url, "idle"));
        Process child = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String out = new String(child.getInputStream().readAllBytes()).trim();
        assertEquals(0, child.waitFor(), "the idle client's JVM failed: " + out);
        long usedNs = Long.parseLong(out.lines().reduce((a, b) -> b).orElseThrow());
        // 2% of one core: the count is the whole JVM's (its JIT and GC threads
        // too) in 10 ms ticks; the Rust test, in a process of its own, holds 0.5%.
        assertTrue(usedNs < 40_000_000L, "an idle client's JVM used " + usedNs / 1000 + " µs of CPU in 2 s");
    }
}
