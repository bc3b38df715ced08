//! One claim on a ZooKeeper lock as a state machine: create and list,
//! watch the predecessor, hold (watching our own node), delete.

use std::sync::Arc;
use std::time::Duration;

use super::paths::{
    is_writer, node_prefix_with, sort_key, sorted_contenders, LATCH_MARKER, LOCK_MARKER, READ_MARKER, WRITE_MARKER,
};
use super::watchdog::PauseWatchdog;
use crate::claim::{Claim, Cx, Progress, WriteHold};
use crate::io::{ConnectionEvent, Notification, Reply, ZkOp};
use crate::refusal::Refusals;
use crate::timers::{Backoff, Timer, Timers};
use crate::{Error, FencingToken, LossReason, Nonce, RequestId};

/// Which recipe the claim follows: Curator's `InterProcessMutex`, one
/// half of its `InterProcessReadWriteLock`, or a `LeaderLatch` participant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ZkRole {
    /// Holds at index 0; watches its immediate predecessor.
    Mutex,
    /// Leads at index 0; watches its immediate predecessor (the mutex's
    /// rule under Curator's `latch-` marker).
    Latch,
    /// Holds while no writer's node sorts before its own (except the
    /// owner's own writer node, for a downgrade); else watches the nearest
    /// writer before it.
    Read {
        /// Downgrade: the owner's write hold. The reader's node is then
        /// created with the writer node's sequence, not a new one (as
        /// Curator 5.5+ does), so it sorts beside the writer and no writer
        /// queued after it can hold the lock while the downgraded read is
        /// held. Its grant carries the write hold's token, not its own
        /// node's czxid: that node is newer than a writer queued behind the
        /// write hold, which is granted after the downgraded read, so its
        /// czxid as a token would exceed that writer's.
        beside_write: Option<WriteHold>,
    },
    /// Holds at index 0 among readers and writers; watches its immediate predecessor.
    Write,
}

impl ZkRole {
    /// The one-node recipe of `mode`. `None` for a semaphore: that is
    /// Curator's two-part recipe (a mutex, then leases), claimed by
    /// [`super::ZkPermitsClaim`], which runs a [`ZkRole::Mutex`] claim inside.
    pub(crate) fn of(mode: crate::LockMode, beside_write: Option<WriteHold>) -> Option<Self> {
        match mode {
            crate::LockMode::Exclusive => Some(ZkRole::Mutex),
            crate::LockMode::Leader => Some(ZkRole::Latch),
            crate::LockMode::Read => Some(ZkRole::Read { beside_write }),
            crate::LockMode::Write => Some(ZkRole::Write),
            crate::LockMode::Semaphore => None,
        }
    }

    fn marker(&self) -> &'static str {
        match self {
            ZkRole::Mutex => LOCK_MARKER,
            ZkRole::Latch => LATCH_MARKER,
            ZkRole::Read { .. } => READ_MARKER,
            ZkRole::Write => WRITE_MARKER,
        }
    }
}

/// What the claim is trying to do right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Goal {
    Acquire,
    /// Release or cancel: delete our node once we know it, then finish.
    Leave,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Create and getChildren are out together; each becomes `None` once answered
    /// (the list only matters once the create has named our node).
    Creating {
        create: Option<RequestId>,
        list: Option<RequestId>,
    },
    /// The create's outcome is unknown: list the children to find our node
    /// by its uuid prefix (`None`: waiting to retry).
    Recovering {
        list: Option<RequestId>,
    },
    /// Our node was found by prefix; reading its czxid.
    ReadingOwnNode {
        req: Option<RequestId>,
    },
    /// Re-reading the children after a wake-up (`None`: waiting to retry).
    Listing {
        list: Option<RequestId>,
    },
    /// Watching the predecessor; `req` is the stat+watch request, whose
    /// id also names the watch when it fires.
    Watching {
        req: RequestId,
    },
    Held,
    /// Deleting our node (`None`: waiting to retry).
    Deleting {
        req: Option<RequestId>,
    },
    /// The session expired while we waited: start over once a new one is up.
    AwaitingSession,
    Finished,
}

