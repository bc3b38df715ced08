//! Acquires that Java can wait for in slices and cancel.
//!
//! `start` spawns the runtime's cancel-safe `acquire_as` as a task; `wait`
//! blocks the Java thread for at most a slice; `free` withdraws the acquire
//! if it still waits, returning once the server holds nothing of it
//! (`polylock::blocking::Sliced::cancel`), and gives back a grant that
//! nobody claimed. Claiming a grant keeps the hold in the
//! runtime (released later by owner) and hands it the grant's Java `HoldWatch`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jni::objects::GlobalRef;
use polylock::{Error, Guard, OwnerId};
use tokio::task::JoinHandle;

use crate::errors::{Failure, Outcome};
use crate::handles::LockHandle;
use crate::runtime::{self, Slice, Sliced};
use crate::upcalls;

pub(crate) struct PendingAcquire {
    /// Keeps the Java lock handle (and its client's count) alive while the acquire runs.
    _lock: Arc<LockHandle>,
    owner: u64,
    task: Mutex<Option<Sliced<polylock::Result<Guard>>>>,
}

/// What `wait` tells Java, besides the fencing token (>= 0) of a grant.
pub(crate) const STILL_WAITING: i64 = -1;
pub(crate) const NOT_GRANTED: i64 = -2;

/// `timeout_nanos < 0`: wait until granted; 0: one try, no wait.
fn timeout_of(timeout_nanos: i64) -> Option<Duration> {
    (timeout_nanos >= 0).then(|| Duration::from_nanos(timeout_nanos as u64))
}

pub(crate) fn start(lock: Arc<LockHandle>, owner: u64, timeout_nanos: i64) -> PendingAcquire {
    let timeout = timeout_of(timeout_nanos);
    let l = lock.lock.clone();
    let task = runtime::sliced(async move { l.acquire_as(OwnerId(owner), timeout).await });
    PendingAcquire { _lock: lock, owner, task: Mutex::new(Some(task)) }
}

impl PendingAcquire {
    /// Blocks up to `millis`; the token of a grant (claimed, watched for
    /// loss by `watch`), [`STILL_WAITING`], or [`NOT_GRANTED`].
    pub(crate) fn wait(&self, millis: i64, watch: GlobalRef) -> Outcome<i64> {
        let mut slot = self.task.lock().unwrap_or_else(|p| p.into_inner());
        let Some(task) = slot.as_mut() else {
            return Err(Failure::Illegal("this acquire already finished".into()));
        };
        let joined = match task.wait(Duration::from_millis(millis.max(0) as u64)) {
            Slice::StillRunning => return Ok(STILL_WAITING),
            Slice::Done(outcome) => Ok(outcome),
            Slice::Failed(why) => Err(why),
        };
        *slot = None;
        match joined {
            Ok(Ok(guard)) => Ok(claim(self.owner, guard, watch) as i64),
            Ok(Err(Error::Timeout(_) | Error::WouldBlock(_))) => Ok(NOT_GRANTED),
            Ok(Err(e)) => Err(e.into()),
            Err(why) => Err(Failure::Panic(format!("acquire task failed: {why}"))),
        }
    }

    /// Cancels the acquire if it still runs and waits until the runtime has
    /// withdrawn it; a grant that raced the cancel is released.
    pub(crate) fn cancel(&self) {
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            // An unclaimed guard is dropped here, which releases it.
            drop(task.cancel());
        }
    }
}

/// Keeps the hold in the runtime (Java releases by owner) and, for a new
/// grant, forwards its loss to `watch`, the Java `HoldWatch` of that grant.
/// A re-entry shares its grant's signal: its own `watch` is dropped unused.
/// Returns the fencing token.
fn claim(owner: u64, guard: Guard, watch: GlobalRef) -> u64 {
    if !guard.is_reentry() {
        // No task per grant: the runtime calls this only on a loss.
        guard.loss_watch().on_loss(move |reason| upcalls::notify_lost(&watch, owner, &reason.to_string()));
    }
    guard.into_token()
}

/// An acquire whose result goes to `completion.done(...)` on a runtime
/// thread, for `lockAsync()`. Aborting the returned task cancels it.
pub(crate) fn start_async(lock: Arc<LockHandle>, owner: u64, completion: GlobalRef, watch: GlobalRef) -> PendingAsync {
    let task = runtime::spawn(async move {
        let result = match lock.lock.acquire_as(OwnerId(owner), None).await {
            Ok(guard) => Ok(claim(owner, guard, watch)),
            Err(e) => Err(Failure::Polylock(e)),
        };
        upcalls::complete(&completion, result);
    });
    PendingAsync { task }
}

pub(crate) struct PendingAsync {
    task: JoinHandle<()>,
}

impl PendingAsync {
    /// Withdraws the acquire unless it already completed.
    pub(crate) fn cancel(&self) {
        self.task.abort();
    }
}
