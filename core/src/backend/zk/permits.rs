//! One claim on a ZooKeeper counting semaphore: Curator's
//! `InterProcessSemaphoreV2`, so Curator clients and ours share permits.
//!
//! - `P/polylock_permits` (ours, persistent, decimal text) records the
//!   number of permits `N`; the first acquirer creates it, everyone else
//!   reads it, and a client with another `N` is refused before it creates
//!   anything. Curator keeps no such record and never reads it.
//! - The internal mutex at `P/locks` is Curator's `InterProcessMutex`, i.e.
//!   exactly our mutex claim ([`ZkClaim`] with [`ZkRole::Mutex`]), driven
//!   from inside this claim. Only its holder creates leases and waits, so
//!   waiters are served in mutex order (FIFO) and Curator's do the same.
//! - Holding the mutex, we create our `k` leases
//!   `P/leases/_c_<uuid>-lease-<seq>` (EPHEMERAL_SEQUENTIAL, protected: each
//!   with its own uuid, as Curator makes one protected create per lease),
//!   pipelined with a getChildren of `P/leases` that sets a children watch.
//!   Granted when the children, ours included, number at most `N`; else we
//!   wait for the watch (a lease going) and list again: no polling.
//! - Once granted we delete our mutex node and the grant is reported when
//!   that delete is answered, as Curator's acquire returns only after
//!   `lock.release()`: the next contender can then take the mutex at once
//!   (a try without waiting that came right after our grant would
//!   otherwise find our mutex node and fail).
//! - Token: the largest czxid of our leases (zxids only grow, and the mutex
//!   orders the grants, so a later grant's leases are newer).
//! - Held: as the mutex claim, session expiry, the disconnection deadline
//!   and the pause watchdog lose the grant, and so does a lease deleted by
//!   someone (each lease is watched). Release deletes the leases.
//! - A try without waiting still queues for the mutex: the mutex is held
//!   by each acquirer for a few round trips, and a try that failed because
//!   another was busy with it would fail while permits are free (ten tries
//!   at once for 3 free permits would get 1). Instead, while it waits for
//!   the mutex, a try watches `P/leases` and fails once the leases there
//!   and ours would number more than `N`: then too few permits are free (or
//!   the mutex holder waits for them, and a try does not pass a waiter).
//!   So a try fails only for want of permits, as CPython's
//!   `BoundedSemaphore.acquire(blocking=False)` does.
//! - If the mutex is lost while we wait (its node deleted, the session in
//!   doubt), we delete our leases and start over: leases left behind by a
//!   waiter without the mutex would count against the mutex holder, which
//!   could then wait for us while we wait for it.

use std::sync::Arc;
use std::time::Duration;

