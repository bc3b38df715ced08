//! What crosses the sans-IO boundary: commands out, replies and
//! notifications in, events up to the application. All plain data.

use crate::{Error, FencingToken, LossReason, OwnerId, ReleaseId, RequestId, Ticket};

/// A request for the driver to send to the backend. The driver must send a
/// lock's commands in the order they are polled, on one connection (Redis)
/// or one session (ZooKeeper), and answer each with exactly one
/// [`Reply`] carrying the same id.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Command {
    /// Names this command; its reply carries the same id.
    pub id: RequestId,
    /// What to send.
    pub op: Op,
}

/// The backend operation a command asks for: each backend's own type, so
/// a transport matches only the operations of its backend.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// A Redis operation.
    Redis(RedisOp),
    /// A ZooKeeper operation.
    ZooKeeper(ZkOp),
}

/// A Redis operation. Exhaustive on purpose: a new one must be handled by
/// every Redis transport before it compiles.
#[derive(Debug, Clone, PartialEq)]
pub enum RedisOp {
    /// Redis: run a Lua script, as one request that executes where it stands
    /// in the command order: `EVALSHA` of [`Script::sha1`] when `by_sha`,
    /// else `EVAL` with the source (which also loads the script into the
    /// server's cache). Reply: [`Reply::Redis`]; a `NOSCRIPT` refusal of an
    /// `EVALSHA` (the server restarted, failed over or flushed its scripts)
    /// is passed on as [`Reply::Refused`] like any refusal, never retried by
    /// the driver: the script did not run, and only the core knows whether
    /// it is still wanted (a request sent again by the driver would run
    /// after whatever the core sent since, a cancel say).
    ///
    /// Why `EVALSHA`: Redis hashes an `EVAL`'s source (SHA1) before it runs
    /// it, twice in 7.0, outside what `INFO commandstats` counts: for the
    /// two scripts of an acquire+release, about as many instructions as
    /// running them.
    Eval {
        /// The script to run.
        script: &'static Script,
        /// Its `KEYS`.
        keys: Vec<String>,
        /// Its `ARGV`.
        args: Vec<String>,
        /// Send `EVALSHA` (true) or `EVAL` with the source (false).
        by_sha: bool,
    },
    /// Redis: [`RedisOp::Eval`], then `WAIT replicas timeout_ms` on the same
    /// connection, pipelined (one round trip): returns once `replicas`
    /// replicas acknowledged the script's writes, or the timeout passed.
    /// Reply: [`Reply::Redis`] with `[script result, replicas that
    /// acknowledged]`; an error of either is the reply.
    EvalAcked {
        /// The script to run.
        script: &'static Script,
        /// Its `KEYS`.
        keys: Vec<String>,
        /// Its `ARGV`.
        args: Vec<String>,
        /// Send `EVALSHA` (true) or `EVAL` with the source (false).
        by_sha: bool,
        /// How many replicas must acknowledge the script's writes.
        replicas: u32,
        /// How long the `WAIT` may block.
        timeout_ms: u64,
    },
    /// Redis: subscribe the client's pub/sub connection to `channels`, in
    /// one `SUBSCRIBE` (one command on the server, however many channels).
    /// Reply: [`Reply::Done`] once every subscription is confirmed; then
    /// [`Notification::Message`] for each message. The driver resubscribes
    /// after a reconnect by itself and reports [`ConnectionEvent::Connected`].
    Subscribe {
        /// The channels, in one command.
        channels: Vec<String>,
    },
    /// Redis: drop subscriptions made with [`RedisOp::Subscribe`], in one
    /// `UNSUBSCRIBE`. Reply: [`Reply::Done`].
    Unsubscribe {
        /// The channels, in one command.
        channels: Vec<String>,
    },
    /// Redis Cluster: [`RedisOp::Subscribe`] with sharded pub/sub
    /// (`SSUBSCRIBE`, on the node serving the channels' slot: they share
    /// one), where `SPUBLISH` is heard (a different world from `PUBLISH`).
    /// Asked only with [`crate::LockConfig::shard_release`]. Messages come
    /// as [`Notification::Message`], as for `SUBSCRIBE`.
    ShardSubscribe {
        /// The channels (all in one slot), in one command.
        channels: Vec<String>,
    },
    /// Redis Cluster: drop subscriptions made with [`RedisOp::ShardSubscribe`]
    /// (`SUNSUBSCRIBE`). Reply: [`Reply::Done`].
    ShardUnsubscribe {
        /// The channels (all in one slot), in one command.
        channels: Vec<String>,
    },
}

