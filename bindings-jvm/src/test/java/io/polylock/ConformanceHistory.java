package io.polylock;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The operation history of the conformance scenarios' lock steps, for
 * tests/history's histcheck (a Porcupine check of mutual exclusion). With
 * POLYLOCK_HISTORY_DIR set, every acquire (call, and return with the token or
 * the outcome's name), release (call, and return ok, or ok false when told
 * Lost) and reported loss goes as one JSON line (tests/history/events.go)
 * into {@code java-conformance-<pid>.jsonl} there, stamped with
 * {@link System#nanoTime()} (CLOCK_MONOTONIC on Linux, the clock every
 * language's recorder reads). A call is stamped before the step hands the
 * API call to the owner's thread, its return after the step has the answer,
 * so the interval holds the operation. Nothing is recorded when the variable
 * is unset.
 */
final class ConformanceHistory {
    private static final String DIR = System.getenv("POLYLOCK_HISTORY_DIR");
    private static final AtomicLong RUNS = new AtomicLong();
    private static FileOutputStream file;

    private final String backend;
    private final String lock;
    /** Names this run's clients apart from every other run's. */
    private final String run;

    /** One scenario run's history: its lock name is unique to the run, so each run is a history of its own. */
    ConformanceHistory(String backend, String lock) {
        this.backend = backend;
        this.lock = "java:" + lock;
        this.run = "java-" + ProcessHandle.current().pid() + "-" + RUNS.getAndIncrement();
    }

    /** One synchronous append per line, shared by every scenario run of the JVM. */
    private static synchronized void write(String line) {
        try {
            if (file == null) {
                file = new FileOutputStream(
                        Path.of(DIR, "java-conformance-" + ProcessHandle.current().pid() + ".jsonl").toFile(), true);
            }
            file.write(line.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private void record(int c, int owner, JsonNode step, String op, String kind, String fields) {
        if (DIR == null || DIR.isEmpty()) {
            return;
        }
        String mode = step.path("mode").asText("");
        String modeField = mode.equals("read") || mode.equals("write") ? ", \"mode\": \"" + mode + "\"" : "";
        write("{\"client\": \"" + run + "/c" + c + ".o" + owner + "\", \"backend\": \"" + backend
                + "\", \"lock\": \"" + lock + "\", \"resource\": \"\", \"op\": \"" + op + "\", \"kind\": \"" + kind
                + "\", \"t_ns\": " + System.nanoTime() + modeField + fields + "}\n");
    }

    /** An acquire is called; {@code permits}: the semaphore's number, for a semaphore's acquire. */
    void acquireCall(int c, int owner, JsonNode step, int permits) {
        String fields = step.path("mode").asText("").equals("permits")
                ? ", \"permits\": " + step.path("permits").asInt(permits) + ", \"count\": " + step.path("count").asInt(1)
                : "";
        record(c, owner, step, "acquire", "call", fields);
    }

    /** The acquire returned {"granted", token}, or else {outcome}. */
    void acquireReturn(int c, int owner, JsonNode step, String[] r) {
        String fields = r[0].equals("granted") ? ", \"token\": " + Long.parseLong(r[1])
                : ", \"error\": \"" + jsonSafe(r[0]) + "\"";
        record(c, owner, step, "acquire", "return", fields);
    }

    void releaseCall(int c, int owner, JsonNode step) {
        record(c, owner, step, "release", "call", "");
    }

    /** The release returned {@code outcome}: ok, lost (told Lost: ok false), or another error. */
    void releaseReturn(int c, int owner, JsonNode step, String outcome) {
        String fields = switch (outcome) {
            case "ok" -> ", \"ok\": true";
            case "lost" -> ", \"ok\": false";
            default -> ", \"error\": \"" + jsonSafe(outcome) + "\"";
        };
        record(c, owner, step, "release", "return", fields);
    }

    /** (client, owner) was told it lost its hold in the step's mode. */
    void lost(int c, int owner, JsonNode step) {
        record(c, owner, step, "lost", "event", "");
    }

    /** An outcome name, or an error's text reduced to what needs no JSON escaping. */
    private static String jsonSafe(String s) {
        return s.replaceAll("[^A-Za-z0-9_ .:-]", "_");
    }
}
