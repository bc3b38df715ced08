//! Deterministic simulation: a virtual clock that jumps from event to
//! event, seeded network delays, drops and duplicated notifications,
//! client pauses and crashes, server-side expiry and ZooKeeper session
//! expiry, around real `LockTable`s (one per client, driven as the runtime
//! drives it) and small server models. A step cap turns a livelock into a
//! failure instead of a hang.

#![allow(dead_code)]

pub mod redis_model;
pub mod solo;
pub mod zk_model;

use std::collections::BTreeMap;
use std::time::Duration;

use polylock_core::{
    AcquireOptions, Backend, Command, ConnectionEvent, Error, Event, Instant, LockConfig, LockMode, LockName,
    LockTable, Nonce, Notification, Op, Output, OwnerId, PermitRequest, ReleaseId, ReleaseProgress, Reply, RequestId,
    Ticket, TransportError,
};
use polylock_core::{RedisOp, ZkOp};
use redis_model::RedisModel;
use zk_model::ZkModel;

pub const LOCK: &str = "/sim/resource";
/// The names a run's clients lock: only the first, unless [`Scenario::two_names`].
pub const LOCKS: [&str; 2] = [LOCK, "/sim/other"];

/// splitmix64: small, seedable, good enough for schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability `per_mille`/1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// Which faults a run may inject.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    pub max_delay_ms: u64,
    pub drop_per_mille: u64,
    pub dup_per_mille: u64,
    /// Client pauses, some longer than the lease / session timeout.
    pub pauses: bool,
    pub crashes: bool,
    /// Redis: the lock key deleted server-side; ZooKeeper: sessions expired.
    pub expiries: bool,
    /// Short disconnections (below the loss grace).
    pub disconnects: bool,
    /// ZooKeeper: a network partition that outlasts the session. The client
    /// reports `Disconnected` anywhere from at once to 9/20 of the session
    /// timeout later (zookeeper-client's detection delay), possibly before
    /// replies the server sent just before the cut are processed; the server
    /// expires the session a session timeout after the cut; the client only
    /// hears of the expiry when it reconnects, after that. Some partitions
    /// start at random, and some right after the server answered a
    /// getChildren that makes the client the holder: the grant is in flight.
    pub partitions: bool,
    /// Requests the server answers with a transient error (Redis `BUSY`,
    /// `LOADING`, `READONLY`, `OOM`; ZooKeeper throttling) without running them.
    pub refuse_per_mille: u64,
    /// Redis: the whole key space replaced by a copy taken earlier in the
    /// run (a restart from an older RDB/AOF, a failover to a replica that
    /// missed writes). The server's clock does not go back with it.
    pub rollbacks: bool,
    /// Redis: any key deleted (eviction under maxmemory, a stray DEL).
    pub evictions: bool,
    /// A pause is a host suspend that the client's clock does not count
    /// (CLOCK_MONOTONIC on Linux): after it, the client reads time as it was
    /// when the suspend began. The runtime's clock counts suspend
    /// (CLOCK_BOOTTIME), which is what a plain pause models; this switch
    /// shows what goes wrong without it.
    pub uncounted_suspends: bool,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub backend: Backend,
    pub clients: usize,
    pub cycles: usize,
    pub hold_ms: (u64, u64),
    pub lease_ms: u64,
    pub waiter_ttl_ms: u64,
    pub session_ms: u64,
    /// Probability (per mille) that an acquire carries a deadline / is a try / is cancelled.
    pub deadline_per_mille: u64,
    pub no_wait_per_mille: u64,
    pub cancel_per_mille: u64,
    pub faults: Faults,
    /// Each client alternates between the two [`LOCKS`] from cycle to cycle
    /// (half of them starting with each), so two names share every client's
    /// table under the same faults. The oracles hold per name.
    pub two_names: bool,
    /// Every acquire is one half of a read-write lock: a write with this
    /// probability (per mille), else a read. 0: the mutex.
    pub write_per_mille: Option<u64>,
    /// Every acquire asks for permits of a counting semaphore of this many
    /// (Redis), each its own owner, `k` in 1..=N chosen per acquire.
    pub semaphore: Option<u32>,
    /// Every acquire is a campaign in a leader election ([`LockMode::Leader`]):
    /// a belief is a leadership, its token the term.
    pub election: bool,
    /// Semaphores: the last client is made with this other number of
    /// permits. It starts once the server has recorded the run's number,
    /// and every one of its acquires must be refused without a change.
    pub mismatch: Option<u32>,
    /// Redis: replica acknowledgements every grant and renewal asks for
    /// ([`LockConfig::replicas`]); the simulated server gives them all,
    /// except when it refuses (`refuse_per_mille`): then none.
    pub replicas: u32,
    pub time_cap_ms: u64,
    pub step_cap: u64,
}

impl Scenario {
    pub fn new(backend: Backend) -> Self {
        Scenario {
            backend,
            clients: 4,
            cycles: 3,
            hold_ms: (5, 60),
            lease_ms: 900,
            waiter_ttl_ms: 900,
            session_ms: 1200,
            deadline_per_mille: 0,
            no_wait_per_mille: 0,
            cancel_per_mille: 0,
            faults: Faults { max_delay_ms: 5, ..Faults::default() },
            two_names: false,
            write_per_mille: None,
            semaphore: None,
            election: false,
            mismatch: None,
            replicas: 0,
            time_cap_ms: 600_000,
            step_cap: 400_000,
        }
    }
}

/// A span during which a client's application believed it held the lock.
#[derive(Debug, Clone)]
pub struct Belief {
    pub client: usize,
    /// Which of [`LOCKS`].
    pub lock: usize,
    pub mode: LockMode,
    /// Semaphores: the permits granted (1 otherwise).
    pub permits: u32,
    /// When the application asked.
    pub asked: u64,
    pub token: u64,
    pub start: u64,
    pub end: Option<u64>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub beliefs: Vec<Belief>,
    /// Writes each resource (one per lock) accepted: (time, client, token, lock).
    pub accepted_writes: Vec<(u64, usize, u64, usize)>,
    pub rejected_writes: u64,
    /// Server-side grants in order: (time, client, token, lock).
    pub server_grants: Vec<(u64, usize, u64, usize)>,
    /// Tokens the server could have given each client, with their lock
    /// (Redis grants / ZK czxids of its nodes).
    pub server_tokens: Vec<Vec<(usize, u64)>>,
    pub finished: Vec<bool>,
    pub crashed: Vec<bool>,
    /// Commands sent in response to a wake-up (Redis message / ZooKeeper watch).
    pub wake_retries: u64,
    /// Releases that could wake someone (server-side releases / node deletions).
    pub releases: u64,
    /// Redis: scripts sent by SHA1 that the server refused `NOSCRIPT`.
    pub noscripts: u64,
    pub end_ms: u64,
    pub steps: u64,
    /// What is left on the server once every live client has finished and
    /// cleanup had time to run: lock key, queue keys / ephemeral nodes.
    pub leftovers: usize,
    pub livelock: bool,
    /// The most locks one client's table held machines for at once.
    pub max_table_locks: usize,
    /// Every pause (or suspend): (client, start, end).
    pub pauses: Vec<(usize, u64, u64)>,
    /// Every acquire that failed: (client, error).
    pub failures: Vec<(usize, Error)>,
    /// Semaphores: the scripts' accounting broke (free + held != N), and
    /// the mismatched client's acquires that changed the server's state
    /// or were not refused.
    pub sem_breaks: Vec<String>,
    pub mismatch_changes: Vec<String>,
    /// Semaphores: grants handed to a queued waiter by another's script.
    pub sem_handoffs: u64,
    /// Semaphores: runs' ends where the recorded number and held ids were
    /// lost, so that a probe for all permits was refused as a mismatch.
    pub sem_unrecorded: u64,
    /// ZooKeeper: releases reported done while the released holder's node
    /// was still on the server, its session alive (see
    /// [`check_release_confirmed`]).
    pub early_releases: Vec<String>,
    /// ZooKeeper: releases checked that way (the holder's node was on the
    /// server when the release began).
    pub checked_releases: u64,
}

