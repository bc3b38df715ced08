package io.polylock;

import java.util.ArrayList;
import java.util.List;

/**
 * An idle client in a JVM of its own, as a service's would be (see
 * {@link HostProcessTest}): connects to {@code args[0]}, makes a burst of
 * calls, holds 100 locks named {@code args[1]-i}, and prints the CPU time in
 * ns its whole process used over the next 2 s.
 */
final class IdleClientMain {
    private IdleClientMain() {}

    public static void main(String[] args) throws Exception {
        var os = (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        try (LockClient client = LockClient.connect(args[0])) {
            DistributedLock busy = client.newLock(args[1] + "-busy");
            for (int i = 0; i < 300; i++) {
                busy.lock();
                busy.unlock();
            }
            List<DistributedLock> held = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                DistributedLock lock = client.newLock(args[1] + "-" + i);
                lock.lock();
                held.add(lock);
            }
            // Let the JIT finish compiling the calls above.
            Thread.sleep(1000);
            long before = os.getProcessCpuTime();
            Thread.sleep(2000);
            System.out.println(os.getProcessCpuTime() - before);
            for (DistributedLock lock : held) {
                lock.unlock();
            }
        }
    }
}
