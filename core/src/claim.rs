//! A claim is one server-side attempt on a lock: from the first acquire
//! command through waiting and holding to the release that ends it.
//! Each backend implements its claim in its own module
//! (`backend/redis/claim.rs`, `backend/zk/claim.rs`); the machine only sees
//! this common surface. A machine has at most one active claim and any
//! number of background claims still cleaning up (a release or an abandoned
//! attempt being retried), so a new attempt never waits for old cleanup.

use std::collections::VecDeque;

use crate::io::{Command, ConnectionEvent, Notification, Op, Reply};
use crate::timers::{Timer, Timers};
use crate::{Error, FencingToken, Instant, LossReason, RequestId};

/// The owner's write hold that a read acquire is granted beside (a
/// downgrade): how the server records it (the Redis field, the ZooKeeper
/// node's name) and its grant's fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteHold {
    pub(crate) record: String,
    pub(crate) token: FencingToken,
}

/// What a claim reports after an input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Progress {
    /// Nothing the application needs to know.
    Pending,
    /// The claim is granted.
    Granted(FencingToken),
    /// A try without waiting found the lock taken (cleanup may still run).
    Busy,
    /// A try without waiting was refused by a server that cannot serve for
    /// now (the server's text); the machine gives the claim up.
    Unavailable(String),
    /// The server refused the acquire for good (a semaphore's clients
    /// disagree on its permits): the waiter fails with this, nothing of the
    /// claim is on the server, and the machine stays usable.
    Refused(Error),
    /// A granted claim is lost; the claim now cleans up by itself.
    Lost(LossReason),
    /// The claim has nothing left to do on the server.
    Finished,
    /// The server said something impossible.
    Fatal(Error),
}

/// Outgoing commands of a machine, with id allocation.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    next_id: u64,
    queue: VecDeque<Command>,
}

impl Outbox {
    pub(crate) fn send(&mut self, op: impl Into<Op>) -> RequestId {
        self.next_id += 1;
        let id = RequestId(self.next_id);
        self.queue.push_back(Command { id, op: op.into() });
        id
    }

    pub(crate) fn pop(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }
}

/// The inputs every backend's claim accepts.
pub(crate) trait Claim {
    /// Sends the first command(s) of the claim.
    fn begin(&mut self, cx: &mut Cx<'_>);
    /// Does this claim wait for the reply `id`?
    fn owns(&self, id: RequestId) -> bool;
    fn on_reply(&mut self, cx: &mut Cx<'_>, id: RequestId, reply: Reply) -> Progress;
    fn on_notification(&mut self, cx: &mut Cx<'_>, n: &Notification) -> Progress;
    fn on_connection(&mut self, cx: &mut Cx<'_>, ev: ConnectionEvent) -> Progress;
    fn on_timer(&mut self, cx: &mut Cx<'_>, t: Timer) -> Progress;
    /// Ends a granted claim (release) or an ungranted one (cancel, timeout).
    /// Afterwards the claim only cleans up and finally reports `Finished`.
    fn give_up(&mut self, cx: &mut Cx<'_>);
    fn timers(&mut self) -> &mut Timers;
    fn is_finished(&self) -> bool;
    /// The field (Redis) or node (ZooKeeper) that identifies the claim, for status.
    fn describe(&self) -> String;
    /// A server-side identity that a newer claim could share (Redis: the
    /// owner's field). Two live claims must never share one: an old claim's
    /// cleanup would delete the new claim's grant.
    fn shared_identity(&self) -> Option<&str> {
        None
    }
    /// The server's text if its latest answer to this claim was a transient
    /// refusal: what an acquire deadline passing now reports.
    fn refusal(&self) -> Option<&str> {
        None
    }
    /// Whether the server's latest answer refused the request (not merely
    /// fell short, as a grant no replica acknowledged): its cleanup would
    /// likely be refused too, so a failure is not held back for it.
    fn refused(&self) -> bool {
        self.refusal().is_some()
    }
}

/// What a claim may touch while handling an input.
pub(crate) struct Cx<'a> {
    pub(crate) now: Instant,
    pub(crate) out: &'a mut Outbox,
    pub(crate) cfg: &'a crate::LockConfig,
}
