//! A synchronous harness: lock tables (one per client) and a server model
//! with no delays, for checking local semantics (reentrancy, release by a
//! non-owner) step by step.

#![allow(dead_code)]

use std::time::Duration;

use polylock_core::RedisOp;
use polylock_core::{
    AcquireOptions, Backend, Error, Event, Instant, LockConfig, LockMode, LockName, LockTable, Nonce, Op, Output,
    OwnerId, ReleaseProgress, Reply,
};

use super::redis_model::RedisModel;
use super::zk_model::ZkModel;
use super::LOCK;

pub struct Solo {
    pub backend: Backend,
    pub tables: Vec<LockTable>,
    pub redis: RedisModel,
    pub zk: ZkModel,
    pub now: u64,
    pub events: Vec<(usize, Event)>,
    nonce: u128,
}

impl Solo {
    pub fn new(backend: Backend, clients: usize) -> Self {
        let mut cfg = LockConfig::new(backend);
        cfg.lease = Duration::from_secs(30);
        Solo {
            backend,
            tables: (0..clients).map(|i| LockTable::new(cfg.clone(), Nonce(1000 + i as u128)).unwrap()).collect(),
            redis: RedisModel::default(),
            zk: ZkModel::new(),
            now: 1,
            events: Vec::new(),
            nonce: 0,
        }
    }

    pub fn nonce(&mut self) -> Nonce {
        self.nonce += 1;
        Nonce(self.nonce << 32 | 0xabc)
    }

    pub fn acquire(&mut self, c: usize, owner: u64, no_wait: bool) {
        let n = self.nonce();
        let opts = AcquireOptions { no_wait, ..Default::default() };
        let name = LockName::new(LOCK).unwrap();
        self.tables[c]
            .acquire(Instant::from_millis(self.now), &name, LockMode::Exclusive, OwnerId(owner), opts, n)
            .unwrap();
        self.settle();
    }

    /// Client `c`'s `owner` ends one hold.
    pub fn release(&mut self, c: usize, owner: u64) -> Result<ReleaseProgress, Error> {
        self.tables[c].release(Instant::from_millis(self.now), LOCK, LockMode::Exclusive, OwnerId(owner), None)
    }

    /// Which of `owners` holds the lock in client `c`'s table, and how often.
    pub fn holder(&self, c: usize, owners: impl IntoIterator<Item = u64>) -> Option<(u64, u32)> {
        owners.into_iter().find_map(|o| self.tables[c].hold(LOCK, LockMode::Exclusive, OwnerId(o)).map(|(n, _)| (o, n)))
    }

    /// Runs every table's commands against the model until all is quiet.
    /// Replies go in as soon as each command is polled, between two
    /// `poll_output` calls, which the drive contract allows.
    pub fn settle(&mut self) {
        for _ in 0..1000 {
            let mut any = false;
            for c in 0..self.tables.len() {
                while let Some(out) = self.tables[c].poll_output() {
                    let cmd = match out {
                        Output::Command(cmd) => cmd,
                        Output::Event { event, .. } => {
                            self.events.push((c, event));
                            continue;
                        }
                        // No time passes here.
                        _ => continue,
                    };
                    any = true;
                    let now = Instant::from_millis(self.now);
                    match (&cmd.op, self.backend) {
                        (Op::Redis(RedisOp::Eval { script, keys, args, by_sha }), _) => {
                            let fx = self.redis.eval_op(self.now, script.name, *by_sha, keys, args);
                            self.tables[c].handle_reply(now, cmd.id, fx.reply);
                            for (ch, payload) in fx.publish {
                                let subs = self.redis.subs.get(&ch).cloned().unwrap_or_default();
                                for s in subs {
                                    self.tables[s].handle_notification(
                                        now,
                                        polylock_core::Notification::Message {
                                            channel: ch.clone(),
                                            payload: payload.clone(),
                                        },
                                    );
                                }
                            }
                        }
                        (Op::Redis(RedisOp::Subscribe { channels }), _) => {
                            for channel in channels {
                                self.redis.subs.entry(channel.clone()).or_default().push(c);
                            }
                            self.tables[c].handle_reply(now, cmd.id, Reply::Done);
                        }
                        (Op::Redis(RedisOp::Unsubscribe { channels }), _) => {
                            for channel in channels {
                                if let Some(s) = self.redis.subs.get_mut(channel) {
                                    s.retain(|x| *x != c);
                                }
                            }
                            self.tables[c].handle_reply(now, cmd.id, Reply::Done);
                        }
                        (op, Backend::ZooKeeper) => {
                            let mut fired = Vec::new();
                            let r = self.zk.apply(c, c as u64 + 1, cmd.id, op, &mut fired);
                            self.tables[c].handle_reply(now, cmd.id, r);
                            for (w, id) in fired {
                                self.tables[w]
                                    .handle_notification(now, polylock_core::Notification::NodeDeleted { id });
                            }
                        }
                        (op, b) => panic!("{op:?} on {b:?}"),
                    }
                }
            }
            if !any {
                return;
            }
        }
        panic!("did not settle");
    }

    /// Does the server say client `c`'s `owner` holds the lock?
    pub fn server_holder_is(&mut self, c: usize, owner: u64) -> bool {
        match self.backend {
            Backend::Redis => self.redis.holder(self.now, LOCK) == Some(self.tables[c].holder_id(OwnerId(owner))),
            Backend::ZooKeeper => {
                let Some(session) = self.zk.holder_session(LOCK) else { return false };
                // The node's data names the owner.
                let kids: Vec<_> = self
                    .zk
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.ephemeral_session == Some(session))
                    .map(|(_, n)| n.data.clone())
                    .collect();
                session == c as u64 + 1 && kids.contains(&self.tables[c].holder_id(OwnerId(owner)).into_bytes())
            }
        }
    }

    pub fn server_free(&mut self) -> bool {
        match self.backend {
            Backend::Redis => self.redis.holder(self.now, LOCK).is_none(),
            Backend::ZooKeeper => self.zk.holder_session(LOCK).is_none(),
        }
    }
}
