package check;

import io.polylock.DistributedLock;
import io.polylock.LockClient;

/**
 * Install test of the jar (scripts/package test): takes and releases a lock on
 * every server URL given, with the native library the jar loads itself.
 */
public final class InstallCheck {
    private InstallCheck() {}

    public static void main(String[] urls) {
        for (String url : urls) {
            String name = "package-test/java-" + ProcessHandle.current().pid();
            try (LockClient client = LockClient.connect(url)) {
                DistributedLock lock = client.newLock(name);
                lock.lock();
                long token;
                try {
                    token = lock.fencingToken();
                    check(token > 0, "fencing token " + token);
                    check(lock.isHeldByCurrentThread() && lock.isLocked(), "not held after lock()");
                } finally {
                    lock.unlock();
                }
                check(!lock.isLocked(), "still locked after unlock()");
                System.out.println("java " + url.split(":")[0] + ": acquired (fencing token " + token + ") and released");
            }
        }
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
