//! The executor around the core's [`LockTable`]: one per `Client`. It
//! decides nothing about locks. It gives the table its inputs (API calls,
//! replies, the transport's reports, timeouts), then drains
//! [`LockTable::poll_output`]: events go to the callers waiting for them,
//! commands to the transport, the next deadline to the one timer task.
//!
//! Hot path: the caller's own task starts its commands and drives the
//! replies until its answer arrives (no hop through another task); whatever
//! is still in flight then is handed to a spawned task, so dropping the
//! caller never strands a reply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use polylock_core::{
    AcquireOptions, Backend, Event, FencingToken, Instant, LockConfig, LockMode, LockName, LockStatus, LockTable,
    LossReason, Nonce, Output, OwnerId, ReleaseId, ReleaseProgress, Reply, RequestId, StatusId, Ticket,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::backend::{Report, Started, Transport};
use crate::clock::SuspendAwareClock;
use crate::error::{Error, Result};
use crate::timer::Timer;
use crate::trace::{self, Hop};

/// Shared by every hold of one grant: tells it about a loss. Dropped on
/// release, which ends every [`crate::LossWatch`] of the grant with `None`
/// and drops its loss callbacks uncalled.
pub(crate) struct HoldState {
    pub(crate) lost: watch::Sender<Option<LossReason>>,
    /// [`crate::LossWatch::on_loss`]'s callbacks, run once on a loss.
    on_loss: Mutex<Vec<LossCallback>>,
}

pub(crate) type LossCallback = Box<dyn FnOnce(LossReason) + Send>;

impl std::fmt::Debug for HoldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldState").field("lost", &*self.lost.borrow()).finish_non_exhaustive()
    }
}

impl HoldState {
    fn new() -> Arc<Self> {
        Arc::new(HoldState { lost: watch::channel(None).0, on_loss: Mutex::new(Vec::new()) })
    }

    /// Keeps `f` for the loss, or gives it back if the loss already came
    /// (the caller runs it then). Under the callbacks' mutex, so that a loss
    /// that [`Self::report_loss`] is reporting meanwhile either sees `f` or
    /// is seen here: `f` runs exactly once.
    pub(crate) fn add_loss_callback(&self, f: LossCallback) -> Option<(LossCallback, LossReason)> {
        let mut callbacks = self.on_loss.lock().unwrap_or_else(|p| p.into_inner());
        match *self.lost.borrow() {
            Some(reason) => Some((f, reason)),
            None => {
                callbacks.push(f);
                None
            }
        }
    }