#[derive(Debug)]
enum Input {
    Reply(RequestId, Reply),
    Notif(Notification),
    Conn(ConnectionEvent),
    /// ZooKeeper: session `old` expired and `new` replaced it.
    Expired {
        old: u64,
        new: u64,
    },
}

#[derive(Debug)]
enum Ev {
    Deliver {
        c: usize,
        input: Input,
    },
    Server {
        c: usize,
        session: u64,
        cmd: Command,
        drop_reply: bool,
    },
    Timer {
        c: usize,
    },
    AppStart {
        c: usize,
    },
    AppWrite {
        c: usize,
        token: u64,
        lock: usize,
    },
    WriteArrive {
        c: usize,
        token: u64,
        lock: usize,
    },
    AppRelease {
        c: usize,
        belief: usize,
    },
    AppCancel {
        c: usize,
        ticket: Ticket,
    },
    Pause {
        c: usize,
        ms: u64,
    },
    Crash {
        c: usize,
    },
    ExpireSession {
        c: usize,
    },
    DeleteLockKey {
        lock: usize,
    },
    Snapshot,
    Restore,
    EvictKey,
    /// Redis: `SCRIPT FLUSH` (or a failover to a replica, which has no
    /// scripts cached): every script must be sent with its source again.
    FlushScripts,
    Disconnect {
        c: usize,
        ms: u64,
    },
    Reconnect {
        c: usize,
    },
    Partition {
        c: usize,
    },
    PartitionExpiry {
        c: usize,
        session: u64,
    },
    PartitionHeals {
        c: usize,
        old: u64,
    },
    Reap,
}

/// ZooKeeper: a release under way, and the released holder's nodes (path,
/// czxid) that must be gone by the time it is reported done.
struct Releasing {
    client: usize,
    id: ReleaseId,
    nodes: Vec<(String, i64)>,
}

#[derive(Debug, PartialEq)]
enum App {
    Idle,
    Waiting(Ticket),
    Holding(usize),
    Done,
}

struct Client {
    /// The client's table, holding its one lock (or none while idle).
    t: LockTable,
    app: App,
    /// The lock (of [`LOCKS`]) of the current cycle, and the mode asked for.
    lock: usize,
    mode: LockMode,
    /// The owner of the current acquire (semaphores: a fresh one each), and its ask.
    owner: OwnerId,
    ask: u32,
    asked: u64,
    cycles_left: usize,
    paused_until: u64,
    /// How far the client's clock is behind real time: the suspends it did not count.
    clock_lag: u64,
    crashed: bool,
    disconnected: bool,
    /// Cut off by a partition: nothing it sends reaches the server.
    partitioned: bool,
    session: u64,
    armed: Option<u64>,
    fifo_cmd: u64,
    fifo_in: u64,
    /// When the latest connection-state input to this client is due: the
    /// runtime reports session states from one watcher, in order, so a
    /// `Disconnected` never overtakes a `Connected` reported before it.
    conn_fifo: u64,
    fifo_pub: u64,
    nonce_seq: u128,
}

pub struct World {
    pub sc: Scenario,
    now: u64,
    seq: u64,
    /// The sequence number of the event being stepped.
    current_seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    pub rng: Rng,
    clients: Vec<Client>,
    pub redis: RedisModel,
    /// The copy a `Restore` fault puts back.
    snapshot: Option<redis_model::Snapshot>,
    pub zk: ZkModel,
    /// Server-side session id per client (ZooKeeper).
    server_session: Vec<u64>,
    next_session: u64,
    /// The newest token each lock's resource accepted.
    resource_max: [u64; 2],
    /// ZooKeeper: releases under way, by client and release id: the nodes
    /// (path, czxid) of the released holder, which must be gone from the
    /// server by the time the release is reported done.
    releasing: Vec<Releasing>,
    pub out: Outcome,
    fields: Vec<String>,
    trace: bool,
}

const RESPONSE_TIMEOUT_MS: u64 = 250;

impl World {
    pub fn new(sc: Scenario, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut cfg = LockConfig::new(sc.backend);
        cfg.lease = Duration::from_millis(sc.lease_ms);
        cfg.waiter_ttl = Duration::from_millis(sc.waiter_ttl_ms);
        cfg.session_timeout = Duration::from_millis(sc.session_ms);
        cfg.min_backoff = Duration::from_millis(20);
        cfg.max_backoff = Duration::from_millis(200);
        cfg.replicas = sc.replicas;
        let mut clients = Vec::new();
        let mut fields = Vec::new();
        for i in 0..sc.clients {
            let t = LockTable::new(cfg.clone(), Nonce(rng.next() as u128 | ((i as u128) << 64))).unwrap();
            fields.push(t.holder_id(OwnerId(1)));
            clients.push(Client {
                t,
                app: App::Idle,
                lock: 0,
                mode: LockMode::Exclusive,
                owner: OwnerId(1),
                ask: 1,
                asked: 0,
                cycles_left: sc.cycles,
                paused_until: 0,
                clock_lag: 0,
                crashed: false,
                disconnected: false,
                partitioned: false,
                session: i as u64 + 1,
                armed: None,
                fifo_cmd: 0,
                fifo_in: 0,
                conn_fifo: 0,
                fifo_pub: 0,
                nonce_seq: 0,
            });
        }
        let n = sc.clients;
        let mut w = World {
            sc,
            now: 0,
            seq: 0,
            current_seq: 0,
            queue: BTreeMap::new(),
            rng,
            clients,
            redis: RedisModel::default(),
            snapshot: None,
            zk: ZkModel::new(),
            server_session: (1..=n as u64).collect(),
            next_session: n as u64 + 1,
            resource_max: [0; 2],
            releasing: Vec::new(),
            out: Outcome { server_tokens: vec![Vec::new(); n], ..Outcome::default() },
            fields,
            trace: std::env::var("SIM_TRACE").is_ok(),
        };
        w.out.finished = vec![false; n];
        w.out.crashed = vec![false; n];
        w
    }

    fn at(&mut self, t: u64, ev: Ev) {
        // (time, sequence): at one instant, what was scheduled first runs first.
        self.seq += 1;
        self.queue.insert((t, self.seq), ev);
    }

    fn delay(&mut self) -> u64 {
        let max = self.sc.faults.max_delay_ms;
        self.rng.range(if max > 0 { 1 } else { 0 }, max)
    }