use super::claim::{ZkClaim, ZkRole};
use super::paths::{node_prefix_with, LEASE_MARKER, SEMAPHORE_LEASES, SEMAPHORE_LOCKS, SEMAPHORE_PERMITS};
use super::watchdog::PauseWatchdog;
use crate::claim::{Claim, Cx, Progress};
use crate::io::{ConnectionEvent, Notification, Reply, ZkOp};
use crate::refusal::Refusals;
use crate::timers::{Backoff, Timer, Timers, ALL};
use crate::{Error, FencingToken, Instant, LossReason, Nonce, PermitRequest, RequestId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Goal {
    Acquire,
    /// Delete our leases and leave the mutex (then finish, or start over
    /// with `rejoin`).
    Leave,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Reading (`recording`: creating) the record of the number of permits
    /// (`None`: waiting to retry the read).
    Permits {
        req: Option<RequestId>,
        recording: bool,
    },
    /// Contending for the mutex on `P/locks`.
    Locking,
    /// Holding the mutex: our leases are being made (or found again), then listed.
    Leasing,
    /// Holding the mutex with too many leases: waiting for the children watch.
    Waiting,
    /// Enough leases: our mutex node is being deleted; granted once it is gone.
    Granting,
    Held,
    /// The session expired while we contended: start over once a new one is up.
    AwaitingSession,
    /// Deleting our leases (the mutex's node goes with `retiring`).
    Leaving,
    Finished,
}

#[derive(Debug, Clone, PartialEq)]
enum LeaseState {
    /// The create is out.
    Creating(RequestId),
    /// The create's outcome is unknown: the next list finds it by prefix.
    Unknown,
    /// Found by prefix: reading its czxid (`None`: waiting to retry).
    Reading {
        name: String,
        req: Option<RequestId>,
    },
    Known {
        name: String,
        czxid: i64,
    },
    /// Deleting it on leaving (`None`: waiting to retry).
    Deleting {
        name: String,
        req: Option<RequestId>,
    },
}

#[derive(Debug, Clone)]
struct Lease {
    /// `_c_<uuid>-lease-`: the node's name up to its sequence.
    prefix: String,
    state: LeaseState,
    /// From the grant on: the getData+watch on this lease (`None`: to be sent).
    watch: Option<RequestId>,
}

impl Lease {
    fn owns(&self, id: RequestId) -> bool {
        let req = match &self.state {
            LeaseState::Creating(r) => Some(*r),
            LeaseState::Reading { req, .. } | LeaseState::Deleting { req, .. } => *req,
            LeaseState::Unknown | LeaseState::Known { .. } => None,
        };
        req == Some(id) || self.watch == Some(id)
    }

    fn known(&self) -> Option<(&str, i64)> {
        match &self.state {
            LeaseState::Known { name, czxid } => Some((name, *czxid)),
            _ => None,
        }
    }
}

/// One claim on a ZooKeeper semaphore. See the module docs.
#[derive(Debug)]
pub(crate) struct ZkPermitsClaim {
    /// The semaphore's path `P`.
    base: Arc<str>,
    ask: PermitRequest,
    nonce: Nonce,
    /// Bumped on every start over, so each attempt's nodes have fresh uuids.
    generation: u64,
    data: Vec<u8>,
    wait: bool,
    goal: Goal,
    /// Leaving only to contend again (the mutex was lost while we waited).
    rejoin: bool,
    phase: Phase,
    /// The mutex claim on `P/locks` while we contend.
    mutex: Option<ZkClaim>,
    /// Mutex claims given up and still deleting their node.
    retiring: Vec<ZkClaim>,
    leases: Vec<Lease>,
    /// The list of `P/leases` in flight, and whether it sets a children watch.
    list: Option<(RequestId, bool)>,
    /// The children watch set by an answered list, until it fires or is dropped.
    children_watch: Option<RequestId>,
    /// What the machine sees: for each timer, the earliest of `own` and the
    /// mutex claims' (see `sync_timers`).
    timers: Timers,
    own: Timers,
    backoff: Backoff,
    /// While held: tells a stalled process that its session may have expired.
    watchdog: PauseWatchdog,
    down_since: Option<Instant>,
    refusals: Refusals,
    /// The holder's time to stop its work ([`crate::AcquireOptions::stop_margin`]).
    stop_margin: Duration,
}

/// A reply of a kind the request cannot get: the driver is broken.
fn unexpected(request: &str, reply: Reply) -> Progress {
    Progress::Fatal(Error::Protocol(format!("unexpected {request} reply {reply:?}")))
}

fn last_segment(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_owned()
}

impl ZkPermitsClaim {
    /// `base` is the semaphore's path; `data` goes into our nodes (who
    /// holds them, for status); `down_since` is the machine's knowledge of
    /// the connection.
    pub(crate) fn new(
        base: Arc<str>,
        ask: PermitRequest,
        nonce: Nonce,
        data: Vec<u8>,
        wait: bool,
        down_since: Option<Instant>,
    ) -> Self {
        ZkPermitsClaim {
            base,
            ask,
            nonce,
            generation: 0,
            data,
            wait,
            goal: Goal::Acquire,
            rejoin: false,
            phase: Phase::Permits { req: None, recording: false },
            mutex: None,
            retiring: Vec::new(),
            leases: Vec::new(),
            list: None,
            children_watch: None,
            timers: Timers::default(),
            own: Timers::default(),
            backoff: Backoff::default(),
            watchdog: PauseWatchdog::default(),
            down_since,
            refusals: Refusals::default(),
            stop_margin: Duration::ZERO,
        }
    }

    /// Reports a loss by disconnection `margin` earlier.
    pub(crate) fn with_stop_margin(mut self, margin: Duration) -> Self {
        self.stop_margin = margin;
        self
    }

    /// How long after a disconnection a holder is told it lost its permits.
    fn disconnect_grace(&self, cx: &Cx<'_>) -> Duration {
        cx.cfg.disconnect_grace().saturating_sub(self.stop_margin)
    }

    fn leases_path(&self) -> String {
        format!("{}/{SEMAPHORE_LEASES}", self.base)
    }

    fn permits_path(&self) -> String {
        format!("{}/{SEMAPHORE_PERMITS}", self.base)
    }

    /// A fresh identity per attempt and node: slot 0 names the mutex
    /// claim, slot `i` the `i`th lease.
    fn identity(&self, slot: u64) -> Nonce {
        self.nonce.derive((self.generation << 32) | slot)
    }

    fn retry_later(&mut self, cx: &Cx<'_>) {
        self.own.retry_with_backoff(&mut self.backoff, cx.cfg, cx.now);
    }

    // ---- the number of permits -------------------------------------------

    fn send_permits_read(&mut self, cx: &mut Cx<'_>) {
        let req = cx.out.send(ZkOp::GetData { path: self.permits_path() });
        self.own.clear(Timer::Retry);
        self.phase = Phase::Permits { req: Some(req), recording: false };
    }

    /// The record is missing: we are the first, so we write ours
    /// (`make_parent`: the semaphore's path is missing too).
    fn send_permits_record(&mut self, cx: &mut Cx<'_>, make_parent: bool) {
        if make_parent {
            let _ = cx.out.send(ZkOp::CreateContainers { path: self.base.to_string() });
        }
        let data = self.ask.total.to_string().into_bytes();
        let req = cx.out.send(ZkOp::CreatePersistent { path: self.permits_path(), data });
        self.phase = Phase::Permits { req: Some(req), recording: true };
    }

    fn on_permits(&mut self, cx: &mut Cx<'_>, recording: bool, reply: Reply) -> Progress {
        match reply {
            Reply::Data { data, .. } => {
                let text = String::from_utf8_lossy(&data);
                match text.trim().parse::<u32>() {
                    Ok(n) if n == self.ask.total => {
                        self.start_mutex(cx);
                        Progress::Pending
                    }
                    Ok(server) => {
                        // Nothing of ours is on the server yet: done.
                        self.phase = Phase::Finished;
                        self.own.clear_all();
                        Progress::Refused(Error::PermitsMismatch { server, ours: self.ask.total })
                    }
                    Err(_) => Progress::Fatal(Error::Protocol(format!(
                        "{} holds {text:?}, not a number of permits",
                        self.permits_path()
                    ))),
                }
            }
            Reply::Created { .. } if recording => {
                self.start_mutex(cx);
                Progress::Pending
            }
            // Someone recorded it first: read theirs.
            Reply::Done if recording => {
                self.send_permits_read(cx);
                Progress::Pending
            }
            Reply::NoNode => {
                self.send_permits_record(cx, recording);
                Progress::Pending
            }
            // Reading again is right whether or not a lost create landed.
            Reply::Failed(_) => {
                self.phase = Phase::Permits { req: None, recording: false };
                self.retry_later(cx);
                Progress::Pending
            }
            other => unexpected("permits record", other),
        }
    }

    // ---- the mutex ---------------------------------------------------------

    fn start_mutex(&mut self, cx: &mut Cx<'_>) {
        let parent: Arc<str> = format!("{}/{SEMAPHORE_LOCKS}", self.base).into();
        let nonce = self.identity(0);
        // Always queued: a try decides on the permits (see the module docs).
        let mut mutex = ZkClaim::new(parent, ZkRole::Mutex, nonce, self.data.clone(), true, self.down_since);
        mutex.begin(cx);
        self.mutex = Some(mutex);
        self.phase = Phase::Locking;
        if !self.wait {
            self.send_list(cx, true);
        }
    }

    /// A try waiting for the mutex: the leases there now, plus ours, would
    /// exceed the permits, so the try fails; else it waits on (the list's
    /// children watch counts again when a lease comes or goes).
    fn on_list_while_locking(&mut self, cx: &mut Cx<'_>, leases: usize) -> Progress {
        if leases + self.ask.count as usize > self.ask.total as usize {
            self.leave(cx);
            return Progress::Busy;
        }
        Progress::Pending
    }

    /// A try's list and watch of `P/leases` while it waited for the mutex,
    /// dropped once the mutex is ours (the leases are counted anew then).
    fn drop_locking_list(&mut self, cx: &mut Cx<'_>) {
        self.unwatch_children(cx);
        if let Some((id, watched)) = self.list.take() {
            if watched {
                let _ = cx.out.send(ZkOp::Unwatch { watch: id });
            }
        }
    }

    /// Gives the mutex up; its claim deletes its node in the background.
    fn retire_mutex(&mut self, cx: &mut Cx<'_>) {
        if let Some(mut mutex) = self.mutex.take() {
            mutex.give_up(cx);
            if !mutex.is_finished() {
                self.retiring.push(mutex);
            }
        }
    }

    /// Runs `f` on the mutex claim and reads what it reports.
    fn drive_mutex(&mut self, cx: &mut Cx<'_>, f: impl FnOnce(&mut ZkClaim, &mut Cx<'_>) -> Progress) -> Progress {
        let Some(mut mutex) = self.mutex.take() else { return Progress::Pending };
        let p = f(&mut mutex, cx);
        self.mutex = Some(mutex);
        self.on_mutex(cx, p)
    }

    /// Runs `f` on every retiring mutex claim, dropping those that are done.
    fn drive_retiring(&mut self, cx: &mut Cx<'_>, mut f: impl FnMut(&mut ZkClaim, &mut Cx<'_>) -> Progress) {
        self.retiring.retain_mut(|m| {
            let p = f(m, cx);
            !matches!(p, Progress::Finished | Progress::Fatal(_)) && !m.is_finished()
        });
    }

    fn on_mutex(&mut self, cx: &mut Cx<'_>, p: Progress) -> Progress {
        match p {
            Progress::Pending | Progress::Finished => Progress::Pending,
            Progress::Granted(_) if self.phase == Phase::Locking && self.goal == Goal::Acquire => {
                self.drop_locking_list(cx);
                self.create_leases(cx);
                Progress::Pending
            }
            Progress::Granted(_) => Progress::Pending,
            // A try found the mutex taken; its claim is leaving by itself.
            Progress::Busy => {
                self.retiring.extend(self.mutex.take());
                self.goal = Goal::Leave;
                self.phase = Phase::Leaving;
                Progress::Busy
            }
            Progress::Lost(_) => {
                self.start_over(cx);
                Progress::Pending
            }
            p @ (Progress::Unavailable(_) | Progress::Refused(_) | Progress::Fatal(_)) => p,
        }
    }

    // ---- our leases --------------------------------------------------------

    fn send_lease_create(&self, cx: &mut Cx<'_>, prefix: &str) -> RequestId {
        let path = format!("{}/{prefix}", self.leases_path());
        cx.out.send(ZkOp::CreateSequential { path, data: self.data.clone() })
    }

    fn send_lease_delete(&self, cx: &mut Cx<'_>, name: &str) -> RequestId {
        cx.out.send(ZkOp::Delete { path: format!("{}/{name}", self.leases_path()) })
    }

    fn send_lease_read(&self, cx: &mut Cx<'_>, name: &str) -> RequestId {
        cx.out.send(ZkOp::Stat { path: format!("{}/{name}", self.leases_path()), watch: false })
    }

    /// Holding the mutex: our `k` leases, all at once, and the watched list
    /// behind them (answered after them, so it shows them).
    fn create_leases(&mut self, cx: &mut Cx<'_>) {
        self.leases = (0..u64::from(self.ask.count))
            .map(|i| {
                let prefix = node_prefix_with(&self.identity(i + 1).to_uuid(), LEASE_MARKER);
                let req = self.send_lease_create(cx, &prefix);
                Lease { prefix, state: LeaseState::Creating(req), watch: None }
            })
            .collect();
        self.phase = Phase::Leasing;
        self.send_list(cx, true);
    }

    fn send_list(&mut self, cx: &mut Cx<'_>, watch: bool) {
        let path = self.leases_path();
        let op = if watch { ZkOp::WatchChildren { path } } else { ZkOp::GetChildren { path } };
        self.list = Some((cx.out.send(op), watch));
        self.own.clear(Timer::Retry);
    }

    fn unwatch_children(&mut self, cx: &mut Cx<'_>) {
        if let Some(watch) = self.children_watch.take() {
            let _ = cx.out.send(ZkOp::Unwatch { watch });
        }
    }

    /// Leasing: once every lease is answered, find the unknown ones
    /// (a plain list) or count them all (a watched list).
    fn advance(&mut self, cx: &mut Cx<'_>) {
        if self.goal == Goal::Leave {
            // A lease whose create went unanswered while we leave is looked
            // for and deleted, or it would hold a permit for nobody as long
            // as the session lives.
            self.advance_leave(cx);
            return;
        }
        if self.phase != Phase::Leasing || self.list.is_some() {
            return;
        }
        if self.leases.iter().any(|l| matches!(l.state, LeaseState::Creating(_) | LeaseState::Reading { .. })) {
            return;
        }
        let unknown = self.leases.iter().any(|l| l.state == LeaseState::Unknown);
        self.send_list(cx, !unknown);
    }

    /// Leaving: delete what we know, find what we do not.
    fn advance_leave(&mut self, cx: &mut Cx<'_>) {
        for i in 0..self.leases.len() {
            if let LeaseState::Deleting { name, req: None } = self.leases[i].state.clone() {
                let req = self.send_lease_delete(cx, &name);
                self.leases[i].state = LeaseState::Deleting { name, req: Some(req) };
            }
        }
        if self.list.is_none() && self.leases.iter().any(|l| l.state == LeaseState::Unknown) {
            self.send_list(cx, false);
        }
    }

    fn on_lease_created(&mut self, cx: &mut Cx<'_>, i: usize, reply: Reply) -> Progress {
        match reply {
            Reply::Created { path, czxid } => {
                let name = last_segment(&path);
                self.leases[i].state = if self.goal == Goal::Leave {
                    let req = self.send_lease_delete(cx, &name);
                    LeaseState::Deleting { name, req: Some(req) }
                } else {
                    LeaseState::Known { name, czxid }
                };
            }
            // `P/leases` is missing (first use, or a container reaped).
            Reply::NoNode if self.goal == Goal::Leave => {
                self.leases.remove(i);
            }
            Reply::NoNode => {
                let _ = cx.out.send(ZkOp::CreateContainers { path: self.leases_path() });
                let req = self.send_lease_create(cx, &self.leases[i].prefix.clone());
                self.leases[i].state = LeaseState::Creating(req);
            }
            Reply::Failed(_) => self.leases[i].state = LeaseState::Unknown,
            other => return unexpected("create", other),
        }
        self.advance(cx);
        Progress::Pending
    }

    fn on_lease_read(&mut self, cx: &mut Cx<'_>, i: usize, reply: Reply) -> Progress {
        let LeaseState::Reading { name, .. } = self.leases[i].state.clone() else { return Progress::Pending };
        match reply {
            Reply::Stat { czxid } => self.leases[i].state = LeaseState::Known { name, czxid },
            // Gone between the list and the read: make it again.
            Reply::NoNode => {
                let req = self.send_lease_create(cx, &self.leases[i].prefix.clone());
                self.leases[i].state = LeaseState::Creating(req);
            }
            Reply::Failed(_) => {
                self.leases[i].state = LeaseState::Reading { name, req: None };
                self.retry_later(cx);
            }
            other => return unexpected("stat", other),
        }
        self.advance(cx);
        Progress::Pending
    }

    fn on_lease_deleted(&mut self, cx: &mut Cx<'_>, i: usize, reply: Reply) -> Progress {
        match reply {
            Reply::Done | Reply::NoNode => {
                self.leases.remove(i);
            }
            Reply::Failed(_) => {
                if let LeaseState::Deleting { name, .. } = self.leases[i].state.clone() {
                    self.leases[i].state = LeaseState::Deleting { name, req: None };
                }
                self.retry_later(cx);
            }
            other => return unexpected("delete", other),
        }
        Progress::Pending
    }

    /// The watch on one of our leases (set from the grant on). Gone already
    /// means someone deleted it: lost if held, start over if not yet.
    fn on_lease_watch_set(&mut self, cx: &mut Cx<'_>, i: usize, reply: Reply) -> Progress {
        match reply {
            Reply::Stat { .. } => Progress::Pending,
            Reply::NoNode => self.lease_deleted(cx),
            Reply::Failed(_) => {
                self.leases[i].watch = None;
                self.retry_later(cx);
                Progress::Pending
            }
            other => unexpected("stat", other),
        }
    }

    /// One of our leases was deleted by someone else.
    fn lease_deleted(&mut self, cx: &mut Cx<'_>) -> Progress {
        match self.phase {
            Phase::Held => {
                self.own.clear_all();
                Progress::Lost(LossReason::NodeDeleted)
            }
            Phase::Granting => {
                self.start_over(cx);
                Progress::Pending
            }
            _ => Progress::Pending,
        }
    }

    /// The list of `P/leases`: finds leases whose create went unanswered,
    /// and, watched with every lease known, decides the grant.
    fn on_list(&mut self, cx: &mut Cx<'_>, id: RequestId, watched: bool, reply: Reply) -> Progress {
        self.list = None;
        if watched && matches!(reply, Reply::Children(_)) {
            self.children_watch = Some(id);
        }
        let kids = match reply {
            Reply::Children(kids) => kids,
            // No `P/leases`, so none of our leases: make them (again).
            Reply::NoNode => Vec::new(),
            Reply::Failed(_) => {
                self.retry_later(cx);
                return Progress::Pending;
            }
            other => return unexpected("children", other),
        };
        if self.phase == Phase::Locking && self.goal == Goal::Acquire {
            return self.on_list_while_locking(cx, kids.len());
        }
        let leaving = self.goal == Goal::Leave;
        let all_known = self.leases.iter().all(|l| l.known().is_some());
        for i in (0..self.leases.len()).rev() {
            let state = self.leases[i].state.clone();
            let found = kids.iter().find(|k| k.starts_with(&self.leases[i].prefix)).cloned();
            self.leases[i].state = match (state, found) {
                (LeaseState::Unknown, Some(name)) if leaving => {
                    let req = self.send_lease_delete(cx, &name);
                    LeaseState::Deleting { name, req: Some(req) }
                }
                (LeaseState::Unknown, Some(name)) => {
                    let req = self.send_lease_read(cx, &name);
                    LeaseState::Reading { name, req: Some(req) }
                }
                (LeaseState::Unknown, None) if leaving => {
                    self.leases.remove(i);
                    continue;
                }
                // Never made, or (a known one) deleted by someone: make it again.
                (LeaseState::Unknown, None) | (LeaseState::Known { .. }, None) if !leaving && watched => {
                    LeaseState::Creating(self.send_lease_create(cx, &self.leases[i].prefix.clone()))
                }
                (LeaseState::Unknown, None) => {
                    LeaseState::Creating(self.send_lease_create(cx, &self.leases[i].prefix.clone()))
                }
                (state, _) => state,
            };
        }
        if leaving || self.phase != Phase::Leasing {
            self.unwatch_children(cx);
            return Progress::Pending;
        }
        if watched && all_known && self.leases.iter().all(|l| l.known().is_some()) {
            return self.evaluate(cx, kids.len());
        }
        self.unwatch_children(cx);
        self.advance(cx);
        Progress::Pending
    }

    /// Every lease of ours is among `children` leases: Curator's rule.
    fn evaluate(&mut self, cx: &mut Cx<'_>, children: usize) -> Progress {
        self.backoff.reset();
        if children <= self.ask.total as usize {
            self.release_mutex(cx);
            return Progress::Pending;
        }
        if !self.wait {
            self.leave(cx);
            return Progress::Busy;
        }
        self.phase = Phase::Waiting;
        Progress::Pending
    }

    /// Enough permits: watch our leases and delete our mutex node (in that
    /// order, so the watches are answered first); the grant follows the
    /// delete (see the module docs).
    fn release_mutex(&mut self, cx: &mut Cx<'_>) {
        self.unwatch_children(cx);
        self.watch_leases(cx);
        self.retire_mutex(cx);
        self.phase = Phase::Granting;
    }

    fn watch_leases(&mut self, cx: &mut Cx<'_>) {
        let parent = self.leases_path();
        for lease in &mut self.leases {
            if let (Some((name, _)), None) = (lease.known(), lease.watch) {
                let path = format!("{parent}/{name}");
                lease.watch = Some(cx.out.send(ZkOp::Stat { path, watch: true }));
            }
        }
    }

    /// Granting with the mutex's node gone: held. While the connection is
    /// down past its deadline the session may be gone: start over instead.
    fn grant(&mut self, cx: &mut Cx<'_>) -> Progress {
        let loss_at = self.down_since.map(|down| down.saturating_add(self.disconnect_grace(cx)));
        if loss_at.is_some_and(|at| at <= cx.now) {
            self.start_over(cx);
            return Progress::Pending;
        }
        self.phase = Phase::Held;
        self.arm_watchdog(cx);
        if let Some(at) = loss_at {
            self.own.set(Timer::Loss, at);
        }
        let czxid = self.leases.iter().filter_map(|l| l.known().map(|(_, z)| z)).max().unwrap_or(-1);
        match u64::try_from(czxid) {
            Ok(token) => Progress::Granted(FencingToken(token)),
            Err(_) => Progress::Fatal(Error::Protocol(format!("negative czxid {czxid}"))),
        }
    }

    fn arm_watchdog(&mut self, cx: &Cx<'_>) {
        self.watchdog.arm(&mut self.own, cx.now, cx.cfg.session_timeout);
    }

    /// The pause watchdog fired while held: late, the permit may be lost.
    fn on_watchdog(&mut self, cx: &mut Cx<'_>) -> Progress {
        if self.watchdog.fired_late(&mut self.own, cx.now, cx.cfg.session_timeout) {
            self.own.clear_all();
            return Progress::Lost(LossReason::Paused);
        }
        Progress::Pending
    }

    // ---- leaving -----------------------------------------------------------

    /// Deletes our leases and gives the mutex up. Idempotent.
    fn leave(&mut self, cx: &mut Cx<'_>) {
        self.goal = Goal::Leave;
        self.own.clear_all();
        self.unwatch_children(cx);
        if let Some((id, true)) = self.list {
            // Its answer may still be needed to find a lease; not its watch.
            let _ = cx.out.send(ZkOp::Unwatch { watch: id });
            self.list = Some((id, false));
        }
        self.retire_mutex(cx);
        for lease in &mut self.leases {
            if let LeaseState::Known { name, .. } | LeaseState::Reading { name, .. } = &lease.state {
                lease.state = LeaseState::Deleting { name: name.clone(), req: None };
            }
        }
        self.phase = Phase::Leaving;
        self.advance_leave(cx);
    }

    /// The mutex is lost, or a lease is, before the grant: leave and contend again.
    fn start_over(&mut self, cx: &mut Cx<'_>) {
        self.rejoin = true;
        self.leave(cx);
    }

    /// After every input: a grant whose mutex node is gone, a start over
    /// whose leases are gone, or the end.
    fn settle(&mut self, cx: &mut Cx<'_>, p: Progress) -> Progress {
        if p == Progress::Pending && self.phase == Phase::Granting && self.retiring.is_empty() {
            return self.grant(cx);
        }
        if self.goal != Goal::Leave || !self.leases.is_empty() {
            return p;
        }
        if self.rejoin {
            if self.phase != Phase::AwaitingSession && p == Progress::Pending {
                self.rejoin = false;
                self.goal = Goal::Acquire;
                self.generation += 1;
                self.list = None;
                self.children_watch = None;
                self.start_mutex(cx);
            }
            return p;
        }
        if self.mutex.is_none() && self.retiring.is_empty() && self.phase != Phase::Finished {
            self.phase = Phase::Finished;
            self.own.clear_all();
            if p == Progress::Pending {
                return Progress::Finished;
            }
        }
        p
    }

    /// The machine sees, for each timer, the earliest of ours and the mutex
    /// claims'; `on_timer` runs whatever of them is due.
    fn sync_timers(&mut self) {
        let mut merged = self.own.clone();
        for claim in self.mutex.iter_mut().chain(self.retiring.iter_mut()) {
            for t in ALL {
                if let Some(at) = claim.timers().get(t) {
                    if merged.get(t).is_none_or(|m| at < m) {
                        merged.set(t, at);
                    }
                }
            }
        }
        self.timers = merged;
    }

    fn finish_input(&mut self, cx: &mut Cx<'_>, p: Progress) -> Progress {
        let p = self.settle(cx, p);
        self.sync_timers();
        p
    }

    // ---- our own replies, timers and connection ----------------------------

    fn on_own_reply(&mut self, cx: &mut Cx<'_>, id: RequestId, reply: Reply) -> Progress {
        if let Phase::Permits { req: Some(r), recording } = self.phase {
            if r == id {
                return self.on_permits(cx, recording, reply);
            }
        }
        if let Some((l, watched)) = self.list {
            if l == id {
                return self.on_list(cx, id, watched, reply);
            }
        }
        let Some(i) = self.leases.iter().position(|l| l.owns(id)) else { return Progress::Pending };
        if self.leases[i].watch == Some(id) {
            return self.on_lease_watch_set(cx, i, reply);
        }
        match self.leases[i].state {
            LeaseState::Creating(_) => self.on_lease_created(cx, i, reply),
            LeaseState::Reading { .. } => self.on_lease_read(cx, i, reply),
            LeaseState::Deleting { .. } => self.on_lease_deleted(cx, i, reply),
            LeaseState::Unknown | LeaseState::Known { .. } => Progress::Pending,
        }
    }

    /// Whatever waited for a retry goes now.
    fn on_retry(&mut self, cx: &mut Cx<'_>) {
        match self.phase {
            Phase::Permits { req: None, .. } => self.send_permits_read(cx),
            // A try's count of the leases while it waits for the mutex.
            Phase::Locking if !self.wait && self.list.is_none() && self.children_watch.is_none() => {
                self.send_list(cx, true)
            }
            Phase::Leasing => {
                for i in 0..self.leases.len() {
                    if let LeaseState::Reading { name, req: None } = self.leases[i].state.clone() {
                        let req = self.send_lease_read(cx, &name);
                        self.leases[i].state = LeaseState::Reading { name, req: Some(req) };
                    }
                }
                self.advance(cx);
            }
            Phase::Granting | Phase::Held => self.watch_leases(cx),
            Phase::Leaving => self.advance_leave(cx),
            _ => {}
        }
    }

    fn on_own_timer(&mut self, cx: &mut Cx<'_>, t: Timer) -> Progress {
        match (t, &self.phase) {
            (Timer::Loss, Phase::Held) => {
                self.own.clear_all();
                Progress::Lost(LossReason::Disconnected)
            }
            (Timer::Watchdog, Phase::Held) => self.on_watchdog(cx),
            (Timer::Retry, _) => {
                self.on_retry(cx);
                Progress::Pending
            }
            _ => Progress::Pending,
        }
    }

    /// The session is gone, and every ephemeral node of ours with it.
    fn on_session_expired(&mut self, cx: &mut Cx<'_>) -> Progress {
        let ev = ConnectionEvent::SessionExpired;
        if let Some(mutex) = self.mutex.as_mut() {
            // Its loss is ours to handle here, not a reason to start over now.
            let _ = mutex.on_connection(cx, ev);
        }
        self.drive_retiring(cx, |m, cx| m.on_connection(cx, ev));
        self.leases.clear();
        self.list = None;
        self.children_watch = None;
        match self.phase {
            Phase::Finished | Phase::Permits { .. } => Progress::Pending,
            Phase::Held => {
                self.own.clear_all();
                Progress::Lost(LossReason::SessionExpired)
            }
            _ if self.goal == Goal::Leave && !self.rejoin => {
                self.retire_mutex(cx);
                Progress::Pending
            }
            _ => {
                self.retire_mutex(cx);
                self.own.clear_all();
                self.goal = Goal::Leave;
                self.rejoin = true;
                self.phase = Phase::AwaitingSession;
                Progress::Pending
            }
        }
    }

    fn on_disconnected(&mut self, cx: &mut Cx<'_>) -> Progress {
        self.down_since.get_or_insert(cx.now);
        if self.phase == Phase::Held {
            if let Some(down) = self.down_since {
                self.own.set(Timer::Loss, down.saturating_add(self.disconnect_grace(cx)));
            }
        }
        Progress::Pending
    }

    /// Connected again: the loss deadline is off and retries go now. A
    /// children watch may have fired while we were away: list again.
    fn on_reconnected(&mut self, cx: &mut Cx<'_>) -> Progress {
        self.down_since = None;
        self.own.clear(Timer::Loss);
        self.backoff.reset();
        match self.phase {
            Phase::AwaitingSession => self.phase = Phase::Leaving,
            Phase::Waiting => {
                self.unwatch_children(cx);
                self.phase = Phase::Leasing;
                self.send_list(cx, true);
            }
            // A try waiting for the mutex counts the leases again.
            Phase::Locking if !self.wait && self.list.is_none() => {
                self.unwatch_children(cx);
                self.send_list(cx, true);
            }
            _ => {
                self.own.clear(Timer::Retry);
                self.on_retry(cx);
            }
        }
        Progress::Pending
    }
}

