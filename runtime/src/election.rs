//! `Election` and `Leadership`: a leader election of one name. The core
//! runs it as the mutex's lifecycle in [`LockMode::Leader`] (campaign =
//! acquire, resign = release, term = the grant's fencing token, deposed =
//! lost), so a leader is told it may have lost its leadership before any
//! other participant can lead, exactly as a lock holder is. On ZooKeeper
//! the participants are Curator `LeaderLatch` nodes; on Redis the leader
//! holds the name's mutex.

use std::sync::Arc;
use std::time::Duration;

use polylock_core::{Backend, LockMode, LockName, LossReason, OwnerId};

use crate::error::{Error, Result};
use crate::executor::Executor;
use crate::lock::{Guard, Lock, LossWatch};
use crate::options::LockOptions;

/// A leader election of one [`crate::Client`] ([`crate::Client::election`]).
/// Cheap to clone. Each campaign is a participant of its own (a fresh
/// owner), so two tasks of one client campaigning on one name are two
/// participants, and a leadership is not re-entrant.
#[derive(Clone)]
pub struct Election {
    lock: Lock,
    exec: Arc<Executor>,
    backend: Backend,
    name: LockName,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election").field("name", &self.lock.name()).finish()
    }
}

/// Who leads an election now, as the server records it ([`Election::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's participant id: a polylock participant's
    /// `<client id>:<owner>` ([`Leadership::participant`]), or the id a
    /// Curator `LeaderLatch` was given (its node's data).
    pub participant: String,
    /// The leadership's term: ZooKeeper the leader node's czxid; Redis the
    /// fence counter of its grant, which its renewals keep (`None` only if
    /// the leader stopped renewing and the lease is running out).
    pub term: Option<u64>,
}

impl Election {
    pub(crate) fn new(exec: Arc<Executor>, backend: Backend, name: LockName, opts: &LockOptions) -> Self {
        Election { lock: Lock::new(exec.clone(), name.clone(), LockMode::Leader, opts), exec, backend, name }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Waits until this new participant leads. Cancel-safe: dropping the
    /// future withdraws the participant and leaves nothing on the server
    /// (a leadership that raced the drop is resigned).
    pub async fn campaign(&self) -> Result<Leadership> {
        self.lock.acquire_as(OwnerId::fresh(), None).await.map(Leadership::new)
    }

    /// Like [`Self::campaign`] but gives up after `timeout`
    /// (`Duration::ZERO`: lead only if nobody leads or waits). `Ok(None)`
    /// if it did not lead in time; the participant is withdrawn.
    pub async fn campaign_timeout(&self, timeout: Duration) -> Result<Option<Leadership>> {
        match self.lock.acquire_as(OwnerId::fresh(), Some(timeout)).await {
            Ok(guard) => Ok(Some(Leadership::new(guard))),
            Err(Error::Timeout(_) | Error::WouldBlock(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Who leads now, by every client (one read of the server, as Curator's
    /// `getLeader`); `None` when nobody does. Stale the moment it returns:
    /// to act as the leader, campaign and check the term at the resource.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let status = self.exec.status(self.backend, &self.name).await?;
        Ok(match (status.held, status.holder) {
            (true, Some(participant)) => Some(Leader { participant, term: status.fencing_token }),
            _ => None,
        })
    }
}

/// Proof of leading an election. Resigning it (or dropping it, which
/// resigns in the background) lets the next participant lead.
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
}

impl Leadership {
    fn new(guard: Guard) -> Self {
        Leadership { guard }
    }

    /// The leadership's term: larger than every earlier leadership's of
    /// this election, through restarts and failovers as a lock's fencing
    /// token is. Hand it to what the leader writes to, and have that refuse
    /// terms smaller than the largest it has seen: a deposed leader's late
    /// writes are then refused.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// This participant's id as the server records it (what
    /// [`Election::leader`] reports while it leads).
    pub fn participant(&self) -> String {
        self.guard.lock().holder_id(self.guard.owner())
    }

    /// Whether the leadership was lost (and why). Once lost, stop acting as the leader.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.guard.lost_reason()
    }

    /// Resolves when the leadership is lost; never, if it is resigned first.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// Runs `work` while leading and drops it when the leadership is lost,
    /// returning [`Error::Lost`]: [`Guard::while_held`], for a leader.
    pub async fn while_held<F: std::future::Future>(&self, work: F) -> Result<F::Output> {
        self.guard.while_held(work).await
    }

    /// The loss signal, for bindings that forward it elsewhere.
    pub fn loss_watch(&self) -> LossWatch {
        self.guard.loss_watch()
    }

    /// Ends the leadership and waits for the server; the next participant
    /// leads after it. [`Error::Lost`] if it had been lost meanwhile.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}