/// One claim on a ZooKeeper lock.
#[derive(Debug)]
pub(crate) struct ZkClaim {
    /// The lock's parent node ([`super::lock_path`]).
    parent: Arc<str>,
    role: ZkRole,
    nonce: Nonce,
    generation: u64,
    uuid: String,
    data: Vec<u8>,
    wait: bool,
    goal: Goal,
    /// Our node's name (not the full path) and czxid, once known.
    node: Option<(String, i64)>,
    phase: Phase,
    timers: Timers,
    backoff: Backoff,
    /// While held: tells a stalled process that its session may have expired.
    watchdog: PauseWatchdog,
    /// Since when the connection has been down, if it is: a grant that
    /// arrives meanwhile counts its loss deadline from then.
    down_since: Option<crate::Instant>,
    /// While held, or waiting behind the first contender: the watch that
    /// tells us of our node's deletion (`None`: to be sent). The
    /// getData+watch on our own node, or (see `own_watch_on_parent`) the
    /// children watch of the list that granted us the lock.
    own_watch: Option<RequestId>,
    /// The server has answered `own_watch`: our node existed when the watch
    /// was set, and it has not fired since.
    own_watch_set: bool,
    /// `own_watch` is the children watch our pipelined list set on the
    /// lock's parent. Granted by that list, a holder needs no request of its
    /// own to learn of its node's deletion (which changes the children):
    /// uncontended, acquire+release is three requests, not four. It fires
    /// on any change among the contenders, too; the holder then watches its
    /// own node directly, as a holder granted otherwise does at once.
    own_watch_on_parent: bool,
    /// Whether the server's latest answer was a transient refusal.
    refusals: Refusals,
    /// While watching: the predecessor was the first contender in a list
    /// read after our create. Sequence numbers only grow, so nobody can
    /// come between it and us: once it is deleted, and our own node is
    /// known to be there (`own_watch_set`), we are first without reading
    /// the children again.
    behind_first: bool,
    /// The holder's time to stop its work ([`crate::AcquireOptions::stop_margin`]).
    stop_margin: Duration,
}

impl ZkClaim {
    /// Reports a loss by disconnection `margin` earlier.
    pub(crate) fn with_stop_margin(mut self, margin: Duration) -> Self {
        self.stop_margin = margin;
        self
    }

    fn arm_watchdog(&mut self, cx: &Cx<'_>) {
        self.watchdog.arm(&mut self.timers, cx.now, cx.cfg.session_timeout);
    }

    /// The pause watchdog fired while held: late, the holder is told it may
    /// have lost the lock.
    fn on_watchdog(&mut self, cx: &mut Cx<'_>) -> Progress {
        if self.watchdog.fired_late(&mut self.timers, cx.now, cx.cfg.session_timeout) {
            self.timers.clear_all();
            return Progress::Lost(LossReason::Paused);
        }
        Progress::Pending
    }

    /// `data` is stored in the node (who holds it, for `status`);
    /// `down_since` is the machine's knowledge of the connection.
    pub(crate) fn new(
        parent: Arc<str>,
        role: ZkRole,
        nonce: Nonce,
        data: Vec<u8>,
        wait: bool,
        down_since: Option<crate::Instant>,
    ) -> Self {
        ZkClaim {
            parent,
            role,
            nonce,
            generation: 0,
            uuid: nonce.to_uuid(),
            data,
            wait,
            goal: Goal::Acquire,
            node: None,
            phase: Phase::Recovering { list: None },
            timers: Timers::default(),
            backoff: Backoff::default(),
            watchdog: PauseWatchdog::default(),
            down_since,
            own_watch: None,
            own_watch_set: false,
            own_watch_on_parent: false,
            refusals: Refusals::default(),
            behind_first: false,
            stop_margin: Duration::ZERO,
        }
    }

    /// When a holder must be told it lost the lock because the connection
    /// went down, if it is down.
    fn disconnection_deadline(&self, cx: &Cx<'_>) -> Option<crate::Instant> {
        self.down_since.map(|down| down.saturating_add(cx.cfg.disconnect_grace().saturating_sub(self.stop_margin)))
    }

    /// The only way into Held. Starts the pause watchdog and, while the
    /// connection is down, the loss deadline from the disconnection, exactly
    /// as if we had held the lock when it went down. False if that deadline
    /// has already passed: the session may be gone, so the claim is not
    /// granted and waits for the connection (the same session: look again)
    /// or the expiry.
    fn enter_held(&mut self, cx: &mut Cx<'_>) -> bool {
        let loss_at = self.disconnection_deadline(cx);
        if loss_at.is_some_and(|at| at <= cx.now) {
            self.phase = Phase::Listing { list: None };
            return false;
        }
        self.phase = Phase::Held;
        self.arm_watchdog(cx);
        if let Some(at) = loss_at {
            self.timers.set(Timer::Loss, at);
        }
        self.watch_own_node(cx);
        true
    }

