//! `LockMachine`: one lock name as seen by one client. It owns the local
//! side (who holds it here and how often, who waits here and until when)
//! and delegates the server side to a backend claim ([`crate::redis`],
//! [`crate::zk`]).
//!
//! Local waiters queue here and only the first of them contends on the
//! server, so many threads of one process cost one server-side waiter, and
//! a release wakes one of them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::claim::{Claim, Cx, Outbox, Progress, WriteHold};
use crate::io::{Command, ConnectionEvent, Event, Notification, ReleaseProgress, Reply};
use crate::redis::{RedisClaim, RedisKeys, RedisRole, Terms};
use crate::time::Clock;
use crate::zk::{ZkClaim, ZkPermitsClaim, ZkRole};
use crate::{
    holder_id, Backend, Error, FencingToken, Instant, LockConfig, LockMode, LockName, LossReason, Nonce, OwnerId,
    PermitRequest, ReleaseId, RequestId, Ticket,
};

/// How to acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    /// Give up at this instant (an [`Event::Failed`] with [`Error::Timeout`]).
    pub deadline: Option<Instant>,
    /// Try once without waiting: [`Error::WouldBlock`] if someone else holds it.
    pub no_wait: bool,
    /// Redis: this acquire's lease (and its queue entry's TTL), instead of
    /// the config's. A re-entry keeps the lease of the grant it enters.
    pub lease: Option<Duration>,
    /// A semaphore acquire ([`LockMode::Semaphore`]): how many of how many
    /// permits. Required there, refused elsewhere.
    pub permits: Option<PermitRequest>,
    /// Tell the holder of a loss this much earlier than the margins alone
    /// would: time to stop its work (a command's exit after SIGTERM)
    /// before the server can grant anyone else. Redis: at most a third of
    /// the lease; ZooKeeper: less than [`LockConfig::disconnect_grace`].
    pub stop_margin: Duration,
}

/// Where the lock lives on its backend, worked out once per machine.
#[derive(Debug)]
enum Layout {
    Redis(Arc<RedisKeys>),
    ZooKeeper(Arc<str>),
}

#[derive(Debug)]
struct Waiter {
    ticket: Ticket,
    owner: OwnerId,
    deadline: Option<Instant>,
    no_wait: bool,
    lease: Option<Duration>,
    permits: Option<PermitRequest>,
    stop_margin: Duration,
    nonce: Nonce,
    /// A read acquire by the owner's write holder (a downgrade): the
    /// write hold ([`LockMachine::write_hold`]) it is granted beside.
    beside_write: Option<WriteHold>,
}

/// The holds of one lost grant that have not been released yet: each of
/// those releases reports the loss.
#[derive(Debug, Clone, Copy)]
struct LostHolds {
    owner: OwnerId,
    token: FencingToken,
    reason: LossReason,
    remaining: u32,
}

#[derive(Debug, Clone, Copy)]
struct Holder {
    owner: OwnerId,
    count: u32,
    token: FencingToken,
}

/// A server-side claim with what the machine needs to know about it.
struct TrackedClaim {
    claim: Box<dyn Claim + Send + Sync>,
    /// The ticket the claim is for, while it is still wanted.
    ticket: Option<Ticket>,
    /// Set once the application released: its end is reported as `Released`.
    release: Option<ReleaseId>,
    /// A failed acquire (a try that found the lock taken, a deadline that
    /// passed) reported once the claim has left the server, so the caller
    /// never finds its own failed attempt still queued there.
    failure: Option<PendingFailure>,
}

/// An acquire's failure held back until its claim's cleanup ends, or until
/// `report_by` if the server does not answer.
#[derive(Debug)]
struct PendingFailure {
    ticket: Ticket,
    owner: OwnerId,
    error: Error,
    report_by: Instant,
}

/// How long a failed acquire's report waits for its cleanup when the server
/// does not answer over a connection that looks up (with the connection
/// known down it does not wait at all): the cleanup goes on afterwards, and
/// the caller is not held past its deadline for longer than this.
const CLEANUP_REPORT_WAIT: Duration = Duration::from_secs(1);

impl PendingFailure {
    fn new(now: Instant, ticket: Ticket, owner: OwnerId, error: Error) -> Self {
        PendingFailure { ticket, owner, error, report_by: now.saturating_add(CLEANUP_REPORT_WAIT) }
    }
}

impl std::fmt::Debug for TrackedClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedClaim").field("claim", &self.claim.describe()).field("ticket", &self.ticket).finish()
    }
}

