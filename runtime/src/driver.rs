//! The executor around the core: one per `Client`. It owns every
//! `LockMachine` of the client behind one mutex, feeds them replies,
//! notifications, connection changes and timeouts, routes their events to
//! the waiting callers, and runs their commands through the transport.
//!
//! Hot path: the caller's own task starts its commands and drives the
//! replies until its answer arrives (no hop through a driver task); whatever
//! is still in flight then is handed to a spawned task, so dropping the
//! caller never strands a reply. One timer task serves every lock's
//! deadlines (renewals, loss, retries), so there is no task or thread per lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use polylock_core::{
    AcquireOptions, ConnectionEvent, Event, FencingToken, Instant, LockConfig, LockMachine, LockName, LossReason,
    Nonce, Notification, Op, OwnerId, ReleaseId, ReleaseProgress, Reply, RequestId, Ticket,
};
use tokio::sync::{oneshot, watch, Notify};

use crate::clock::SuspendAwareClock;
use crate::error::{Error, Result};
use crate::transport::{Started, Transport};

/// Shared by every grant of one owner on one lock: tells it about a loss.
#[derive(Debug)]
pub(crate) struct HoldState {
    pub(crate) lost: watch::Sender<Option<LossReason>>,
}

impl HoldState {
    fn new() -> Arc<Self> {
        Arc::new(HoldState { lost: watch::channel(None).0 })
    }
}

/// What a successful acquire hands back.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) token: FencingToken,
    pub(crate) hold: Arc<HoldState>,
    /// Holds of the owner before this one (0: a new grant, not a re-entry).
    pub(crate) reentry: u32,
}

type GrantResult = std::result::Result<Grant, polylock_core::Error>;

/// Commands started for a lock: (lock name, request id, reply future).
pub(crate) type StartedCmds = Vec<(String, RequestId, Started)>;

struct Entry {
    machine: LockMachine,
    armed: Option<u64>,
    waiters: HashMap<Ticket, oneshot::Sender<GrantResult>>,
    releases: HashMap<ReleaseId, oneshot::Sender<()>>,
    holds: HashMap<OwnerId, Arc<HoldState>>,
}

#[derive(Default)]
struct Inner {
    locks: HashMap<String, Entry>,
    timers: BTreeSet<(u64, String)>,
    /// Redis channel -> lock name, for routing pub/sub messages.
    channels: HashMap<String, String>,
    closed: bool,
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    pub(crate) transport: Transport,
    /// Every deadline's clock: counts time the host spent suspended.
    clock: SuspendAwareClock,
    timer_wake: Arc<Notify>,
    /// When the timer task will wake next by itself (ms since epoch), so a
    /// new deadline only wakes it early when it must: a grant's renewal,
    /// seconds away, costs no wake-up on the hot path.
    timer_sleeps_until: Arc<AtomicU64>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) client_id: Nonce,
    /// The template for new machines (backend, session timeout).
    pub(crate) base_config: Mutex<LockConfig>,
}

/// Fresh OS randomness for a ZooKeeper node's name.
pub(crate) fn os_nonce() -> Nonce {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source failed");
    Nonce(u128::from_le_bytes(b))
}

