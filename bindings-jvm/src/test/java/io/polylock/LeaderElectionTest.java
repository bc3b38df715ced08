package io.polylock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.ZooKeeper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import redis.clients.jedis.Jedis;

/**
 * {@link LeaderElection} against the real servers: one leader at a time, the
 * next leads after the leader closes, terms grow, {@code getLeader()} reports
 * what the server records, listeners hear each change in order, a waiting
 * participant's close withdraws it, nothing is left on the server, and a lost
 * leadership is given up (listeners told) before another participant leads,
 * after which the participant campaigns again.
 */
@Timeout(120)
class LeaderElectionTest {

    static List<String> backends() {
        return Servers.both().toList();
    }

    /** What a listener heard, in order. */
    static final class Heard implements LeaderListener {
        final List<String> calls = new CopyOnWriteArrayList<>();

        @Override
        public void isLeader() {
            calls.add("isLeader");
        }

        @Override
        public void notLeader() {
            calls.add("notLeader");
        }
    }

    /** What an election may leave on the server: ZooKeeper latch nodes, or the Redis lock's keys. */
    static List<String> leftovers(String url, String name) throws Exception {
        if (Servers.isZk(url)) {
            ZooKeeper zk = Servers.zooKeeper();
            try {
                return Servers.zkChildren(zk, name);
            } finally {
                zk.close();
            }
        }
        List<String> left = new ArrayList<>();
        try (Jedis jedis = Servers.jedis()) {
            for (String key : List.of(name, "polylock_queue:{" + name + "}", "polylock_queue_deadline:{" + name + "}")) {
                if (jedis.exists(key)) {
                    left.add(key);
                }
            }
        }
        return left;
    }