impl Claim for ZkPermitsClaim {
    fn begin(&mut self, cx: &mut Cx<'_>) {
        self.send_permits_read(cx);
    }

    fn owns(&self, id: RequestId) -> bool {
        if self.phase == Phase::Finished {
            return false;
        }
        matches!(self.phase, Phase::Permits { req: Some(r), .. } if r == id)
            || self.list.is_some_and(|(l, _)| l == id)
            || self.leases.iter().any(|l| l.owns(id))
            || self.mutex.as_ref().is_some_and(|m| m.owns(id))
            || self.retiring.iter().any(|m| m.owns(id))
    }

    fn on_reply(&mut self, cx: &mut Cx<'_>, id: RequestId, reply: Reply) -> Progress {
        let p = if self.mutex.as_ref().is_some_and(|m| m.owns(id)) {
            self.drive_mutex(cx, |m, cx| m.on_reply(cx, id, reply))
        } else if let Some(i) = self.retiring.iter().position(|m| m.owns(id)) {
            let p = self.retiring[i].on_reply(cx, id, reply);
            if matches!(p, Progress::Finished | Progress::Fatal(_)) || self.retiring[i].is_finished() {
                self.retiring.remove(i);
            }
            Progress::Pending
        } else {
            // A throttled or read-only server is retried like a request that
            // got no answer; a try without waiting reports it instead.
            let reply = self.refusals.filter(cx.cfg.backend, reply);
            let p = self.on_own_reply(cx, id, reply);
            match (self.wait, self.goal, self.refusals.latest()) {
                (false, Goal::Acquire, Some(text)) if !matches!(self.phase, Phase::Held | Phase::Granting) => {
                    Progress::Unavailable(text.to_owned())
                }
                _ => p,
            }
        };
        self.finish_input(cx, p)
    }

