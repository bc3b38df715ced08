package io.polylock;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads libpolylock_jvm from the jar: copies {@code native/<os>-<arch>/<lib>}
 * to a temporary file and {@code System.load}s it, so that users add one
 * dependency and nothing else. {@code -Dpolylock.library.path=/path/lib.so}
 * loads a given file instead (for native development).
 */
final class NativeLoader {
    private NativeLoader() {}

    static void load() {
        String override = System.getProperty("polylock.library.path");
        if (override != null && !override.isEmpty()) {
            System.load(Path.of(override).toAbsolutePath().toString());
            return;
        }
        String resource = "/native/" + platform() + "/" + System.mapLibraryName("polylock_jvm");
        try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new UnsatisfiedLinkError("polylock has no native library for " + platform()
                        + " in its jar (looked for " + resource + "; scripts/package builds linux-x86_64 and linux-aarch64)"
                        + ": build bindings-jvm/native for this platform and pass -Dpolylock.library.path=FILE");
            }
            Path file = Files.createTempFile("polylock_jvm-", "-" + System.mapLibraryName("polylock_jvm"));
            try {
                Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
                System.load(file.toAbsolutePath().toString());
            } finally {
                // Loaded (or not): the file is not needed any more. Deleted
                // now, not at exit, so a JVM that is killed (and never runs
                // its exit hooks) leaves nothing in the temp directory. On
                // POSIX the loaded mapping outlives the name; Windows keeps
                // a loaded library's file open, so there it goes at exit.
                if (!deleted(file)) {
                    file.toFile().deleteOnExit();
                }
            }
        } catch (IOException e) {
            UnsatisfiedLinkError error = new UnsatisfiedLinkError("cannot extract " + resource + ": " + e);
            error.initCause(e);
            throw error;
        }
    }

    private static boolean deleted(Path file) {
        try {
            Files.deleteIfExists(file);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** For example {@code linux-x86_64}, as the pom names the jar's directory. */
    static String platform() {
        String os = System.getProperty("os.name").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
        String osName = os.startsWith("linux") ? "linux" : os.startsWith("mac") ? "macos" : os.replace(' ', '_');
        String archName = switch (arch) {
            case "amd64", "x86_64" -> "x86_64";
            case "aarch64", "arm64" -> "aarch64";
            default -> arch;
        };
        return osName + "-" + archName;
    }
}
