//! Hot-path cost guards for ZooKeeper, counted and not timed: how many
//! round trips a caller waits for, and how many requests reach the server,
//! per uncontended acquire, acquire+release and handoff. The machine is
//! answered by the simulation's ZooKeeper model, one session per client, in
//! the order each session sent its requests (as ZooKeeper answers them).
//!
//! The bounds are the counts of the current design; a change that adds a
//! request or a wait to the hot path fails here and must say why.

#[allow(dead_code)]
#[path = "sim/zk_model.rs"]
mod zk_model;

use polylock_core::{
    AcquireOptions, Backend, Command, Event, Instant, LockConfig, LockMachine, LockName, Nonce, Notification, Op,
    OwnerId, ReleaseProgress, ZkOp,
};
use zk_model::ZkModel;

const T0: Instant = Instant::from_millis(1_000);

/// Clients of one model server; client `c` has session `c + 1`.
struct Bench {
    zk: ZkModel,
    machines: Vec<LockMachine>,
    /// Requests that reached the server (an unwatch may send RemoveWatches: counted).
    requests: usize,
}

impl Bench {
    fn new(clients: usize) -> Self {
        let mut zk = ZkModel::new();
        let mut fired = Vec::new();
        let containers = Op::ZooKeeper(ZkOp::CreateContainers { path: "/x".into() });
        zk.apply(0, 1, polylock_core::RequestId(0), &containers, &mut fired);
        let machines = (0..clients)
            .map(|c| {
                let cfg = LockConfig::new(Backend::ZooKeeper);
                LockMachine::new(cfg, LockName::new("/x").unwrap(), Nonce(c as u128 + 1)).unwrap()
            })
            .collect();
        Bench { zk, machines, requests: 0 }
    }

    /// One round trip of client `c`: everything it has sent goes to the
    /// server, and the answers (and the watches they fire, to their
    /// clients) come back. False if it had nothing to send.
    fn round_trip(&mut self, c: usize) -> bool {
        let sent: Vec<Command> = std::iter::from_fn(|| self.machines[c].poll_command()).collect();
        if sent.is_empty() {
            return false;
        }
        for cmd in sent {
            self.requests += 1;
            let mut fired = Vec::new();
            let reply = self.zk.apply(c, c as u64 + 1, cmd.id, &cmd.op, &mut fired);
            self.machines[c].handle_reply(T0, cmd.id, reply);
            for (w, id) in fired {
                self.machines[w].handle_notification(T0, Notification::NodeDeleted { id });
            }
        }
        true
    }

    /// Round trips client `c` waits for until `done` sees the event it waits for.
    fn round_trips_until(&mut self, c: usize, done: impl Fn(&Event) -> bool) -> usize {
        let mut trips = 0;
        loop {
            if std::iter::from_fn(|| self.machines[c].poll_event()).any(|e| done(&e)) {
                return trips;
            }
            assert!(self.round_trip(c), "client {c} waits with nothing sent");
            trips += 1;
        }
    }

    fn acquire(&mut self, c: usize) {
        self.machines[c].acquire(T0, OwnerId(1), AcquireOptions::default(), Nonce(100 + c as u128)).unwrap();
    }

    /// Sends what a client sent off the caller's path (a waiter's watches,
    /// a holder's watch on its own node) and counts it.
    fn settle(&mut self, c: usize) {
        while self.round_trip(c) {}
    }

    fn release(&mut self, c: usize) {
        let progress = self.machines[c].release(T0, OwnerId(1)).unwrap();
        assert!(matches!(progress, ReleaseProgress::Releasing(_)), "{progress:?}");
    }
}

fn granted(e: &Event) -> bool {
    matches!(e, Event::Granted { .. })
}

fn released(e: &Event) -> bool {
    matches!(e, Event::Released { .. })
}

/// Uncontended acquire: the create and the getChildren go out together and
/// are answered in order, so the caller waits one round trip, and two
/// requests reach the server before the grant.
#[test]
fn an_uncontended_acquire_waits_one_round_trip() {
    let mut b = Bench::new(1);
    b.acquire(0);
    assert_eq!(b.round_trips_until(0, granted), 1, "round trips before the grant");
    assert_eq!(b.requests, 2, "requests before the grant (create, getChildren)");
}

