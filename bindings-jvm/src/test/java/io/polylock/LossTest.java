package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import redis.clients.jedis.Jedis;

/** onLost: a holder is told when the server takes its lock away. */
@Timeout(120)
class LossTest {

    @Test
    void zookeeperSessionExpiryRunsOnLost() throws Exception {
        String url = Servers.zkUrl();
        ClientOptions partitionable = ClientOptions.defaults()
                .withSessionTimeout(Duration.ofSeconds(4))
                .withDebugFaultsForTests();
        try (LockClient client = LockClient.connect(url, partitionable); LockClient other = LockClient.connect(url)) {
            String name = Servers.unique(url, "zk-loss");
            DistributedLock lock = client.newLock(name);
            CountDownLatch lost = new CountDownLatch(1);
            lock.onLost(lost::countDown);
            lock.lock();
            client.debugExpireSessionForTests();
            assertTrue(lost.await(30, TimeUnit.SECONDS), "onLost did not run after the session expired");
            assertFalse(lock.isHeldByCurrentThread());
            LockLostException e =
                    assertThrows(LockLostException.class, lock::unlock, "the first unlock after a loss reports it");
            assertEquals(name, e.lockName());
            assertNotNull(e.reason(), "the runtime says why");
            assertEquals("lock \"" + name + "\" was lost: " + e.reason(), e.getMessage());
            assertThrows(IllegalMonitorStateException.class, lock::unlock, "and the hold is gone");

            // The ephemeral node went with the session: someone else gets the lock.
            DistributedLock theirs = other.newLock(name);
            assertTrue(theirs.tryLock(10, TimeUnit.SECONDS));
            theirs.unlock();

            // The client recovers with a new session: it can lock again.
            assertTrue(lock.tryLock(20, TimeUnit.SECONDS), "no new session after the expiry");
            lock.unlock();
        }
    }

    @Test
    void redisLeaseExpiredServerSideRunsOnLost() throws Exception {
        String url = Servers.redisUrl();
        try (LockClient client = LockClient.connect(url); Jedis jedis = Servers.jedis()) {
            String name = Servers.unique(url, "redis-loss");
            DistributedLock lock = client.newLock(name, Duration.ofSeconds(1));
            CountDownLatch lost = new CountDownLatch(1);
            lock.onLost(lost::countDown);
            lock.lock();
            assertEquals(1, jedis.hlen(name), "the hash at the lock name, one field");
            assertEquals(lock.holderIdOfCurrentThread(), jedis.hkeys(name).iterator().next());
            jedis.del(name); // as if the lease had run out: the next renewal is refused
            assertTrue(lost.await(30, TimeUnit.SECONDS), "onLost did not run after the lease was refused");
            assertFalse(lock.isHeldByCurrentThread());
            assertThrows(LockLostException.class, lock::unlock);
            assertTrue(lock.tryLock(10, TimeUnit.SECONDS), "lockable again after the loss");
            lock.unlock();
        }
    }

    @Test
    void eachHoldOfALostReentrantLockReportsTheLoss() throws Exception {
        String url = Servers.redisUrl();
        try (LockClient client = LockClient.connect(url); Jedis jedis = Servers.jedis()) {
            String name = Servers.unique(url, "reentrant-loss");
            DistributedLock lock = client.newLock(name, Duration.ofSeconds(1));
            CountDownLatch lost = new CountDownLatch(1);
            lock.onLost(lost::countDown);
            lock.lock();
            lock.lock();
            assertEquals(2, lock.getHoldCount());
            jedis.del(name);
            assertTrue(lost.await(30, TimeUnit.SECONDS), "onLost did not run after the lease was refused");
            assertThrows(LockLostException.class, lock::unlock, "the first hold reports the loss");
            assertThrows(LockLostException.class, lock::unlock, "and so does the second");
            assertThrows(IllegalMonitorStateException.class, lock::unlock, "then nothing is held");
            assertTrue(lock.tryLock(10, TimeUnit.SECONDS), "lockable again after the loss");
            assertEquals(1, lock.getHoldCount());
            lock.unlock();
            assertThrows(IllegalMonitorStateException.class, lock::unlock);
        }
    }

    @Test
    void releasedLockNeverReportsLoss() throws Exception {
        String url = Servers.redisUrl();
        try (LockClient client = LockClient.connect(url); Jedis jedis = Servers.jedis()) {
            String name = Servers.unique(url, "no-loss");
            DistributedLock lock = client.newLock(name, Duration.ofSeconds(1));
            CountDownLatch lost = new CountDownLatch(1);
            lock.onLost(lost::countDown);
            lock.lock();
            lock.unlock();
            jedis.del(name);
            assertFalse(lost.await(1500, TimeUnit.MILLISECONDS), "a released hold reported a loss");
        }
    }
}