    /// Watches our node while held: if anyone deletes it, we must say so.
    /// One request after the grant, off the caller's path: the grant does
    /// not wait for its reply.
    /// Already set (while waiting behind the first contender, or by the
    /// list that granted us), it is kept.
    fn watch_own_node(&mut self, cx: &mut Cx<'_>) {
        let Some((node, _)) = self.node.clone() else { return };
        self.timers.clear(Timer::Retry);
        if self.own_watch.is_some() {
            return;
        }
        self.own_watch_set = false;
        self.own_watch_on_parent = false;
        self.own_watch = Some(cx.out.send(ZkOp::Stat { path: self.node_path(&node), watch: true }));
    }

    /// The children watch of the list that granted us stands in for the
    /// watch on our own node: the list's answer, which had our node, set it.
    fn keep_list_watch_as_own(&mut self, list: RequestId) {
        self.own_watch = Some(list);
        self.own_watch_set = true;
        self.own_watch_on_parent = true;
    }

    /// Our own watch is gone (fired, failed, or its node or session is).
    fn forget_own_watch(&mut self) {
        self.own_watch = None;
        self.own_watch_set = false;
        self.own_watch_on_parent = false;
    }

    /// Leaving `Watching` other than by the watch firing: the driver may drop it.
    fn unwatch_predecessor(&mut self, cx: &mut Cx<'_>) {
        if let Phase::Watching { req } = self.phase {
            let _ = cx.out.send(ZkOp::Unwatch { watch: req });
        }
    }

    fn node_path(&self, node: &str) -> String {
        format!("{}/{node}", self.parent)
    }

    /// Our node's name up to its sequence: the protection prefix and the role's marker.
    fn prefix(&self) -> String {
        node_prefix_with(&self.uuid, self.role.marker())
    }

    fn send_create(&mut self, cx: &mut Cx<'_>) {
        let parent = self.parent.to_string();
        let path = format!("{parent}/{}", self.prefix());
        let data = self.data.clone();
        let create = match &self.role {
            ZkRole::Read { beside_write: Some(writer) } => {
                ZkOp::CreateEphemeral { path: format!("{path}{}", sort_key(&writer.record)), data }
            }
            _ => ZkOp::CreateSequential { path, data },
        };
        let create = cx.out.send(create);
        // With a children watch: if this list grants us the lock, the watch
        // tells us of our node's deletion (see `own_watch_on_parent`). If it
        // does not, the watch fires once at the next change and is ignored:
        // dropping it would cost a RemoveWatches request.
        let list = cx.out.send(ZkOp::WatchChildren { path: parent });
        self.phase = Phase::Creating { create: Some(create), list: Some(list) };
    }

    fn send_list(&mut self, cx: &mut Cx<'_>, recovering: bool) {
        let list = Some(cx.out.send(ZkOp::GetChildren { path: self.parent.to_string() }));
        self.timers.clear(Timer::Retry);
        self.phase = if recovering { Phase::Recovering { list } } else { Phase::Listing { list } };
    }

    fn send_delete(&mut self, cx: &mut Cx<'_>) {
        match self.node.clone() {
            Some((node, _)) => {
                let req = cx.out.send(ZkOp::Delete { path: self.node_path(&node) });
                self.timers.clear(Timer::Retry);
                self.phase = Phase::Deleting { req: Some(req) };
            }
            None => {
                // We never learnt our node's name: find it by prefix, then delete.
                self.send_list(cx, true);
            }
        }
    }

    /// Reads the czxid of our node found by prefix (the create's reply,
    /// which carries it, was lost).
    fn send_own_node_read(&mut self, cx: &mut Cx<'_>) {
        let node = self.node.clone().map(|(n, _)| n).unwrap_or_default();
        let req = cx.out.send(ZkOp::Stat { path: self.node_path(&node), watch: false });
        self.phase = Phase::ReadingOwnNode { req: Some(req) };
    }

    /// A fresh identity after the session (and so our node) is gone.
    fn restart(&mut self, cx: &mut Cx<'_>) {
        if let ZkRole::Read { beside_write } = &mut self.role {
            // Our node, and so maybe the writer's session, is gone: a node
            // named after that writer's sequence could now sort ahead of a
            // writer that holds the lock. Queue as any reader does.
            *beside_write = None;
        }
        self.generation += 1;
        self.uuid = self.nonce.derive(self.generation).to_uuid();
        self.node = None;
        self.forget_own_watch();
        self.send_create(cx);
    }

