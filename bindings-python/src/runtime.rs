//! The process-wide tokio runtime, and the interruptible wait that every
//! blocking call goes through.

use std::future::Future;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use polylock::blocking::{Slice, Sliced};
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::lock_error;

/// How long a blocked call waits with the GIL released before it looks for
/// a pending signal (Ctrl-C must interrupt within 100 ms).
pub(crate) const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// The runtime of this process, tagged with its pid. A forked child sees a
/// foreign pid and builds its own; the parent's is leaked, never dropped
/// (dropping would join worker threads that do not exist in the child).
static CURRENT: AtomicPtr<(u32, Runtime)> = AtomicPtr::new(std::ptr::null_mut());
static BUILDING: Mutex<()> = Mutex::new(());

pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    if let Some(rt) = current_for(pid) {
        return Ok(rt);
    }
    let _building = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = current_for(pid) {
        return Ok(rt);
    }
    let rt = polylock::blocking::binding_runtime("polylock-rt")
        .map_err(|e| lock_error(format!("cannot start the polylock runtime: {e}")))?;
    let leaked: &'static mut (u32, Runtime) = Box::leak(Box::new((pid, rt)));
    CURRENT.store(leaked, Ordering::Release);
    Ok(&leaked.1)
}

fn current_for(pid: u32) -> Option<&'static Runtime> {
    let ptr = CURRENT.load(Ordering::Acquire);
    // SAFETY: the pointer comes from Box::leak and is never freed.
    let entry = unsafe { ptr.as_ref() }?;
    (entry.0 == pid).then_some(&entry.1)
}

/// What to do with the work when Ctrl-C interrupts the wait.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnInterrupt {
    /// End the task: an acquire still waiting is withdrawn, and the
    /// interrupt is raised once the server holds nothing of it
    /// (`Sliced::cancel`); other work is aborted.
    Cancel,
    /// Let it finish in the background (a release must still happen).
    Detach,
}

/// Runs `fut` on the runtime and waits for it with the GIL released, in
/// slices, checking for signals between them ([`Sliced`]: no tokio timer
/// per slice). A signal handler's exception (KeyboardInterrupt) is
/// returned after the task is dealt with.
pub(crate) fn wait<T, F>(py: Python<'_>, on_interrupt: OnInterrupt, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut task = Sliced::spawn(runtime()?.handle(), fut);
    loop {
        match py.detach(|| task.wait(SIGNAL_SLICE)) {
            Slice::Done(value) => return Ok(value),
            Slice::Failed(why) => return Err(lock_error(format!("polylock task failed: {why}"))),
            Slice::StillRunning => {
                if let Err(interrupted) = py.check_signals() {
                    if on_interrupt == OnInterrupt::Cancel {
                        // A grant that raced the cancel is dropped: given back.
                        py.detach(|| drop(task.cancel()));
                    }
                    // Detach: dropping `task` leaves it running.
                    return Err(interrupted);
                }
            }
        }
    }
}