/// Uncontended acquire+release: one round trip each, three requests (create,
/// getChildren, delete). The getChildren sets a children watch, which tells
/// the holder of its node's deletion: no watch of its own node to send.
#[test]
fn an_uncontended_acquire_and_release_wait_two_round_trips() {
    let mut b = Bench::new(1);
    b.acquire(0);
    let acquire = b.round_trips_until(0, granted);
    b.settle(0);
    b.release(0);
    let release = b.round_trips_until(0, released);
    assert_eq!((acquire, release), (1, 1), "round trips (acquire, release)");
    assert_eq!(b.requests, 3, "requests per acquire+release");
    assert_eq!(b.zk.ephemeral_count(), 0, "nothing left on the server");
}

/// Handoff: the holder's delete fires the watch of the waiter behind it.
/// That waiter was next in line when it listed and its own node is watched
/// (set with the predecessor's watch, no extra wait), so the deletion makes
/// it first. Counted from the holder's release call: the holder waits one
/// round trip (its delete), the waiter none after the watch fires, and one
/// request reaches the server.
#[test]
fn a_handoff_grants_the_next_waiter_without_another_round_trip() {
    let mut b = Bench::new(2);
    b.acquire(0);
    b.round_trips_until(0, granted);
    b.settle(0);
    b.acquire(1);
    b.settle(1); // create+getChildren, then the watches on the holder's node and its own
    assert!(std::iter::from_fn(|| b.machines[1].poll_event()).next().is_none(), "the waiter waits");
    // The waiter's node fired the holder's children watch: the holder now
    // watches its own node, the one request its grant did not send.
    let joined = b.requests;
    b.settle(0);
    assert_eq!(b.requests - joined, 1, "the holder's requests when a waiter comes");
    let before = b.requests;
    b.release(0);
    assert_eq!(b.round_trips_until(0, released), 1, "the holder's release");
    assert_eq!(b.round_trips_until(1, granted), 0, "the waiter's round trips after the watch fired");
    assert_eq!(b.requests - before, 1, "requests from the release to the grant (the delete)");
    b.settle(1);
    assert_eq!(b.requests - before, 1, "the new holder's own watch was set while it waited");
}

fn failed(e: &Event) -> bool {
    matches!(e, Event::Failed { .. })
}

/// A try without waiting that finds the lock taken made a node to find out.
/// It reports `WouldBlock` only once that node is deleted (two round trips:
/// create+getChildren, delete), as Curator's `tryLock` does: reported
/// earlier, the caller could look at the server (or try again from another
/// client) and still find the failed try queued there.
#[test]
fn a_failed_try_reports_once_its_node_is_gone() {
    let mut b = Bench::new(2);
    b.acquire(0);
    b.round_trips_until(0, granted);
    b.settle(0);
    let try_once = AcquireOptions { no_wait: true, ..AcquireOptions::default() };
    b.machines[1].acquire(T0, OwnerId(1), try_once, Nonce(200)).unwrap();
    assert_eq!(b.round_trips_until(1, failed), 2, "round trips of a failed try (create+list, delete)");
    assert_eq!(b.zk.ephemeral_count(), 1, "when the try reports, only the holder's node is left");
}

/// The same for an acquire whose deadline passes while it waits: its
/// `Timeout` is reported once its node is deleted, one round trip after the
/// deadline.
#[test]
fn a_timed_out_acquire_reports_once_its_node_is_gone() {
    let mut b = Bench::new(2);
    b.acquire(0);
    b.round_trips_until(0, granted);
    b.settle(0);
    let deadline = Instant::from_millis(T0.as_millis() + 100);
    let opts = AcquireOptions { deadline: Some(deadline), ..AcquireOptions::default() };
    b.machines[1].acquire(T0, OwnerId(1), opts, Nonce(200)).unwrap();
    b.settle(1);
    b.machines[1].handle_timeout(deadline);
    assert_eq!(b.round_trips_until(1, failed), 1, "round trips after the deadline (the delete)");
    assert_eq!(b.zk.ephemeral_count(), 1, "when the timeout reports, only the holder's node is left");
}