/// The lifecycle of one lock for one client, without I/O: the per-lock
/// piece a [`crate::LockTable`] runs for each name. See the crate docs for
/// the drive contract (the table's) and how the table drains a machine.
#[derive(Debug)]
pub struct LockMachine {
    cfg: LockConfig,
    name: LockName,
    mode: LockMode,
    layout: Layout,
    client_id: Nonce,
    clock: Clock,
    out: Outbox,
    events: VecDeque<Event>,
    holder: Option<Holder>,
    waiters: VecDeque<Waiter>,
    /// The claim for `holder`, or for the first waiter while it contends.
    active: Option<TrackedClaim>,
    /// Claims that are only cleaning up (released, cancelled, lost).
    background: Vec<TrackedClaim>,
    /// Lost grants whose holds have not all been released. Kept per grant
    /// (not cleared when the owner acquires again), so a stale guard's
    /// release reports its own loss and never ends the owner's newer hold.
    lost: Vec<LostHolds>,
    next_ticket: u64,
    next_release: u64,
    /// Since when the connection has been down (the first `Disconnected`
    /// not yet followed by `Connected`). A claim started meanwhile gets it,
    /// so its grant's loss deadline counts from the disconnection.
    down_since: Option<Instant>,
    fatal: Option<Error>,
    closed: bool,
}

impl LockMachine {
    /// A machine for `name`. `client_id` is the client's 128-bit random id
    /// (the Redis field prefix and ZooKeeper node data).
    pub fn new(cfg: LockConfig, name: LockName, client_id: Nonce) -> Result<Self, Error> {
        Self::with_mode(cfg, name, LockMode::Exclusive, client_id)
    }

    /// A machine for one mode of `name`: the mutex, the write half of a
    /// read-write lock, or the read half for one owner (readers of one
    /// client hold at once, each with its own machine).
    pub fn with_mode(cfg: LockConfig, name: LockName, mode: LockMode, client_id: Nonce) -> Result<Self, Error> {
        cfg.validate()?;
        if cfg.backend == Backend::Redis && cfg.cluster {
            crate::redis::keys::refuse_split_keys_on_a_cluster(&name, mode)?;
        }
        let layout = match cfg.backend {
            Backend::Redis if mode.is_read_write() => Layout::Redis(Arc::new(RedisKeys::of_read_write(&name))),
            Backend::Redis if mode == LockMode::Semaphore => Layout::Redis(Arc::new(RedisKeys::of_semaphore(&name))),
            Backend::Redis => Layout::Redis(Arc::new(RedisKeys::of(&name))),
            Backend::ZooKeeper => Layout::ZooKeeper(crate::zk::lock_path(&name).into()),
        };
        Ok(LockMachine {
            cfg,
            name,
            mode,
            layout,
            client_id,
            clock: Clock::default(),
            out: Outbox::default(),
            events: VecDeque::new(),
            holder: None,
            waiters: VecDeque::new(),
            active: None,
            background: Vec::new(),
            lost: Vec::new(),
            next_ticket: 0,
            next_release: 0,
            down_since: None,
            fatal: None,
            closed: false,
        })
    }

    /// Redis: the master now lists `replicas_seen` replicas; this lock's
    /// next grant or renewal asks the acknowledgements that makes
    /// ([`LockConfig::see_replicas`]).
    pub fn see_replicas(&mut self, replicas_seen: usize) {
        self.cfg.see_replicas(replicas_seen);
    }

    // ---- getters -------------------------------------------------------

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Which lock of the name this machine runs (mutex, read or write half, semaphore).
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// `owner`'s current grant, if it holds the lock here: how the server
    /// records it and its token (what a downgrade is granted beside).
    pub(crate) fn write_hold(&self, owner: OwnerId) -> Option<WriteHold> {
        let h = self.holder.filter(|h| h.owner == owner)?;
        self.active.as_ref().map(|t| WriteHold { record: t.claim.describe(), token: h.token })
    }

    /// The machine's settings.
    pub fn config(&self) -> &LockConfig {
        &self.cfg
    }

    /// The local holder, its hold count and fencing token.
    pub fn holder(&self) -> Option<(OwnerId, u32, FencingToken)> {
        self.holder.map(|h| (h.owner, h.count, h.token))
    }

    /// Why `owner`'s newest lost grant was lost, while some of its holds
    /// are unreleased (each of their releases reports [`Error::Lost`]).
    pub fn unreleased_loss(&self, owner: OwnerId) -> Option<LossReason> {
        self.lost.iter().rev().find(|l| l.owner == owner).map(|l| l.reason)
    }

    /// Does `owner` hold the lock?
    pub fn is_held_by(&self, owner: OwnerId) -> bool {
        self.holder.is_some_and(|h| h.owner == owner)
    }

