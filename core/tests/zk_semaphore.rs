//! The ZooKeeper semaphore's decisions, on the simulation's server model:
//! Curator's `InterProcessSemaphoreV2` layout (a mutex at `P/locks`,
//! leases at `P/leases`), `k` leases per grant, the grant only while the
//! leases number at most `N`, the mutex given back before the grant, a
//! waiter woken by its children watch, release, the permits record and
//! its mismatch, and the losses of a held grant.

#[allow(dead_code)]
#[path = "sim/zk_model.rs"]
mod zk_model;

use polylock_core::*;
use zk_model::ZkModel;

const T0: Instant = Instant::from_millis(1_000);
const SEM: &str = "/sem";

/// Clients of one model server, each answered in order, one request at a
/// time. Client `c` starts with session `c + 1`.
struct Zk {
    zk: ZkModel,
    tables: Vec<LockTable>,
    sessions: Vec<u64>,
    /// Every request each client sent, in order.
    sent: Vec<Vec<Op>>,
    /// Events each client's application got.
    events: Vec<Vec<Event>>,
    /// The server's children of `P/locks` and `P/leases` when each grant came out.
    at_grant: Vec<(Vec<String>, Vec<String>)>,
    /// The failed client's own nodes under `P/locks` and `P/leases` when
    /// each failure came out.
    at_failure: Vec<(usize, usize)>,
    next_nonce: u128,
}

impl Zk {
    fn new(clients: usize) -> Self {
        let tables = (0..clients)
            .map(|c| LockTable::new(LockConfig::new(Backend::ZooKeeper), Nonce(c as u128 + 1)).unwrap())
            .collect();
        Zk {
            zk: ZkModel::new(),
            tables,
            sessions: (1..=clients as u64).collect(),
            sent: vec![Vec::new(); clients],
            events: vec![Vec::new(); clients],
            at_grant: Vec::new(),
            at_failure: Vec::new(),
            next_nonce: 1000,
        }
    }

    /// Runs every table until nothing is left to send. Time stands still:
    /// whatever happens here is driven by replies and watches alone.
    fn settle(&mut self) {
        loop {
            let mut any = false;
            for c in 0..self.tables.len() {
                while let Some(out) = self.tables[c].poll_output() {
                    match out {
                        Output::Event { event, .. } => {
                            match event {
                                Event::Granted { .. } => {
                                    self.at_grant.push((self.children("locks"), self.children("leases")))
                                }
                                Event::Failed { .. } => self.at_failure.push(self.own_nodes(c)),
                                _ => {}
                            }
                            self.events[c].push(event);
                        }
                        Output::Command(cmd) => {
                            any = true;
                            self.sent[c].push(cmd.op.clone());
                            let mut fired = Vec::new();
                            let reply = self.zk.apply(c, self.sessions[c], cmd.id, &cmd.op, &mut fired);
                            self.tables[c].handle_reply(T0, cmd.id, reply);
                            self.deliver(fired);
                        }
                        _ => {}
                    }
                }
            }
            if !any {
                return;
            }
        }
    }

    fn deliver(&mut self, fired: Vec<(usize, RequestId)>) {
        for (w, id) in fired {
            self.tables[w].handle_notification(T0, Notification::WatchFired { id });
        }
    }

    /// Client `c` asks for `count` of `total` permits as a fresh owner.
    fn acquire(&mut self, c: usize, total: u32, count: u32, no_wait: bool) -> (OwnerId, Ticket) {
        let owner = OwnerId::fresh();
        self.next_nonce += 1;
        let opts = AcquireOptions { permits: Some(PermitRequest { total, count }), no_wait, ..Default::default() };
        let name = LockName::new(SEM).unwrap();
        let t = self.tables[c].acquire(T0, &name, LockMode::Semaphore, owner, opts, Nonce(self.next_nonce)).unwrap();
        self.settle();
        (owner, t)
    }

    /// Client `c` asks as [`Self::acquire`] does, but nothing is sent yet:
    /// [`Self::settle_interleaved`] runs several such asks side by side.
    fn start(&mut self, c: usize, total: u32, count: u32, no_wait: bool) -> (OwnerId, Ticket) {
        let owner = OwnerId::fresh();
        self.next_nonce += 1;
        let opts = AcquireOptions { permits: Some(PermitRequest { total, count }), no_wait, ..Default::default() };
        let name = LockName::new(SEM).unwrap();
        let t = self.tables[c].acquire(T0, &name, LockMode::Semaphore, owner, opts, Nonce(self.next_nonce)).unwrap();
        (owner, t)
    }