/// A ZooKeeper operation. Exhaustive on purpose, as [`RedisOp`].
#[derive(Debug, Clone, PartialEq)]
pub enum ZkOp {
    /// ZooKeeper: create `path` + a 10-digit sequence, EPHEMERAL_SEQUENTIAL,
    /// open ACL. Reply: [`Reply::Created`], or [`Reply::NoNode`] if the parent is missing.
    CreateSequential {
        /// The node's path before its sequence suffix.
        path: String,
        /// The node's data.
        data: Vec<u8>,
    },
    /// ZooKeeper: create `path` EPHEMERAL (no sequence), open ACL: a
    /// downgraded reader's node, named after its writer's. Reply:
    /// [`Reply::Created`], [`Reply::NoNode`] if the parent is missing, or
    /// [`Reply::Done`] if the node exists already.
    CreateEphemeral {
        /// The node's full path.
        path: String,
        /// The node's data.
        data: Vec<u8>,
    },
    /// ZooKeeper: create `path` and every missing ancestor as CONTAINER nodes,
    /// ignoring NodeExists. Reply: [`Reply::Done`].
    CreateContainers {
        /// The deepest container to create.
        path: String,
    },
    /// ZooKeeper: create `path` PERSISTENT with `data`, open ACL: a record
    /// that outlives its creator (a semaphore's number of permits).
    /// Reply: [`Reply::Created`], [`Reply::NoNode`] if the parent is
    /// missing, or [`Reply::Done`] if the node exists already.
    CreatePersistent {
        /// The node's full path.
        path: String,
        /// The node's data.
        data: Vec<u8>,
    },
    /// ZooKeeper: the children of `path`. Reply: [`Reply::Children`] or [`Reply::NoNode`].
    GetChildren {
        /// The parent node.
        path: String,
    },
    /// ZooKeeper: [`ZkOp::GetChildren`] with a one-shot children watch
    /// (getChildren with a watcher: set only if `path` exists). When a
    /// child is added or removed the driver reports
    /// [`Notification::WatchFired`] with this command's id
    /// ([`Notification::NodeDeleted`] if `path` itself was deleted). A
    /// semaphore's waiter waits this way for a lease to go.
    /// Reply: [`Reply::Children`] or [`Reply::NoNode`].
    WatchChildren {
        /// The parent node.
        path: String,
    },
    /// ZooKeeper: the czxid of `path`. Reply: [`Reply::Stat`] or [`Reply::NoNode`].
    /// With `watch`, and only if the node exists (use getData with a watcher,
    /// not exists, so a missing node leaves no watch behind), the driver later
    /// reports [`Notification::WatchFired`] with this command's id.
    Stat {
        /// The node.
        path: String,
        /// Whether to leave a watch on it.
        watch: bool,
    },
    /// ZooKeeper: the data and czxid of `path`, no watch (a status read).
    /// Reply: [`Reply::Data`] or [`Reply::NoNode`].
    GetData {
        /// The node.
        path: String,
    },
    /// ZooKeeper: delete `path`, any version. Reply: [`Reply::Done`] or [`Reply::NoNode`].
    Delete {
        /// The node.
        path: String,
    },
    /// ZooKeeper: the watch set by the [`ZkOp::Stat`] or
    /// [`ZkOp::WatchChildren`] command `watch` is no longer wanted (its claim timed out, was cancelled, or looks again).
    /// The driver drops it, on the server too, and never reports it; it may
    /// come before that command's reply. Reply: [`Reply::Done`].
    Unwatch {
        /// The command whose watch is no longer wanted.
        watch: RequestId,
    },
}

impl From<RedisOp> for Op {
    fn from(op: RedisOp) -> Self {
        Op::Redis(op)
    }
}

impl From<ZkOp> for Op {
    fn from(op: ZkOp) -> Self {
        Op::ZooKeeper(op)
    }
}

/// A Lua script the core asks Redis to run.
#[derive(Debug, PartialEq, Eq)]
pub struct Script {
    /// A short name for logs and metrics.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    /// The source's SHA1, hex, computed on first use.
    pub(crate) sha1: std::sync::OnceLock<String>,
}

impl Script {
    /// The SHA1 of the source in lowercase hex: the name `EVALSHA` runs it by.
    pub fn sha1(&self) -> &str {
        self.sha1.get_or_init(|| sha1_smol::Sha1::from(self.source).digest().to_string())
    }
}