    /// Schedules the faults of this run up front, from the seed.
    fn plan_faults(&mut self) {
        let f = self.sc.faults.clone();
        let horizon = (self.sc.cycles as u64) * (self.sc.hold_ms.1 + 20) * self.sc.clients as u64 + 100;
        for c in 0..self.sc.clients {
            if f.pauses && self.rng.chance(500) {
                let t = self.rng.range(0, horizon);
                let long = self.rng.chance(500);
                let ms = if long {
                    self.rng
                        .range(self.sc.lease_ms.max(self.sc.session_ms), 3 * self.sc.lease_ms.max(self.sc.session_ms))
                } else {
                    self.rng.range(1, 100)
                };
                self.at(t, Ev::Pause { c, ms });
            }
            if f.crashes && self.rng.chance(250) {
                let t = self.rng.range(0, horizon);
                self.at(t, Ev::Crash { c });
            }
            if f.expiries && self.sc.backend == Backend::ZooKeeper && self.rng.chance(300) {
                let t = self.rng.range(0, horizon);
                self.at(t, Ev::ExpireSession { c });
            }
            if f.disconnects && self.rng.chance(400) {
                let t = self.rng.range(0, horizon);
                let grace =
                    if self.sc.backend == Backend::ZooKeeper { self.sc.session_ms / 3 } else { self.sc.lease_ms / 2 };
                let ms = self.rng.range(1, grace.saturating_sub(40).max(2));
                self.at(t, Ev::Disconnect { c, ms });
            }
        }
        if f.partitions && self.sc.backend == Backend::ZooKeeper {
            for c in 0..self.sc.clients {
                if self.rng.chance(300) {
                    let t = self.rng.range(0, horizon);
                    self.at(t, Ev::Partition { c });
                }
            }
        }
        if f.expiries && self.sc.backend == Backend::Redis {
            for _ in 0..self.rng.range(0, 2) {
                let t = self.rng.range(0, horizon);
                let lock = if self.sc.two_names { self.rng.range(0, 1) as usize } else { 0 };
                self.at(t, Ev::DeleteLockKey { lock });
            }
        }
        if f.rollbacks && self.sc.backend == Backend::Redis && self.rng.chance(500) {
            let taken = self.rng.range(0, horizon);
            let restored = self.rng.range(taken, horizon + self.sc.lease_ms);
            self.at(taken, Ev::Snapshot);
            self.at(restored, Ev::Restore);
        }
        if f.evictions && self.sc.backend == Backend::Redis {
            for _ in 0..self.rng.range(0, 3) {
                let t = self.rng.range(0, horizon);
                self.at(t, Ev::EvictKey);
            }
        }
        // Requests in flight when the script cache goes: refused NOSCRIPT,
        // some after their claim has moved on (a cancel sent behind them).
        if f.refuse_per_mille > 0 && self.sc.backend == Backend::Redis {
            for _ in 0..self.rng.range(0, 4) {
                let t = self.rng.range(0, horizon);
                self.at(t, Ev::FlushScripts);
            }
        }
        if self.sc.backend == Backend::ZooKeeper {
            self.at(50, Ev::Reap);
        }
    }

    /// Runs the scenario to the end: every live client finished, or a cap hit.
    pub fn run(mut self) -> Outcome {
        self.plan_faults();
        for c in 0..self.sc.clients {
            let t = self.rng.range(0, 10);
            self.at(t, Ev::AppStart { c });
        }
        let mut quiet_since: Option<u64> = None;
        while let Some(((t, seq), ev)) = self.queue.pop_first() {
            self.current_seq = seq;
            self.out.steps += 1;
            if self.out.steps > self.sc.step_cap {
                self.out.livelock = true;
                break;
            }
            if t > self.sc.time_cap_ms {
                break;
            }
            self.now = t;
            if self.trace {
                eprintln!("{t:>6} {ev:?}");
            }
            let fault = matches!(ev, Ev::DeleteLockKey { .. } | Ev::Snapshot | Ev::Restore | Ev::EvictKey);
            self.step(ev);
            if self.trace && fault {
                eprintln!("{t:>6} keys {:?}", self.redis.live_keys(t));
            }
            let all_done = self.clients.iter().all(|c| c.crashed || c.app == App::Done);
            if all_done {
                // Let cleanup finish (releases, queue entries, container reaping),
                // but stop once only renewals of nobody and timers remain.
                let since = *quiet_since.get_or_insert(self.now);
                let idle = self.clients.iter().all(|c| c.crashed || c.t.lock_count() == 0);
                if idle || self.now > since + 3 * self.sc.lease_ms.max(self.sc.session_ms) + 1000 {
                    break;
                }
            }
        }
        self.finish()
    }

    fn finish(mut self) -> Outcome {
        let now = self.now + 10 * self.sc.lease_ms.max(self.sc.waiter_ttl_ms).max(self.sc.session_ms);
        for c in 0..self.sc.clients {
            self.out.finished[c] = self.clients[c].app == App::Done;
            self.out.crashed[c] = self.clients[c].crashed;
        }
        self.out.end_ms = self.now;
        match self.sc.backend {
            Backend::Redis => {
                // Far in the future, everything with a TTL is gone; nothing
                // may be left without one, not even the fence counter.
                self.out.leftovers = match self.sc.semaphore {
                    None => self.redis.key_count(now),
                    Some(n) => self.sem_leftovers(now, n),
                };
                for (t, field, token, key) in self.redis.grants.clone() {
                    // `<client id>:<owner>`: a semaphore's owners are many.
                    let client = |f: &str| f.rsplit_once(':').map(|(id, _)| id.to_owned());
                    let c = self.fields.iter().position(|f| client(f) == client(&field)).unwrap();
                    let lock = LOCKS.iter().position(|l| *l == key).expect("a grant of a simulated lock");
                    self.out.server_grants.push((t, c, token, lock));
                    self.out.server_tokens[c].push((lock, token));
                }
                self.out.releases = self.redis.releases;
                self.out.noscripts = self.redis.noscripts;
                self.out.sem_breaks = std::mem::take(&mut self.redis.sem_breaks);
                self.out.sem_handoffs = self.redis.sem_handoffs;
            }
            Backend::ZooKeeper => {
                // Crashed clients' sessions expire in time; what counts is
                // ephemeral nodes of sessions that stay open.
                for c in 0..self.sc.clients {
                    if self.clients[c].crashed {
                        let mut fired = Vec::new();
                        self.zk.expire_session(self.server_session[c], &mut fired);
                    }
                }
                self.out.leftovers = self.zk.ephemeral_count();
                self.out.releases = self.zk.deletes_of_lock_nodes;
            }
        }
        self.out
    }

