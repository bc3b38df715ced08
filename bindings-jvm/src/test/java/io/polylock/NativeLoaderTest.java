package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The native library is unpacked from the jar into a temporary file: that
 * file must not outlive the load, even in a JVM that is killed (SIGKILL, an
 * OOM kill, a container stop) and never runs its exit hooks. Left behind,
 * every run of a service would add one ~10 MB file to /tmp until the disk
 * is full (it did fill this machine's).
 */
class NativeLoaderTest {
    /** The child: loads the library, says so, and waits to be killed. */
    public static void main(String[] args) throws Exception {
        Class.forName("io.polylock.Native");
        System.out.println("loaded");
        System.out.flush();
        Thread.sleep(60_000);
    }

    @Test
    @Timeout(60)
    void aKilledJvmLeavesNoUnpackedLibraryBehind() throws Exception {
        Path tmp = Files.createTempDirectory("polylock-loader-test");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> cmd = new java.util.ArrayList<>(List.of(java, "-Djava.io.tmpdir=" + tmp,
                "-cp", System.getProperty("java.class.path")));
        String libraryPath = System.getProperty("polylock.library.path");
        if (libraryPath != null && !libraryPath.isEmpty()) {
            // The suite loads a given file: the jar's unpacking is what is tested here.
            cmd.add("-Dpolylock.library.path=");
        }
        cmd.add(NativeLoaderTest.class.getName());
        Process child = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        try (BufferedReader out = new BufferedReader(
                new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = out.readLine()) != null && !line.equals("loaded")) {
                System.err.println("child: " + line);
            }
            assertEquals("loaded", line, "the child did not load the library");
            child.destroyForcibly(); // SIGKILL: no shutdown hook, no deleteOnExit
            assertTrue(child.waitFor(20, TimeUnit.SECONDS));
        }
        List<Path> files;
        try (Stream<Path> left = Files.list(tmp)) {
            files = left.toList();
        }
        for (Path f : files) {
            Files.delete(f);
        }
        Files.delete(tmp);
        assertEquals(List.of(), files, "unpacked native libraries left in " + tmp);
    }
}