    fn retry_later(&mut self, cx: &Cx<'_>) {
        self.timers.retry_with_backoff(&mut self.backoff, cx.cfg, cx.now);
    }

    fn finish(&mut self) -> Progress {
        self.phase = Phase::Finished;
        self.timers.clear_all();
        Progress::Finished
    }

    /// Decide from a children list: held, watch the predecessor, or start over.
    /// `pipelined`: the list (and the children watch it set) went out with
    /// our create, so a list without our node was read before the node was
    /// made (ZooKeeper answers a session in order, so this should not
    /// happen): read the children again rather than make a second node,
    /// which would queue behind the first.
    fn evaluate(&mut self, cx: &mut Cx<'_>, children: Vec<String>, pipelined: Option<RequestId>) -> Progress {
        let Some((node, czxid)) = self.node.clone() else {
            return Progress::Pending;
        };
        if self.goal == Goal::Leave {
            self.send_delete(cx);
            return Progress::Pending;
        }
        let sorted = sorted_contenders(children);
        let Some(index) = sorted.iter().position(|c| *c == node) else {
            if pipelined.is_some() {
                self.send_list(cx, false);
                return Progress::Pending;
            }
            // Our node is gone although the session is not known to be
            // expired (deleted by someone, or the session just expired):
            // contend again with a new node.
            self.restart(cx);
            return Progress::Pending;
        };
        self.backoff.reset();
        let blocker = self.blocker(&sorted, index);
        if blocker.is_none() {
            if let Some(list) = pipelined {
                self.keep_list_watch_as_own(list);
            }
            if !self.enter_held(cx) {
                return Progress::Pending;
            }
            return self.granted(czxid);
        }
        if !self.wait {
            self.goal = Goal::Leave;
            self.send_delete(cx);
            return Progress::Busy;
        }
        let predecessor = blocker.expect("not held");
        let req = cx.out.send(ZkOp::Stat { path: self.node_path(predecessor), watch: true });
        self.phase = Phase::Watching { req };
        // Next in line: watch our own node too (sent with the predecessor's
        // watch, so no wait), which the grant would set anyway. Only for
        // the mutex and the latch: a read-write lock's downgraded reader can
        // sort beside the writer ahead of us, so its deletion alone proves nothing.
        self.behind_first = index == 1 && matches!(self.role, ZkRole::Mutex | ZkRole::Latch);
        if self.behind_first {
            self.watch_own_node(cx);
        }
        Progress::Pending
    }