    /// Local acquires still waiting.
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// How `owner`'s grants are recorded on the server ([`holder_id`]).
    pub fn holder_id(&self, owner: OwnerId) -> String {
        holder_id(self.client_id, owner)
    }

    /// True when nothing is held, awaited or being cleaned up, no output
    /// is pending and no loss is left to report: the driver may drop the machine.
    pub fn is_idle(&self) -> bool {
        self.lost.is_empty()
            && self.holder.is_none()
            && self.waiters.is_empty()
            && self.active.is_none()
            && self.background.is_empty()
            && self.events.is_empty()
    }

    /// True while something of this machine's is still on its way to or
    /// from the server (a claim contending, held or cleaning up), or an event
    /// is undelivered. [`Self::is_idle`] is this plus "no loss left to
    /// report": a closed client waits for this one only.
    pub fn has_server_work(&self) -> bool {
        self.active.is_some() || !self.background.is_empty() || !self.events.is_empty()
    }

    // ---- application commands -----------------------------------------

    /// Asks for the lock on behalf of `owner`. Re-entry by the holder is
    /// granted at once with no I/O. The outcome arrives as
    /// [`Event::Granted`] or [`Event::Failed`] with the returned ticket.
    /// `nonce` must be fresh OS randomness: it names a ZooKeeper node.
    pub fn acquire(
        &mut self,
        now: Instant,
        owner: OwnerId,
        opts: AcquireOptions,
        nonce: Nonce,
    ) -> Result<Ticket, Error> {
        let ticket = Ticket(self.next_ticket + 1);
        self.acquire_as(ticket, now, owner, opts, nonce, None)?;
        self.next_ticket += 1;
        Ok(ticket)
    }

    /// [`Self::acquire`] with a ticket the caller allocated (the lock
    /// table's, unique across its machines), and for a read acquire by the
    /// owner's write holder, the writer's server record (a downgrade).
    pub(crate) fn acquire_as(
        &mut self,
        ticket: Ticket,
        now: Instant,
        owner: OwnerId,
        opts: AcquireOptions,
        nonce: Nonce,
        beside_write: Option<WriteHold>,
    ) -> Result<(), Error> {
        let now = self.clock.observe(now);
        self.run_due(now);
        self.usable()?;
        if let Some(lease) = opts.lease {
            crate::config::validate_lease(lease)?;
        }
        self.check_permits(owner, opts.permits)?;
        self.check_stop_margin(opts.stop_margin, opts.lease)?;
        if self.mode == LockMode::Leader && (self.is_held_by(owner) || self.waiters.iter().any(|w| w.owner == owner)) {
            // A leadership is not re-entrant: a second campaign would share
            // the first's term and end with its resign.
            return Err(Error::InvalidOption("this participant already leads or campaigns".into()));
        }
        if let Some(h) = self.holder.as_mut().filter(|h| h.owner == owner) {
            h.count = h.count.checked_add(1).ok_or_else(|| Error::InvalidOption("hold count overflow".into()))?;
            self.events.push_back(Event::Granted { ticket, owner, token: h.token, reentry: h.count - 1 });
            return Ok(());
        }
        if opts.no_wait && (self.holder.is_some() || !self.waiters.is_empty()) {
            self.events.push_back(Event::Failed { ticket, owner, error: Error::WouldBlock });
            return Ok(());
        }
        if opts.deadline.is_some_and(|d| d <= now) && !opts.no_wait {
            self.events.push_back(Event::Failed { ticket, owner, error: Error::Timeout });
            return Ok(());
        }
        let w = Waiter {
            ticket,
            owner,
            deadline: opts.deadline,
            no_wait: opts.no_wait,
            lease: opts.lease,
            permits: opts.permits,
            stop_margin: opts.stop_margin,
            nonce,
            beside_write,
        };
        self.waiters.push_back(w);
        self.start_next_claim(now);
        Ok(())
    }

    /// Ends one hold by `owner`: its current grant if it holds the lock,
    /// else one hold of a grant it lost. [`Error::NotHeld`] if it has
    /// neither (the lock stays as it was); [`Error::Lost`] for each hold of
    /// a lost grant.
    pub fn release(&mut self, now: Instant, owner: OwnerId) -> Result<ReleaseProgress, Error> {
        self.release_hold(now, owner, None)
    }

