package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.exceptions.JedisDataException;

/** A server that keeps refusing until the timeout: LockUnavailableException naming its reply. */
@Timeout(60)
class TransientTest {

    @Test
    void aBusyServerUntilTheTimeoutThrowsUnavailableNamingBusy() throws Exception {
        String url = System.getenv("POLYLOCK_TEST_REDIS2");
        Assumptions.assumeTrue(url != null && !url.isEmpty(), "POLYLOCK_TEST_REDIS2 not set");
        URI uri = URI.create(url);
        try (Jedis admin = new Jedis(uri)) {
            admin.configSet("busy-reply-threshold", "100");
        }
        try (LockClient client = LockClient.connect(url)) {
            String name = Servers.unique(url, "busy");
            DistributedLock lock = client.newLock(name);
            Thread spinner = new Thread(() -> {
                try (Jedis j = new Jedis(uri)) {
                    j.eval("while true do end", 0);
                } catch (RuntimeException killedOrTimedOut) {
                    // ends with the test's SCRIPT KILL
                }
            });
            spinner.setDaemon(true);
            spinner.start();
            awaitBusy(uri);
            long started = System.nanoTime();
            LockUnavailableException e;
            try {
                e = assertThrows(LockUnavailableException.class, () -> lock.tryLock(1, TimeUnit.SECONDS));
            } finally {
                killScript(uri);
            }
            long waitedMs = (System.nanoTime() - started) / 1_000_000;
            assertTrue(e.reply().startsWith("BUSY"), e.reply());
            assertTrue(e.getMessage().contains(name), e.getMessage());
            assertTrue(waitedMs >= 950, "thrown at once (" + waitedMs + " ms), not at the timeout");
            // The lock stays usable once the server answers again.
            assertTrue(lock.tryLock(5, TimeUnit.SECONDS));
            lock.unlock();
            assertEquals(0, lock.getHoldCount());
        }
    }

    private static void awaitBusy(URI uri) throws InterruptedException {
        while (true) {
            try (Jedis j = new Jedis(uri)) {
                j.ping();
            } catch (JedisDataException e) {
                if (e.getMessage().startsWith("BUSY")) {
                    return;
                }
            }
            Thread.sleep(10);
        }
    }

    private static void killScript(URI uri) throws InterruptedException {
        while (true) {
            try (Jedis j = new Jedis(uri)) {
                j.scriptKill();
                return;
            } catch (JedisDataException e) {
                if (e.getMessage().startsWith("NOTBUSY")) {
                    return;
                }
            }
            Thread.sleep(10);
        }
    }
}
