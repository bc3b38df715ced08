//! Semaphore acquires that Java can wait for in slices and cancel, as
//! [`crate::acquire`] does for locks.
//!
//! `start` spawns the runtime's cancel-safe `Semaphore::acquire_held` as a
//! task: a grant stays in the semaphore (Java releases by count, from any
//! thread, as with `java.util.concurrent.Semaphore`). `wait` blocks the Java
//! thread for at most a slice; `cancel` withdraws the acquire if it still
//! waits and returns once the server holds nothing of it
//! (`polylock::blocking::Sliced::cancel`), and says whether a grant raced
//! the cancel, so that Java keeps it rather than losing track.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::acquire::{NOT_GRANTED, STILL_WAITING};
use crate::errors::{Failure, Outcome};
use crate::handles::SemaphoreHandle;
use crate::runtime::{self, Slice, Sliced};

type Grant = polylock::Result<Option<u64>>;

pub(crate) struct PendingPermits {
    /// Keeps the Java semaphore handle (and its client's count) alive while the acquire runs.
    _sem: Arc<SemaphoreHandle>,
    task: Mutex<Option<Sliced<Grant>>>,
}

/// `timeout_nanos < 0`: wait until granted; 0: one try, no wait.
pub(crate) fn start(sem: Arc<SemaphoreHandle>, count: u32, timeout_nanos: i64) -> PendingPermits {
    let timeout = (timeout_nanos >= 0).then(|| Duration::from_nanos(timeout_nanos as u64));
    let s = sem.sem.clone();
    let task = runtime::sliced(async move { s.acquire_held(count, timeout).await });
    PendingPermits { _sem: sem, task: Mutex::new(Some(task)) }
}

/// The grant's token (>= 0), or [`NOT_GRANTED`]; errors as Java exceptions.
fn outcome(grant: Grant) -> Outcome<i64> {
    match grant {
        Ok(Some(token)) => Ok(token as i64),
        Ok(None) => Ok(NOT_GRANTED),
        Err(e) => Err(e.into()),
    }
}

impl PendingPermits {
    /// Blocks up to `millis`: the token of a grant, [`STILL_WAITING`], or [`NOT_GRANTED`].
    pub(crate) fn wait(&self, millis: i64) -> Outcome<i64> {
        let mut slot = self.task.lock().unwrap_or_else(|p| p.into_inner());
        let Some(task) = slot.as_mut() else {
            return Err(Failure::Illegal("this acquire already finished".into()));
        };
        let grant = match task.wait(Duration::from_millis(millis.max(0) as u64)) {
            Slice::StillRunning => return Ok(STILL_WAITING),
            Slice::Done(grant) => grant,
            Slice::Failed(why) => {
                *slot = None;
                return Err(Failure::Panic(format!("semaphore acquire task failed: {why}")));
            }
        };
        *slot = None;
        outcome(grant)
    }

    /// Cancels the acquire if it still runs and waits until the runtime has
    /// withdrawn it: the token of a grant that raced the cancel (it is held
    /// in the semaphore), or [`NOT_GRANTED`] (a refusal that raced it too:
    /// the caller asked to stop waiting, not for its outcome).
    pub(crate) fn cancel(&self) -> i64 {
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(task) = task else { return NOT_GRANTED };
        task.cancel().map_or(NOT_GRANTED, |grant| outcome(grant).unwrap_or(NOT_GRANTED))
    }
}
