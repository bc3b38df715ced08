package io.polylock;

import java.net.URI;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.stream.Stream;

import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.exceptions.JedisException;

/**
 * The real servers the suite runs against (POLYLOCK_TEST_REDIS,
 * POLYLOCK_TEST_ZK; `scripts/services env` prints them), and plain clients
 * to look at what a lock left on them.
 */
final class Servers {
    private static final AtomicLong COUNTER = new AtomicLong();

    private Servers() {}

    static String redisUrl() {
        return required("POLYLOCK_TEST_REDIS");
    }

    static String zkUrl() {
        return required("POLYLOCK_TEST_ZK");
    }

    /** The Sentinel set's redis+sentinel:// URL (scripts/services start --sentinel), or null when unset. */
    static String sentinelUrl() {
        String v = System.getenv("POLYLOCK_TEST_SENTINEL");
        return v == null || v.isEmpty() ? null : v;
    }

    /** host:port of the master, as the first answering sentinel of a redis+sentinel:// URL names it. */
    static HostAndPort sentinelMaster(String url) {
        String rest = url.substring(url.indexOf("://") + 3);
        String hosts = rest.substring(rest.lastIndexOf('@') + 1, rest.indexOf('/'));
        String masterName = rest.substring(rest.indexOf('/') + 1).split("\\?")[0];
        for (String s : hosts.split(",")) {
            try (Jedis sentinel = new Jedis(HostAndPort.from(s),
                    DefaultJedisClientConfig.builder().timeoutMillis(2000).build())) {
                List<String> named = sentinel.sentinelGetMasterAddrByName(masterName);
                if (named != null && named.size() == 2) {
                    return new HostAndPort(named.get(0), Integer.parseInt(named.get(1)));
                }
            } catch (JedisException e) {
                // this sentinel does not answer: ask the next
            }
        }
        throw new IllegalStateException("no sentinel of " + url + " names a master");
    }

    /** The Redis Cluster's redis+cluster:// URL (scripts/services start --cluster), or null when unset. */
    static String clusterUrl() {
        String v = System.getenv("POLYLOCK_TEST_CLUSTER");
        return v == null || v.isEmpty() ? null : v;
    }

    /** A cluster client on the seeds of a redis+cluster:// URL: it sends each key's command to its slot's master. */
    static JedisCluster cluster(String url) {
        String rest = url.substring(url.indexOf("://") + 3);
        String hosts = rest.substring(rest.lastIndexOf('@') + 1).split("[/?]")[0];
        Set<HostAndPort> seeds = new HashSet<>();
        for (String s : hosts.split(",")) {
            seeds.add(HostAndPort.from(s));
        }
        return new JedisCluster(seeds);
    }

    /** Both backends, for parameterised tests. */
    static Stream<String> both() {
        return Stream.of(redisUrl(), zkUrl());
    }

    private static String required(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException(name + " is not set: start the servers and export their URLs with "
                    + "eval \"$(scripts/services start)\"");
        }
        return v;
    }

    static boolean isZk(String url) {
        return url.startsWith("zk");
    }

    /** A lock name no other run or suite uses; a ZooKeeper path on ZooKeeper. */
    static String unique(String url, String what) {
        String base = "polylock-jvm-" + what + "-" + ProcessHandle.current().pid() + "-"
                + COUNTER.incrementAndGet() + "-" + System.nanoTime();
        return isZk(url) ? "/polylock-jvm-tests/" + base : base;
    }

    /** host:port[,host:port] of a zk:// URL, for the plain ZooKeeper client. */
    static String zkConnectString(String url) {
        return url.replaceFirst("^zk://", "");
    }

    static Jedis jedis() {
        URI u = URI.create(redisUrl());
        return new Jedis(u.getHost(), u.getPort());
    }

    static ZooKeeper zooKeeper() throws Exception {
        CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(zkConnectString(zkUrl()), 10_000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
        });
        if (!connected.await(10, TimeUnit.SECONDS)) {
            zk.close();
            throw new IllegalStateException("cannot connect to ZooKeeper at " + zkUrl());
        }
        return zk;
    }

    /** The contender nodes under a ZooKeeper lock path (none if the path is gone). */
    static List<String> zkChildren(ZooKeeper zk, String path) throws Exception {
        try {
            return zk.getChildren(path, false);
        } catch (KeeperException.NoNodeException e) {
            return List.of();
        }
    }

    /**
     * Waits until {@code condition} holds, for at most 10 s. Cleanup the
     * runtime starts in the background is checked this way, not with sleeps.
     */
    static void eventually(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within 10 s: " + what);
            }
            Thread.sleep(20);
        }
    }
}
