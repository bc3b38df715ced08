//! Who holds a lock right now, as the server sees it: a short sans-IO read
//! that the lock table runs beside the machines (one script on Redis, a
//! listing and a read on ZooKeeper) and decodes here, so every driver shows
//! the same answer.

use crate::io::{Op, Reply};
use crate::redis::status::RedisStatusRead;
use crate::zk::status::ZkStatusRead;
use crate::Error;

/// A lock as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStatus {
    /// Held by anyone, in any process.
    pub held: bool,
    /// The holder's id: Redis `<client id>:<owner>` (Redisson's layout),
    /// ZooKeeper the holder node's data (ours: the same id; Curator's: an IP).
    pub holder: Option<String>,
    /// Redis: the last fencing token issued, while its counter lives (it
    /// expires a lease after the grant that set it or, held by polylock,
    /// after its last renewal; a lock a Redisson client holds past its
    /// first lease shows `None`: the token is unknown, never 0). ZooKeeper:
    /// the holder node's czxid.
    pub fencing_token: Option<u64>,
    /// Contenders waiting, where the backend can tell (Redis: polylock's
    /// queue, which Redisson waiters do not join; ZooKeeper: every node after the first).
    pub waiters: Option<usize>,
    /// Redis: milliseconds until the lease expires without renewal.
    pub ttl_ms: Option<i64>,
    /// Read-write locks: how many hold the read half (`holder` is the
    /// first of them). 0 for a mutex, a writer, or a free lock.
    pub readers: u32,
    /// Semaphores (Redis): permits held now, of how many (the recorded
    /// number, else free plus held as Redisson counts it).
    pub permits: Option<PermitCounts>,
}

/// A semaphore's permits as the server counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitCounts {
    /// Permits held now.
    pub held: u32,
    /// The semaphore's number of permits.
    pub total: u32,
}

/// What a status read does after a reply.
#[derive(Debug)]
pub(crate) enum StatusStep {
    /// Send this and feed back its reply.
    Send(Op),
    /// The answer.
    Done(Result<LockStatus, Error>),
}

/// One status read in progress.
#[derive(Debug)]
pub(crate) enum StatusRead {
    Redis(RedisStatusRead),
    ZooKeeper(ZkStatusRead),
}

impl StatusRead {
    pub(crate) fn on_reply(&mut self, reply: Reply) -> StatusStep {
        match self {
            StatusRead::Redis(r) => r.on_reply(reply),
            StatusRead::ZooKeeper(z) => z.on_reply(reply),
        }
    }
}

/// The answer to a read that got no reply, or a reply no read expects.
pub(crate) fn unexpected(reply: Reply) -> Error {
    match reply {
        Reply::Failed(e) => Error::NoAnswer(e.message),
        other => Error::Protocol(format!("unexpected status reply {other:?}")),
    }
}