/// The backend's answer to one command.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// Redis: the script's result.
    Redis(RedisValue),
    /// ZooKeeper create: the full path of the new node and its czxid.
    Created {
        /// The new node's full path (with its sequence).
        path: String,
        /// The new node's creation zxid.
        czxid: i64,
    },
    /// ZooKeeper getChildren: child names (not full paths), in any order.
    Children(Vec<String>),
    /// ZooKeeper stat/getData: the node's czxid.
    Stat {
        /// The node's creation zxid.
        czxid: i64,
    },
    /// ZooKeeper getData ([`ZkOp::GetData`]): the node's data and czxid.
    Data {
        /// The node's data.
        data: Vec<u8>,
        /// The node's creation zxid.
        czxid: i64,
    },
    /// ZooKeeper: the node does not exist.
    NoNode,
    /// Success with nothing to report (subscribe, unsubscribe, delete, containers).
    Done,
    /// The request may or may not have reached the server (connection lost,
    /// timed out). The core retries idempotent work itself.
    Failed(TransportError),
    /// The server refused the request (a Redis error reply, a ZooKeeper error
    /// code other than those above). The text is kept for diagnosis.
    Refused(String),
}

/// A Redis reply value, as much of RESP as the scripts use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisValue {
    /// A nil reply.
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk string reply.
    Bulk(Vec<u8>),
    /// A status (simple string) reply.
    Status(String),
    /// An array reply.
    Array(Vec<RedisValue>),
}

/// Why a request has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    /// What the transport reported, for diagnosis.
    pub message: String,
}

/// Something the server told us without being asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notification {
    /// Redis: a pub/sub message on a channel this machine subscribed to,
    /// with its payload (`0` for a plain wake-up, a fencing token for a
    /// direct handoff).
    Message {
        /// The channel the message came on.
        channel: String,
        /// The message.
        payload: String,
    },
    /// ZooKeeper: the watch set by the [`ZkOp::Stat`] command `id` fired
    /// (the node was deleted or its data changed; for
    /// [`ZkOp::WatchChildren`], its children changed; the session's end comes as
    /// [`ConnectionEvent::SessionExpired`] instead).
    WatchFired {
        /// The command that set the watch.
        id: RequestId,
    },
    /// ZooKeeper: the watch set by the [`ZkOp::Stat`] command `id` fired
    /// because its node was deleted (a driver that cannot tell the event's
    /// type reports [`Notification::WatchFired`], which means "look again").
    /// A waiter whose predecessor was first is then first itself.
    NodeDeleted {
        /// The command that set the watch.
        id: RequestId,
    },
}

/// The state of the connection (Redis) or session (ZooKeeper) a lock uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionEvent {
    /// The connection dropped. Redis: the driver reconnects by itself.
    /// ZooKeeper: the session may still be alive.
    Disconnected,
    /// Connected again (Redis: commands and subscriptions restored;
    /// ZooKeeper: the same session resumed, or a new one after `SessionExpired`).
    Connected,
    /// ZooKeeper: the session expired; its ephemeral nodes and watches are gone.
    /// The driver opens a new session and then reports `Connected`.
    SessionExpired,
}

/// What the machine tells the application.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The acquire named by `ticket` holds the lock.
    Granted {
        /// The acquire granted.
        ticket: Ticket,
        /// Its owner.
        owner: OwnerId,
        /// The grant's fencing token.
        token: FencingToken,
        /// 0 for a new grant, n for its n-th re-entry.
        reentry: u32,
    },
    /// The acquire named by `ticket` ended without the lock.
    Failed {
        /// The acquire that ended.
        ticket: Ticket,
        /// Its owner.
        owner: OwnerId,
        /// Why it ended.
        error: Error,
    },
    /// The holder lost the lock. Delivered before the server can grant the
    /// lock to anyone else, as long as the driver keeps its timers.
    Lost {
        /// The owner that held it.
        owner: OwnerId,
        /// The lost grant's fencing token.
        token: FencingToken,
        /// Why it was lost.
        reason: LossReason,
    },
    /// The server-side release named by `id` finished; others may now be granted.
    Released {
        /// The release that finished.
        id: ReleaseId,
    },
}

/// The result of [`crate::LockMachine::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ReleaseProgress {
    /// A reentrant hold ended; the owner still holds `remaining` times. No I/O.
    StillHeld {
        /// How many holds the owner has left.
        remaining: u32,
    },
    /// The last hold ended; the server-side release is under way and ends
    /// with [`Event::Released`] carrying this id.
    Releasing(ReleaseId),
}
