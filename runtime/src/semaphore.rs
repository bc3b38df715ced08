//! `Semaphore` and `Permits`: a counting semaphore of `N` permits with a
//! lease per grant (Redisson's `RPermitExpirableSemaphore` layout on
//! Redis; on ZooKeeper, Curator's `InterProcessSemaphoreV2`, whose leases
//! live as long as the session). Every grant of `k` permits is its own owner in the core (a fresh
//! [`OwnerId`]), so grants of one task never merge: a semaphore counts
//! permits, not holders.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polylock_core::{LockMode, LockName, LossReason, OwnerId, PermitRequest};

use crate::error::{Error, Result};
use crate::executor::Executor;
use crate::lock::{Guard, Lock, LossWatch};
use crate::options::LockOptions;

/// A counting semaphore of one [`crate::Client`] ([`crate::Client::semaphore`]).
/// Cheap to clone; clones share the grants taken with [`Self::acquire_held`].
#[derive(Clone)]
pub struct Semaphore {
    lock: Lock,
    exec: Arc<Executor>,
    backend: polylock_core::Backend,
    name: LockName,
    permits: u32,
    /// Grants taken for [`Self::release`] (newest last): the
    /// `threading.Semaphore` and `java.util.concurrent.Semaphore` shape,
    /// where any caller may release what another acquired.
    held: Arc<Mutex<Vec<Permits>>>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore").field("name", &self.lock.name()).field("permits", &self.permits).finish()
    }
}