    /// The node whose deletion we wait for, if any: none means we hold the
    /// lock. A mutex or writer waits for its immediate predecessor; a
    /// reader for the nearest writer before it (readers share), except the
    /// owner's own writer node that a downgrade is granted beside.
    fn blocker<'a>(&self, sorted: &'a [String], index: usize) -> Option<&'a String> {
        match &self.role {
            ZkRole::Mutex | ZkRole::Latch | ZkRole::Write => index.checked_sub(1).map(|i| &sorted[i]),
            ZkRole::Read { beside_write } => {
                let beside = beside_write.as_ref().map(|w| w.record.as_str());
                sorted[..index].iter().rev().find(|c| is_writer(c) && Some(c.as_str()) != beside)
            }
        }
    }

    /// The predecessor we watch is gone. Next in line with our node known
    /// to be there (see `behind_first`), we are first: held. Else look at
    /// the children again.
    fn on_predecessor_gone(&mut self, cx: &mut Cx<'_>) -> Progress {
        if !(self.behind_first && self.own_watch_set && self.goal == Goal::Acquire) {
            self.send_list(cx, false);
            return Progress::Pending;
        }
        self.backoff.reset();
        let czxid = self.node.as_ref().map_or(-1, |(_, z)| *z);
        if !self.enter_held(cx) {
            return Progress::Pending;
        }
        self.granted(czxid)
    }

    /// The grant, with our node's czxid as its token; a downgrade's, with
    /// its write hold's (see [`ZkRole::Read`]).
    fn granted(&self, czxid: i64) -> Progress {
        if let ZkRole::Read { beside_write: Some(w) } = &self.role {
            return Progress::Granted(w.token);
        }
        match u64::try_from(czxid) {
            Ok(token) => Progress::Granted(FencingToken(token)),
            Err(_) => Progress::Fatal(Error::Protocol(format!("negative czxid {czxid}"))),
        }
    }

    /// Children listed while our create's outcome is unknown.
    fn recover_from(&mut self, cx: &mut Cx<'_>, children: Vec<String>) -> Progress {
        let prefix = self.prefix();
        match children.into_iter().find(|c| c.starts_with(&prefix)) {
            Some(found) => {
                self.node = Some((found, 0));
                self.send_own_node_read(cx);
                Progress::Pending
            }
            None if self.goal == Goal::Leave => self.finish(),
            None => {
                self.send_create(cx);
                Progress::Pending
            }
        }
    }

    fn on_failure(&mut self, cx: &mut Cx<'_>, next: Phase) -> Progress {
        self.phase = next;
        self.retry_later(cx);
        Progress::Pending
    }

    /// The answer to our create. It names our node (and its czxid, the
    /// fencing token); the getChildren sent with it is read once both are in.
    /// `list` is that getChildren, `None` if it already failed.
    fn on_created(&mut self, cx: &mut Cx<'_>, list: Option<RequestId>, reply: Reply) -> Progress {
        match reply {
            Reply::Created { path, czxid } => {
                let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
                self.node = Some((name, czxid));
                if self.goal == Goal::Leave {
                    self.send_delete(cx);
                } else if list.is_none() {
                    // The pipelined list already failed: list again.
                    self.send_list(cx, false);
                } else {
                    self.phase = Phase::Creating { create: None, list };
                }
                Progress::Pending
            }
            Reply::NoNode => {
                // The parent is missing (first use, or a container reaped).
                // The pipelined list fails too; make the parents, then retry.
                if self.goal == Goal::Leave {
                    return self.finish();
                }
                let _ = cx.out.send(ZkOp::CreateContainers { path: self.parent.to_string() });
                self.send_create(cx);
                Progress::Pending
            }
            // We cannot tell whether the node was made: find it by its prefix.
            Reply::Failed(_) => self.on_failure(cx, Phase::Recovering { list: None }),
            // A downgrade's node (named, not sequential) exists already: ours,
            // from a create whose reply was lost. Find it and read its czxid.
            Reply::Done if matches!(self.role, ZkRole::Read { beside_write: Some(_) }) => {
                self.send_list(cx, true);
                Progress::Pending
            }
            other => unexpected("create", other),
        }
    }

    /// The getChildren pipelined with our create. It decides the claim only
    /// once the create has named our node; before that (or if it failed) the
    /// create's reply decides what comes next.
    fn on_pipelined_children(
        &mut self,
        cx: &mut Cx<'_>,
        create: Option<RequestId>,
        list: RequestId,
        reply: Reply,
    ) -> Progress {
        match reply {
            Reply::Children(children) if self.goal == Goal::Acquire && self.node.is_some() => {
                self.evaluate(cx, children, Some(list))
            }
            Reply::Children(_) | Reply::NoNode | Reply::Failed(_) if create.is_some() => {
                // The create is still unanswered; its reply decides what comes next.
                self.phase = Phase::Creating { create, list: None };
                Progress::Pending
            }
            Reply::Children(_) | Reply::NoNode | Reply::Failed(_) => self.on_failure(cx, Phase::Listing { list: None }),
            other => unexpected("children", other),
        }
    }

    /// The children listed to learn whether a create whose outcome is
    /// unknown made our node. A missing parent means it did not.
    fn on_recovery_children(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Children(children) => self.recover_from(cx, children),
            Reply::NoNode if self.goal == Goal::Leave => self.finish(),
            Reply::NoNode => {
                self.send_create(cx);
                Progress::Pending
            }
            Reply::Failed(_) => self.on_failure(cx, Phase::Recovering { list: None }),
            other => unexpected("children", other),
        }
    }

    /// The stat of our node found by prefix: its czxid is the fencing token
    /// that the lost create reply would have carried.
    fn on_own_node_read(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Stat { czxid } => {
                if let Some((name, _)) = self.node.take() {
                    self.node = Some((name, czxid));
                }
                if self.goal == Goal::Leave {
                    self.send_delete(cx);
                } else {
                    self.send_list(cx, false);
                }
                Progress::Pending
            }
            Reply::NoNode => {
                // Gone between the list and the stat: nothing of ours is left.
                self.node = None;
                if self.goal == Goal::Leave {
                    return self.finish();
                }
                self.restart(cx);
                Progress::Pending
            }
            Reply::Failed(_) => self.on_failure(cx, Phase::ReadingOwnNode { req: None }),
            other => unexpected("stat", other),
        }
    }

    /// The children re-read after a wake-up (or a retry): decide again.
    /// A missing parent means our node went with it.
    fn on_children(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Children(children) => self.evaluate(cx, children, None),
            Reply::NoNode => {
                self.restart(cx);
                Progress::Pending
            }
            Reply::Failed(_) => self.on_failure(cx, Phase::Listing { list: None }),
            other => unexpected("children", other),
        }
    }

    /// The stat+watch on our predecessor: either the watch is set, or the
    /// predecessor is already gone and we look at the children again.
    fn on_predecessor_stat(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            // The watch is set: wait for it to fire.
            Reply::Stat { .. } => Progress::Pending,
            // The predecessor left before we looked.
            Reply::NoNode => self.on_predecessor_gone(cx),
            Reply::Failed(_) => self.on_failure(cx, Phase::Listing { list: None }),
            other => unexpected("stat", other),
        }
    }

    /// The stat+watch on our own node while held: a node already gone means
    /// someone deleted it, and the holder must hear it before the next grant.
    fn on_own_watch_set(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            // Our node is watched.
            Reply::Stat { .. } => {
                self.own_watch_set = true;
                Progress::Pending
            }
            Reply::NoNode => {
                self.timers.clear_all();
                Progress::Lost(LossReason::NodeDeleted)
            }
            Reply::Failed(_) => {
                // Still held; the retry timer sets the watch again.
                self.forget_own_watch();
                self.retry_later(cx);
                Progress::Pending
            }
            other => unexpected("stat", other),
        }
    }

    /// The stat+watch on our own node set while not (yet) held. Our node
    /// gone: look at the children again (which finds it gone and starts
    /// over). No answer: we are granted the slow way, by listing.
    fn on_own_watch_before_grant(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Stat { .. } => {
                self.own_watch_set = true;
                Progress::Pending
            }
            Reply::NoNode => {
                self.forget_own_watch();
                self.look_again_if_watching(cx);
                Progress::Pending
            }
            Reply::Failed(_) => {
                self.forget_own_watch();
                Progress::Pending
            }
            other => unexpected("stat", other),
        }
    }

    /// Our own node changed (deleted by someone) before the grant: if we
    /// are waiting, look at the children again instead of waiting on.
    fn look_again_if_watching(&mut self, cx: &mut Cx<'_>) {
        if matches!(self.phase, Phase::Watching { .. }) {
            self.unwatch_predecessor(cx);
            self.send_list(cx, false);
        }
    }

    /// The delete of our node on leaving: already gone is as good as deleted.
    fn on_deleted(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Done | Reply::NoNode => self.finish(),
            Reply::Failed(_) => self.on_failure(cx, Phase::Deleting { req: None }),
            other => unexpected("delete", other),
        }
    }

    /// The connection dropped; the session may live on. A holder keeps the
    /// lock until the session could have expired unseen, then is told.
    fn on_disconnected(&mut self, cx: &mut Cx<'_>) -> Progress {
        self.down_since.get_or_insert(cx.now);
        if self.phase == Phase::Held {
            if let Some(at) = self.disconnection_deadline(cx) {
                self.timers.set(Timer::Loss, at);
            }
        }
        Progress::Pending
    }

    /// The session is gone, and our ephemeral node with it: a holder has
    /// lost the lock, a leaver is done, a contender starts over once a new
    /// session is up.
    fn on_session_expired(&mut self) -> Progress {
        self.node = None;
        match (self.goal, &self.phase) {
            (_, Phase::Finished) => Progress::Finished,
            (_, Phase::Held) => {
                self.timers.clear_all();
                Progress::Lost(LossReason::SessionExpired)
            }
            (Goal::Leave, _) => self.finish(),
            (Goal::Acquire, _) => {
                self.timers.clear_all();
                self.phase = Phase::AwaitingSession;
                Progress::Pending
            }
        }
    }

    /// Connected again (same session, or a new one after an expiry): the
    /// loss deadline is off, and whatever waited for a retry goes now.
    fn on_reconnected(&mut self, cx: &mut Cx<'_>) -> Progress {
        self.down_since = None;
        self.timers.clear(Timer::Loss);
        self.backoff.reset();
        match self.phase.clone() {
            Phase::AwaitingSession => self.restart(cx),
            Phase::Recovering { list: None } => self.send_list(cx, true),
            // A watch may have fired while we were away: look again.
            Phase::Listing { list: None } => self.send_list(cx, false),
            Phase::Watching { .. } => {
                self.unwatch_predecessor(cx);
                self.send_list(cx, false);
            }
            Phase::Held if self.own_watch.is_none() => self.watch_own_node(cx),
            Phase::ReadingOwnNode { req: None } | Phase::Deleting { req: None } => {
                self.timers.clear(Timer::Retry);
                self.on_timer(cx, Timer::Retry);
            }
            _ => {}
        }
        Progress::Pending
    }
}

