//! Redis read-write lock beside a Redisson reader: Redisson's watchdog sets
//! the hash and every reader's timeout key, ours included, to its own
//! `lockWatchdogTimeout` (30 s by default) every 10 s. With a 120 s lease a
//! polylock reader renews every 40 s; once Redisson's reader unlocks (the
//! hash then lives as long as the longest timeout key: ours, cut) or its
//! client dies, the hash would run out before our next renewal and a
//! waiting writer would be granted while our reader still believes it
//! holds. The renewal reports the cut; the reader renews and counts its
//! loss deadline by it.
//!
//! On the simulation's server model, with Redisson's read lock, watchdog
//! and unlock re-stated line for line beside polylock's scripts.

#[allow(dead_code)]
#[path = "sim/redis_model.rs"]
mod redis_model;

use std::time::Duration;

use polylock_core::*;
use redis_model::RedisModel;

const NAME: &str = "orders";
const BASE: &str = "{orders}";
const REDISSON_CHANNEL: &str = "redisson_rwlock:{orders}";
/// Redisson's reader field (`<client uuid>:<thread id>`).
const REDISSON_FIELD: &str = "6f1c2d3e-0000-4000-8000-000000000001:1";
/// Redisson's default `lockWatchdogTimeout`; its watchdog runs every third.
const WATCHDOG_MS: u64 = 30_000;
const READER: usize = 0;
const WRITER: usize = 1;
const ME: OwnerId = OwnerId(1);

/// What the Redisson reader does at the end of its hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RedissonEnd {
    /// `unlock()`: its field and key go; the hash keeps the longest TTL of
    /// the timeout keys left (ours).
    Unlocks,
    /// Its client dies: no unlock, no more watchdog; its field stays.
    Dies,
}

/// Two polylock clients (a reader with a 120 s lease, a writer) and a
/// Redisson reader on one model server, on one virtual clock in ms.
struct Mixed {
    redis: RedisModel,
    tables: Vec<LockTable>,
    /// The instant each table last asked to be woken at.
    wake_at: Vec<Option<u64>>,
    /// Events each client's application got, with when.
    events: Vec<Vec<(u64, Event)>>,
    /// When our reader's renewals were sent.
    renewals: Vec<u64>,
    now: u64,
}

impl Mixed {
    fn new() -> Self {
        let mut reader = LockConfig::new(Backend::Redis);
        reader.set_lease(Duration::from_secs(120));
        let writer = LockConfig::new(Backend::Redis);
        Mixed {
            redis: RedisModel::default(),
            tables: vec![LockTable::new(reader, Nonce(11)).unwrap(), LockTable::new(writer, Nonce(22)).unwrap()],
            wake_at: vec![None; 2],
            events: vec![Vec::new(), Vec::new()],
            renewals: Vec::new(),
            now: 1_000,
        }
    }

    fn at(&self) -> Instant {
        Instant::from_millis(self.now)
    }

    fn acquire(&mut self, c: usize, mode: LockMode) {
        let now = self.at();
        let name = LockName::new(NAME).unwrap();
        self.tables[c].acquire(now, &name, mode, ME, AcquireOptions::default(), Nonce(c as u128 + 100)).unwrap();
        self.settle();
    }

    fn holds(&self, c: usize, mode: LockMode) -> bool {
        self.tables[c].hold(NAME, mode, ME).is_some()
    }

    fn deliver(&mut self, channel: &str, payload: &str) {
        let now = self.at();
        for s in self.redis.subs.get(channel).cloned().unwrap_or_default() {
            let n = Notification::Message { channel: channel.to_owned(), payload: payload.to_owned() };
            self.tables[s].handle_notification(now, n);
        }
    }

    /// Runs every table's commands against the model, answered at once.
    fn settle(&mut self) {
        for _ in 0..1_000 {
            let mut any = false;
            for c in 0..self.tables.len() {
                while let Some(out) = self.tables[c].poll_output() {
                    let cmd = match out {
                        Output::Command(cmd) => cmd,
                        Output::Event { event, .. } => {
                            self.events[c].push((self.now, event));
                            continue;
                        }
                        Output::Timeout(at) => {
                            self.wake_at[c] = Some(at.as_millis());
                            continue;
                        }
                        _ => continue,
                    };
                    any = true;
                    let now = self.at();
                    let reply = match &cmd.op {
                        Op::Redis(RedisOp::Eval { script, keys, args, by_sha }) => {
                            if script.name == "polylock_rw_renew" && c == READER {
                                self.renewals.push(self.now);
                            }
                            let fx = self.redis.eval_op(self.now, script.name, *by_sha, keys, args);
                            for (channel, payload) in fx.publish {
                                self.deliver(&channel, &payload);
                            }
                            fx.reply
                        }
                        Op::Redis(RedisOp::Subscribe { channels } | RedisOp::ShardSubscribe { channels }) => {
                            for channel in channels {
                                self.redis.subs.entry(channel.clone()).or_default().push(c);
                            }
                            Reply::Done
                        }
                        Op::Redis(RedisOp::Unsubscribe { channels } | RedisOp::ShardUnsubscribe { channels }) => {
                            for channel in channels {
                                if let Some(s) = self.redis.subs.get_mut(channel) {
                                    s.retain(|x| *x != c);
                                }
                            }
                            Reply::Done
                        }
                        other => panic!("unexpected command {other:?}"),
                    };
                    self.tables[c].handle_reply(now, cmd.id, reply);
                }
            }
            if !any {
                return;
            }
        }
        panic!("did not settle");
    }