/// A fresh owner per grant. Tagged apart from task and thread owners'
/// hashes ([`crate::current_owner`]) by its top bit; unique in the process.
fn fresh_owner() -> OwnerId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    OwnerId((1 << 63) | NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Semaphore {
    pub(crate) fn new(
        exec: Arc<Executor>,
        backend: polylock_core::Backend,
        name: LockName,
        permits: u32,
        opts: &LockOptions,
    ) -> Result<Self> {
        let ask = PermitRequest { total: permits, count: 1 };
        ask.validate().map_err(|e| Error::from_core(name.as_str(), e))?;
        Ok(Semaphore {
            lock: Lock::new(exec.clone(), name.clone(), LockMode::Semaphore, opts),
            exec,
            backend,
            name,
            permits,
            held: Arc::default(),
        })
    }

    /// The permits free on the server now, by every client (one read, as
    /// `polylock status`; Redisson's `availablePermits`). A semaphore not
    /// used yet has all its permits free. Stale the moment it returns: to
    /// take a permit, acquire instead.
    pub async fn available_permits(&self) -> Result<u32> {
        let status = self.exec.status(self.backend, &self.name).await?;
        Ok(status.permits.map_or(self.permits, |p| p.total.saturating_sub(p.held)))
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The number of permits every client of this name must agree on.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits for `count` permits (1 to [`Self::permits`]). Cancel-safe:
    /// dropping the future leaves nothing on the server.
    pub async fn acquire(&self, count: u32) -> Result<Permits> {
        self.acquire_for(count, None).await
    }

    /// Like [`Self::acquire`] but gives up after `timeout` (`Duration::ZERO`:
    /// one try without waiting). `Ok(None)` if not granted in time.
    pub async fn try_acquire(&self, count: u32, timeout: Duration) -> Result<Option<Permits>> {
        match self.acquire_for(count, Some(timeout)).await {
            Ok(p) => Ok(Some(p)),
            Err(Error::Timeout(_) | Error::WouldBlock(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `count` permits, waiting at most `timeout` (`None`: forever; zero:
    /// one try). Errors: [`Error::Timeout`] or [`Error::WouldBlock`] when
    /// not granted, [`Error::PermitsMismatch`] when the server's number of
    /// permits is another.
    pub async fn acquire_for(&self, count: u32, timeout: Option<Duration>) -> Result<Permits> {
        let ask = PermitRequest { total: self.permits, count };
        let guard = self.lock.acquire_with(fresh_owner(), timeout, Some(ask)).await?;
        Ok(Permits { guard, count })
    }

    /// [`Self::acquire_for`], kept by the semaphore for a later
    /// [`Self::release`]: the grant's fencing token, or `None` if not
    /// granted in time.
    pub async fn acquire_held(&self, count: u32, timeout: Option<Duration>) -> Result<Option<u64>> {
        match self.acquire_for(count, timeout).await {
            Ok(p) => {
                let token = p.fencing_token();
                self.held.lock().expect("semaphore grants").push(p);
                Ok(Some(token))
            }
            Err(Error::Timeout(_) | Error::WouldBlock(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Gives back `count` permits taken with [`Self::acquire_held`] and
    /// waits for the server: the newest grants whose counts fit in what is
    /// left to give back, so a caller releasing its one permit is not
    /// stopped by another caller's newer grant of two. A count no set of
    /// whole grants makes up this way (releasing 1 when only a grant of 2
    /// is held), or more than is held, is [`Error::InvalidOption`], and
    /// nothing is released. A grant lost meanwhile is released too and
    /// reported as [`Error::Lost`].
    pub async fn release(&self, count: u32) -> Result<()> {
        let taken = {
            let mut held = self.held.lock().expect("semaphore grants");
            let mut left = count;
            let mut picked = Vec::new();
            for (i, g) in held.iter().enumerate().rev() {
                if left == 0 {
                    break;
                }
                if g.count <= left {
                    left -= g.count;
                    picked.push(i);
                }
            }
            if left != 0 || count == 0 {
                let have: u32 = held.iter().map(|g| g.count).sum();
                return Err(Error::InvalidOption(if count == 0 || have < count {
                    format!("cannot release {count} permits of {:?}: {have} held here", self.name())
                } else {
                    format!("releasing {count} permits of {:?} would split a grant", self.name())
                }));
            }
            // Indices from the highest down: each removal leaves the lower ones in place.
            picked.into_iter().map(|i| held.remove(i)).collect::<Vec<_>>()
        };
        let mut first_error = None;
        for g in taken {
            if let Err(e) = g.release().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The fencing token of the newest grant held for [`Self::release`].
    pub fn newest_token(&self) -> Option<u64> {
        self.held.lock().expect("semaphore grants").last().map(Permits::fencing_token)
    }

    /// The loss signal of the newest grant held for [`Self::release`] (what
    /// a binding forwards to its language's loss callback).
    pub fn newest_loss_watch(&self) -> Option<LossWatch> {
        self.held.lock().expect("semaphore grants").last().map(Permits::loss_watch)
    }

    /// Permits held for [`Self::release`] in this handle (and its clones).
    pub fn held_permits(&self) -> u32 {
        self.held.lock().expect("semaphore grants").iter().map(|g| g.count).sum()
    }
}

/// `count` permits of a semaphore, held until released (or dropped, which
/// releases in the background), renewed with their lease meanwhile.
#[derive(Debug)]
pub struct Permits {
    guard: Guard,
    count: u32,
}

impl Permits {
    /// How many permits this grant holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The grant's fencing token: larger than every earlier grant's of this name.
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Whether the permits were lost (and why).
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.guard.lost_reason()
    }

    /// Resolves when the permits are lost; never, if released first.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// Runs `work` while the permits are held and drops it if they are lost
    /// first, as [`Guard::while_held`] does: `Ok(output)`, or
    /// [`Error::Lost`] with the semaphore's name and the reason.
    pub async fn while_held<F: Future>(&self, work: F) -> Result<F::Output> {
        self.guard.while_held(work).await
    }

    /// The grant's loss signal, for bindings that forward it elsewhere.
    pub fn loss_watch(&self) -> LossWatch {
        self.guard.loss_watch()
    }

    /// Gives the permits back and waits for the server. [`Error::Lost`] if
    /// they were lost while held.
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }
}