impl Shared {
    pub(crate) fn new(transport: Transport, base: LockConfig) -> Arc<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            transport,
            clock: SuspendAwareClock::new(),
            timer_wake: Arc::new(Notify::new()),
            timer_sleeps_until: Arc::new(AtomicU64::new(0)),
            handle: tokio::runtime::Handle::current(),
            client_id: os_nonce(),
            base_config: Mutex::new(base),
        });
        crate::transport::link(&shared.transport, &shared);
        tokio::spawn(timer_task(Arc::downgrade(&shared)));
        shared
    }

    pub(crate) fn now(&self) -> Instant {
        Instant::from_millis(self.clock.elapsed().as_millis() as u64)
    }

    /// The instant `d` from now, rounded up to the millisecond so a
    /// deadline never comes early.
    pub(crate) fn deadline_after(&self, d: Duration) -> Instant {
        let micros = (self.clock.elapsed() + d).as_micros();
        Instant::from_millis(micros.div_ceil(1000) as u64)
    }

    fn lock_inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- calls from the API -------------------------------------------

    /// Starts an acquire. Returns the receiver of its outcome and the
    /// commands it started.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        name: &LockName,
        lease: Option<Duration>,
        owner: OwnerId,
        opts: AcquireOptions,
    ) -> Result<(Ticket, oneshot::Receiver<GrantResult>, StartedCmds)> {
        let mut inner = self.lock_inner();
        if inner.closed {
            return Err(Error::Closed);
        }
        let key = name.as_str().to_owned();
        if !inner.locks.contains_key(&key) {
            let mut cfg = self.base_config.lock().expect("config lock").clone();
            if let Some(lease) = lease {
                cfg.lease = lease;
                cfg.waiter_ttl = lease;
            }
            let machine = LockMachine::new(cfg, name.clone(), self.client_id).map_err(|e| Error::from_core(&key, e))?;
            inner.locks.insert(
                key.clone(),
                Entry {
                    machine,
                    armed: None,
                    waiters: HashMap::new(),
                    releases: HashMap::new(),
                    holds: HashMap::new(),
                },
            );
        }
        let now = self.now();
        let (tx, rx) = oneshot::channel();
        let entry = inner.locks.get_mut(&key).expect("inserted above");
        let ticket = entry.machine.acquire(now, owner, opts, os_nonce()).map_err(|e| Error::from_core(&key, e))?;
        entry.waiters.insert(ticket, tx);
        let started = self.drain(&mut inner, &key);
        Ok((ticket, rx, started))
    }

    /// Withdraws a pending acquire (its caller went away or gave up).
    pub(crate) fn cancel(self: &Arc<Self>, name: &str, ticket: Ticket) {
        let mut inner = self.lock_inner();
        let now = self.now();
        let Some(entry) = inner.locks.get_mut(name) else { return };
        entry.waiters.remove(&ticket);
        entry.machine.cancel(now, ticket);
        let started = self.drain(&mut inner, name);
        drop(inner);
        self.spawn_group(started);
    }

    /// Ends one hold of `owner` (of its grant with fencing token `token`, if
    /// given: a guard's). `Ok(None)` when a reentrant hold remains.
    pub(crate) fn release(
        self: &Arc<Self>,
        name: &str,
        owner: OwnerId,
        token: Option<FencingToken>,
    ) -> Result<(Option<oneshot::Receiver<()>>, StartedCmds)> {
        let mut inner = self.lock_inner();
        let now = self.now();
        let Some(entry) = inner.locks.get_mut(name) else {
            return Err(Error::NotHeld(name.to_owned()));
        };
        match entry.machine.release_hold(now, owner, token) {
            Ok(ReleaseProgress::StillHeld { .. }) => Ok((None, Vec::new())),
            Ok(ReleaseProgress::Releasing(id)) => {
                entry.holds.remove(&owner);
                let (tx, rx) = oneshot::channel();
                entry.releases.insert(id, tx);
                let started = self.drain(&mut inner, name);
                Ok((Some(rx), started))
            }
            Err(e) => {
                let started = self.drain(&mut inner, name);
                drop(inner);
                self.spawn_group(started);
                Err(Error::from_core(name, e))
            }
        }
    }

    /// `owner`'s current grant of `name`: its hold count and fencing token.
    pub(crate) fn hold(&self, name: &str, owner: OwnerId) -> Option<(u32, FencingToken)> {
        let inner = self.lock_inner();
        inner.locks.get(name).and_then(|e| e.machine.holder()).filter(|(o, _, _)| *o == owner).map(|(_, n, t)| (n, t))
    }

    /// Why `owner`'s newest lost, not yet released grant of `name` was lost.
    pub(crate) fn unreleased_loss(&self, name: &str, owner: OwnerId) -> Option<LossReason> {
        self.lock_inner().locks.get(name).and_then(|e| e.machine.unreleased_loss(owner))
    }

    /// Is `name` held by anyone in this client?
    pub(crate) fn locally_held(&self, name: &str) -> bool {
        self.lock_inner().locks.get(name).is_some_and(|e| e.machine.holder().is_some())
    }

    pub(crate) fn redis_field(&self, owner: OwnerId) -> String {
        polylock_core::redis::field(self.client_id, owner)
    }

    /// Closes every machine: waiters fail, holders release. Returns the cleanup.
    pub(crate) fn close(self: &Arc<Self>) -> StartedCmds {
        let mut inner = self.lock_inner();
        inner.closed = true;
        let now = self.now();
        let names: Vec<String> = inner.locks.keys().cloned().collect();
        let mut started = Vec::new();
        for name in names {
            if let Some(entry) = inner.locks.get_mut(&name) {
                entry.machine.close(now);
            }
            started.extend(self.drain(&mut inner, &name));
        }
        started
    }

    /// Nothing of any lock is on its way to or from the server. Closed
    /// machines whose holders have not released yet stay in the table (so
    /// those releases report `Lost(Closed)`), but have no server work.
    pub(crate) fn is_quiet(&self) -> bool {
        self.lock_inner().locks.values().all(|e| !e.machine.has_server_work())
    }

    // ---- inputs from the transport --------------------------------------

    fn feed(self: &Arc<Self>, name: &str, id: RequestId, reply: Reply) -> StartedCmds {
        let mut inner = self.lock_inner();
        let now = self.now();
        let Some(entry) = inner.locks.get_mut(name) else { return Vec::new() };
        entry.machine.handle_reply(now, id, reply);
        self.drain(&mut inner, name)
    }

    /// A pub/sub message or a fired watch for `name`.
    pub(crate) fn notify(self: &Arc<Self>, name: &str, n: Notification) {
        let mut inner = self.lock_inner();
        let now = self.now();
        let Some(entry) = inner.locks.get_mut(name) else { return };
        entry.machine.handle_notification(now, n);
        let started = self.drain(&mut inner, name);
        drop(inner);
        self.spawn_group(started);
    }

    /// A Redis pub/sub message: route it by channel.
    pub(crate) fn message(self: &Arc<Self>, channel: &str, payload: &str) {
        let name = self.lock_inner().channels.get(channel).cloned();
        if let Some(name) = name {
            self.notify(&name, Notification::Message { channel: channel.to_owned(), payload: payload.to_owned() });
        }
    }

    /// A connection or session change, for every lock.
    pub(crate) fn connection(self: &Arc<Self>, ev: ConnectionEvent) {
        let mut inner = self.lock_inner();
        let now = self.now();
        let names: Vec<String> = inner.locks.keys().cloned().collect();
        let mut started = Vec::new();
        for name in names {
            if let Some(entry) = inner.locks.get_mut(&name) {
                entry.machine.handle_connection(now, ev);
            }
            started.extend(self.drain(&mut inner, &name));
        }
        drop(inner);
        self.spawn_group(started);
    }

    /// Every machine's due timers.
    fn fire_timers(self: &Arc<Self>) -> Option<u64> {
        let mut inner = self.lock_inner();
        let now = self.now();
        let mut started = Vec::new();
        while let Some((at, name)) = inner.timers.first().cloned() {
            if at > now.as_millis() {
                break;
            }
            inner.timers.pop_first();
            if let Some(entry) = inner.locks.get_mut(&name) {
                entry.armed = None;
                entry.machine.handle_timeout(now);
            }
            started.extend(self.drain(&mut inner, &name));
        }
        let next = inner.timers.first().map(|(t, _)| *t);
        drop(inner);
        self.spawn_group(started);
        next
    }

    // ---- outputs --------------------------------------------------------

    /// The drive contract: after an input, deliver every event, start every
    /// command in order, re-arm the timer. Drops idle machines.
    fn drain(self: &Arc<Self>, inner: &mut Inner, name: &str) -> StartedCmds {
        let mut started = Vec::new();
        let Some(entry) = inner.locks.get_mut(name) else { return started };
        // Events first: a holder is told of a loss before the command
        // that gives the lock away leaves (the core's drive contract).
        loop {
            let mut more = false;
            while let Some(ev) = entry.machine.poll_event() {
                match ev {
                    Event::Granted { ticket, owner, token, reentry } => {
                        let hold = entry.holds.entry(owner).or_insert_with(HoldState::new).clone();
                        let delivered = match entry.waiters.remove(&ticket) {
                            Some(tx) => tx.send(Ok(Grant { token, hold, reentry })).is_ok(),
                            None => false,
                        };
                        if !delivered {
                            // The caller is gone: give back what it would have held.
                            if let Ok(ReleaseProgress::Releasing(_)) = entry.machine.release(self.now(), owner) {
                                entry.holds.remove(&owner);
                            }
                            more = true;
                        }
                    }
                    Event::Failed { ticket, error, .. } => {
                        if let Some(tx) = entry.waiters.remove(&ticket) {
                            let _ = tx.send(Err(error));
                        }
                    }
                    Event::Lost { owner, reason, .. } => {
                        if let Some(h) = entry.holds.remove(&owner) {
                            // send_replace stores the value even with no receiver subscribed yet.
                            h.lost.send_replace(Some(reason));
                        }
                    }
                    Event::Released { id } => {
                        if let Some(tx) = entry.releases.remove(&id) {
                            let _ = tx.send(());
                        }
                    }
                    _ => {}
                }
            }
            while let Some(cmd) = entry.machine.poll_command() {
                match &cmd.op {
                    Op::Subscribe { channel } => {
                        inner.channels.insert(channel.clone(), name.to_owned());
                    }
                    Op::Unsubscribe { channel } => {
                        inner.channels.remove(channel);
                    }
                    _ => {}
                }
                started.push((name.to_owned(), cmd.id, self.transport.start(name, cmd.id, cmd.op)));
            }
            if !more {
                break;
            }
        }
        let next = entry.machine.poll_timeout().map(|t| t.as_millis());
        let idle = entry.machine.is_idle() && entry.waiters.is_empty() && entry.releases.is_empty();
        let armed = entry.armed;
        if next != armed {
            if let Some(old) = armed {
                inner.timers.remove(&(old, name.to_owned()));
            }
            if let Some(t) = next {
                inner.timers.insert((t, name.to_owned()));
                if t < self.timer_sleeps_until.load(AtomicOrdering::Acquire) {
                    self.timer_wake.notify_one();
                }
            }
            if let Some(e) = inner.locks.get_mut(name) {
                e.armed = next;
            }
        }
        if idle {
            if let Some(t) = next {
                inner.timers.remove(&(t, name.to_owned()));
            }
            inner.locks.remove(name);
        }
        started
    }

    /// Runs commands to completion in the background, feeding each reply.
    pub(crate) fn spawn_group(self: &Arc<Self>, started: StartedCmds) {
        if started.is_empty() {
            return;
        }
        let group: FuturesUnordered<_> = started.into_iter().map(into_reply).collect();
        let me = self.clone();
        self.handle.spawn(async move { me.run_group(group).await });
    }

    async fn run_group(self: Arc<Self>, mut group: FuturesUnordered<ReplyFuture>) {
        while let Some((name, id, reply)) = group.next().await {
            for s in self.feed(&name, id, reply) {
                group.push(into_reply(s));
            }
        }
    }

    /// Drives `started` (and whatever their replies start) until `rx`
    /// answers; the rest continues in the background.
    pub(crate) async fn drive_until<T>(
        self: &Arc<Self>,
        started: StartedCmds,
        rx: &mut oneshot::Receiver<T>,
    ) -> Option<T> {
        let mut group: FuturesUnordered<_> = started.into_iter().map(into_reply).collect();
        let mut handoff = HandOff { shared: self, group: Some(&mut group) };
        let result = loop {
            let group = handoff.group.as_deref_mut().expect("present until the end");
            tokio::select! {
                biased;
                r = &mut *rx => break r.ok(),
                Some((name, id, reply)) = group.next(), if !group.is_empty() => {
                    for s in self.feed(&name, id, reply) {
                        group.push(into_reply(s));
                    }
                }
            }
        };
        drop(handoff);
        result
    }
}

