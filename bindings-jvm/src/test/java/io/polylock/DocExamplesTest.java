package io.polylock;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.URI;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Runs every {@code ```java} example of the documentation (README.md, docs/,
 * bindings-jvm/README.md) against the test servers, so a renamed method
 * breaks this suite rather than the docs.
 *
 * <p>The blocks of one Markdown file form the body of one {@code main}
 * method, in order (a page's later examples may use what its earlier ones
 * made), with their {@code import} lines hoisted. A block preceded by
 * {@code <!-- fragment: reason -->} is skipped (code that needs another
 * library, such as the Curator or Redisson code a migration guide replaces).
 * The program is compiled in process against this build's classes and run
 * in this JVM, so it uses the native library the suite already loaded. The
 * documented URLs are pointed at POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK.
 */
class DocExamplesTest {
    private static final Path ROOT = Path.of("..").toAbsolutePath().normalize();
    private static final Pattern FENCE = Pattern.compile("^```(\\S*)\\s*$");
    private static final Pattern FRAGMENT = Pattern.compile("^<!--\\s*fragment:\\s*\\S.*-->\\s*$");

    record Block(int line, String code) {}

    static List<Path> docFiles() throws IOException {
        List<Path> files = new ArrayList<>(List.of(ROOT.resolve("README.md"), ROOT.resolve("bindings-jvm/README.md")));
        try (Stream<Path> docs = Files.walk(ROOT.resolve("docs"))) {
            docs.filter(p -> p.toString().endsWith(".md")).sorted().forEach(files::add);
        }
        return files;
    }

    /** The runnable {@code ```java} blocks of a file, fragments left out. */
    static List<Block> examples(Path path) throws IOException {
        List<String> lines = Files.readAllLines(path);
        List<Block> blocks = new ArrayList<>();
        for (int i = 0; i < lines.size(); i++) {
            var fence = FENCE.matcher(lines.get(i));
            if (!fence.matches()) {
                continue;
            }
            String language = fence.group(1).split(",")[0];
            int end = i + 1;
            while (end < lines.size() && !lines.get(end).strip().equals("```")) {
                end++;
            }
            String before = "";
            for (int j = i - 1; j >= 0; j--) {
                if (!lines.get(j).isBlank()) {
                    before = lines.get(j).strip();
                    break;
                }
            }
            if (language.equals("java") && !FRAGMENT.matcher(before).matches()) {
                blocks.add(new Block(i + 2, String.join("\n", lines.subList(i + 1, end))));
            }
            i = end;
        }
        return blocks;
    }

    static String program(String className, Path path, List<Block> blocks) {
        List<String> imports = new ArrayList<>();
        List<String> body = new ArrayList<>();
        for (Block block : blocks) {
            String code = block.code()
                    .replace("redis://127.0.0.1:6390", Servers.redisUrl())
                    .replace("redis://127.0.0.1:6379", Servers.redisUrl())
                    .replace("zk://127.0.0.1:2191", Servers.zkUrl())
                    .replace("zk://127.0.0.1:2181", Servers.zkUrl());
            body.add("// --- " + ROOT.relativize(path) + ":" + block.line());
            for (String line : code.split("\n")) {
                (line.startsWith("import ") ? imports : body).add(line);
            }
        }
        return String.join("\n", imports) + "\npublic class " + className
                + " {\npublic static void main(String[] args) throws Exception {\n"
                + String.join("\n", body) + "\n}\n}\n";
    }

    @Test
    void theDocumentationHasJavaExamples() throws IOException {
        boolean any = false;
        for (Path f : docFiles()) {
            any |= !examples(f).isEmpty();
        }
        assertTrue(any, "no ```java example found: the extractor or the docs moved");
    }

    @TestFactory
    Stream<DynamicTest> javaExamplesRun() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Path path : docFiles()) {
            List<Block> blocks = examples(path);
            if (blocks.isEmpty()) {
                continue;
            }
            tests.add(DynamicTest.dynamicTest("java examples of " + ROOT.relativize(path) + " run",
                    () -> assertTimeoutPreemptively(Duration.ofSeconds(120), () -> run(path, blocks))));
        }
        assertFalse(tests.isEmpty(), "no ```java example found");
        return tests.stream();
    }

    private static void run(Path path, List<Block> blocks) throws Exception {
        String className = "DocExample_" + ROOT.relativize(path).toString().replaceAll("[^A-Za-z0-9]", "_");
        String source = program(className, path, blocks);
        Path out = Files.createTempDirectory("polylock-doc-examples");
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        StringWriter diagnostics = new StringWriter();
        // This build's classes: where LockClient was loaded from.
        String classpath = Path.of(LockClient.class.getProtectionDomain().getCodeSource().getLocation().toURI())
                .toString();
        try (StandardJavaFileManager files = javac.getStandardFileManager(null, null, null)) {
            JavaFileObject unit = new SimpleJavaFileObject(
                    URI.create("string:///" + className + ".java"), JavaFileObject.Kind.SOURCE) {
                @Override
                public CharSequence getCharContent(boolean ignoreEncodingErrors) {
                    return source;
                }
            };
            boolean compiled = javac.getTask(diagnostics, files, null,
                    List.of("-d", out.toString(), "-classpath", classpath, "-proc:none"), null, List.of(unit)).call();
            if (!compiled) {
                fail("a java example of " + ROOT.relativize(path) + " does not compile "
                        + "(the '// --- file:line' comment above the failing line says which block):\n"
                        + diagnostics + "\n--- program ---\n" + numbered(source));
            }
        }
        try (URLClassLoader loader = new URLClassLoader(new URL[] {out.toUri().toURL()},
                DocExamplesTest.class.getClassLoader())) {
            Method main = loader.loadClass(className).getMethod("main", String[].class);
            try {
                main.invoke(null, (Object) new String[0]);
            } catch (InvocationTargetException e) {
                throw new AssertionError("a java example of " + ROOT.relativize(path) + " threw:\n--- program ---\n"
                        + numbered(source), e.getCause());
            }
        }
    }

    private static String numbered(String source) {
        String[] lines = source.split("\n");
        return java.util.stream.IntStream.range(0, lines.length)
                .mapToObj(i -> String.format("%4d  %s", i + 1, lines[i]))
                .collect(Collectors.joining("\n"));
    }
}