/// A reply of a kind the request cannot get: the driver is broken.
fn unexpected(request: &str, reply: Reply) -> Progress {
    Progress::Fatal(Error::Protocol(format!("unexpected {request} reply {reply:?}")))
}

impl Claim for ZkClaim {
    fn begin(&mut self, cx: &mut Cx<'_>) {
        self.send_create(cx);
    }

    fn owns(&self, id: RequestId) -> bool {
        if self.own_watch == Some(id) && self.phase != Phase::Finished {
            return true;
        }
        match &self.phase {
            Phase::Creating { create, list } => *create == Some(id) || *list == Some(id),
            Phase::Recovering { list } | Phase::Listing { list } => *list == Some(id),
            Phase::ReadingOwnNode { req } | Phase::Deleting { req } => *req == Some(id),
            Phase::Watching { req } => *req == id,
            Phase::Held | Phase::AwaitingSession | Phase::Finished => false,
        }
    }

    fn on_reply(&mut self, cx: &mut Cx<'_>, id: RequestId, reply: Reply) -> Progress {
        // A throttled or read-only server is retried like a request that got
        // no answer; a try without waiting has no time to retry and reports it.
        let reply = self.refusals.filter(cx.cfg.backend, reply);
        let progress = match self.phase.clone() {
            Phase::Creating { create: Some(c), list } if c == id => self.on_created(cx, list, reply),
            Phase::Creating { create, list: Some(l) } if l == id => self.on_pipelined_children(cx, create, l, reply),
            Phase::Recovering { list: Some(l) } if l == id => self.on_recovery_children(cx, reply),
            Phase::ReadingOwnNode { req: Some(r) } if r == id => self.on_own_node_read(cx, reply),
            Phase::Listing { list: Some(l) } if l == id => self.on_children(cx, reply),
            Phase::Watching { req } if req == id => self.on_predecessor_stat(cx, reply),
            Phase::Held if self.own_watch == Some(id) => self.on_own_watch_set(cx, reply),
            _ if self.own_watch == Some(id) => self.on_own_watch_before_grant(cx, reply),
            Phase::Deleting { req: Some(r) } if r == id => self.on_deleted(cx, reply),
            _ => Progress::Pending,
        };
        // Reported once the claim is in its retry state, which give_up leaves
        // cleanly (finding and deleting a node the refused request may follow).
        match (self.wait, self.goal, self.refusals.latest()) {
            (false, Goal::Acquire, Some(text)) if self.phase != Phase::Held => Progress::Unavailable(text.to_owned()),
            _ => progress,
        }
    }

