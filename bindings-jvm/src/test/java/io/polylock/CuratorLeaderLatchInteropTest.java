package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.ZooKeeper;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Curator's real {@code LeaderLatch} and polylock participants in one
 * election (one latch path): at every moment at most one of them believes it
 * leads (sampled from a checker thread while leaders come and go), the next
 * one takes over whenever the leader, of either kind, closes, and each side's
 * {@code getLeader()} names the other side's leader by its participant id.
 */
@Timeout(120)
class CuratorLeaderLatchInteropTest {
    private CuratorFramework curator;
    private LockClient a;
    private LockClient b;

    @BeforeEach
    void connect() throws Exception {
        curator = CuratorFrameworkFactory.newClient(Servers.zkConnectString(Servers.zkUrl()), new RetryOneTime(100));
        curator.start();
        assertTrue(curator.blockUntilConnected(10, TimeUnit.SECONDS));
        a = LockClient.connect(Servers.zkUrl());
        b = LockClient.connect(Servers.zkUrl());
    }

    @AfterEach
    void close() {
        a.close();
        b.close();
        curator.close();
    }

    @Test
    void oneLeaderAtATimeAcrossCuratorAndPolylockAndTheNextTakesOver() throws Exception {
        String path = Servers.unique(Servers.zkUrl(), "latch-interop");
        LeaderLatch curatorFirst = new LeaderLatch(curator, path, "curator-first");
        LeaderElection ours1 = a.election(path);
        LeaderElection ours2 = b.election(path);
        LeaderLatch curatorLast = new LeaderLatch(curator, path, "curator-last");
        LeaderElection observer = a.election(path); // never started: reads the leader only

        LeadershipChecker checker = new LeadershipChecker(List.of(curatorFirst::hasLeadership,
                ours1::hasLeadership, ours2::hasLeadership, curatorLast::hasLeadership));
        try (checker) {
            curatorFirst.start();
            assertTrue(curatorFirst.await(10, TimeUnit.SECONDS), "the Curator latch did not lead alone");
            checker.sampleNow();
            ours1.start();
            ours2.start();
            assertFalse(ours1.await(300, TimeUnit.MILLISECONDS), "polylock led beside a Curator leader");
            assertFalse(ours2.hasLeadership());
            assertEquals("curator-first", observer.getLeader().orElseThrow().id(),
                    "polylock's getLeader() does not name the Curator leader");
            Servers.eventually("both polylock participants' nodes",
                    () -> latchNodes(path).size() == 3);

            // Curator -> polylock: one of ours (the earlier node) takes over.
            curatorFirst.close();
            Servers.eventually("a polylock participant leads", () -> ours1.hasLeadership() || ours2.hasLeadership());
            checker.sampleNow();
            LeaderElection next = ours1.hasLeadership() ? ours1 : ours2;
            LeaderElection after = next == ours1 ? ours2 : ours1;
            long term = next.getTerm();

            // A Curator latch that joins now queues behind both of ours, and names our leader.
            curatorLast.start();
            assertFalse(curatorLast.await(300, TimeUnit.MILLISECONDS), "Curator led beside a polylock leader");
            assertEquals(next.getId(), curatorLast.getLeader().getId(),
                    "Curator's getLeader() does not name the polylock leader");
            assertTrue(curatorLast.getLeader().isLeader());

            // polylock -> polylock, then polylock -> Curator.
            next.close();
            assertTrue(after.await(10, TimeUnit.SECONDS), "the other polylock participant did not take over");
            checker.sampleNow();
            assertTrue(after.getTerm() > term, "the term did not grow");
            assertEquals(after.getId(), curatorLast.getLeader().getId());
            after.close();
            assertTrue(curatorLast.await(10, TimeUnit.SECONDS), "Curator did not take over from polylock");
            checker.sampleNow();
            assertEquals("curator-last", observer.getLeader().orElseThrow().id(),
                    "polylock's getLeader() does not name the Curator leader");
            curatorLast.close();
        }
        assertEquals(0, checker.overlaps(), "two participants believed they lead at one moment");
        for (int i = 0; i < 4; i++) {
            assertTrue(checker.sawLeading(i), "the checker did not sample participant " + i + " leading");
        }
        Servers.eventually("nothing left under the latch path", () -> latchNodes(path).isEmpty());
    }

    private static List<String> latchNodes(String path) {
        try {
            ZooKeeper zk = Servers.zooKeeper();
            try {
                return Servers.zkChildren(zk, path);
            } finally {
                zk.close();
            }
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