    fn on_notification(&mut self, cx: &mut Cx<'_>, n: &Notification) -> Progress {
        let mut p = self.drive_mutex(cx, |m, cx| m.on_notification(cx, n));
        self.drive_retiring(cx, |m, cx| m.on_notification(cx, n));
        let id = match n {
            Notification::WatchFired { id } | Notification::NodeDeleted { id } => Some(*id),
            _ => None,
        };
        if let (Some(id), Progress::Pending) = (id, &p) {
            if self.children_watch == Some(id) {
                // A lease came or went: count again.
                self.children_watch = None;
                if self.phase == Phase::Waiting {
                    self.phase = Phase::Leasing;
                    self.send_list(cx, true);
                } else if self.phase == Phase::Locking && !self.wait && self.list.is_none() {
                    self.send_list(cx, true);
                }
            } else if self.leases.iter().any(|l| l.watch == Some(id)) {
                p = self.lease_deleted(cx);
            }
        }
        self.finish_input(cx, p)
    }

    fn on_connection(&mut self, cx: &mut Cx<'_>, ev: ConnectionEvent) -> Progress {
        let p = match ev {
            ConnectionEvent::SessionExpired => self.on_session_expired(cx),
            ev => {
                let p = self.drive_mutex(cx, |m, cx| m.on_connection(cx, ev));
                self.drive_retiring(cx, |m, cx| m.on_connection(cx, ev));
                let ours = match ev {
                    ConnectionEvent::Disconnected => self.on_disconnected(cx),
                    _ => self.on_reconnected(cx),
                };
                if p == Progress::Pending {
                    ours
                } else {
                    p
                }
            }
        };
        self.finish_input(cx, p)
    }