    /// Ends one hold of `owner`'s grant with fencing token `token` (what a
    /// guard releases): if that grant was lost, [`Error::Lost`], and the
    /// owner's newer grant, if any, is untouched. `None` is [`Self::release`].
    pub fn release_hold(
        &mut self,
        now: Instant,
        owner: OwnerId,
        token: Option<FencingToken>,
    ) -> Result<ReleaseProgress, Error> {
        let id = ReleaseId(self.next_release + 1);
        let progress = self.release_hold_as(id, now, owner, token)?;
        if progress == ReleaseProgress::Releasing(id) {
            self.next_release += 1;
        }
        Ok(progress)
    }

    /// [`Self::release_hold`] naming the release `id` if the last hold ends
    /// (the lock table's ids are unique across its machines).
    pub(crate) fn release_hold_as(
        &mut self,
        id: ReleaseId,
        now: Instant,
        owner: OwnerId,
        token: Option<FencingToken>,
    ) -> Result<ReleaseProgress, Error> {
        let now = self.clock.observe(now);
        self.run_due(now);
        let matches = |o: OwnerId, t: FencingToken| o == owner && token.is_none_or(|want| want == t);
        if !self.holder.is_some_and(|h| matches(h.owner, h.token)) {
            let Some(i) = self.lost.iter().position(|l| matches(l.owner, l.token)) else {
                return Err(self.fatal.clone().unwrap_or(Error::NotHeld));
            };
            let reason = self.lost[i].reason;
            self.lost[i].remaining -= 1;
            if self.lost[i].remaining == 0 {
                self.lost.remove(i);
            }
            return Err(Error::Lost(reason));
        }
        let h = self.holder.as_mut().expect("checked above");
        if h.count > 1 {
            h.count -= 1;
            return Ok(ReleaseProgress::StillHeld { remaining: h.count });
        }
        self.holder = None;
        if let Some(mut tracked) = self.active.take() {
            tracked.release = Some(id);
            tracked.ticket = None;
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            tracked.claim.give_up(&mut cx);
            self.move_to_background(tracked);
        } else {
            self.events.push_back(Event::Released { id });
        }
        self.start_next_claim(now);
        Ok(ReleaseProgress::Releasing(id))
    }

    /// Withdraws a pending acquire. Whatever it put on the server is
    /// removed in the background. No event follows for this ticket.
    /// Returns false if the ticket is not waiting (already granted or failed).
    pub fn cancel(&mut self, now: Instant, ticket: Ticket) -> bool {
        let now = self.clock.observe(now);
        self.run_due(now);
        let Some(pos) = self.waiters.iter().position(|w| w.ticket == ticket) else {
            return false;
        };
        self.waiters.remove(pos);
        self.abandon_active_for(now, ticket);
        self.start_next_claim(now);
        true
    }

    /// Withdraws a pending acquire as its deadline passing would: it fails
    /// with [`Error::Cancelled`] once whatever it put on the server is gone
    /// (at once if it put nothing there; when the server does not confirm
    /// soon, after a bounded wait, and the cleanup goes on). A caller that
    /// waits for this outcome never finds its own withdrawn attempt still
    /// queued; Curator's and Redisson's interrupted acquires leave nothing
    /// queued either. [`Self::cancel`] is the same without the report, for
    /// a caller gone.
    /// False if `ticket` waits no more: its outcome (perhaps a grant) was
    /// already reported.
    pub fn withdraw(&mut self, now: Instant, ticket: Ticket) -> bool {
        let now = self.clock.observe(now);
        self.run_due(now);
        let Some(pos) = self.waiters.iter().position(|w| w.ticket == ticket) else {
            return false;
        };
        let owner = self.waiters[pos].owner;
        self.waiters.remove(pos);
        self.fail_after_cleanup(now, ticket, owner, Error::Cancelled);
        self.start_next_claim(now);
        true
    }

    /// Stops the machine: waiters fail with [`Error::Closed`], the holder's
    /// lock is released. Cleanup keeps running until [`Self::is_idle`].
    pub fn close(&mut self, now: Instant) {
        let now = self.clock.observe(now);
        self.closed = true;
        for w in std::mem::take(&mut self.waiters) {
            self.abandon_active_for(now, w.ticket);
            self.events.push_back(Event::Failed { ticket: w.ticket, owner: w.owner, error: Error::Closed });
        }
        // Told before the release that gives the lock away is sent (events
        // are drained before commands).
        if self.lose_holder(LossReason::Closed) {
            if let Some(mut tracked) = self.active.take() {
                let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
                tracked.claim.give_up(&mut cx);
                tracked.ticket = None;
                self.move_to_background(tracked);
            }
        }
    }

    // ---- inputs from the driver ---------------------------------------

