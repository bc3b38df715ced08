//! `Lock` and `Guard`: the public face of one lock name. Everything a
//! binding needs to know about a hold (its token, its count, its loss) is
//! asked of the lock by owner, answered from the core machine, so a binding
//! that releases by owner keeps no guards and no bookkeeping of its own.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use polylock_core::{AcquireOptions, FencingToken, LockMode, LockName, LossReason, OwnerId, PermitRequest, Ticket};
use tokio::sync::{oneshot, watch};

use crate::error::{Error, Result};
use crate::executor::{Executor, Grant, GrantResult, HoldState, LossCallback};
use crate::options::LockOptions;
use crate::owner::current_owner;
use crate::withdrawal::Withdrawal;

/// A handle on one lock name of one [`crate::Client`]: a mutex, or one
/// half of a read-write lock ([`RwLock::read`], [`RwLock::write`]). Cheap to clone.
#[derive(Clone)]
pub struct Lock {
    exec: Arc<Executor>,
    name: LockName,
    mode: LockMode,
    lease: Option<Duration>,
    stop_margin: Duration,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock").field("name", &self.name.as_str()).field("mode", &self.mode).finish()
    }
}

impl Lock {
    pub(crate) fn new(exec: Arc<Executor>, name: LockName, mode: LockMode, opts: &LockOptions) -> Self {
        Lock { exec, name, mode, lease: opts.lease, stop_margin: opts.stop_margin }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// A mutex, or which half of a read-write lock.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Waits until the calling task holds the lock. Reentrant per task:
    /// a task that holds it gets another guard at once, with no I/O.
    /// Cancel-safe: dropping the future leaves nothing on the server.
    pub async fn acquire(&self) -> Result<Guard> {
        self.acquire_as(current_owner(), None).await
    }

    /// Like [`Self::acquire`] but gives up after `timeout` (`Duration::ZERO`:
    /// one try without waiting). `Ok(None)` if the lock was not granted in time.
    pub async fn try_acquire(&self, timeout: Duration) -> Result<Option<Guard>> {
        match self.acquire_as(current_owner(), Some(timeout)).await {
            Ok(g) => Ok(Some(g)),
            Err(Error::Timeout(_) | Error::WouldBlock(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acquire on behalf of an explicit owner (a binding's thread, task or
    /// async context). `timeout`: `None` waits forever, zero tries once.
    /// Errors: [`Error::Timeout`] or [`Error::WouldBlock`] when not granted.
    pub async fn acquire_as(&self, owner: OwnerId, timeout: Option<Duration>) -> Result<Guard> {
        self.acquire_with(owner, timeout, None).await
    }

    /// [`Self::acquire_as`], for a semaphore with its permit ask.
    pub(crate) async fn acquire_with(
        &self,
        owner: OwnerId,
        timeout: Option<Duration>,
        permits: Option<PermitRequest>,
    ) -> Result<Guard> {
        let (no_wait, deadline) = match timeout {
            None => (false, None),
            Some(d) if d.is_zero() => (true, None),
            Some(d) => (false, Some(self.exec.deadline_after(d))),
        };
        let opts = AcquireOptions { no_wait, deadline, lease: self.lease, permits, stop_margin: self.stop_margin };
        let (ticket, rx, started) = self.exec.acquire(&self.name, self.mode, owner, opts)?;
        // Owns the receiver for the whole wait, so that if this future is
        // dropped mid-wait its Drop sees the acquire as pending and cancels it.
        let mut pending = PendingAcquire { lock: self, owner, ticket, rx: Some(rx) };
        let rx = pending.rx.as_mut().expect("just set");
        let outcome = match Withdrawal::current() {
            None => self.exec.drive_until(started, rx).await,
            Some(withdrawal) => {
                let _waiting = withdrawal.waiting();
                let answered = tokio::select! {
                    biased;
                    outcome = self.exec.drive_until(started, rx) => Some(outcome),
                    () = withdrawal.requested() => None,
                };
                match answered {
                    Some(outcome) => outcome,
                    None => self.exec.drive_until(self.exec.withdraw(ticket), rx).await,
                }
            }
        };
        pending.rx = None; // answered: nothing to cancel
        match outcome {
            Some(Ok(grant)) => Ok(Guard::new(self.clone(), owner, grant)),
            Some(Err(e)) => Err(Error::from_core(self.name(), e)),
            None => Err(Error::Closed),
        }
    }

    /// Ends one hold of `owner` and waits until the server has released the
    /// lock (at once for a reentrant hold). [`Error::NotHeld`] if `owner`
    /// does not hold it; the lock is then unchanged. The current grant goes
    /// first; once it is gone, each hold of a lost grant reports
    /// [`Error::Lost`] (newest first, as a stack of guards would).
    pub async fn release_as(&self, owner: OwnerId) -> Result<()> {
        self.release_hold(owner, None).await
    }

    /// Ends one hold of `owner`'s grant with fencing token `token` (what a
    /// binding's guard object releases): [`Error::Lost`] if that grant was
    /// lost, and then the owner's newer grant, if any, is untouched.
    pub async fn release_grant(&self, owner: OwnerId, token: u64) -> Result<()> {
        self.release_hold(owner, Some(FencingToken(token))).await
    }

    async fn release_hold(&self, owner: OwnerId, token: Option<FencingToken>) -> Result<()> {
        let (rx, started) = self.exec.release(self.name(), self.mode, owner, token)?;
        if let Some(mut rx) = rx {
            self.exec.drive_until(started, &mut rx).await;
        }
        Ok(())
    }

    /// `owner`'s current grant: its fencing token and hold count. `None`
    /// if it holds none (a lost grant is no longer held).
    pub fn hold(&self, owner: OwnerId) -> Option<HoldInfo> {
        self.exec.hold(self.name(), self.mode, owner).map(|(count, token)| HoldInfo { token: token.0, count })
    }

    /// The fencing token of `owner`'s newest unreleased hold:
    /// [`Error::Lost`] if that is a lost grant, [`Error::NotHeld`] if none.
    pub fn fencing_token_of(&self, owner: OwnerId) -> Result<u64> {
        if let Some(hold) = self.hold(owner) {
            return Ok(hold.token);
        }
        match self.exec.unreleased_loss(self.name(), self.mode, owner) {
            Some(reason) => Err(Error::Lost { name: self.name().to_owned(), reason }),
            None => Err(Error::NotHeld(self.name().to_owned())),
        }
    }

    /// How many times `owner` holds the lock in this client (0: not at all).
    pub fn hold_count(&self, owner: OwnerId) -> u32 {
        self.hold(owner).map_or(0, |h| h.count)
    }

    /// How many times the calling task holds the lock.
    pub fn hold_count_current(&self) -> u32 {
        self.hold_count(current_owner())
    }

    /// Is the lock (this half of a read-write lock) held by any owner of this client?
    pub fn is_held_locally(&self) -> bool {
        self.exec.is_held_here(self.name(), self.mode)
    }

    /// How `owner`'s grants of this client are recorded on the server
    /// (`<client id>:<owner>`: the Redis hash field, the ZooKeeper node data,
    /// [`crate::Status::holder`]).
    pub fn holder_id(&self, owner: OwnerId) -> String {
        self.exec.holder_id(owner)
    }
}

/// One owner's current grant of a lock, as [`Lock::hold`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldInfo {
    /// The grant's fencing token (re-entries share it).
    pub token: u64,
    /// How many holds of it the owner has not released.
    pub count: u32,
}

/// The loss signal of one grant (every re-entry of it shares it): resolves
/// with the reason when the grant is lost, or with `None` once its last
/// hold is released first. Needs no task: await it where you like, or hand
/// [`Self::on_loss`] a callback.
#[derive(Debug, Clone)]
pub struct LossWatch {
    rx: watch::Receiver<Option<LossReason>>,
    /// Weak: a watch must not keep its grant's state (and so its sender,
    /// whose drop is the release's `None`) alive.
    hold: Weak<HoldState>,
    handle: tokio::runtime::Handle,
}

impl LossWatch {
    fn new(hold: &Arc<HoldState>, handle: &tokio::runtime::Handle) -> Self {
        LossWatch { rx: hold.lost.subscribe(), hold: Arc::downgrade(hold), handle: handle.clone() }
    }

    /// Why the grant was lost, if it was.
    pub fn reason(&self) -> Option<LossReason> {
        *self.rx.borrow()
    }

    /// Calls `f(reason)` once if the grant is lost (soon, if it already
    /// is); never if its last hold is released first, and then `f` is
    /// dropped. Unlike awaiting [`Self::ended`] in a task of its own, it
    /// costs no task and no wakeup while the grant is held and none on its
    /// release: what a binding uses to forward a loss to its language.
    /// `f` runs on a runtime worker: it must not block (hand blocking work
    /// to a thread of its own, e.g. `tokio::task::spawn_blocking`).
    pub fn on_loss(&self, f: impl FnOnce(LossReason) + Send + 'static) {
        let f: LossCallback = Box::new(f);
        // The grant's state is gone once it was released or lost: then only
        // a loss (recorded in the watch) still calls `f`.
        let due = match self.hold.upgrade() {
            Some(hold) => hold.add_loss_callback(f),
            None => self.reason().map(|reason| (f, reason)),
        };
        if let Some((f, reason)) = due {
            self.handle.spawn(async move { f(reason) });
        }
    }

    /// `Some(reason)` when the grant is lost; `None` when it is released
    /// first (the runtime drops the grant's sender on release).
    pub async fn ended(mut self) -> Option<LossReason> {
        loop {
            if let Some(reason) = *self.rx.borrow_and_update() {
                return Some(reason);
            }
            if self.rx.changed().await.is_err() {
                return *self.rx.borrow();
            }
        }
    }
}

/// An acquire in flight. If its future is dropped, the acquire is
/// cancelled, and a grant that raced the drop is given back.
struct PendingAcquire<'a> {
    lock: &'a Lock,
    owner: OwnerId,
    ticket: Ticket,
    rx: Option<oneshot::Receiver<GrantResult>>,
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        self.lock.exec.cancel(self.ticket);
        rx.close();
        if let Ok(Ok(_grant)) = rx.try_recv() {
            let lock = self.lock.clone();
            let owner = self.owner;
            self.lock.exec.handle.spawn(async move {
                let _ = lock.release_as(owner).await;
            });
        }
    }
}

/// Proof of holding a lock. Releasing it (or dropping it, which releases
/// in the background) ends one hold.
pub struct Guard {
    lock: Lock,
    owner: OwnerId,
    token: FencingToken,
    hold: Arc<HoldState>,
    reentry: bool,
    done: bool,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("lock", &self.lock.name()).field("token", &self.token.0).finish()
    }
}

impl Guard {
    fn new(lock: Lock, owner: OwnerId, grant: Grant) -> Self {
        Guard { lock, owner, token: grant.token, hold: grant.hold, reentry: grant.reentry > 0, done: false }
    }

    /// Is this a re-entry of a grant the owner already held? A new grant
    /// (`false`) is the one whose [`Self::loss_watch`] a binding forwards.
    pub fn is_reentry(&self) -> bool {
        self.reentry
    }

    /// The fencing token of this grant: larger than any earlier grant's.
    /// Pass it to the resource you protect and have it refuse smaller ones.
    pub fn fencing_token(&self) -> u64 {
        self.token.0
    }

    /// The owner this guard holds the lock for.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// The lock this guard holds.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Whether the lock was lost (and why). Once lost, stop touching the resource.
    pub fn lost_reason(&self) -> Option<LossReason> {
        *self.hold.lost.borrow()
    }

    /// Resolves when the lock is lost; never, if it is released first.
    pub async fn lost(&self) -> LossReason {
        match self.loss_watch().ended().await {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// Runs `work` while the lock is held and drops it if the lock is lost
    /// first: `Ok(output)` when `work` finishes while held, [`Error::Lost`]
    /// (the lock's name and the [`LossReason`]) when the loss comes first.
    /// The loss is checked before `work` at every wake-up: lost work takes no
    /// further step (it is dropped at the `.await` it waits in), and work
    /// under a lock already lost never starts. A lease or session running
    /// out is told on the holder's own deadline, ahead of the server's, so
    /// the work stops before anyone else can be granted the lock
    /// (docs/guarantees.md names the cases). Not stopped: code that blocks
    /// its thread between awaits, and tasks `work` spawned; so pass
    /// [`Self::fencing_token`] to the resource too. The guard stays held:
    /// release it afterwards.
    ///
    /// ```no_run
    /// # async fn demo(client: polylock::Client) -> polylock::Result<()> {
    /// let guard = client.lock("orders/42")?.acquire().await?;
    /// let token = guard.fencing_token();
    /// let written = guard.while_held(async move {
    ///     // the critical section: every await here is a point where a loss stops it
    ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    ///     token
    /// });
    /// match written.await {
    ///     Ok(token) => println!("wrote with token {token}"),
    ///     Err(e) => eprintln!("stopped: {e}"), // Error::Lost: the work was dropped
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn while_held<F: Future>(&self, work: F) -> Result<F::Output> {
        tokio::select! {
            // The loss first: once the grant is lost, the work must not take
            // another step, even one that is ready in the same wake-up.
            biased;
            reason = self.lost() => Err(Error::Lost { name: self.lock.name().to_owned(), reason }),
            output = work => Ok(output),
        }
    }

    /// This grant's loss signal, for bindings that forward it elsewhere.
    /// It outlives the guard: [`Self::into_token`] does not end it.
    pub fn loss_watch(&self) -> LossWatch {
        LossWatch::new(&self.hold, &self.lock.exec.handle)
    }

    /// Ends this hold and waits for the server. [`Error::Lost`] if the lock
    /// was lost while held: whatever ran under it was not protected.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        // Always through the machine, lost or not: a lost hold's release is
        // what takes the loss report (the machine decides what it says), and
        // until every hold has taken it the lock's state cannot be dropped.
        // By token, so a stale guard never ends the owner's newer grant.
        self.lock.release_hold(self.owner, Some(self.token)).await
    }

    /// Forgets the guard without releasing (a binding that releases by owner).
    pub fn into_token(mut self) -> u64 {
        self.done = true;
        self.token.0
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let lock = self.lock.clone();
        let (owner, token) = (self.owner, self.token);
        self.lock.exec.handle.spawn(async move {
            let _ = lock.release_hold(owner, Some(token)).await;
        });
    }
}

/// A read-write lock of one [`crate::Client`]: many readers or one writer
/// ([`crate::Client::rw_lock`]). Each half is a [`Lock`] with the mutex's
/// contract (reentrant per owner, fencing token on every grant, loss
/// signal, timeouts, cancel-safety). A writer may take the read half
/// (downgrade) and keep it after releasing the write half; a reader asking
/// for the write half gets [`Error::UpgradeRefused`] at once. A waiting
/// writer blocks new readers, so a stream of readers cannot starve it.
#[derive(Debug, Clone)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl RwLock {
    pub(crate) fn new(exec: Arc<Executor>, name: LockName, opts: &LockOptions) -> Self {
        RwLock {
            read: Lock::new(exec.clone(), name.clone(), LockMode::Read, opts),
            write: Lock::new(exec, name, LockMode::Write, opts),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The shared half.
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The exclusive half.
    pub fn write(&self) -> &Lock {
        &self.write
    }
}
