//! The ZooKeeper read-write lock's decisions, on the simulation's server
//! model: Curator's `InterProcessReadWriteLock` nodes, whom a reader waits
//! for, the downgrade's node, and the upgrade refused before any request.

#[allow(dead_code)]
#[path = "sim/zk_model.rs"]
mod zk_model;

use polylock_core::*;
use zk_model::ZkModel;

const T0: Instant = Instant::from_millis(1_000);
const ME: OwnerId = OwnerId(1);

/// Clients of one model server; client `c` has session `c + 1`. Each
/// client's table is answered in order, one request at a time.
struct Zk {
    zk: ZkModel,
    tables: Vec<LockTable>,
    /// Every request each client sent, in order.
    sent: Vec<Vec<Op>>,
    /// Events each client's application got.
    events: Vec<Vec<Event>>,
}

impl Zk {
    fn new(clients: usize) -> Self {
        let mut zk = ZkModel::new();
        let containers = Op::ZooKeeper(ZkOp::CreateContainers { path: "/rw".into() });
        zk.apply(0, 1, RequestId(0), &containers, &mut Vec::new());
        let tables = (0..clients)
            .map(|c| LockTable::new(LockConfig::new(Backend::ZooKeeper), Nonce(c as u128 + 1)).unwrap())
            .collect();
        Zk { zk, tables, sent: vec![Vec::new(); clients], events: vec![Vec::new(); clients] }
    }

    /// Runs every table until nothing is left to send.
    fn settle(&mut self) {
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
                            let reply = self.zk.apply(c, c as u64 + 1, cmd.id, &cmd.op, &mut fired);
                            self.tables[c].handle_reply(T0, cmd.id, reply);
                            for (w, id) in fired {
                                self.tables[w].handle_notification(T0, Notification::NodeDeleted { id });
                            }
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

    fn acquire(&mut self, c: usize, mode: LockMode, owner: OwnerId) -> Result<Ticket, Error> {
        let name = LockName::new("/rw").unwrap();
        let nonce = Nonce(1000 + (c as u128) * 100 + self.sent[c].len() as u128);
        let t = self.tables[c].acquire(T0, &name, mode, owner, AcquireOptions::default(), nonce);
        self.settle();
        t
    }

    fn release(&mut self, c: usize, mode: LockMode, owner: OwnerId) {
        let _ = self.tables[c].release(T0, "/rw", mode, owner, None).unwrap();
        self.settle();
    }

    fn holds(&self, c: usize, mode: LockMode, owner: OwnerId) -> bool {
        self.tables[c].hold("/rw", mode, owner).is_some()
    }

    fn children(&self) -> Vec<String> {
        let mut kids: Vec<String> =
            self.zk.nodes.keys().filter_map(|k| k.strip_prefix("/rw/")).map(str::to_owned).collect();
        kids.sort();
        kids
    }
}

/// The writer's read acquire is a downgrade: its node is created
/// EPHEMERAL, not sequential, named with the writer's sequence, and a
/// writer that queued behind the write hold stays out until the
/// downgraded reader leaves, even after the write release.
#[test]
fn a_downgrade_reads_with_the_writers_sequence_and_keeps_later_writers_out() {
    let mut z = Zk::new(2);
    z.acquire(0, LockMode::Write, ME).unwrap();
    assert!(z.holds(0, LockMode::Write, ME));
    z.acquire(1, LockMode::Write, ME).unwrap();
    assert!(!z.holds(1, LockMode::Write, ME), "two writers");
    z.acquire(0, LockMode::Read, ME).unwrap();
    assert!(z.holds(0, LockMode::Read, ME), "the downgrade is granted beside the write hold");
    let create = z.sent[0].iter().rev().find(|op| matches!(op, Op::ZooKeeper(ZkOp::CreateEphemeral { .. })));
    let Some(Op::ZooKeeper(ZkOp::CreateEphemeral { path, .. })) = create else {
        panic!("no EPHEMERAL create for the downgrade: {:?}", z.sent[0])
    };
    // Client 0's writer node was the first sequential child of /rw.
    assert!(z.children().iter().any(|k| k.ends_with("__WRIT__0000000000")), "{:?}", z.children());
    assert!(path.ends_with("__READ__0000000000"), "{path} does not carry the writer's sequence");
    let (_, write_token) = z.tables[0].hold("/rw", LockMode::Write, ME).unwrap();
    let (_, read_token) = z.tables[0].hold("/rw", LockMode::Read, ME).unwrap();
    // The read node is newer than the queued writer's: its czxid as the
    // token would exceed the token that writer is granted next.
    assert_eq!(read_token, write_token, "a downgrade's grant carries its write hold's token");
    z.release(0, LockMode::Write, ME);
    assert!(z.holds(0, LockMode::Read, ME), "the read hold outlives the write hold");
    assert!(!z.holds(1, LockMode::Write, ME), "a writer got in beside the downgraded reader");
    z.release(0, LockMode::Read, ME);
    assert!(z.holds(1, LockMode::Write, ME), "the queued writer is granted once the reader leaves");
    let (_, next) = z.tables[1].hold("/rw", LockMode::Write, ME).unwrap();
    assert!(next > read_token, "the next writer's token {next:?} is not above the downgraded read's {read_token:?}");
    z.release(1, LockMode::Write, ME);
    assert!(z.children().is_empty(), "{:?}", z.children());
}

/// Read to write by the same owner is refused by the table before any
/// request is made; another owner of the same client just waits.
#[test]
fn an_upgrade_is_refused_before_any_request() {
    let mut z = Zk::new(1);
    z.acquire(0, LockMode::Read, ME).unwrap();
    let before = z.sent[0].len();
    assert_eq!(z.acquire(0, LockMode::Write, ME), Err(Error::UpgradeRefused));
    assert_eq!(z.sent[0].len(), before, "the refused upgrade sent {:?}", &z.sent[0][before..]);
    assert!(z.holds(0, LockMode::Read, ME), "the read hold is untouched");
    z.acquire(0, LockMode::Write, OwnerId(2)).unwrap();
    assert!(!z.holds(0, LockMode::Write, OwnerId(2)), "a writer beside a reader");
    z.release(0, LockMode::Read, ME);
    assert!(z.holds(0, LockMode::Write, OwnerId(2)));
}

/// A reader waits for the nearest writer before it (Curator: the first
/// one): when the first writer leaves, the reader is not woken, since the
/// second writer still sorts before it.
#[test]
fn a_reader_waits_for_the_nearest_writer_before_it() {
    let mut z = Zk::new(3);
    z.acquire(0, LockMode::Write, ME).unwrap();
    z.acquire(1, LockMode::Write, ME).unwrap();
    z.acquire(2, LockMode::Read, ME).unwrap();
    let watched: Vec<&String> = z.sent[2]
        .iter()
        .filter_map(|op| match op {
            Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if !path.contains("__READ__") => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(watched.len(), 1, "{:?}", z.sent[2]);
    let second_writer = z.children().into_iter().find(|k| k.contains("__WRIT__0000000001")).unwrap();
    assert!(watched[0].ends_with(&second_writer), "the reader watches {} , not the nearest writer", watched[0]);
    let sent_before = z.sent[2].len();
    z.release(0, LockMode::Write, ME);
    assert!(z.holds(1, LockMode::Write, ME));
    assert_eq!(z.sent[2].len(), sent_before, "the reader was woken by a writer it does not wait for");
    z.release(1, LockMode::Write, ME);
    assert!(z.holds(2, LockMode::Read, ME));
}