    fn on_notification(&mut self, cx: &mut Cx<'_>, n: &Notification) -> Progress {
        match (n, &self.phase) {
            (Notification::NodeDeleted { id }, Phase::Watching { req }) if id == req => {
                return self.on_predecessor_gone(cx);
            }
            (Notification::WatchFired { id }, Phase::Watching { req }) if id == req => {
                self.send_list(cx, false);
            }
            // The contenders changed while we held the lock (one came or
            // went, or our node was deleted): watch our own node now, whose
            // answer says which (the lock's parent goes only once it is empty).
            (Notification::WatchFired { id } | Notification::NodeDeleted { id }, Phase::Held)
                if self.own_watch == Some(*id) && self.own_watch_on_parent =>
            {
                self.forget_own_watch();
                self.watch_own_node(cx);
            }
            // Our node changed while we held it: deleted by someone else
            // (the driver does not report the session's end here, and nobody
            // writes a lock node's data), so the next contender may be
            // granted now.
            (Notification::WatchFired { id } | Notification::NodeDeleted { id }, Phase::Held)
                if self.own_watch == Some(*id) =>
            {
                self.timers.clear_all();
                return Progress::Lost(LossReason::NodeDeleted);
            }
            // Our own node changed before the grant: nobody but us deletes
            // it while the session lives, so someone did; do not count on it.
            (Notification::WatchFired { id } | Notification::NodeDeleted { id }, _) if self.own_watch == Some(*id) => {
                self.forget_own_watch();
                self.look_again_if_watching(cx);
            }
            _ => {}
        }
        Progress::Pending
    }