    /// Semaphores: what is left at `now`, long after the run. A probe
    /// acquire of all `n` permits (a try) must be granted, as it is when no
    /// permit leaked, and its leave must leave only the counter back at `n`
    /// and the recorded number `n` (both without a TTL): no permit id held,
    /// no queue entry, nothing else.
    fn sem_leftovers(&mut self, now: u64, n: u32) -> usize {
        let mut left = 0;
        let grants = self.redis.grants.len();
        for name in LOCKS {
            let k = polylock_core::redis::RedisKeys::of_semaphore(&LockName::new(name).unwrap());
            let keys: Vec<String> = [k.lock(), k.fence(), k.queue(), k.queue_deadline()]
                .into_iter()
                .chain(k.permit_timeouts())
                .chain(k.permit_total())
                .map(str::to_owned)
                .collect();
            let (holder, lease) = ("probe:1".to_owned(), self.sc.lease_ms.to_string());
            let member = format!("p{n}|{holder}|0|{lease}");
            let all = n.to_string();
            let args = [&holder, &lease, "0", &lease, k.channel(), &member, &all, &all].map(|a| a.to_owned());
            let fx = self.redis.eval(now, "polylock_sem_acquire", &keys, &args);
            let granted = matches!(&fx.reply, Reply::Redis(polylock_core::RedisValue::Array(v))
                if matches!(v.as_slice(), [polylock_core::RedisValue::Int(1), _]));
            // Refused for fewer permits while no number is recorded: the
            // recorded number and held ids were both lost, and the server
            // looks like a Redisson semaphore of fewer permits. Refusing
            // (not guessing) is the documented answer; counted apart.
            let unrecorded = !self.redis.has_key(now, k.permit_total().unwrap())
                && matches!(&fx.reply, Reply::Redis(polylock_core::RedisValue::Array(v))
                    if matches!(v.as_slice(), [polylock_core::RedisValue::Int(-1), polylock_core::RedisValue::Int(m)] if *m < i64::from(n)));
            if unrecorded {
                self.out.sem_unrecorded += 1;
                self.redis.del(k.lock());
            } else if !granted {
                if self.trace {
                    eprintln!("left: a probe of {n} permits of {name} got {:?}", fx.reply);
                }
                left += 1;
            }
            let args = [&holder, k.channel(), k.channel(), &member, "", &all].map(|a| a.to_owned());
            self.redis.eval(now, "polylock_sem_leave", &keys[..5], &args);
            for key in [k.lock(), k.permit_total().unwrap()] {
                if let Some(v) = self.redis.counter(now, key) {
                    if v != i64::from(n) {
                        if self.trace {
                            eprintln!("left: {key} = {v}, not {n}");
                        }
                        left += 1;
                    }
                    self.redis.del(key);
                }
            }
        }
        self.redis.grants.truncate(grants);
        // The fence the probe set expires with the probe's lease.
        left + self.redis.key_count(now + 10 * self.sc.lease_ms)
    }

    fn step(&mut self, ev: Ev) {
        // Events for a paused client wait until it wakes, in order; a
        // crashed client gets nothing at all.
        let target = match &ev {
            Ev::Deliver { c, .. }
            | Ev::Timer { c }
            | Ev::AppStart { c }
            | Ev::AppWrite { c, .. }
            | Ev::AppRelease { c, .. }
            | Ev::AppCancel { c, .. }
            | Ev::Pause { c, .. }
            | Ev::Disconnect { c, .. }
            | Ev::Partition { c } => Some(*c),
            _ => None,
        };
        if let Some(c) = target {
            if self.clients[c].crashed {
                return;
            }
            if self.clients[c].paused_until > self.now {
                // Deferred with its own sequence number, so at `until` it still
                // comes before what was due later: a client's inputs keep
                // their order across a pause.
                let until = self.clients[c].paused_until;
                self.queue.insert((until, self.current_seq), ev);
                return;
            }
        }
        match ev {
            Ev::Deliver { c, input } => self.deliver(c, input),
            Ev::Server { c, session, cmd, drop_reply } => self.serve(c, session, cmd, drop_reply),
            Ev::Timer { c } => {
                self.clients[c].armed = None;
                let now = self.local_now(c);
                self.clients[c].t.handle_timeout(now);
                self.drain(c);
            }
            Ev::AppStart { c } => self.app_start(c),
            Ev::AppWrite { c, token, lock } => {
                // The write leaves the client now; it reaches the resource a little later.
                let d = self.delay();
                self.at(self.now + d, Ev::WriteArrive { c, token, lock });
            }
            Ev::WriteArrive { c, token, lock } => {
                if token >= self.resource_max[lock] {
                    self.resource_max[lock] = token;
                    self.out.accepted_writes.push((self.now, c, token, lock));
                } else {
                    self.out.rejected_writes += 1;
                }
            }
            Ev::AppRelease { c, belief } => {
                if self.clients[c].app == App::Holding(belief) {
                    self.out.beliefs[belief].end = Some(self.now);
                    let now = self.local_now(c);
                    let name = LOCKS[self.out.beliefs[belief].lock];
                    let mode = self.out.beliefs[belief].mode;
                    let owner = self.clients[c].owner;
                    let r = self.clients[c].t.release(now, name, mode, owner, None);
                    // A holder whose deadline passed while it was paused learns
                    // of the loss on release; anything else is a bug.
                    assert!(
                        matches!(r, Ok(_) | Err(polylock_core::Error::Lost(_))),
                        "release by the holder failed: {r:?}"
                    );
                    if let Ok(ReleaseProgress::Releasing(id)) = r {
                        let token = self.out.beliefs[belief].token;
                        let nodes = self.held_nodes(c, name, token);
                        self.releasing.push(Releasing { client: c, id, nodes });
                    }
                    self.cycle_done(c);
                    self.drain(c);
                }
            }
            Ev::AppCancel { c, ticket } => {
                if self.clients[c].app == App::Waiting(ticket) {
                    let now = self.local_now(c);
                    if self.clients[c].t.cancel(now, ticket) {
                        self.cycle_done(c);
                    }
                    self.drain(c);
                }
            }
            Ev::Pause { c, ms } => {
                self.clients[c].paused_until = self.now + ms;
                self.out.pauses.push((c, self.now, self.now + ms));
                if self.sc.faults.uncounted_suspends {
                    self.clients[c].clock_lag += ms;
                }
                if self.sc.backend == Backend::ZooKeeper && ms > self.sc.session_ms {
                    // No heartbeats: the server expires the session.
                    self.at(self.now + self.sc.session_ms, Ev::ExpireSession { c });
                }
            }
            Ev::Crash { c } => {
                self.clients[c].crashed = true;
                if let App::Holding(b) = self.clients[c].app {
                    self.out.beliefs[b].end = Some(self.now);
                }
                if self.sc.backend == Backend::ZooKeeper {
                    self.at(self.now + self.sc.session_ms, Ev::ExpireSession { c });
                }
            }
            Ev::ExpireSession { c } => self.expire_session(c),
            Ev::DeleteLockKey { lock } => self.redis.del(LOCKS[lock]),
            Ev::Snapshot => self.snapshot = Some(self.redis.snapshot()),
            Ev::Restore => {
                if let Some(copy) = self.snapshot.take() {
                    self.redis.restore(copy);
                }
            }
            Ev::EvictKey => {
                let pick = self.rng.next();
                self.redis.evict(self.now, pick);
            }
            Ev::FlushScripts => self.redis.flush_scripts(),
            Ev::Disconnect { c, ms } => {
                self.clients[c].disconnected = true;
                self.push_input(c, Input::Conn(ConnectionEvent::Disconnected), 0);
                self.at(self.now + ms, Ev::Reconnect { c });
            }
            Ev::Reconnect { c } => {
                if !self.clients[c].crashed && !self.clients[c].partitioned {
                    self.clients[c].disconnected = false;
                    self.push_input(c, Input::Conn(ConnectionEvent::Connected), 1);
                }
            }
            Ev::Partition { c } => self.partition(c),
            // The server expires the partitioned client's session (unless
            // something else expired it meanwhile).
            Ev::PartitionExpiry { c, session } => {
                if self.server_session[c] == session {
                    self.expire_server_side(c);
                }
            }
            // The partition heals: the client reconnects and learns of the expiry.
            Ev::PartitionHeals { c, old } => {
                self.clients[c].partitioned = false;
                if !self.clients[c].crashed {
                    self.clients[c].disconnected = false;
                    let new = self.server_session[c];
                    if new != old {
                        self.push_input(c, Input::Expired { old, new }, 1);
                    }
                    // Connected even if the client already heard of the expiry
                    // from elsewhere: a short disconnection's reconnect may
                    // have been swallowed by the partition.
                    self.push_input(c, Input::Conn(ConnectionEvent::Connected), 1);
                }
            }
            Ev::Reap => {
                let mut fired = Vec::new();
                self.zk.reap_containers(&mut fired);
                self.fire(fired);
                if self.clients.iter().any(|c| !c.crashed && c.app != App::Done) {
                    self.at(self.now + 50, Ev::Reap);
                }
            }
        }
    }

