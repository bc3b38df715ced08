package io.polylock;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * A participant in a leader election, shaped like Curator's {@code LeaderLatch}: {@link #start()}
 * joins the election, {@link #await()} waits to lead, {@link #hasLeadership()} says whether this
 * participant leads, {@link LeaderListener}s hear leadership come and go, {@link #close()} leaves
 * (resigning if it leads) and leaves nothing on the server. Made by {@link LockClient#election}.
 * Thread-safe.
 *
 * <p>Each leadership has a term ({@link #getTerm()}): larger than every earlier leadership's of the
 * election, so it is a fencing token. Hand it to what the leader writes to, and have that refuse
 * terms smaller than the largest it has seen.
 *
 * <p>A leadership can be lost (a Redis lease refused or expired, a ZooKeeper session expired, the
 * client closed). {@link #hasLeadership()} turns false and the listeners' {@code notLeader()} runs
 * before any other participant can lead. The participant then campaigns again, as a latch rejoins its
 * election, until it is closed; if a campaign fails for good (the client closed), {@link #await()}
 * throws why.
 *
 * <p>On ZooKeeper the participant is a Curator {@code LeaderLatch} node under the election's path
 * ({@code _c_<uuid>-latch-<seq>}, the participant id as its data), so Curator latches and polylock
 * participants take part in one election. On Redis the leader holds the election name's lock.
 *
 * <p>Close it: a started election keeps campaigning (and its leadership) until {@link #close()} or
 * its client's close.
 */
public final class LeaderElection implements AutoCloseable {
    /** Where a participant is in its life, as Curator's {@code LeaderLatch.State}. */
    public enum State {
        /** Made, not started. */
        LATENT,
        /** Started: campaigning or leading. */
        STARTED,
        /** Closed: out of the election for good. */
        CLOSED
    }

    /** Who leads an election, as the server records it ({@link #getLeader()}). */
    public static final class Leader {
        private final String id;
        private final long term;

        /** Made by the native side; {@code term} -1 where the server has none. */
        Leader(String id, long term) {
            this.id = id;
            this.term = term;
        }

        /**
         * The leader's participant id: a polylock participant's {@link LeaderElection#getId()}, or the id
         * a Curator {@code LeaderLatch} was given.
         * @return the leader's participant id
         */
        public String id() {
            return id;
        }

        /**
         * The leadership's term where the server still has it: ZooKeeper always; Redis while the fence
         * counter of the grant lives.
         * @return the term, or empty
         */
        public OptionalLong term() {
            return term < 0 ? OptionalLong.empty() : OptionalLong.of(term);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Leader other && id.equals(other.id) && term == other.term;
        }

        @Override
        public int hashCode() {
            return Objects.hash(id, term);
        }

        @Override
        public String toString() {
            return "Leader(" + id + (term < 0 ? "" : ", term " + term) + ")";
        }
    }

    private static final Cleaner CLEANER = Cleaner.create();

    private final String name;
    private final long election;
    private final List<LeaderListener> listeners = new CopyOnWriteArrayList<>();
    private final SerialCallbacks callbacks = new SerialCallbacks();

    /** Guards the fields below; private, so that no user code can hold it while a runtime thread waits. */
    private final Object monitor = new Object();
    // `leading` is also read without the monitor.
    private State state = State.LATENT;
    private long campaign;          // the native campaign's handle while started
    private volatile boolean leading;
    private long term = -1;
    private String participant;
    private RuntimeException failure;

    LeaderElection(String name, long election) {
        this.name = name;
        this.election = election;
        long nativeHandle = election; // the cleaning action must not capture `this`
        CLEANER.register(this, () -> Native.electionFree(nativeHandle));
    }

    /**
     * The election's name.
     * @return the election's name
     */
    public String name() {
        return name;
    }

    /**
     * Joins the election: campaigns in the background (on polylock's runtime, no thread of its own).
     * @throws IllegalStateException it was started before
     * @throws LockClosedException the client is closed
     */
    public void start() {
        synchronized (monitor) {
            if (state != State.LATENT) {
                throw new IllegalStateException("election " + name + " cannot be started more than once");
            }
            try {
                campaign = Native.campaignStart(election, this);
            } finally {
                Reference.reachabilityFence(this);
            }
            state = State.STARTED;
        }
    }

    /**
     * Waits until this participant leads.
     * @throws InterruptedException interrupted while waiting
     * @throws IllegalStateException it was not started
     * @throws LockClosedException it was closed (or its client)
     * @throws LockException its campaign failed for good (the exception says why)
     */
    public void await() throws InterruptedException {
        awaitNanos(-1);
    }

    /**
     * Waits up to {@code timeout} until this participant leads.
     * @param timeout how long to wait at most
     * @param unit the unit of {@code timeout}
     * @return whether it leads
     * @throws InterruptedException interrupted while waiting
     * @throws IllegalStateException it was not started
     * @throws LockClosedException it was closed (or its client)
     * @throws LockException its campaign failed for good (the exception says why)
     */
    public boolean await(long timeout, TimeUnit unit) throws InterruptedException {
        Objects.requireNonNull(unit, "unit");
        return awaitNanos(Math.max(0, unit.toNanos(timeout)));
    }

    /**
     * Whether this participant leads now, as far as it knows (local state, no I/O). Turns false when
     * its leadership is lost before anyone else can lead.
     * @return whether this participant leads
     */
    public boolean hasLeadership() {
        return leading;
    }

    /**
     * The term of this participant's leadership: its fencing token.
     * @return the term
     * @throws IllegalStateException this participant does not lead
     */
    public long getTerm() {
        synchronized (monitor) {
            if (!leading) {
                throw new IllegalStateException("this participant does not lead election " + name);
            }
            return term;
        }
    }

    /**
     * This participant's id as the server records it while it leads (what {@link #getLeader()} and a
     * Curator latch's {@code getLeader()} report): set when it first leads, and new after each loss.
     * @return the participant id of its latest leadership, or null if it never led
     */
    public String getId() {
        synchronized (monitor) {
            return participant;
        }
    }

    /**
     * Who leads now, by every client and Curator latch (one read of the server, as Curator's
     * {@code getLeader()}). Stale the moment it returns; it may disagree with
     * {@link #hasLeadership()} for a moment.
     * @return the leader, or empty when nobody leads
     */
    public Optional<Leader> getLeader() {
        try {
            return Optional.ofNullable(Native.electionLeader(election));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Where this participant is in its life.
     * @return its state
     */
    public State getState() {
        synchronized (monitor) {
            return state;
        }
    }

    /**
     * Adds a listener for leadership changes from now on.
     * @param listener called on each leadership and each end of one
     */
    public void addListener(LeaderListener listener) {
        listeners.add(Objects.requireNonNull(listener, "listener"));
    }

    /**
     * Removes a listener.
     * @param listener a listener added before
     */
    public void removeListener(LeaderListener listener) {
        listeners.remove(listener);
    }

    /**
     * Leaves the election: stops believing it leads (listeners hear {@code notLeader()}), then resigns
     * its leadership or withdraws its campaign and returns once the server holds nothing of it, so the
     * next participant can lead. Idempotent.
     * @throws LockException the server could not be told (the session or lease then ends it)
     */
    @Override
    public void close() {
        long ending;
        synchronized (monitor) {
            if (state == State.CLOSED) {
                return;
            }
            state = State.CLOSED;
            ending = campaign;
            campaign = 0;
            deposed();
            monitor.notifyAll();
        }
        if (ending != 0) {
            // Outside the monitor: the campaign's upcalls take it, and this waits for the campaign.
            try {
                Native.campaignEnd(ending);
            } finally {
                Reference.reachabilityFence(this);
            }
        }
    }

    @Override
    public String toString() {
        return "LeaderElection(" + name + ", " + getState() + (leading ? ", leading" : "") + ")";
    }

    // ---- called from native code on a runtime thread: brief, never blocking on I/O ----

    /** This participant leads, with {@code term}, recorded as {@code participantId}. */
    @SuppressWarnings("unused")
    void elected(long term, String participantId) {
        synchronized (monitor) {
            if (state != State.STARTED) {
                return; // closed meanwhile: close() resigns this leadership
            }
            this.term = term;
            this.participant = participantId;
            leading = true;
            monitor.notifyAll();
            for (LeaderListener listener : listeners) {
                callbacks.execute(listener::isLeader);
            }
        }
    }

    /** The leadership may be gone ({@code reason}); the runtime campaigns again. */
    @SuppressWarnings("unused")
    void lost(String reason) {
        synchronized (monitor) {
            deposed();
        }
    }

    /** The campaign ended without leading, for good. */
    @SuppressWarnings("unused")
    void failed(Throwable error) {
        synchronized (monitor) {
            failure = error instanceof RuntimeException e ? e : new LockException(String.valueOf(error));
            monitor.notifyAll();
        }
    }

    // ---- internals --------------------------------------------------------

    /** Ends the belief in a leadership, if there is one. The caller holds the monitor. */
    private void deposed() {
        if (leading) {
            leading = false;
            for (LeaderListener listener : listeners) {
                callbacks.execute(listener::notLeader);
            }
        }
    }

    private boolean awaitNanos(long nanos) throws InterruptedException {
        long deadline = System.nanoTime() + nanos;
        synchronized (monitor) {
            return awaitLocked(nanos, deadline);
        }
    }

    private boolean awaitLocked(long nanos, long deadline) throws InterruptedException {
        while (true) {
            switch (state) {
                case LATENT -> throw new IllegalStateException("election " + name + " was not started");
                case CLOSED -> throw new LockClosedException("election " + name + " is closed");
                case STARTED -> { }
            }
            if (leading) {
                return true;
            }
            if (failure != null) {
                throw failure;
            }
            if (nanos < 0) {
                monitor.wait();
            } else {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                TimeUnit.NANOSECONDS.timedWait(monitor, left);
            }
        }
    }
}
