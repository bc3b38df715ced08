package io.polylock;

/**
 * Hears a {@link LeaderElection}'s leadership come and go, as Curator's
 * {@code LeaderLatchListener} does. Calls of one election run one at a time, in
 * the order the changes happened, on a polylock callback thread (never an I/O
 * thread, so a slow listener delays only its own election's later calls).
 */
public interface LeaderListener {
    /** This participant leads now ({@link LeaderElection#getTerm()} is its term). */
    void isLeader();

    /**
     * This participant no longer leads: its leadership was lost (a Redis lease refused or
     * expired, a ZooKeeper session expired, the client closed) or it was closed. Stop acting as
     * the leader; after a loss, nobody else led before {@link LeaderElection#hasLeadership()}
     * turned false.
     */
    void notLeader();
}