    fn expire_session(&mut self, c: usize) {
        let (old, new) = self.expire_server_side(c);
        if !self.clients[c].crashed {
            self.push_input(c, Input::Expired { old, new }, 1);
        }
    }

    /// The server expires client `c`'s session; returns (old, new) session ids.
    fn expire_server_side(&mut self, c: usize) -> (u64, u64) {
        let old = self.server_session[c];
        let mut fired = Vec::new();
        self.zk.expire_session(old, &mut fired);
        self.fire(fired);
        let new = self.next_session;
        self.server_session[c] = new;
        self.next_session += 1;
        (old, new)
    }

    /// Cuts client `c` off until after the server has expired its session.
    fn partition(&mut self, c: usize) {
        if self.clients[c].disconnected || self.clients[c].partitioned {
            return;
        }
        self.clients[c].disconnected = true;
        self.clients[c].partitioned = true;
        let s = self.sc.session_ms;
        // The client's detection delay; delivered outside the reply FIFO, so
        // replies already on their way may be processed after it.
        let detect = if self.rng.chance(500) { 0 } else { self.rng.range(1, s * 9 / 20) };
        let at = (self.now + detect).max(self.clients[c].conn_fifo);
        self.clients[c].conn_fifo = at;
        self.at(at, Ev::Deliver { c, input: Input::Conn(ConnectionEvent::Disconnected) });
        let session = self.server_session[c];
        self.at(self.now + s, Ev::PartitionExpiry { c, session });
        let heal = self.now + s + self.rng.range(1, 300);
        self.at(heal, Ev::PartitionHeals { c, old: session });
    }

    fn fire(&mut self, fired: Vec<(usize, RequestId)>) {
        for (w, id) in fired {
            if self.clients[w].partitioned {
                continue; // cut off: it learns of the expiry instead
            }
            // The model fires watches on deletions only. A driver may say
            // so (`NodeDeleted`) or not (`WatchFired`): both are exercised.
            let n =
                if self.rng.chance(250) { Notification::WatchFired { id } } else { Notification::NodeDeleted { id } };
            self.push_input(w, Input::Notif(n), 0);
        }
    }

    /// Queues an input to a client on its in-order reply channel.
    fn push_input(&mut self, c: usize, input: Input, extra: u64) {
        let d = self.delay() + extra;
        let t = (self.now + d).max(self.clients[c].fifo_in);
        self.clients[c].fifo_in = t;
        if matches!(input, Input::Conn(_)) {
            self.clients[c].conn_fifo = self.clients[c].conn_fifo.max(t);
        }
        self.at(t, Ev::Deliver { c, input });
    }

    fn app_start(&mut self, c: usize) {
        if self.clients[c].app != App::Idle {
            return;
        }
        if self.clients[c].cycles_left == 0 {
            self.clients[c].app = App::Done;
            return;
        }
        if self.mismatch_of(c).is_some() && !self.redis.has_key(self.now, &permit_record(LOCKS[self.clients[c].lock])) {
            // The mismatched client comes once the run's number is recorded.
            self.at(self.now + 20, Ev::AppStart { c });
            return;
        }
        let mut opts = AcquireOptions::default();
        if self.rng.chance(self.sc.no_wait_per_mille) {
            opts.no_wait = true;
        } else if self.rng.chance(self.sc.deadline_per_mille) {
            opts.deadline = Some(self.local_now(c).saturating_add(Duration::from_millis(self.rng.range(1, 300))));
        }
        self.clients[c].nonce_seq += 1;
        let nonce = Nonce((self.rng.next() as u128) << 64 | self.clients[c].nonce_seq);
        let now = self.local_now(c);
        if self.sc.two_names {
            self.clients[c].lock = (c + self.sc.cycles - self.clients[c].cycles_left) % 2;
        }
        self.clients[c].mode = match self.sc.write_per_mille {
            None if self.sc.election => LockMode::Leader,
            None => LockMode::Exclusive,
            Some(w) if self.rng.chance(w) => LockMode::Write,
            Some(_) => LockMode::Read,
        };
        let name = LockName::new(LOCKS[self.clients[c].lock]).unwrap();
        self.clients[c].owner = OwnerId(1);
        if let Some(n) = self.sc.semaphore {
            let total = self.mismatch_of(c).unwrap_or(n);
            self.clients[c].mode = LockMode::Semaphore;
            // Each acquire its own owner, as the runtime makes them.
            self.clients[c].owner = OwnerId(self.clients[c].nonce_seq as u64);
            self.clients[c].ask = self.rng.range(1, u64::from(total)) as u32;
            opts.permits = Some(PermitRequest { total, count: self.clients[c].ask });
        }
        self.clients[c].asked = self.now;
        let (mode, owner) = (self.clients[c].mode, self.clients[c].owner);
        let ticket = self.clients[c].t.acquire(now, &name, mode, owner, opts, nonce).expect("acquire accepted");
        self.clients[c].app = App::Waiting(ticket);
        if self.rng.chance(self.sc.cancel_per_mille) {
            let t = self.now + self.rng.range(0, 200);
            self.at(t, Ev::AppCancel { c, ticket });
        }
        self.drain(c);
    }

    /// The other number of permits client `c` was made with, if it is the mismatched one.
    fn mismatch_of(&self, c: usize) -> Option<u32> {
        self.sc.mismatch.filter(|_| self.sc.semaphore.is_some() && c + 1 == self.sc.clients)
    }

    fn cycle_done(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        cl.cycles_left = cl.cycles_left.saturating_sub(1);
        cl.app = App::Idle;
        let gap = self.rng.range(0, 20);
        self.at(self.now + gap, Ev::AppStart { c });
    }

    /// What client `c`'s clock reads now.
    fn local_now(&self, c: usize) -> Instant {
        Instant::from_millis(self.now.saturating_sub(self.clients[c].clock_lag))
    }