    /// Tells every watch of the grant, then runs its callbacks on one task
    /// (never under the executor's mutex: a callback may call back in).
    fn report_loss(&self, handle: &tokio::runtime::Handle, reason: LossReason) {
        // send_replace stores the value even with no receiver subscribed yet.
        self.lost.send_replace(Some(reason));
        let callbacks = std::mem::take(&mut *self.on_loss.lock().unwrap_or_else(|p| p.into_inner()));
        if !callbacks.is_empty() {
            handle.spawn(async move { callbacks.into_iter().for_each(|f| f(reason)) });
        }
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

pub(crate) type GrantResult = std::result::Result<Grant, polylock_core::Error>;
type StatusResult = std::result::Result<LockStatus, polylock_core::Error>;

/// Commands started and not answered yet.
pub(crate) type InFlight = Vec<(RequestId, Started)>;

/// The table and everyone waiting on it, behind the executor's one mutex.
struct ExecutorState {
    table: LockTable,
    acquires: HashMap<Ticket, oneshot::Sender<GrantResult>>,
    releases: HashMap<ReleaseId, oneshot::Sender<()>>,
    statuses: HashMap<StatusId, oneshot::Sender<StatusResult>>,
    /// The loss signal of each owner's current grant of each lock.
    holds: HashMap<(String, LockMode, OwnerId), Arc<HoldState>>,
    /// The connections and the tasks serving them. Dropped (which closes
    /// them) once the client is closed and its cleanup is done, although
    /// the application may keep lock handles, and so this executor, alive.
    transport: Option<Arc<dyn Transport>>,
}

pub(crate) struct Executor {
    state: Mutex<ExecutorState>,
    /// Every deadline's clock: counts time the host spent suspended.
    clock: SuspendAwareClock,
    timer: Arc<Timer>,
    pub(crate) handle: tokio::runtime::Handle,
}

/// Fresh OS randomness for a claim's id (a ZooKeeper node's name, a Redis queue entry).
pub(crate) fn os_nonce() -> Nonce {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source failed");
    Nonce(u128::from_le_bytes(b))
}

impl Executor {
    /// Starts the executor of one client: its timer task, and the task that
    /// feeds the transport's reports to the table.
    pub(crate) fn start(
        transport: Box<dyn Transport>,
        reports: mpsc::UnboundedReceiver<Report>,
        config: LockConfig,
    ) -> Result<Arc<Self>> {
        let table = LockTable::new(config, os_nonce()).map_err(|e| Error::from_core("", e))?;
        let exec = Arc::new(Executor {
            state: Mutex::new(ExecutorState {
                table,
                acquires: HashMap::new(),
                releases: HashMap::new(),
                statuses: HashMap::new(),
                holds: HashMap::new(),
                transport: Some(Arc::from(transport)),
            }),
            clock: SuspendAwareClock::new(),
            timer: Arc::new(Timer::new()),
            handle: tokio::runtime::Handle::current(),
        });
        let weak = Arc::downgrade(&exec);
        tokio::spawn(crate::timer::run(exec.timer.clone(), move || {
            let exec = weak.upgrade()?;
            // Closed and done: no deadline is left to run.
            exec.fire_timers().then(|| exec.now())
        }));
        tokio::spawn(feed_reports(Arc::downgrade(&exec), reports));
        Ok(exec)
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

    fn state(&self) -> std::sync::MutexGuard<'_, ExecutorState> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The transport, or `Closed` once the closed client has let go of it.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn transport(&self) -> Result<Arc<dyn Transport>> {
        self.state().transport.clone().ok_or(Error::Closed)
    }

    // ---- calls from the API -------------------------------------------

    /// Starts an acquire. Returns the receiver of its outcome and the
    /// commands it started.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        opts: AcquireOptions,
    ) -> Result<(Ticket, oneshot::Receiver<GrantResult>, InFlight)> {
        let mut st = self.state();
        let ticket = st
            .table
            .acquire(self.now(), name, mode, owner, opts, os_nonce())
            .map_err(|e| Error::from_core(name.as_str(), e));
        let ticket = match ticket {
            Ok(t) => t,
            Err(e) => {
                let started = self.drain(&mut st);
                drop(st);
                self.run_in_background(started);
                return Err(e);
            }
        };
        let (tx, rx) = oneshot::channel();
        st.acquires.insert(ticket, tx);
        let started = self.drain(&mut st);
        Ok((ticket, rx, started))
    }

    /// Withdraws a pending acquire (its caller went away or gave up).
    pub(crate) fn cancel(self: &Arc<Self>, ticket: Ticket) {
        let mut st = self.state();
        st.acquires.remove(&ticket);
        st.table.cancel(self.now(), ticket);
        let started = self.drain(&mut st);
        drop(st);
        self.run_in_background(started);
    }

    /// Withdraws a pending acquire whose caller still waits for its
    /// outcome: `Cancelled` once the server holds nothing of it, or the
    /// grant that came first, both on the acquire's receiver. What it
    /// starts is for the caller to drive.
    pub(crate) fn withdraw(self: &Arc<Self>, ticket: Ticket) -> InFlight {
        let mut st = self.state();
        st.table.withdraw(self.now(), ticket);
        self.drain(&mut st)
    }

    /// Ends one hold of `owner` (of its grant with fencing token `token`, if
    /// given: a guard's). No receiver when a reentrant hold remains.
    pub(crate) fn release(
        self: &Arc<Self>,
        name: &str,
        mode: LockMode,
        owner: OwnerId,
        token: Option<FencingToken>,
    ) -> Result<(Option<oneshot::Receiver<()>>, InFlight)> {
        let mut st = self.state();
        match st.table.release(self.now(), name, mode, owner, token) {
            Ok(ReleaseProgress::StillHeld { .. }) => Ok((None, Vec::new())),
            Ok(ReleaseProgress::Releasing(id)) => {
                st.holds.remove(&(name.to_owned(), mode, owner));
                let (tx, rx) = oneshot::channel();
                st.releases.insert(id, tx);
                let started = self.drain(&mut st);
                Ok((Some(rx), started))
            }
            Err(e) => {
                let started = self.drain(&mut st);
                drop(st);
                self.run_in_background(started);
                Err(Error::from_core(name, e))
            }
        }
    }

    /// One status read of `name` (what [`crate::Client::status`] and
    /// [`crate::Semaphore::available_permits`] answer from); `backend`
    /// names the server when there is no answer.
    pub(crate) async fn status(self: &Arc<Self>, backend: Backend, name: &LockName) -> Result<LockStatus> {
        if self.state().table.is_closed() {
            return Err(Error::Closed);
        }
        let (mut rx, started) = self.read_status(name);
        match self.drive_until(started, &mut rx).await {
            Some(Ok(status)) => Ok(status),
            Some(Err(polylock_core::Error::NoAnswer(reason))) => {
                Err(Error::Connect { addr: backend.as_str().into(), reason })
            }
            Some(Err(e)) => Err(Error::from_core(name.as_str(), e)),
            None => Err(Error::Closed),
        }
    }

    /// Starts a status read of `name`.
    fn read_status(self: &Arc<Self>, name: &LockName) -> (oneshot::Receiver<StatusResult>, InFlight) {
        let mut st = self.state();
        let id = st.table.read_status(name);
        let (tx, rx) = oneshot::channel();
        st.statuses.insert(id, tx);
        let started = self.drain(&mut st);
        (rx, started)
    }

    /// `owner`'s current grant of `name` in `mode`: its hold count and fencing token.
    pub(crate) fn hold(&self, name: &str, mode: LockMode, owner: OwnerId) -> Option<(u32, FencingToken)> {
        self.state().table.hold(name, mode, owner)
    }

    /// Why `owner`'s newest lost, not yet released grant of `name` in `mode` was lost.
    pub(crate) fn unreleased_loss(&self, name: &str, mode: LockMode, owner: OwnerId) -> Option<LossReason> {
        self.state().table.unreleased_loss(name, mode, owner)
    }

    /// Is `name` held in `mode` by anyone in this client?
    pub(crate) fn is_held_here(&self, name: &str, mode: LockMode) -> bool {
        self.state().table.is_held_here(name, mode)
    }

    pub(crate) fn holder_id(&self, owner: OwnerId) -> String {
        self.state().table.holder_id(owner)
    }

    pub(crate) fn client_id(&self) -> Nonce {
        self.state().table.client_id()
    }

    /// Closes every lock (see [`LockTable::close`]) and starts the cleanup.
    pub(crate) fn close(self: &Arc<Self>) {
        let mut st = self.state();
        st.table.close(self.now());
        let started = self.drain(&mut st);
        drop(st);
        self.run_in_background(started);
    }

    /// Nothing of any lock is on its way to or from the server.
    pub(crate) fn is_quiet(&self) -> bool {
        !self.state().table.has_server_work()
    }

    // ---- inputs from the transport and the timer -----------------------

    fn on_reply(self: &Arc<Self>, id: RequestId, reply: Reply) -> InFlight {
        let mut st = self.state();
        st.table.handle_reply(self.now(), id, reply);
        self.drain(&mut st)
    }

    fn on_report(self: &Arc<Self>, report: Report) {
        trace::stamp(Hop::ReportTaken);
        let mut st = self.state();
        let now = self.now();
        match report {
            Report::Notification(n) => st.table.handle_notification(now, n),
            Report::Connection(ev) => st.table.handle_connection(now, ev),
            Report::SessionTimeout(d) => st.table.set_session_timeout(d),
            Report::ReplicasSeen(n) => st.table.set_replicas_seen(n),
        }
        let started = self.drain(&mut st);
        trace::stamp(Hop::CommandsStarted);
        drop(st);
        self.run_in_background(started);
        trace::stamp(Hop::ReportDone);
    }

    /// Runs every lock's due timers (the timer task calls this).
    /// Runs the due timers; false once the client is closed and has let
    /// go of its transport (nothing is left to time).
    pub(crate) fn fire_timers(self: &Arc<Self>) -> bool {
        let mut st = self.state();
        st.table.handle_timeout(self.now());
        let started = self.drain(&mut st);
        let open = st.transport.is_some();
        drop(st);
        self.run_in_background(started);
        open
    }

    // ---- outputs --------------------------------------------------------

    /// The drive contract: after an input, drain the table: deliver each
    /// event, start each command in order, hand the deadline to the timer.
    fn drain(&self, st: &mut ExecutorState) -> InFlight {
        let mut started = Vec::new();
        while let Some(out) = st.table.poll_output() {
            match out {
                Output::Event { name, mode, event } => self.deliver(st, name, mode, event),
                Output::Status { id, result } => {
                    if let Some(tx) = st.statuses.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Output::Command(cmd) => {
                    let id = cmd.id;
                    started.push((id, start(st.transport.as_deref(), cmd)));
                }
                Output::Timeout(at) => self.timer.arm(at),
                _ => {}
            }
        }
        if st.table.is_closed() && !st.table.has_server_work() && started.is_empty() {
            // Closed, and the cleanup is done: let go of the connections.
            st.transport = None;
        }
        started
    }

    /// Hands an event to whoever waits for it.
    fn deliver(&self, st: &mut ExecutorState, name: LockName, mode: LockMode, event: Event) {
        match event {
            Event::Granted { ticket, owner, token, reentry } => {
                let key = (name.as_str().to_owned(), mode, owner);
                let hold = st.holds.entry(key).or_insert_with(HoldState::new).clone();
                let taken = match st.acquires.remove(&ticket) {
                    Some(tx) => {
                        trace::stamp(Hop::GrantSent);
                        tx.send(Ok(Grant { token, hold, reentry })).is_ok()
                    }
                    None => false,
                };
                if !taken {
                    // The caller is gone: the table gives back what it would have held.
                    st.table.grant_unwanted(self.now(), name.as_str(), mode, owner, token);
                    if st.table.hold(name.as_str(), mode, owner).is_none() {
                        st.holds.remove(&(name.as_str().to_owned(), mode, owner));
                    }
                }
            }
            Event::Failed { ticket, error, .. } => {
                if let Some(tx) = st.acquires.remove(&ticket) {
                    let _ = tx.send(Err(error));
                }
            }
            Event::Lost { owner, reason, .. } => {
                if let Some(h) = st.holds.remove(&(name.as_str().to_owned(), mode, owner)) {
                    h.report_loss(&self.handle, reason);
                }
            }
            Event::Released { id } => {
                if let Some(tx) = st.releases.remove(&id) {
                    let _ = tx.send(());
                }
            }
            _ => {}
        }
    }

    /// Runs commands to completion in a spawned task, feeding each reply.
    pub(crate) fn run_in_background(self: &Arc<Self>, started: InFlight) {
        if started.is_empty() {
            return;
        }
        let group: FuturesUnordered<_> = started.into_iter().map(into_reply).collect();
        let me = self.clone();
        self.handle.spawn(async move { me.run_group(group).await });
    }

    async fn run_group(self: Arc<Self>, mut group: FuturesUnordered<ReplyFuture>) {
        while let Some((id, reply)) = group.next().await {
            for s in self.on_reply(id, reply) {
                group.push(into_reply(s));
            }
        }
    }

    /// Drives `started` (and whatever their replies start) until `rx`
    /// answers; the rest continues in the background.
    pub(crate) async fn drive_until<T>(
        self: &Arc<Self>,
        started: InFlight,
        rx: &mut oneshot::Receiver<T>,
    ) -> Option<T> {
        let mut group: FuturesUnordered<_> = started.into_iter().map(into_reply).collect();
        let mut rest = RestToBackground { exec: self, group: Some(&mut group) };
        let result = loop {
            let group = rest.group.as_deref_mut().expect("present until the end");
            tokio::select! {
                biased;
                r = &mut *rx => break r.ok(),
                Some((id, reply)) = group.next(), if !group.is_empty() => {
                    for s in self.on_reply(id, reply) {
                        group.push(into_reply(s));
                    }
                }
            }
        };
        drop(rest);
        result
    }
}

/// Starts `cmd` on the transport. A closed table that has finished its
/// cleanup sends nothing more; should it ever, the command fails as an
/// unreachable server's would, rather than reopening a connection.
fn start(transport: Option<&dyn Transport>, cmd: polylock_core::Command) -> crate::backend::Started {
    match transport {
        Some(t) => t.start(cmd),
        None => {
            Box::pin(async { Reply::Failed(polylock_core::TransportError { message: "the client is closed".into() }) })
        }
    }
}

/// Feeds the transport's reports to the table, in the order they were sent.
async fn feed_reports(weak: std::sync::Weak<Executor>, mut reports: mpsc::UnboundedReceiver<Report>) {
    while let Some(report) = reports.recv().await {
        let Some(exec) = weak.upgrade() else { return };
        exec.on_report(report);
    }
}

type ReplyFuture = std::pin::Pin<Box<dyn std::future::Future<Output = (RequestId, Reply)> + Send>>;

fn into_reply((id, started): (RequestId, Started)) -> ReplyFuture {
    Box::pin(async move { (id, started.await) })
}

/// On drop (the caller's answer came, or the caller itself was dropped),
/// moves the replies still in flight to a background task.
struct RestToBackground<'a> {
    exec: &'a Arc<Executor>,
    group: Option<&'a mut FuturesUnordered<ReplyFuture>>,
}

impl Drop for RestToBackground<'_> {
    fn drop(&mut self) {
        if let Some(group) = self.group.take() {
            if !group.is_empty() {
                let rest = std::mem::take(group);
                let me = self.exec.clone();
                self.exec.handle.spawn(async move { me.run_group(rest).await });
            }
        }
    }
}