type ReplyFuture = std::pin::Pin<Box<dyn std::future::Future<Output = (String, RequestId, Reply)> + Send>>;

fn into_reply((name, id, started): (String, RequestId, Started)) -> ReplyFuture {
    Box::pin(async move { (name, id, started.await) })
}

/// On drop (the caller's answer came, or the caller itself was dropped),
/// moves the replies still in flight to a background task.
struct HandOff<'a> {
    shared: &'a Arc<Shared>,
    group: Option<&'a mut FuturesUnordered<ReplyFuture>>,
}

impl Drop for HandOff<'_> {
    fn drop(&mut self) {
        if let Some(group) = self.group.take() {
            if !group.is_empty() {
                let rest = std::mem::take(group);
                let me = self.shared.clone();
                self.shared.handle.spawn(async move { me.run_group(rest).await });
            }
        }
    }
}

/// One task for every deadline of every lock of a client.
async fn timer_task(weak: std::sync::Weak<Shared>) {
    /// The longest nap: a dropped client is noticed within it.
    const IDLE: Duration = Duration::from_secs(1);
    loop {
        // Hold only a weak reference while asleep, so a dropped client ends this task.
        let (nap, wake, sleeps_until) = {
            let Some(shared) = weak.upgrade() else { return };
            let next = shared.fire_timers();
            let idle_until = shared.now().as_millis() + IDLE.as_millis() as u64;
            let wake_at = next.map_or(idle_until, |n| n.min(idle_until));
            shared.timer_sleeps_until.store(wake_at, AtomicOrdering::Release);
            // A deadline armed between fire_timers and the store above is
            // caught here rather than slept through.
            let missed = shared.lock_inner().timers.first().is_some_and(|(t, _)| *t < wake_at);
            if missed {
                continue;
            }
            let nap = Duration::from_millis(wake_at.saturating_sub(shared.now().as_millis()));
            (nap, shared.timer_wake.clone(), shared.timer_sleeps_until.clone())
        };
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = wake.notified() => {}
        }
        sleeps_until.store(0, AtomicOrdering::Release);
    }
}