    fn deliver(&mut self, c: usize, input: Input) {
        let now = self.local_now(c);
        let woke = matches!(input, Input::Notif(_));
        match input {
            Input::Reply(id, reply) => self.clients[c].t.handle_reply(now, id, reply),
            Input::Notif(n) => self.clients[c].t.handle_notification(now, n),
            Input::Conn(ev) => self.clients[c].t.handle_connection(now, ev),
            Input::Expired { old, new } => {
                // The client learns of each of its sessions' ends in turn; the
                // requests it sends meanwhile carry the session it believes in.
                if self.clients[c].session == old {
                    self.clients[c].session = new;
                    self.clients[c].t.handle_connection(now, ConnectionEvent::SessionExpired);
                    self.clients[c].t.handle_connection(now, ConnectionEvent::Connected);
                }
            }
        }
        let sent = self.drain(c);
        if woke {
            self.out.wake_retries += sent
                .iter()
                .filter(|op| {
                    matches!(op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_acquire")
                        || matches!(op, Op::ZooKeeper(ZkOp::GetChildren { .. }))
                })
                .count() as u64;
        }
    }

    /// Drains a client's table after an input, as the drive contract says:
    /// `poll_output` until `None`, events (which come first) to the
    /// application, commands sent in order, a timeout arming the one timer.
    /// Returns the ops sent.
    fn drain(&mut self, c: usize) -> Vec<Op> {
        let mut sent = Vec::new();
        self.out.max_table_locks = self.out.max_table_locks.max(self.clients[c].t.lock_count());
        while let Some(out) = self.clients[c].t.poll_output() {
            match out {
                Output::Event { name, event, .. } => {
                    let lock = LOCKS.iter().position(|l| *l == name.as_str());
                    let lock = lock.unwrap_or_else(|| panic!("an event for a lock nobody asked for: {name:?}"));
                    self.on_event(c, lock, event);
                }
                Output::Command(cmd) => {
                    sent.push(cmd.op.clone());
                    self.send(c, cmd);
                }
                Output::Timeout(at) => {
                    // The table's instant is on the client's clock. It
                    // replaces the one armed before: a timer still queued
                    // for a later instant just runs handle_timeout early,
                    // which is harmless.
                    let t = (at.as_millis() + self.clients[c].clock_lag).max(self.now);
                    if self.clients[c].armed != Some(t) {
                        self.clients[c].armed = Some(t);
                        self.at(t, Ev::Timer { c });
                    }
                }
                other => panic!("the simulation reads no status: {other:?}"),
            }
        }
        sent
    }

    fn send(&mut self, c: usize, cmd: Command) {
        let pubsub = is_pubsub(&cmd.op);
        if self.clients[c].disconnected || self.rng.chance(self.sc.faults.drop_per_mille) && !pubsub {
            let drop_reply = !self.clients[c].disconnected && self.rng.chance(500);
            if !drop_reply {
                let t = self.now
                    + RESPONSE_TIMEOUT_MS.min(if self.clients[c].disconnected { 1 } else { RESPONSE_TIMEOUT_MS });
                self.at(t, Ev::Deliver { c, input: Input::Reply(cmd.id, failed()) });
                return;
            }
            let d = self.delay();
            let t = (self.now + d).max(self.clients[c].fifo_cmd);
            self.clients[c].fifo_cmd = t;
            let session = self.clients[c].session;
            self.at(t, Ev::Server { c, session, cmd, drop_reply: true });
            return;
        }
        let d = self.delay();
        let t = (self.now + d).max(self.clients[c].fifo_cmd);
        self.clients[c].fifo_cmd = t;
        let session = self.clients[c].session;
        self.at(t, Ev::Server { c, session, cmd, drop_reply: false });
    }

    fn serve(&mut self, c: usize, session: u64, cmd: Command, drop_reply: bool) {
        if !drop_reply && self.rng.chance(self.sc.faults.refuse_per_mille) {
            let reply = Reply::Refused(self.transient_error());
            if is_pubsub(&cmd.op) {
                // Answered on the pub/sub connection, like a confirmation.
                self.push_pub(c, Input::Reply(cmd.id, reply));
            } else {
                self.push_input(c, Input::Reply(cmd.id, reply), 0);
            }
            return;
        }
        let reply = match self.sc.backend {
            Backend::Redis => match &cmd.op {
                Op::Redis(RedisOp::Eval { script, keys, args, by_sha }) => {
                    let fx = self.eval_watched(c, script.name, *by_sha, keys, args);
                    for (ch, payload) in fx.publish {
                        self.publish(&ch, &payload);
                    }
                    fx.reply
                }
                // The script, then WAIT: every replica asked for acknowledges,
                // or (as often as the server refuses) none does.
                Op::Redis(RedisOp::EvalAcked { script, keys, args, by_sha, replicas, .. }) => {
                    let fx = self.eval_watched(c, script.name, *by_sha, keys, args);
                    for (ch, payload) in fx.publish {
                        self.publish(&ch, &payload);
                    }
                    let acks = if self.rng.chance(self.sc.faults.refuse_per_mille) { 0 } else { *replicas };
                    match fx.reply {
                        Reply::Redis(v) => Reply::Redis(polylock_core::RedisValue::Array(vec![
                            v,
                            polylock_core::RedisValue::Int(i64::from(acks)),
                        ])),
                        other => other,
                    }
                }
                Op::Redis(op @ (RedisOp::Subscribe { .. } | RedisOp::ShardSubscribe { .. })) => {
                    for channel in sim_channels(op) {
                        let subs = self.redis.subs.entry(channel).or_default();
                        if !subs.contains(&c) {
                            subs.push(c);
                        }
                    }
                    // Confirmed on the pub/sub connection, before any later message.
                    self.push_pub(c, Input::Reply(cmd.id, Reply::Done));
                    return;
                }
                Op::Redis(op @ (RedisOp::Unsubscribe { .. } | RedisOp::ShardUnsubscribe { .. })) => {
                    for channel in sim_channels(op) {
                        if let Some(s) = self.redis.subs.get_mut(&channel) {
                            s.retain(|x| *x != c);
                        }
                    }
                    self.push_pub(c, Input::Reply(cmd.id, Reply::Done));
                    return;
                }
                other => Reply::Refused(format!("not a Redis op {other:?}")),
            },
            Backend::ZooKeeper => {
                if session != self.server_session[c] || self.clients[c].partitioned {
                    failed()
                } else {
                    let mut fired = Vec::new();
                    let r = self.zk.apply(c, session, cmd.id, &cmd.op, &mut fired);
                    if let Reply::Created { path, czxid } = &r {
                        let lock =
                            LOCKS.iter().position(|l| path.starts_with(&format!("{l}/"))).expect("a simulated lock");
                        self.out.server_tokens[c].push((lock, *czxid as u64));
                    }
                    self.fire(fired);
                    let grants = matches!(r, Reply::Children(_))
                        && matches!(&cmd.op, Op::ZooKeeper(ZkOp::GetChildren { path }) if self.zk.holder_session(path) == Some(session));
                    if grants && !drop_reply && self.sc.faults.partitions && self.rng.chance(100) {
                        // Cut just after the reply left the server.
                        self.push_input(c, Input::Reply(cmd.id, r), 0);
                        self.partition(c);
                        return;
                    }
                    r
                }
            }
        };
        let reply = if drop_reply { failed() } else { reply };
        if drop_reply {
            let t = self.now + RESPONSE_TIMEOUT_MS;
            self.at(t, Ev::Deliver { c, input: Input::Reply(cmd.id, reply) });
        } else {
            self.push_input(c, Input::Reply(cmd.id, reply), 0);
        }
    }

    /// Runs a script; a semaphore acquire of the mismatched client must be
    /// refused, and leave the server as it was but for the reclaim of
    /// expired permits that every script starts with.
    fn eval_watched(
        &mut self,
        c: usize,
        script: &str,
        by_sha: bool,
        keys: &[String],
        args: &[String],
    ) -> redis_model::Effects {
        let watched = self.mismatch_of(c).is_some() && script == "polylock_sem_acquire";
        let expected = watched.then(|| self.redis.reclaimed(self.now, &keys[0], &keys[4]));
        let fx = self.redis.eval_op(self.now, script, by_sha, keys, args);
        if matches!(&fx.reply, Reply::Refused(t) if t.starts_with("NOSCRIPT")) {
            // Nothing ran.
            return fx;
        }
        if let Some(expected) = expected {
            let refused = matches!(&fx.reply, Reply::Redis(polylock_core::RedisValue::Array(v))
                if matches!(v.as_slice(), [polylock_core::RedisValue::Int(-1), _]));
            if !refused {
                self.out.mismatch_changes.push(format!("{} ms: not refused: {:?}", self.now, fx.reply));
            }
            if self.redis.live_keys(self.now) != expected {
                self.out.mismatch_changes.push(format!("{} ms: the refused acquire changed the server", self.now));
            }
        }
        fx
    }

    /// What a server that cannot serve for now answers, as its driver passes it on.
    fn transient_error(&mut self) -> String {
        let texts: &[&str] = match self.sc.backend {
            Backend::Redis => &[
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
                "LOADING Redis is loading the dataset in memory",
                "READONLY You can't write against a read only replica. script: 0, on @user_script:1.",
                "OOM command not allowed when used memory > 'maxmemory'.",
            ],
            Backend::ZooKeeper => &["THROTTLEDOP request was throttled due to server heavy loading"],
        };
        texts[self.rng.range(0, texts.len() as u64 - 1) as usize].to_owned()
    }

    fn push_pub(&mut self, c: usize, input: Input) {
        let d = self.delay();
        let t = (self.now + d).max(self.clients[c].fifo_pub);
        self.clients[c].fifo_pub = t;
        self.at(t, Ev::Deliver { c, input });
    }

    fn publish(&mut self, channel: &str, payload: &str) {
        let subs = self.redis.subs.get(channel).cloned().unwrap_or_default();
        // A shard channel's message names the channel as it was published.
        let named = channel.strip_prefix("shard:").unwrap_or(channel);
        let msg = || Notification::Message { channel: named.to_owned(), payload: payload.to_owned() };
        for s in subs {
            self.push_pub(s, Input::Notif(msg()));
            if self.rng.chance(self.sc.faults.dup_per_mille) {
                self.push_pub(s, Input::Notif(msg()));
            }
        }
    }

    fn on_event(&mut self, c: usize, lock: usize, ev: Event) {
        if self.trace {
            eprintln!("{:>6} client {c} event {} {ev:?}", self.now, LOCKS[lock]);
        }
        match ev {
            Event::Granted { ticket, token, reentry: 0, .. } => {
                assert_eq!(self.clients[c].app, App::Waiting(ticket), "grant for a ticket nobody waits on");
                assert_eq!(self.clients[c].lock, lock, "grant of {ticket:?} under another name");
                let b = self.out.beliefs.len();
                let mode = self.clients[c].mode;
                let (permits, asked) = (self.clients[c].ask, self.clients[c].asked);
                self.out.beliefs.push(Belief {
                    client: c,
                    lock,
                    mode,
                    permits,
                    asked,
                    token: token.0,
                    start: self.now,
                    end: None,
                });
                self.clients[c].app = App::Holding(b);
                let hold = self.rng.range(self.sc.hold_ms.0, self.sc.hold_ms.1);
                if mode != LockMode::Read {
                    // Readers only read: fencing guards the writes.
                    self.at(self.now + hold / 2, Ev::AppWrite { c, token: token.0, lock });
                }
                self.at(self.now + hold, Ev::AppRelease { c, belief: b });
            }
            Event::Granted { .. } => {}
            Event::Failed { ticket, error, .. } if self.clients[c].app == App::Waiting(ticket) => {
                self.out.failures.push((c, error));
                self.cycle_done(c)
            }
            Event::Lost { token, .. } => {
                if let App::Holding(b) = self.clients[c].app {
                    // Only the lock it believes it holds can be lost: a name
                    // it released holds nothing of this client's any more.
                    let belief = &self.out.beliefs[b];
                    assert_eq!((belief.lock, belief.token), (lock, token.0), "a loss of a grant nobody holds");
                    self.out.beliefs[b].end = Some(self.now);
                    self.cycle_done(c);
                }
            }
            Event::Released { id } => self.check_released_nodes_gone(c, id),
            _ => {}
        }
    }

    /// ZooKeeper: client `c`'s nodes under `lock` that carry `token` (the
    /// holder's node: its czxid is the fencing token), in the session the
    /// server has for `c` now. Empty for Redis.
    fn held_nodes(&self, c: usize, lock: &str, token: u64) -> Vec<(String, i64)> {
        if self.sc.backend != Backend::ZooKeeper {
            return Vec::new();
        }
        let prefix = format!("{lock}/");
        let session = self.server_session[c];
        self.zk
            .nodes
            .iter()
            .filter(|(path, n)| {
                path.starts_with(&prefix) && n.ephemeral_session == Some(session) && n.czxid as u64 == token
            })
            .map(|(path, n)| (path.clone(), n.czxid))
            .collect()
    }

    /// A release is reported done only once the server confirmed the delete
    /// of the holder's node (or the session, and the node with it, is
    /// gone): a caller that awaited `release()` and then looks finds the
    /// lock free of it.
    fn check_released_nodes_gone(&mut self, c: usize, id: ReleaseId) {
        let Some(i) = self.releasing.iter().position(|r| r.client == c && r.id == id) else { return };
        let nodes = self.releasing.swap_remove(i).nodes;
        self.out.checked_releases += u64::from(!nodes.is_empty());
        for (path, czxid) in nodes {
            if self.zk.nodes.get(&path).is_some_and(|n| n.czxid == czxid) {
                self.out
                    .early_releases
                    .push(format!("client {c}: {id:?} reported at {} while {path} is on the server", self.now));
            }
        }
    }
}

/// ZooKeeper: no release was reported done while the released holder's
/// node was still on the server.
pub fn check_release_confirmed(out: &Outcome) -> Result<(), String> {
    match out.early_releases.first() {
        None => Ok(()),
        Some(first) => Err(format!("{} release(s) reported before the delete: {first}", out.early_releases.len())),
    }
}

/// Where polylock records a semaphore's number of permits (`RedisKeys::of_semaphore`).
pub fn permit_record(name: &str) -> String {
    polylock_core::redis::RedisKeys::of_semaphore(&LockName::new(name).unwrap()).permit_total().unwrap().to_owned()
}

fn failed() -> Reply {
    Reply::Failed(TransportError { message: "simulated loss".into() })
}

// ---- oracles ------------------------------------------------------------

/// The indexes of [`LOCKS`] a run's records mention.
fn locks_of(out: &Outcome) -> Vec<usize> {
    let mut locks: Vec<usize> =
        out.beliefs.iter().map(|b| b.lock).chain(out.server_grants.iter().map(|g| g.3)).collect();
    locks.sort_unstable();
    locks.dedup();
    locks
}

/// No two clients believed they held the same lock at the same instant,
/// unless both were readers of a read-write lock.
pub fn check_no_overlap(out: &Outcome) -> Result<(), String> {
    for lock in locks_of(out) {
        let mut spans: Vec<&Belief> = out.beliefs.iter().filter(|b| b.lock == lock).collect();
        spans.sort_by_key(|b| b.start);
        for (i, a) in spans.iter().enumerate() {
            let a_end = a.end.unwrap_or(u64::MAX);
            // Every later span that starts before `a` ends overlaps it.
            for b in spans[i + 1..].iter().take_while(|b| b.start < a_end) {
                if a.mode == LockMode::Read && b.mode == LockMode::Read {
                    continue;
                }
                return Err(format!(
                    "overlap on {}: client {} {:?} [{}..{:?}] and client {} {:?} from {}",
                    LOCKS[lock], a.client, a.mode, a.start, a.end, b.client, b.mode, b.start
                ));
            }
        }
    }
    Ok(())
}

/// Every token the application saw was one the server issued to that
/// client for that lock, each lock's server grants carry strictly
/// increasing tokens, and each lock's resource only accepted growing ones.
pub fn check_fencing(out: &Outcome) -> Result<(), String> {
    for b in &out.beliefs {
        if !out.server_tokens[b.client].contains(&(b.lock, b.token)) {
            return Err(format!(
                "client {} was told token {} of {} which the server never issued to it",
                b.client, b.token, LOCKS[b.lock]
            ));
        }
    }
    for lock in locks_of(out) {
        let grants: Vec<_> = out.server_grants.iter().filter(|g| g.3 == lock).collect();
        for pair in grants.windows(2) {
            if pair[1].2 <= pair[0].2 {
                return Err(format!("server grant tokens not increasing: {:?} then {:?}", pair[0], pair[1]));
            }
        }
        let writes: Vec<_> = out.accepted_writes.iter().filter(|w| w.3 == lock).collect();
        for pair in writes.windows(2) {
            if pair[1].2 < pair[0].2 {
                return Err(format!("{}: resource accepted token {} after {}", LOCKS[lock], pair[1].2, pair[0].2));
            }
        }
    }
    Ok(())
}

/// A holder whose lock was granted to someone else while it was paused
/// (or its host suspended) stops believing it holds the lock the moment it
/// runs again: its first input after the pause reports the loss. Valid when
/// the server loses no state behind the holder's back (no expiry of the
/// lock key, no rollback, no eviction, no partition that outlasts the session).
pub fn check_told_at_resume(out: &Outcome) -> Result<(), String> {
    for &(c, p0, p1) in &out.pauses {
        let Some(b) = out.beliefs.iter().find(|b| b.client == c && b.start <= p0 && b.end.is_none_or(|e| e > p1))
        else {
            continue;
        };
        let taken = out
            .server_grants
            .iter()
            .find(|(t, other, _, lock)| *other != c && *lock == b.lock && (p0..=p1).contains(t));
        if let Some(g) = taken {
            return Err(format!(
                "client {c} paused {p0}..{p1} while its lock went to {g:?}, and still believed it held it until {:?}",
                b.end
            ));
        }
    }
    Ok(())
}

/// Each lock's tokens grow in the order the application was granted them
/// (valid when no client was paused, so grants are seen in server order).
/// Readers granted together may see theirs in any order; a writer's token
/// exceeds every earlier grant's and is exceeded by every later one's.
pub fn check_tokens_in_grant_order(out: &Outcome) -> Result<(), String> {
    for lock in locks_of(out) {
        let mut spans: Vec<&Belief> = out.beliefs.iter().filter(|b| b.lock == lock).collect();
        spans.sort_by_key(|b| b.start);
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if a.mode == LockMode::Read && b.mode == LockMode::Read {
                    continue;
                }
                if b.token <= a.token {
                    return Err(format!(
                        "{}: token {} ({:?}) granted after token {} ({:?})",
                        LOCKS[lock], b.token, b.mode, a.token, a.mode
                    ));
                }
            }
        }
    }
    Ok(())
}
/// Semaphores: at no instant did the holders believe they held more than
/// `n` permits of a name between them (each grant counts its `k`); and a
/// grant that could not have been held beside an earlier one (their asks
/// exceed `n` together) carries a greater token. Valid without pauses and
/// server-side loss of state, as [`check_no_overlap`].
pub fn check_permits(out: &Outcome, n: u32) -> Result<(), String> {
    for lock in locks_of(out) {
        let mut spans: Vec<&Belief> = out.beliefs.iter().filter(|b| b.lock == lock).collect();
        spans.sort_by_key(|b| b.start);
        for (i, a) in spans.iter().enumerate() {
            // At `a`'s start, every earlier span not yet ended is held beside it.
            let held: u32 = spans[..i].iter().filter(|b| b.end.is_none_or(|e| e > a.start)).map(|b| b.permits).sum();
            if held + a.permits > n {
                return Err(format!(
                    "{}: client {} granted {} permits at {} while {held} of {n} were held",
                    LOCKS[lock], a.client, a.permits, a.start
                ));
            }
            for b in &spans[i + 1..] {
                if a.permits + b.permits > n && b.token <= a.token {
                    return Err(format!(
                        "{}: token {} ({} permits) granted after token {} ({} permits) of {n}",
                        LOCKS[lock], b.token, b.permits, a.token, a.permits
                    ));
                }
            }
        }
    }
    if let Some(b) = out.sem_breaks.first() {
        return Err(format!("the permits do not add up: {b}"));
    }
    Ok(())
}

