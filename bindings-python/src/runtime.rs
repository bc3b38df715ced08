//! The process-wide tokio runtime, and the interruptible wait that every
//! blocking call goes through.

use std::future::Future;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::lock_error;

/// How long a blocked call waits with the GIL released before it looks for
/// a pending signal (Ctrl-C must interrupt within 100 ms).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

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
    // One worker: the task a call spawns, the Redis/ZooKeeper connection
    // drivers and the reply's waker all run on one thread, so a blocking
    // call costs one wake-up of that thread and one of the caller's, not
    // extra wake-ups between workers (`tests/test_hot_path.py` counts
    // them; the Node binding measured the same). The work is I/O and a
    // few microseconds of table code per reply; one thread carries it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("polylock-rt")
        .build()
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
    /// Abort the task (an acquire: the runtime's acquire is cancel-safe).
    Abort,
    /// Let it finish in the background (a release must still happen).
    Detach,
}

/// Runs `fut` on the runtime and waits for it with the GIL released, in
/// slices, checking for signals between them. A signal handler's exception
/// (KeyboardInterrupt) is returned after the task is dealt with.
///
/// The outcome comes back over a std channel, waited on with its own
/// timeout: a tokio timer per call would wake the runtime's thread to
/// re-arm its driver, one more wake-up per call.
pub(crate) fn wait<T, F>(py: Python<'_>, on_interrupt: OnInterrupt, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = rt.spawn(async move {
        // A receiver gone (the caller interrupted) drops the outcome: a
        // guard in it gives its grant back.
        let _ = tx.send(fut.await);
    });
    // `detach` needs a Sync closure; the mutex is never contended.
    let rx = Mutex::new(rx);
    loop {
        let polled = py.detach(|| rx.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(SIGNAL_SLICE));
        match polled {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Disconnected) => {
                // The task ended without sending: it panicked.
                let why = rt.block_on(task).err().map_or_else(|| "no outcome".to_owned(), |e| e.to_string());
                return Err(lock_error(format!("polylock task failed: {why}")));
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Err(interrupted) = py.check_signals() {
                    if on_interrupt == OnInterrupt::Abort {
                        task.abort();
                    }
                    return Err(interrupted);
                }
            }
        }
    }
}

/// The runtime thread's wake-ups so far: each time its worker went to
/// sleep or woke (tokio's park/unpark count). The hot-path test counts
/// them per acquire+release.
#[pyfunction]
pub(crate) fn runtime_wakes() -> PyResult<u64> {
    let metrics = runtime()?.metrics();
    Ok((0..metrics.num_workers()).map(|w| metrics.worker_park_unpark_count(w)).sum())
}
