//! A slot is one server-side claim on the lock: from the first acquire
//! command through waiting and holding to the release that ends it.
//! Each backend implements its claim in its own module; the machine only
//! sees this common surface. A machine has at most one active slot and any
//! number of background slots still cleaning up (a release or an abandoned
//! attempt being retried), so a new attempt never waits for old cleanup.

use std::collections::VecDeque;
use std::time::Duration;

use crate::io::{Command, ConnectionEvent, Notification, Op, Reply};
use crate::{Error, FencingToken, Instant, LossReason, RequestId};

/// What a slot reports after an input.
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
    /// A granted claim is lost; the slot now cleans up by itself.
    Lost(LossReason),
    /// The slot has nothing left to do on the server.
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
    pub(crate) fn send(&mut self, op: Op) -> RequestId {
        self.next_id += 1;
        let id = RequestId(self.next_id);
        self.queue.push_back(Command { id, op });
        id
    }

    pub(crate) fn pop(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }
}

/// The timers a slot may run. A small fixed table: the next deadline is
/// the minimum of the armed entries (after quinn's `timer.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retry a request that got no answer, or a waiter's fallback retry.
    Retry = 0,
    /// Redis: renew the held lease.
    Renew = 1,
    /// Redis: the local lease deadline; ZooKeeper: the disconnection deadline.
    Loss = 2,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Timers([Option<Instant>; 3]);

impl Timers {
    pub(crate) fn set(&mut self, t: Timer, at: Instant) {
        self.0[t as usize] = Some(at);
    }
    pub(crate) fn clear(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }
    pub(crate) fn get(&self, t: Timer) -> Option<Instant> {
        self.0[t as usize]
    }
    pub(crate) fn clear_all(&mut self) {
        self.0 = [None; 3];
    }
    pub(crate) fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
    /// Disarms and returns the timers due at `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Timer> {
        let mut due: Vec<(Instant, Timer)> = Vec::new();
        for t in [Timer::Retry, Timer::Renew, Timer::Loss] {
            if let Some(at) = self.get(t) {
                if at <= now {
                    due.push((at, t));
                    self.clear(t);
                }
            }
        }
        // A loss at the same instant as a renewal wins: safety first.
        due.sort_by_key(|(at, t)| (*at, std::cmp::Reverse(*t as u8)));
        due.into_iter().map(|(_, t)| t).collect()
    }
}

/// Exponential backoff for retries of unanswered requests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    pub(crate) fn next_delay(&mut self, min: Duration, max: Duration) -> Duration {
        let shift = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        min.saturating_mul(1u32 << shift).min(max)
    }
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The inputs every backend's slot accepts.
pub(crate) trait Claim {
    /// Sends the first command(s) of the claim.
    fn begin(&mut self, cx: &mut Cx<'_>);
    /// Does this slot wait for the reply `id`?
    fn owns(&self, id: RequestId) -> bool;
    fn on_reply(&mut self, cx: &mut Cx<'_>, id: RequestId, reply: Reply) -> Progress;
    fn on_notification(&mut self, cx: &mut Cx<'_>, n: &Notification) -> Progress;
    fn on_connection(&mut self, cx: &mut Cx<'_>, ev: ConnectionEvent) -> Progress;
    fn on_timer(&mut self, cx: &mut Cx<'_>, t: Timer) -> Progress;
    /// Ends a granted claim (release) or an ungranted one (cancel, timeout).
    /// Afterwards the slot only cleans up and finally reports `Finished`.
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
}

/// What a slot may touch while handling an input.
pub(crate) struct Cx<'a> {
    pub(crate) now: Instant,
    pub(crate) out: &'a mut Outbox,
    pub(crate) cfg: &'a crate::LockConfig,
    pub(crate) name: &'a crate::LockName,
}