/// Every client that did not crash finished all its cycles.
pub fn check_liveness(out: &Outcome) -> Result<(), String> {
    if out.livelock {
        return Err(format!("step cap hit after {} steps at {} ms", out.steps, out.end_ms));
    }
    for (i, (done, crashed)) in out.finished.iter().zip(&out.crashed).enumerate() {
        if !done && !crashed {
            return Err(format!("client {i} did not finish by {} ms", out.end_ms));
        }
    }
    Ok(())
}

/// Whether a command goes on the pub/sub connection.
fn is_pubsub(op: &Op) -> bool {
    matches!(
        op,
        Op::Redis(
            RedisOp::Subscribe { .. }
                | RedisOp::Unsubscribe { .. }
                | RedisOp::ShardSubscribe { .. }
                | RedisOp::ShardUnsubscribe { .. }
        )
    )
}

/// The model's names of a (un)subscribe's channels: a shard channel
/// (`SSUBSCRIBE`) is a world apart from the classic one of the same name,
/// as `SPUBLISH` and `PUBLISH` are (see `redis_model`'s LEAVE).
fn sim_channels(op: &RedisOp) -> Vec<String> {
    match op {
        RedisOp::ShardSubscribe { channels } | RedisOp::ShardUnsubscribe { channels } => {
            channels.iter().map(|c| format!("shard:{c}")).collect()
        }
        RedisOp::Subscribe { channels } | RedisOp::Unsubscribe { channels } => channels.clone(),
        other => panic!("not a subscription: {other:?}"),
    }
}