    @ParameterizedTest
    @MethodSource("backends")
    void oneLeaderAtATimeAndTheNextLeadsAfterClose(String url) throws Exception {
        try (LockClient a = LockClient.connect(url); LockClient b = LockClient.connect(url)) {
            String name = Servers.unique(url, "election");
            LeaderElection first = a.election(name);
            LeaderElection second = b.election(name);
            Heard firstHeard = new Heard();
            Heard secondHeard = new Heard();
            first.addListener(firstHeard);
            second.addListener(secondHeard);
            assertTrue(first.getLeader().isEmpty(), "a leader before any campaign");
            assertEquals(LeaderElection.State.LATENT, first.getState());

            first.start();
            assertTrue(first.await(10, TimeUnit.SECONDS), "the only participant did not lead");
            assertTrue(first.hasLeadership());
            long firstTerm = first.getTerm();
            LeaderElection.Leader leader = first.getLeader().orElseThrow();
            assertEquals(first.getId(), leader.id(), "getLeader() names the leader as the server records it");
            if (Servers.isZk(url)) {
                assertEquals(firstTerm, leader.term().orElseThrow(), "the term as the server records it");
                List<String> nodes = leftovers(url, name);
                assertEquals(1, nodes.size(), nodes.toString());
                assertTrue(nodes.get(0).startsWith("_c_") && nodes.get(0).contains("-latch-"),
                        "not a LeaderLatch node: " + nodes);
            }

            second.start();
            assertFalse(second.await(300, TimeUnit.MILLISECONDS), "two leaders");
            assertFalse(second.hasLeadership());
            assertThrows(IllegalStateException.class, second::getTerm, "a term of a participant that does not lead");
            assertTrue(first.hasLeadership(), "the leader stopped leading while another campaigned");

            first.close();
            assertFalse(first.hasLeadership(), "still believes it leads after close()");
            assertEquals(LeaderElection.State.CLOSED, first.getState());
            assertTrue(second.await(10, TimeUnit.SECONDS), "the next did not lead after the leader closed");
            assertTrue(second.getTerm() > firstTerm, "the term did not grow");
            LeaderElection.Leader now = second.getLeader().orElseThrow();
            assertEquals(second.getId(), now.id());
            assertNotEquals(leader.id(), now.id(), "the same participant id for two participants");

            second.close();
            assertTrue(second.getLeader().isEmpty(), "a leader after every participant closed");
            assertEquals(List.of(), leftovers(url, name), "close() left something on the server");
            assertThrows(LockClosedException.class, second::await, "await() after close()");
            Servers.eventually("the first heard isLeader, notLeader",
                    () -> firstHeard.calls.equals(List.of("isLeader", "notLeader")));
            Servers.eventually("the second heard isLeader, notLeader",
                    () -> secondHeard.calls.equals(List.of("isLeader", "notLeader")));
            Thread.sleep(100);
            assertEquals(List.of("isLeader", "notLeader"), firstHeard.calls, "more calls than changes");
            second.close(); // idempotent
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    void closeWhileCampaigningWithdrawsAndLeavesNothing(String url) throws Exception {
        try (LockClient a = LockClient.connect(url); LockClient b = LockClient.connect(url)) {
            String name = Servers.unique(url, "election-withdraw");
            LeaderElection leader = a.election(name);
            leader.start();
            leader.await();
            LeaderElection waiting = b.election(name);
            Heard heard = new Heard();
            waiting.addListener(heard);
            waiting.start();
            assertFalse(waiting.await(300, TimeUnit.MILLISECONDS));
            waiting.close();
            if (Servers.isZk(url)) {
                assertEquals(1, leftovers(url, name).size(), "the withdrawn participant's node is left");
            }
            leader.close();
            assertEquals(List.of(), leftovers(url, name), "something left on the server");
            Thread.sleep(200);
            assertEquals(List.of(), heard.calls, "a withdrawn participant heard of a leadership");
        }
    }

    @Test
    void misuseIsRefused() throws Exception {
        try (LockClient c = LockClient.connect(Servers.redisUrl())) {
            LeaderElection e = c.election(Servers.unique(Servers.redisUrl(), "election-misuse"));
            assertThrows(IllegalStateException.class, e::await, "await() before start()");
            e.start();
            assertThrows(IllegalStateException.class, e::start, "a second start()");
            assertTrue(e.await(10, TimeUnit.SECONDS));
            e.close();
            assertThrows(IllegalStateException.class, e::start, "start() after close()");
            assertThrows(IllegalArgumentException.class, () -> c.election(""));
        }
    }

    @Test
    void closingTheClientEndsTheCampaign() throws Exception {
        String url = Servers.zkUrl();
        String name = Servers.unique(url, "election-client-close");
        try (LockClient a = LockClient.connect(url)) {
            LeaderElection leader = a.election(name);
            leader.start();
            assertTrue(leader.await(10, TimeUnit.SECONDS));
            LockClient b = LockClient.connect(url);
            LeaderElection waiting = b.election(name);
            waiting.start();
            b.close();
            assertThrows(LockClosedException.class, () -> waiting.await(10, TimeUnit.SECONDS));
            waiting.close();
            leader.close();
            assertEquals(List.of(), leftovers(url, name));
        }
    }

    /**
     * A leadership lost on the server: the leader stops believing it leads
     * (on ZooKeeper: before the other participant does, sampled throughout),
     * hears notLeader, and campaigns again, leading once the other closes.
     */
    @ParameterizedTest
    @MethodSource("backends")
    void aLostLeadershipIsGivenUpBeforeAnotherLeadsThenTheParticipantCampaignsAgain(String url) throws Exception {
        ClientOptions options = Servers.isZk(url)
                ? ClientOptions.defaults().withSessionTimeout(Duration.ofSeconds(4)).withDebugFaultsForTests()
                : ClientOptions.defaults();
        try (LockClient a = LockClient.connect(url, options); LockClient b = LockClient.connect(url);
             Jedis jedis = Servers.jedis()) {
            String name = Servers.unique(url, "election-loss");
            // Redis: a short lease, so that the refused renewal comes soon.
            LeaderElection first = Servers.isZk(url) ? a.election(name) : a.election(name, Duration.ofSeconds(1));
            Heard heard = new Heard();
            first.addListener(heard);
            first.start();
            assertTrue(first.await(10, TimeUnit.SECONDS));
            long firstTerm = first.getTerm();
            String firstId = first.getId();
            LeaderElection second = b.election(name);
            second.start();
            assertFalse(second.await(200, TimeUnit.MILLISECONDS));

            LeadershipChecker checker = new LeadershipChecker(List.of(first::hasLeadership, second::hasLeadership));
            try (checker) {
                checker.sampleNow();
                if (Servers.isZk(url)) {
                    a.debugExpireSessionForTests();
                } else {
                    jedis.del(name); // as if the lease had run out: the next renewal is refused
                }
                assertTrue(second.await(30, TimeUnit.SECONDS), "nobody took over after the loss");
            }
            if (Servers.isZk(url)) {
                // A real fault: the session expires on the server only after the client gave up its
                // leadership. (A DEL of the Redis key is not one: it ends the lease early, before the
                // leader can know, so the promise is about a lease that runs out, not this shortcut.)
                assertEquals(0, checker.overlaps(), "both believed they lead at one moment");
            }
            assertTrue(checker.sawLeading(0) && checker.sawLeading(1), "the checker did not sample both leaderships");
            assertFalse(first.hasLeadership());
            Servers.eventually("notLeader after the loss",
                    () -> heard.calls.equals(List.of("isLeader", "notLeader")));
            assertTrue(second.getTerm() > firstTerm);

            // The first campaigns again (a new participant of the same LeaderElection).
            long secondTerm = second.getTerm();
            second.close();
            assertTrue(first.await(30, TimeUnit.SECONDS), "the participant did not campaign again after its loss");
            assertTrue(first.getTerm() > secondTerm, "the term did not grow");
            assertNotEquals(firstId, first.getId(), "a new campaign is a new participant");
            assertEquals(first.getId(), first.getLeader().orElseThrow().id());
            Servers.eventually("isLeader again", () -> heard.calls.equals(List.of("isLeader", "notLeader", "isLeader")));
            first.close();
            assertEquals(List.of(), leftovers(url, name));
        }
    }
}