    /// The holder must be told before anyone else can be granted: while
    /// our reader believes it holds, the server has its field.
    fn check(&mut self) {
        if !self.holds(READER, LockMode::Read) {
            return;
        }
        let field = self.tables[READER].holder_id(ME);
        let t = self.now;
        assert!(
            self.redis.holds(t, NAME, &field),
            "at {t} ms our reader still believes it holds, but the server has dropped its field{}",
            if self.holds(WRITER, LockMode::Write) { " and granted the writer" } else { "" }
        );
        assert!(!self.holds(WRITER, LockMode::Write), "at {t} ms the writer holds beside our reader");
    }

    /// Runs to `until` ms: the tables' timers and, while the Redisson
    /// reader holds (`redisson`: since when, until when, how it ends), its
    /// watchdog every 10 s; the oracle checked every 250 ms and at every step.
    fn run(&mut self, until: u64, redisson: Option<(u64, u64, RedissonEnd)>) {
        let (redisson_at, end_at, end) = redisson.unwrap_or((0, 0, RedissonEnd::Dies));
        let mut watchdog = redisson_at + WATCHDOG_MS / 3;
        let mut ended = redisson.is_none();
        while self.now < until {
            let timers = self.wake_at.iter().flatten().copied();
            let mut next = timers.chain([self.now + 250, until]).min().unwrap().max(self.now + 1);
            if !ended {
                next = next.min(watchdog).min(end_at);
            }
            self.now = next;
            if !ended && self.now >= end_at {
                ended = true;
                if end == RedissonEnd::Unlocks {
                    if let Some(payload) = self.redis.redisson_read_unlock(self.now, NAME, BASE, REDISSON_FIELD) {
                        self.deliver(REDISSON_CHANNEL, &payload);
                    }
                }
            } else if !ended && self.now >= watchdog {
                assert!(self.redis.redisson_read_renew(self.now, NAME, BASE, REDISSON_FIELD, WATCHDOG_MS));
                watchdog = self.now + WATCHDOG_MS / 3;
            }
            for c in 0..self.tables.len() {
                if self.wake_at[c].is_some_and(|at| at <= self.now) {
                    self.wake_at[c] = None;
                    self.tables[c].handle_timeout(Instant::from_millis(self.now));
                }
            }
            self.settle();
            self.check();
        }
    }

    /// While the Redisson reader cuts, our reader renews faster than its
    /// watchdog time; from `alone_by` on (no other live reader), every
    /// third of the lease again.
    fn renews_at_a_third_of_the_lease_once_alone(&self, alone_by: u64) {
        let gaps: Vec<u64> = self.renewals.windows(2).map(|w| w[1] - w[0]).collect();
        let cut: Vec<u64> =
            self.renewals.windows(2).filter(|w| w[0] >= 40_000 && w[1] <= 50_000).map(|w| w[1] - w[0]).collect();
        assert!(!cut.is_empty() && cut.iter().all(|g| *g < WATCHDOG_MS / 3), "renewals while cut: {gaps:?}");
        let later: Vec<u64> = self.renewals.windows(2).filter(|w| w[0] >= alone_by).map(|w| w[1] - w[0]).collect();
        assert!(!later.is_empty() && later.iter().all(|g| *g == 40_000), "renewals once alone: {gaps:?}");
    }

    fn lost(&self, c: usize) -> Vec<u64> {
        self.events[c].iter().filter(|(_, e)| matches!(e, Event::Lost { .. })).map(|(t, _)| *t).collect()
    }

    fn granted(&self, c: usize) -> Vec<u64> {
        self.events[c].iter().filter(|(_, e)| matches!(e, Event::Granted { .. })).map(|(t, _)| *t).collect()
    }
}

/// Our reader (lease 120 s) at 1 s, a Redisson reader beside it at 5 s, a
/// polylock writer waiting from 6 s; the Redisson reader ends at 50 s (its
/// watchdog last cut the hash and our key to 30 s at 45 s). Runs to 200 s.
fn beside_a_redisson_reader(end: RedissonEnd) -> Mixed {
    let mut m = Mixed::new();
    m.acquire(READER, LockMode::Read);
    assert!(m.holds(READER, LockMode::Read));
    m.now = 5_000;
    assert!(m.redis.redisson_read_lock(m.now, NAME, BASE, REDISSON_FIELD, WATCHDOG_MS));
    m.now = 6_000;
    m.acquire(WRITER, LockMode::Write);
    assert!(!m.holds(WRITER, LockMode::Write), "the writer waits for the readers");
    m.run(200_000, Some((5_000, 50_000, end)));
    m
}

#[test]
fn a_redisson_readers_unlock_never_lets_a_writer_in_before_our_reader_is_told() {
    let mut m = beside_a_redisson_reader(RedissonEnd::Unlocks);
    assert_eq!(m.lost(READER), Vec::<u64>::new(), "our reader renewed before the cut hash ran out");
    assert!(m.holds(READER, LockMode::Read));
    assert_eq!(m.granted(WRITER), Vec::<u64>::new(), "the writer still waits for our reader");
    m.renews_at_a_third_of_the_lease_once_alone(60_000);
    let now = m.at();
    let _ = m.tables[READER].release(now, NAME, LockMode::Read, ME, None).unwrap();
    m.settle();
    m.run(205_000, None);
    assert_eq!(m.granted(WRITER).len(), 1, "our reader's release lets the writer in");
}

#[test]
fn a_dead_redisson_readers_cut_never_lets_a_writer_in_before_our_reader_is_told() {
    let m = beside_a_redisson_reader(RedissonEnd::Dies);
    assert_eq!(m.lost(READER), Vec::<u64>::new(), "our reader renewed before the cut hash ran out");
    assert!(m.holds(READER, LockMode::Read));
    assert_eq!(m.granted(WRITER), Vec::<u64>::new(), "the writer still waits for our reader");
    // The dead reader's field stays, but its timeout key ran out at 75 s.
    m.renews_at_a_third_of_the_lease_once_alone(85_000);
}