    /// As [`Self::settle`], but one request per client per round, so the
    /// clients' requests interleave on the server as concurrent ones do.
    fn settle_interleaved(&mut self) {
        loop {
            let mut any = false;
            for c in 0..self.tables.len() {
                while let Some(out) = self.tables[c].poll_output() {
                    match out {
                        Output::Event { event, .. } => self.events[c].push(event),
                        Output::Command(cmd) => {
                            any = true;
                            self.sent[c].push(cmd.op.clone());
                            let mut fired = Vec::new();
                            let reply = self.zk.apply(c, self.sessions[c], cmd.id, &cmd.op, &mut fired);
                            self.tables[c].handle_reply(T0, cmd.id, reply);
                            self.deliver(fired);
                            break;
                        }
                        _ => {}
                    }
                }
            }
            if !any {
                return;
            }
        }
    }

    fn release(&mut self, c: usize, owner: OwnerId) {
        let _ = self.tables[c].release(T0, SEM, LockMode::Semaphore, owner, None).unwrap();
        self.settle();
    }

    fn hold(&self, c: usize, owner: OwnerId) -> Option<FencingToken> {
        self.tables[c].hold(SEM, LockMode::Semaphore, owner).map(|(_, t)| t)
    }

    /// The children of `P/<under>`, sorted.
    fn children(&self, under: &str) -> Vec<String> {
        let prefix = format!("{SEM}/{under}/");
        let mut kids: Vec<String> = self
            .zk
            .nodes
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|k| !k.contains('/'))
            .map(str::to_owned)
            .collect();
        kids.sort();
        kids
    }

    /// The children of `P/leases` made by client `c`'s current session.
    /// Client `c`'s nodes under `P/locks` and under `P/leases`.
    fn own_nodes(&self, c: usize) -> (usize, usize) {
        let of = |under: &str| self.zk.czxid_of_session_node(&format!("{SEM}/{under}"), self.sessions[c]).len();
        (of("locks"), of("leases"))
    }

    fn leases_of(&self, c: usize) -> usize {
        self.zk.czxid_of_session_node(&format!("{SEM}/leases"), self.sessions[c]).len()
    }

    fn failed(&self, c: usize, ticket: Ticket) -> Option<Error> {
        self.events[c].iter().find_map(|e| match e {
            Event::Failed { ticket: t, error, .. } if *t == ticket => Some(error.clone()),
            _ => None,
        })
    }

    fn creates(&self, c: usize) -> Vec<&str> {
        self.sent[c]
            .iter()
            .filter_map(|op| match op {
                Op::ZooKeeper(
                    ZkOp::CreateSequential { path, .. }
                    | ZkOp::CreatePersistent { path, .. }
                    | ZkOp::CreateEphemeral { path, .. }
                    | ZkOp::CreateContainers { path },
                ) => Some(path.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Curator's names: the mutex node `P/locks/_c_<uuid>-lock-<seq>`, `k`
/// leases `P/leases/_c_<uuid>-lease-<seq>` (each with its own uuid), all
/// created after the mutex was ours; our record `P/polylock_permits` = N.
/// The grant's token is its newest lease's czxid, and the mutex node is
/// gone by the time the grant is told.
#[test]
fn a_grant_uses_curators_layout_with_one_lease_per_permit() {
    let mut z = Zk::new(1);
    let (owner, _) = z.acquire(0, 3, 2, false);
    let token = z.hold(0, owner).expect("2 of 3 free permits");
    assert_eq!(z.zk.nodes[&format!("{SEM}/polylock_permits")].data, b"3");
    let leases = z.children("leases");
    assert_eq!(leases.len(), 2, "{leases:?}");
    let lease_name = |l: &String| {
        let rest = l.strip_prefix("_c_").expect("protected");
        let (uuid, seq) = rest.split_once("-lease-").expect("Curator's lease marker");
        assert_eq!(uuid.len(), 36, "{l}");
        assert_eq!(seq.len(), 10, "{l}");
        uuid.to_owned()
    };
    assert_ne!(lease_name(&leases[0]), lease_name(&leases[1]), "one protected create per lease");
    let creates = z.creates(0);
    let mutex_at = creates.iter().position(|p| p.starts_with(&format!("{SEM}/locks/_c_"))).expect("mutex node");
    assert!(creates[mutex_at].ends_with("-lock-"), "{}", creates[mutex_at]);
    let lease_creates: Vec<usize> =
        creates.iter().enumerate().filter(|(_, p)| p.contains("/leases/_c_")).map(|(i, _)| i).collect();
    let mut distinct: Vec<&str> = lease_creates.iter().map(|&i| creates[i]).collect();
    distinct.sort();
    distinct.dedup();
    // Each sent twice: `P/leases` was missing the first time.
    assert_eq!(distinct.len(), 2, "{creates:?}");
    assert!(lease_creates.iter().all(|&i| i > mutex_at), "a lease made before the mutex: {creates:?}");
    let newest = z.zk.czxid_of_session_node(&format!("{SEM}/leases"), 1).into_iter().max().unwrap();
    assert_eq!(token, FencingToken(newest as u64));
    let (locks, leases_then) = &z.at_grant[0];
    assert!(locks.is_empty(), "the mutex was still held at the grant: {locks:?}");
    assert_eq!(leases_then.len(), 2);
    // The leases were counted with a children watch.
    assert!(z.sent[0]
        .iter()
        .any(|op| matches!(op, Op::ZooKeeper(ZkOp::WatchChildren { path }) if path == "/sem/leases")));

    z.release(0, owner);
    assert!(z.children("leases").is_empty(), "release left {:?}", z.children("leases"));
    assert!(z.children("locks").is_empty());
    assert_eq!(z.zk.live_watches(), 0, "watches left behind");
    assert_eq!(z.tables[0].lock_count(), 0);
}

/// Granted only while the leases, ours included, number at most N. A
/// waiter holds the mutex with its leases made and waits on its children
/// watch; later contenders wait for the mutex and make no lease. A release
/// wakes it through the watch (time stands still here: no polling), and
/// each grant is fenced above the last.
#[test]
fn the_mutex_holder_waits_for_the_leases_to_fit() {
    let mut z = Zk::new(3);
    let (a, _) = z.acquire(0, 3, 2, false);
    let ta = z.hold(0, a).unwrap();
    let (b, _) = z.acquire(1, 3, 2, false);
    assert!(z.hold(1, b).is_none(), "4 leases of 3 permits granted");
    assert_eq!(z.leases_of(1), 2, "the waiter's leases are made while it waits");
    assert_eq!(z.children("locks").len(), 1, "the waiter holds the mutex");
    let (c, _) = z.acquire(2, 3, 1, false);
    assert!(z.hold(2, c).is_none(), "granted past the mutex holder");
    assert_eq!(z.leases_of(2), 0, "a lease made without the mutex");
    assert_eq!(z.children("locks").len(), 2);

    let lists_before = z.sent[1].len();
    let fired_before = z.zk.child_watches_fired;
    z.release(0, a);
    assert!(z.zk.child_watches_fired > fired_before, "not woken by the children watch");
    assert!(z.sent[1].len() > lists_before);
    let tb = z.hold(1, b).expect("2 of 3 free after the release");
    assert!(tb > ta);
    // The waiter's grant gave the mutex to the next: 2 + 1 fit in 3.
    let tc = z.hold(2, c).expect("1 of the 1 left");
    assert!(tc > tb);
    assert_eq!(z.children("leases").len(), 3);
    z.release(1, b);
    z.release(2, c);
    assert!(z.children("leases").is_empty() && z.children("locks").is_empty());
    assert_eq!(z.zk.live_watches(), 0);
}

/// A try without waiting that finds too few permits fails with WouldBlock
/// once its leases and its mutex node are gone.
#[test]
fn a_try_without_room_leaves_nothing() {
    let mut z = Zk::new(2);
    let (a, _) = z.acquire(0, 2, 2, false);
    assert!(z.hold(0, a).is_some());
    let (_, t) = z.acquire(1, 2, 1, true);
    assert_eq!(z.failed(1, t), Some(Error::WouldBlock));
    assert!(z.sent[1]
        .iter()
        .any(|op| matches!(op, Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) if path.contains("/leases/"))));
    assert_eq!(z.children("leases").len(), 2, "the try's lease is left: {:?}", z.children("leases"));
    assert!(z.children("locks").is_empty(), "the try's mutex node is left");
    assert_eq!(z.tables[1].lock_count(), 0);
}

/// Issue 46, item 6: a try without waiting fails only when too few permits
/// are free, never because another acquirer holds the internal mutex
/// (CPython's `BoundedSemaphore.acquire(blocking=False)` is the reference).
/// 4 permits, 1 held, ten tries at once: exactly the 3 free are granted, and
/// the seven others fail with WouldBlock leaving nothing on the server.
#[test]
fn tries_at_once_get_every_free_permit() {
    let mut z = Zk::new(11);
    let (held, _) = z.acquire(0, 4, 1, false);
    assert!(z.hold(0, held).is_some());
    let tries: Vec<(usize, OwnerId, Ticket)> = (1..=10)
        .map(|c| {
            let (owner, ticket) = z.start(c, 4, 1, true);
            (c, owner, ticket)
        })
        .collect();
    z.settle_interleaved();
    let granted = tries.iter().filter(|(c, owner, _)| z.hold(*c, *owner).is_some()).count();
    let refused: Vec<Option<Error>> =
        tries.iter().filter(|(c, owner, _)| z.hold(*c, *owner).is_none()).map(|(c, _, t)| z.failed(*c, *t)).collect();
    assert_eq!(granted, 3, "3 of 4 permits were free; failures: {refused:?}");
    assert!(refused.iter().all(|e| *e == Some(Error::WouldBlock)), "{refused:?}");
    assert_eq!(z.children("leases").len(), 4, "{:?}", z.children("leases"));
    assert!(z.children("locks").is_empty(), "a try left its mutex node: {:?}", z.children("locks"));
    for (c, owner, _) in tries {
        if z.hold(c, owner).is_some() {
            z.release(c, owner);
        }
    }
    z.release(0, held);
    assert!(z.children("leases").is_empty());
    assert_eq!(z.zk.live_watches(), 0, "watches left behind");
}

/// A client with another number of permits is refused before it creates
/// anything: it only read the record.
#[test]
fn another_number_of_permits_is_refused_before_any_create() {
    let mut z = Zk::new(2);
    let (a, _) = z.acquire(0, 3, 1, false);
    assert!(z.hold(0, a).is_some());
    let (_, t) = z.acquire(1, 4, 1, false);
    assert_eq!(z.failed(1, t), Some(Error::PermitsMismatch { server: 3, ours: 4 }));
    assert!(z.creates(1).is_empty(), "the refused client created {:?}", z.creates(1));
    assert_eq!(z.sent[1], vec![Op::ZooKeeper(ZkOp::GetData { path: "/sem/polylock_permits".into() })]);
    assert_eq!(z.tables[1].lock_count(), 0);
    let (b, _) = z.acquire(1, 3, 2, false);
    assert!(z.hold(1, b).is_some(), "the agreeing ask is served");
}

/// The session's end loses a held grant (its leases went with it), and a
/// waiter is then served; so does a lease deleted by someone else.
#[test]
fn a_held_grant_is_lost_with_its_session_or_its_lease() {
    let mut z = Zk::new(2);
    let (a, _) = z.acquire(0, 1, 1, false);
    let ta = z.hold(0, a).unwrap();
    let (b, _) = z.acquire(1, 1, 1, false);
    assert!(z.hold(1, b).is_none());
    let mut fired = Vec::new();
    z.zk.expire_session(z.sessions[0], &mut fired);
    // The expired session's own watches are not reported; the others' are.
    fired.retain(|(w, _)| *w != 0);
    z.deliver(fired);
    z.tables[0].handle_connection(T0, ConnectionEvent::SessionExpired);
    z.sessions[0] = 100;
    z.tables[0].handle_connection(T0, ConnectionEvent::Connected);
    z.settle();
    assert!(
        z.events[0].contains(&Event::Lost { owner: a, token: ta, reason: LossReason::SessionExpired }),
        "{:?}",
        z.events[0]
    );
    let tb = z.hold(1, b).expect("the waiter is served once the expired lease is gone");
    assert!(tb > ta);

    // Someone deletes the holder's lease.
    let lease = z.children("leases").pop().unwrap();
    let mut fired = Vec::new();
    let delete = Op::ZooKeeper(ZkOp::Delete { path: format!("{SEM}/leases/{lease}") });
    z.zk.apply(0, 100, RequestId(u64::MAX), &delete, &mut fired);
    z.deliver(fired);
    z.settle();
    assert!(z.events[1].contains(&Event::Lost { owner: b, token: tb, reason: LossReason::NodeDeleted }));
    assert_eq!(z.tables[1].release(T0, SEM, LockMode::Semaphore, b, None), Err(Error::Lost(LossReason::NodeDeleted)));
    z.settle();
    assert!(z.children("leases").is_empty() && z.children("locks").is_empty());
}

/// A create whose reply was lost is found again by its protection prefix:
/// the claim neither makes a second lease nor leaves the first behind.
#[test]
fn a_lease_whose_create_reply_was_lost_is_found_by_its_prefix() {
    let mut z = Zk::new(1);
    let owner = OwnerId::fresh();
    let opts = AcquireOptions { permits: Some(PermitRequest { total: 2, count: 1 }), ..Default::default() };
    let name = LockName::new(SEM).unwrap();
    z.tables[0].acquire(T0, &name, LockMode::Semaphore, owner, opts, Nonce(77)).unwrap();
    let mut lost_one = false;
    let mut now = T0;
    for _ in 0..10_000 {
        if z.hold(0, owner).is_some() {
            break;
        }
        let Some(out) = z.tables[0].poll_output() else { break };
        {
            match out {
                Output::Event { event, .. } => z.events[0].push(event),
                Output::Command(cmd) => {
                    let mut fired = Vec::new();
                    let reply = z.zk.apply(0, 1, cmd.id, &cmd.op, &mut fired);
                    let is_lease = matches!(&cmd.op, Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) if path.contains("/leases/"));
                    let reply = if is_lease && matches!(reply, Reply::Created { .. }) && !lost_one {
                        lost_one = true;
                        Reply::Failed(TransportError { message: "connection lost".into() })
                    } else {
                        reply
                    };
                    z.sent[0].push(cmd.op.clone());
                    z.tables[0].handle_reply(now, cmd.id, reply);
                    z.deliver(fired);
                }
                Output::Timeout(at) => {
                    now = at;
                    z.tables[0].handle_timeout(now);
                }
                _ => {}
            }
        }
    }
    assert!(lost_one);
    let token = z.hold(0, owner).expect("granted after finding the lease");
    assert_eq!(z.children("leases").len(), 1, "{:?}", z.children("leases"));
    let czxid = z.zk.czxid_of_session_node("/sem/leases", 1)[0];
    assert_eq!(token, FencingToken(czxid as u64), "the found lease's czxid is the token");
}

/// A waiter that gives up (cancelled, or its deadline passed) deletes its
/// leases and leaves the mutex, and the next contender is served at once.
#[test]
fn a_cancelled_waiter_leaves_its_leases_and_the_mutex() {
    let mut z = Zk::new(3);
    let (a, _) = z.acquire(0, 1, 1, false);
    assert!(z.hold(0, a).is_some());
    let (_, waiting) = z.acquire(1, 1, 1, false);
    let (c, _) = z.acquire(2, 1, 1, false);
    assert_eq!(z.leases_of(1), 1);
    assert!(z.tables[1].cancel(T0, waiting));
    z.settle();
    assert_eq!(z.leases_of(1), 0, "the cancelled waiter's lease is left");
    assert_eq!(z.children("locks").len(), 1, "only the next contender holds the mutex: {:?}", z.children("locks"));
    assert_eq!(z.leases_of(2), 1, "the next contender waits with its lease");
    z.release(0, a);
    assert!(z.hold(2, c).is_some());
    z.release(2, c);
    assert!(z.children("leases").is_empty() && z.children("locks").is_empty());
    assert_eq!(z.zk.live_watches(), 0);
}

/// A withdrawn waiter (Java's interrupt) is told `Cancelled` only once its
/// lease and its mutex node are gone from the server, so that a caller
/// looking right after never finds them; the next contender goes on.
#[test]
fn a_withdrawn_waiter_is_told_once_its_nodes_are_gone() {
    let mut z = Zk::new(3);
    let (a, _) = z.acquire(0, 1, 1, false);
    let (b, waiting) = z.acquire(1, 1, 1, false);
    let (c, _) = z.acquire(2, 1, 1, false);
    assert_eq!(z.leases_of(1), 1);
    assert!(z.tables[1].withdraw(T0, waiting));
    assert!(!z.tables[1].withdraw(T0, waiting), "withdrawn twice");
    z.settle();
    assert_eq!(z.events[1], vec![Event::Failed { ticket: waiting, owner: b, error: Error::Cancelled }]);
    assert_eq!(z.at_failure, vec![(0, 0)], "told while its mutex node or lease remained");
    z.release(0, a);
    assert!(z.hold(2, c).is_some());
    z.release(2, c);
    assert!(z.children("leases").is_empty() && z.children("locks").is_empty());
}

/// A waiter whose mutex node is deleted by someone deletes its leases and
/// contends again (leases of a waiter without the mutex would block the
/// mutex's next holder); it is served when the permits come free.
#[test]
fn a_waiter_that_loses_the_mutex_starts_over() {
    let mut z = Zk::new(2);
    let (a, _) = z.acquire(0, 1, 1, false);
    let (b, _) = z.acquire(1, 1, 1, false);
    assert_eq!(z.leases_of(1), 1);
    let mutex = z.children("locks").pop().unwrap();
    let mut fired = Vec::new();
    let delete = Op::ZooKeeper(ZkOp::Delete { path: format!("{SEM}/locks/{mutex}") });
    z.zk.apply(0, 1, RequestId(u64::MAX), &delete, &mut fired);
    z.deliver(fired);
    z.settle();
    let locks = z.children("locks");
    assert_eq!(locks.len(), 1, "{locks:?}");
    assert_ne!(locks[0], mutex, "the waiter did not take the mutex again");
    assert_eq!(z.leases_of(1), 1, "one lease, made again under the new mutex node");
    assert!(z.hold(1, b).is_none());
    z.release(0, a);
    assert!(z.hold(1, b).is_some());
    z.release(1, b);
    assert!(z.children("leases").is_empty() && z.children("locks").is_empty());
}

/// Another client's lease (Curator's, say) counts like ours: with it there
/// the permits are full, and its deletion wakes the waiter.
#[test]
fn a_curator_lease_is_counted() {
    let mut z = Zk::new(1);
    let (a, _) = z.acquire(0, 1, 1, false);
    z.release(0, a);
    let curator = Op::ZooKeeper(ZkOp::CreateSequential {
        path: format!("{SEM}/leases/_c_0c0c0c0c-0000-4000-8000-000000000000-lease-"),
        data: Vec::new(),
    });
    let Reply::Created { path, .. } = z.zk.apply(0, 50, RequestId(u64::MAX), &curator, &mut Vec::new()) else {
        panic!()
    };
    let (b, _) = z.acquire(0, 1, 1, false);
    assert!(z.hold(0, b).is_none(), "granted beside Curator's lease");
    let mut fired = Vec::new();
    z.zk.apply(0, 50, RequestId(u64::MAX), &Op::ZooKeeper(ZkOp::Delete { path }), &mut fired);
    z.deliver(fired);
    z.settle();
    assert!(z.hold(0, b).is_some(), "not woken by the lease's deletion");
}

/// Random asks and releases of 1..=N permits by four clients, seeded: the
/// permits granted never exceed N, every ask is served in the end, and
/// nothing is left on the server.
#[test]
fn random_asks_never_exceed_the_permits_and_all_are_served() {
    const N: u32 = 3;
    for seed in 1..=20u64 {
        let mut z = Zk::new(4);
        let mut rng = seed;
        let mut next = move |m: u64| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (rng >> 33) % m
        };
        // (client, owner, count) of every ask not yet released.
        let mut asks: Vec<(usize, OwnerId, u32)> = Vec::new();
        let mut served = 0;
        for _ in 0..60 {
            if asks.len() < 6 && next(2) == 0 {
                let (c, k) = (next(4) as usize, next(u64::from(N)) as u32 + 1);
                let (owner, _) = z.acquire(c, N, k, false);
                asks.push((c, owner, k));
            } else if let Some(i) = (0..asks.len()).find(|&i| z.hold(asks[i].0, asks[i].1).is_some()) {
                let (c, owner, _) = asks.remove(i);
                z.release(c, owner);
                served += 1;
            }
            let held: u32 = asks.iter().filter(|(c, o, _)| z.hold(*c, *o).is_some()).map(|(_, _, k)| k).sum();
            assert!(held <= N, "seed {seed}: {held} permits of {N} granted");
            assert!(z.children("leases").len() <= asks.iter().map(|(_, _, k)| *k as usize).sum::<usize>());
        }
        while !asks.is_empty() {
            let i = (0..asks.len())
                .find(|&i| z.hold(asks[i].0, asks[i].1).is_some())
                .unwrap_or_else(|| panic!("seed {seed}: nobody holds, {} asks wait", asks.len()));
            let (c, owner, _) = asks.remove(i);
            z.release(c, owner);
            served += 1;
        }
        assert!(served > 0);
        assert!(z.children("leases").is_empty() && z.children("locks").is_empty(), "seed {seed}");
        assert_eq!(z.zk.live_watches(), 0, "seed {seed}");
    }
}