    /// Feeds the reply to command `id`. Replies nobody waits for any more
    /// (a cancelled attempt's, an unsubscribe's) are dropped.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        let now = self.clock.observe(now);
        self.run_due(now);
        if self.active.as_ref().is_some_and(|s| s.claim.owns(id)) {
            let mut tracked = self.active.take().expect("checked above");
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            let p = tracked.claim.on_reply(&mut cx, id, reply);
            self.apply_active_progress(now, tracked, p);
        } else if let Some(i) = self.background.iter().position(|s| s.claim.owns(id)) {
            let mut tracked = self.background.swap_remove(i);
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            let p = tracked.claim.on_reply(&mut cx, id, reply);
            self.apply_background_progress(tracked, p);
        }
        self.start_next_claim(now);
    }

    /// Feeds a pub/sub message or a fired watch.
    pub fn handle_notification(&mut self, now: Instant, n: Notification) {
        let now = self.clock.observe(now);
        self.run_due(now);
        self.for_each_claim(now, |claim, cx| claim.on_notification(cx, &n));
    }

    /// Feeds a change of connection or session state.
    pub fn handle_connection(&mut self, now: Instant, ev: ConnectionEvent) {
        let now = self.clock.observe(now);
        self.run_due(now);
        self.down_since = match ev {
            ConnectionEvent::Disconnected => self.down_since.or(Some(now)),
            ConnectionEvent::Connected => None,
            _ => self.down_since,
        };
        self.for_each_claim(now, |claim, cx| claim.on_connection(cx, ev));
    }

    /// Runs every timer due at `now`: acquire deadlines, renewals, loss
    /// deadlines, retries.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock.observe(now);
        self.run_due(now);
    }

    /// Runs what is due at `now`. Every input calls it first, so a holder
    /// whose deadline passed while the process was stalled (a GC pause, a
    /// driver that did not get to its timer) learns of the loss before the
    /// input is handled: a release then reports it.
    fn run_due(&mut self, now: Instant) {
        if self.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        // TrackedClaim timers first: a loss due now must be reported before anything else.
        self.for_each_claim(now, |claim, cx| {
            let mut last = Progress::Pending;
            for t in claim.timers().take_due(cx.now) {
                let p = claim.on_timer(cx, t);
                if p != Progress::Pending {
                    last = p;
                }
            }
            last
        });
        let expired: Vec<(Ticket, OwnerId)> =
            self.waiters.iter().filter(|w| w.deadline.is_some_and(|d| d <= now)).map(|w| (w.ticket, w.owner)).collect();
        // A server that kept refusing the claim made for the waiters is named:
        // it is why they waited in vain (not a holder, here or elsewhere).
        let refused = self.active.as_ref().filter(|_| self.holder.is_none()).and_then(|s| s.claim.refusal());
        let refused = refused.map(str::to_owned);
        for (ticket, owner) in expired {
            let error = refused.clone().map_or(Error::Timeout, Error::Unavailable);
            self.waiters.retain(|w| w.ticket != ticket);
            self.fail_after_cleanup(now, ticket, owner, error);
        }
        // Failures whose cleanup the server has not confirmed in time.
        for tracked in &mut self.background {
            if let Some(f) = tracked.failure.take_if(|f| f.report_by <= now) {
                self.events.push_back(Event::Failed { ticket: f.ticket, owner: f.owner, error: f.error });
            }
        }
        self.start_next_claim(now);
    }

    // ---- outputs -------------------------------------------------------

    /// The next command to send. Drain after every input.
    #[must_use]
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop()
    }

    /// The next event for the application. Drain after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] must next be called, if ever.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let tracked_claims = self.active.iter_mut().chain(self.background.iter_mut());
        let claim_next = tracked_claims.filter_map(|s| s.claim.timers().next()).min();
        let waiter_next = self.waiters.iter().filter_map(|w| w.deadline).min();
        let failure_next = self.background.iter().filter_map(|s| s.failure.as_ref().map(|f| f.report_by)).min();
        [claim_next, waiter_next, failure_next].into_iter().flatten().min()
    }

    // ---- internals -----------------------------------------------------

    /// A semaphore acquire must say how many permits, and nothing else may.
    /// Each permit grant is its own owner's (see [`LockMode::Semaphore`]):
    /// a second acquire by one owner would be taken for a re-entry and get
    /// no permits of its own, so it is refused.
    fn check_permits(&self, owner: OwnerId, permits: Option<PermitRequest>) -> Result<(), Error> {
        match (self.mode, permits) {
            (LockMode::Semaphore, Some(p)) => {
                p.validate()?;
                if self.is_held_by(owner) || self.waiters.iter().any(|w| w.owner == owner) {
                    return Err(Error::InvalidOption("each semaphore acquire needs an owner of its own".into()));
                }
                Ok(())
            }
            (LockMode::Semaphore, None) => Err(Error::InvalidOption("a semaphore acquire needs a permit count".into())),
            (_, Some(_)) => Err(Error::InvalidOption("only a semaphore acquire takes a permit count".into())),
            (_, None) => Ok(()),
        }
    }

    /// A stop margin must leave a loss deadline after the next renewal
    /// (Redis) or after the disconnection is reported (ZooKeeper); a larger
    /// one would report every hold lost while it is fine.
    fn check_stop_margin(&self, margin: Duration, lease: Option<Duration>) -> Result<(), Error> {
        if margin.is_zero() {
            return Ok(());
        }
        let (bound, what) = match self.cfg.backend {
            Backend::Redis => (lease.unwrap_or(self.cfg.lease) / 3, "a third of the lease"),
            Backend::ZooKeeper => {
                (self.cfg.disconnect_grace().saturating_sub(Duration::from_millis(1)), "a third of the session timeout")
            }
        };
        if margin > bound {
            return Err(Error::InvalidOption(format!(
                "the stop margin ({} ms) must be less than {what} ({} ms)",
                margin.as_millis(),
                bound.as_millis()
            )));
        }
        Ok(())
    }

    fn usable(&self) -> Result<(), Error> {
        if let Some(e) = &self.fatal {
            return Err(e.clone());
        }
        if self.closed {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Starts a claim for the first waiter when nothing else holds or contends.
    fn start_next_claim(&mut self, now: Instant) {
        if self.holder.is_some() || self.active.is_some() || self.fatal.is_some() {
            return;
        }
        let Some(w) = self.waiters.front() else { return };
        let holder = self.holder_id(w.owner);
        if self.background.iter().any(|s| s.claim.shared_identity() == Some(holder.as_str())) {
            // The same owner's previous claim is still leaving the server;
            // start once it is gone (its end calls start_next_claim again).
            return;
        }
        let claim: Box<dyn Claim + Send + Sync> = match &self.layout {
            Layout::Redis(keys) => {
                let (lease, waiter_ttl) = self.cfg.lease_and_waiter_ttl(w.lease);
                let terms = Terms { lease, waiter_ttl, stop_margin: w.stop_margin };
                let role = RedisRole::of(self.mode, w.permits);
                Box::new(RedisClaim::new(keys.clone(), role, holder, w.nonce.0, !w.no_wait, terms))
            }
            Layout::ZooKeeper(path) => match (ZkRole::of(self.mode, w.beside_write.clone()), w.permits) {
                (Some(role), _) => Box::new(
                    ZkClaim::new(path.clone(), role, w.nonce, holder.into_bytes(), !w.no_wait, self.down_since)
                        .with_stop_margin(w.stop_margin),
                ),
                (None, permits) => {
                    // `check_permits` made sure a semaphore acquire has its ask.
                    let ask = permits.unwrap_or(PermitRequest { total: 1, count: 1 });
                    let data = holder.into_bytes();
                    Box::new(
                        ZkPermitsClaim::new(path.clone(), ask, w.nonce, data, !w.no_wait, self.down_since)
                            .with_stop_margin(w.stop_margin),
                    )
                }
            },
        };
        let mut tracked = TrackedClaim { claim, ticket: Some(w.ticket), release: None, failure: None };
        let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
        tracked.claim.begin(&mut cx);
        self.active = Some(tracked);
    }

    /// If the active claim is for `ticket`, give it up in the background.
    fn abandon_active_for(&mut self, now: Instant, ticket: Ticket) {
        if self.active.as_ref().is_some_and(|s| s.ticket == Some(ticket) && self.holder.is_none()) {
            let mut tracked = self.active.take().expect("checked above");
            tracked.ticket = None;
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            tracked.claim.give_up(&mut cx);
            self.move_to_background(tracked);
        }
    }

    /// The waiter `ticket` fails with `error`: once its claim has left the
    /// server, or at once if it has no claim there, or if the server cannot
    /// confirm that soon (it refuses, or the connection is down): the caller
    /// is told at its deadline and the cleanup goes on in the background.
    fn fail_after_cleanup(&mut self, now: Instant, ticket: Ticket, owner: OwnerId, error: Error) {
        let mut failure = Some(PendingFailure::new(now, ticket, owner, error));
        if self.active.as_ref().is_some_and(|s| s.ticket == Some(ticket) && self.holder.is_none()) {
            let mut tracked = self.active.take().expect("checked above");
            tracked.ticket = None;
            if self.down_since.is_none() && !tracked.claim.refused() {
                tracked.failure = failure.take();
            }
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            tracked.claim.give_up(&mut cx);
            self.move_to_background(tracked);
        }
        if let Some(f) = failure {
            self.events.push_back(Event::Failed { ticket: f.ticket, owner: f.owner, error: f.error });
        }
    }

    fn move_to_background(&mut self, tracked: TrackedClaim) {
        if tracked.claim.is_finished() {
            self.report_end(tracked);
        } else {
            self.background.push(tracked);
        }
    }

    /// A claim has nothing left on the server: the release or the failure
    /// that waited for that is reported now.
    fn report_end(&mut self, tracked: TrackedClaim) {
        if let Some(id) = tracked.release {
            self.events.push_back(Event::Released { id });
        }
        if let Some(f) = tracked.failure {
            self.events.push_back(Event::Failed { ticket: f.ticket, owner: f.owner, error: f.error });
        }
    }

    fn for_each_claim(&mut self, now: Instant, mut f: impl FnMut(&mut dyn Claim, &mut Cx<'_>) -> Progress) {
        if let Some(mut tracked) = self.active.take() {
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            let p = f(tracked.claim.as_mut(), &mut cx);
            self.apply_active_progress(now, tracked, p);
        }
        for mut tracked in std::mem::take(&mut self.background) {
            let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
            let p = f(tracked.claim.as_mut(), &mut cx);
            self.apply_background_progress(tracked, p);
        }
        self.start_next_claim(now);
    }

    /// Applies what the active claim reported.
    fn apply_active_progress(&mut self, now: Instant, mut tracked: TrackedClaim, p: Progress) {
        match p {
            Progress::Pending => self.active = Some(tracked),
            Progress::Granted(token) => {
                let Some(ticket) = tracked.ticket else {
                    // Not wanted any more: should not happen, but never keep it.
                    let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
                    tracked.claim.give_up(&mut cx);
                    return self.move_to_background(tracked);
                };
                let Some(pos) = self.waiters.iter().position(|w| w.ticket == ticket) else {
                    let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
                    tracked.claim.give_up(&mut cx);
                    return self.move_to_background(tracked);
                };
                let w = self.waiters.remove(pos).expect("position is valid");
                self.events.push_back(Event::Granted { ticket, owner: w.owner, token, reentry: 0 });
                // The same owner's other acquires, queued before this grant
                // (two acquires joined in one task), are re-entries now:
                // left in the queue they would wait behind their own owner.
                let mut count = 1;
                self.waiters.retain(|other| {
                    if other.owner != w.owner {
                        return true;
                    }
                    self.events.push_back(Event::Granted {
                        ticket: other.ticket,
                        owner: w.owner,
                        token,
                        reentry: count,
                    });
                    count += 1;
                    false
                });
                self.holder = Some(Holder { owner: w.owner, count, token });
                self.active = Some(tracked);
            }
            Progress::Busy => {
                // The claim is already leaving (Busy is its last word to us).
                if let Some(ticket) = tracked.ticket.take() {
                    if let Some(pos) = self.waiters.iter().position(|w| w.ticket == ticket) {
                        let w = self.waiters.remove(pos).expect("position is valid");
                        tracked.failure = Some(PendingFailure::new(now, ticket, w.owner, Error::WouldBlock));
                    }
                }
                self.move_to_background(tracked);
            }
            Progress::Unavailable(text) => {
                self.fail_ticket(&mut tracked, Error::Unavailable(text));
                let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
                tracked.claim.give_up(&mut cx);
                self.move_to_background(tracked);
            }
            Progress::Refused(error) => {
                self.fail_ticket(&mut tracked, error);
                let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
                tracked.claim.give_up(&mut cx);
                self.move_to_background(tracked);
            }
            Progress::Lost(reason) => {
                self.lose_holder(reason);
                tracked.ticket = None;
                let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
                tracked.claim.give_up(&mut cx);
                self.move_to_background(tracked);
            }
            Progress::Finished => {
                // An active claim only finishes after give_up, which moves it
                // to the background first; treat it as retired.
                self.move_to_background(tracked);
            }
            Progress::Fatal(e) => self.fail(now, tracked, e),
        }
    }

    /// Ends the wait of the tracked's ticket with `error`.
    fn fail_ticket(&mut self, tracked: &mut TrackedClaim, error: Error) {
        if let Some(ticket) = tracked.ticket.take() {
            if let Some(pos) = self.waiters.iter().position(|w| w.ticket == ticket) {
                let w = self.waiters.remove(pos).expect("position is valid");
                self.events.push_back(Event::Failed { ticket, owner: w.owner, error });
            }
        }
    }

    fn apply_background_progress(&mut self, tracked: TrackedClaim, p: Progress) {
        match p {
            Progress::Fatal(_) | Progress::Finished => self.report_end(tracked),
            _ if tracked.claim.is_finished() => self.report_end(tracked),
            _ => self.background.push(tracked),
        }
    }

    /// The holder, if any, lost the lock: it is told, and each of its holds'
    /// releases will report the loss. False if nobody held it.
    fn lose_holder(&mut self, reason: LossReason) -> bool {
        let Some(h) = self.holder.take() else { return false };
        self.lost.push(LostHolds { owner: h.owner, token: h.token, reason, remaining: h.count });
        self.events.push_back(Event::Lost { owner: h.owner, token: h.token, reason });
        true
    }

    /// A protocol error: report it to everyone and refuse further work.
    fn fail(&mut self, now: Instant, mut tracked: TrackedClaim, e: Error) {
        self.fatal = Some(e.clone());
        self.lose_holder(LossReason::Protocol);
        for w in std::mem::take(&mut self.waiters) {
            self.events.push_back(Event::Failed { ticket: w.ticket, owner: w.owner, error: e.clone() });
        }
        let mut cx = Cx { now, out: &mut self.out, cfg: &self.cfg };
        tracked.claim.give_up(&mut cx);
        tracked.ticket = None;
        self.move_to_background(tracked);
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// Drivers share machines across threads.
    #[test]
    fn machine_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::LockMachine>();
    }

    /// Every hold of an owner that lost the lock reports the loss once on
    /// release; then the owner simply does not hold it, and the machine can go.
    #[test]
    fn each_hold_of_a_lost_owner_reports_the_loss() {
        let name = LockName::new("x").unwrap();
        let mut m = LockMachine::new(LockConfig::new(Backend::Redis), name, Nonce(1)).unwrap();
        let t0 = Instant::from_millis(0);
        let owner = OwnerId(1);
        m.acquire(t0, owner, AcquireOptions::default(), Nonce(2)).unwrap();
        let cmd = m.poll_command().unwrap();
        let granted = Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(9)]));
        m.handle_reply(t0, cmd.id, granted);
        m.acquire(t0, owner, AcquireOptions::default(), Nonce(3)).unwrap();
        while m.poll_event().is_some() {}
        let renew_at = m.poll_timeout().unwrap();
        m.handle_timeout(renew_at);
        let renew = m.poll_command().unwrap();
        m.handle_reply(renew_at, renew.id, Reply::Redis(RedisValue::Int(0)));
        assert_eq!(
            m.poll_event(),
            Some(Event::Lost { owner, token: FencingToken(9), reason: LossReason::RenewalRefused })
        );
        assert!(!m.is_idle(), "the loss is not reported to every hold yet");
        assert_eq!(m.release(renew_at, owner), Err(Error::Lost(LossReason::RenewalRefused)));
        assert_eq!(m.release(renew_at, owner), Err(Error::Lost(LossReason::RenewalRefused)));
        assert_eq!(m.release(renew_at, owner), Err(Error::NotHeld));
    }

    /// A ZooKeeper holder whose process stalls longer than a third of the
    /// session timeout (no heartbeats meanwhile) is told on its next input:
    /// here, the release reports the loss instead of succeeding.
    #[test]
    fn a_stalled_zookeeper_holder_learns_on_its_next_call() {
        let name = LockName::new("/x").unwrap();
        let cfg = LockConfig::new(Backend::ZooKeeper);
        let session = cfg.session_timeout;
        let mut m = LockMachine::new(cfg, name, Nonce(1)).unwrap();
        let t0 = Instant::from_millis(0);
        let owner = OwnerId(1);
        m.acquire(t0, owner, AcquireOptions::default(), Nonce(2)).unwrap();
        let create = m.poll_command().unwrap();
        let list = m.poll_command().unwrap();
        let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
        let node = format!("{path}0000000007");
        let child = node.rsplit('/').next().unwrap().to_owned();
        m.handle_reply(t0, create.id, Reply::Created { path: node, czxid: 40 });
        m.handle_reply(t0, list.id, Reply::Children(vec![child]));
        assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
        // On time, the watchdog just re-arms.
        let on_time = m.poll_timeout().unwrap();
        m.handle_timeout(on_time);
        assert_eq!(m.poll_event(), None);
        // Then the process stalls for a whole session timeout.
        let resumed = on_time.saturating_add(session);
        assert_eq!(m.release(resumed, owner), Err(Error::Lost(LossReason::Paused)));
        assert_eq!(m.poll_event(), Some(Event::Lost { owner, token: FencingToken(40), reason: LossReason::Paused }));
    }
}