    fn on_timer(&mut self, cx: &mut Cx<'_>, _t: Timer) -> Progress {
        // The machine took the due entries of the merged table; ours and the
        // mutex claims' due now are run here.
        let mut last = Progress::Pending;
        for t in self.own.take_due(cx.now) {
            let p = self.on_own_timer(cx, t);
            if p != Progress::Pending {
                last = p;
            }
        }
        let run_due = |m: &mut ZkClaim, cx: &mut Cx<'_>| {
            let mut last = Progress::Pending;
            for t in m.timers().take_due(cx.now) {
                let p = m.on_timer(cx, t);
                if p != Progress::Pending {
                    last = p;
                }
            }
            last
        };
        let p = self.drive_mutex(cx, run_due);
        if p != Progress::Pending {
            last = p;
        }
        self.drive_retiring(cx, run_due);
        self.finish_input(cx, last)
    }

    fn give_up(&mut self, cx: &mut Cx<'_>) {
        if self.goal == Goal::Leave && !self.rejoin {
            return;
        }
        self.rejoin = false;
        match self.phase {
            // Nothing of ours is on the server before the mutex claim starts.
            Phase::Permits { .. } | Phase::Finished => {
                self.goal = Goal::Leave;
                self.phase = Phase::Finished;
                self.own.clear_all();
            }
            _ => self.leave(cx),
        }
        let _ = self.finish_input(cx, Progress::Pending);
    }

    fn timers(&mut self) -> &mut Timers {
        &mut self.timers
    }

    fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    fn describe(&self) -> String {
        let names: Vec<&str> = self
            .leases
            .iter()
            .map(|l| match &l.state {
                LeaseState::Known { name, .. }
                | LeaseState::Reading { name, .. }
                | LeaseState::Deleting { name, .. } => name.as_str(),
                LeaseState::Creating(_) | LeaseState::Unknown => l.prefix.as_str(),
            })
            .collect();
        if names.is_empty() {
            format!("{SEMAPHORE_LEASES}/{}", node_prefix_with(&self.identity(1).to_uuid(), LEASE_MARKER))
        } else {
            names.join(",")
        }
    }

    fn refusal(&self) -> Option<&str> {
        self.refusals.latest().or_else(|| self.mutex.as_ref().and_then(|m| m.refusal()))
    }
}
