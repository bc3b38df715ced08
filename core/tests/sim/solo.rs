//! A synchronous harness: machines and a server model with no delays, for
//! checking local semantics (reentrancy, release by a non-owner) step by step.

#![allow(dead_code)]

use std::time::Duration;

use polylock_core::RedisOp;
use polylock_core::{
    AcquireOptions, Backend, Event, Instant, LockConfig, LockMachine, LockName, Nonce, Op, OwnerId, Reply,
};

use super::redis_model::RedisModel;
use super::zk_model::ZkModel;
use super::LOCK;

pub struct Solo {
    pub backend: Backend,
    pub machines: Vec<LockMachine>,
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
        let name = LockName::new(LOCK).unwrap();
        Solo {
            backend,
            machines: (0..clients)
                .map(|i| LockMachine::new(cfg.clone(), name.clone(), Nonce(1000 + i as u128)).unwrap())
                .collect(),
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
        self.machines[c].acquire(Instant::from_millis(self.now), OwnerId(owner), opts, n).unwrap();
        self.settle();
    }

    /// Runs every machine's commands against the model until all is quiet.
    pub fn settle(&mut self) {
        for _ in 0..1000 {
            let mut any = false;
            for c in 0..self.machines.len() {
                while let Some(cmd) = self.machines[c].poll_command() {
                    any = true;
                    let now = Instant::from_millis(self.now);
                    match (&cmd.op, self.backend) {
                        (Op::Redis(RedisOp::Eval { script, keys, args }), _) => {
                            let fx = self.redis.eval(self.now, script.name, keys, args);
                            self.machines[c].handle_reply(now, cmd.id, fx.reply);
                            for (ch, payload) in fx.publish {
                                let subs = self.redis.subs.get(&ch).cloned().unwrap_or_default();
                                for s in subs {
                                    self.machines[s].handle_notification(
                                        now,
                                        polylock_core::Notification::Message {
                                            channel: ch.clone(),
                                            payload: payload.clone(),
                                        },
                                    );
                                }
                            }
                        }
                        (Op::Redis(RedisOp::Subscribe { channel }), _) => {
                            self.redis.subs.entry(channel.clone()).or_default().push(c);
                            self.machines[c].handle_reply(now, cmd.id, Reply::Done);
                        }
                        (Op::Redis(RedisOp::Unsubscribe { channel }), _) => {
                            if let Some(s) = self.redis.subs.get_mut(channel) {
                                s.retain(|x| *x != c);
                            }
                            self.machines[c].handle_reply(now, cmd.id, Reply::Done);
                        }
                        (op, Backend::ZooKeeper) => {
                            let mut fired = Vec::new();
                            let r = self.zk.apply(c, c as u64 + 1, cmd.id, op, &mut fired);
                            self.machines[c].handle_reply(now, cmd.id, r);
                            for (w, id) in fired {
                                self.machines[w]
                                    .handle_notification(now, polylock_core::Notification::WatchFired { id });
                            }
                        }
                        (op, b) => panic!("{op:?} on {b:?}"),
                    }
                }
                while let Some(ev) = self.machines[c].poll_event() {
                    self.events.push((c, ev));
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
            Backend::Redis => self.redis.holder(self.now, LOCK) == Some(self.machines[c].holder_id(OwnerId(owner))),
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
                session == c as u64 + 1 && kids.contains(&self.machines[c].holder_id(OwnerId(owner)).into_bytes())
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