    fn on_connection(&mut self, cx: &mut Cx<'_>, ev: ConnectionEvent) -> Progress {
        match ev {
            ConnectionEvent::Disconnected => self.on_disconnected(cx),
            ConnectionEvent::SessionExpired => self.on_session_expired(),
            ConnectionEvent::Connected => self.on_reconnected(cx),
        }
    }

    fn on_timer(&mut self, cx: &mut Cx<'_>, t: Timer) -> Progress {
        match (t, self.phase.clone()) {
            (Timer::Loss, Phase::Held) => {
                self.timers.clear_all();
                Progress::Lost(LossReason::Disconnected)
            }
            (Timer::Watchdog, Phase::Held) => self.on_watchdog(cx),
            (Timer::Retry, Phase::Held) => {
                self.watch_own_node(cx);
                Progress::Pending
            }
            (Timer::Retry, Phase::Recovering { list: None }) => {
                self.send_list(cx, true);
                Progress::Pending
            }
            (Timer::Retry, Phase::Listing { list: None }) => {
                self.send_list(cx, false);
                Progress::Pending
            }
            (Timer::Retry, Phase::ReadingOwnNode { req: None }) => {
                self.send_own_node_read(cx);
                Progress::Pending
            }
            (Timer::Retry, Phase::Deleting { req: None }) => {
                self.send_delete(cx);
                Progress::Pending
            }
            _ => Progress::Pending,
        }
    }

    fn give_up(&mut self, cx: &mut Cx<'_>) {
        if self.goal == Goal::Leave {
            return;
        }
        self.goal = Goal::Leave;
        self.timers.clear_all();
        self.unwatch_predecessor(cx);
        match self.phase {
            // The create's reply will name our node; delete it then.
            Phase::Creating { create: Some(_), .. } => {}
            Phase::AwaitingSession | Phase::Finished => {
                self.phase = Phase::Finished;
            }
            Phase::Recovering { list: Some(_) } => {}
            _ => self.send_delete(cx),
        }
    }

    fn timers(&mut self) -> &mut Timers {
        &mut self.timers
    }

    fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    fn describe(&self) -> String {
        self.node.as_ref().map(|(n, _)| n.clone()).unwrap_or_else(|| self.prefix())
    }

    fn refusal(&self) -> Option<&str> {
        self.refusals.latest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::Outbox;
    use crate::io::{Op, TransportError};
    use crate::{Backend, Instant, LockConfig};

    /// A claim given up while it looks for the node of a create whose reply
    /// was lost, and whose node then turns out to be gone, has nothing left
    /// on the server: it finishes without a new create or a delete. (The
    /// property run never reaches this path.)
    #[test]
    fn leaving_while_recovering_finishes_when_the_found_node_is_gone() {
        let cfg = LockConfig::new(Backend::ZooKeeper);
        let mut out = Outbox::default();
        let t0 = Instant::from_millis(0);
        let mut claim = ZkClaim::new("/locks/x".into(), ZkRole::Mutex, Nonce(7), Vec::new(), true, None);
        let mut cx = Cx { now: t0, out: &mut out, cfg: &cfg };
        claim.begin(&mut cx);
        let create = cx.out.pop().unwrap();
        let _pipelined_list = cx.out.pop().unwrap();
        let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
        let ours = format!("{}0000000003", path.rsplit('/').next().unwrap());
        let lost = Reply::Failed(TransportError { message: "timed out".into() });
        assert_eq!(claim.on_reply(&mut cx, create.id, lost), Progress::Pending);

        let retry_at = claim.timers().get(Timer::Retry).unwrap();
        let mut cx = Cx { now: retry_at, out: &mut out, cfg: &cfg };
        claim.on_timer(&mut cx, Timer::Retry);
        let list = cx.out.pop().unwrap();
        assert!(matches!(list.op, Op::ZooKeeper(ZkOp::GetChildren { .. })), "{list:?}");
        claim.give_up(&mut cx);
        assert!(cx.out.pop().is_none(), "the list's answer decides what to delete");

        let children = Reply::Children(vec!["other-lock-0000000001".into(), ours.clone()]);
        assert_eq!(claim.on_reply(&mut cx, list.id, children), Progress::Pending);
        let stat = cx.out.pop().unwrap();
        assert!(
            matches!(&stat.op, Op::ZooKeeper(ZkOp::Stat { path, watch: false }) if path.ends_with(&ours)),
            "{stat:?}"
        );
        assert_eq!(claim.on_reply(&mut cx, stat.id, Reply::NoNode), Progress::Finished);
        assert!(claim.is_finished());
        assert_eq!(cx.out.pop(), None, "no create and no delete after the node is gone");
    }
}
