//! `Loss`: one grant's loss signal as Python sees it (a lock hold's or a
//! semaphore grant's): read it (`is_set`, `reason`, `check`), block on it
//! (`wait`, GIL released, Ctrl-C aware), or have a Python callable called
//! on it (`on_loss`, what asyncio's cancel-on-loss uses).
//!
//! The runtime's loss callback sets it: no thread, task or poll per hold,
//! and no wake-up at all while the grant is held or when it is released.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use polylock::{LossReason, LossWatch};
use pyo3::prelude::*;

use crate::errors::{seconds, to_py};
use crate::process::ProcessBound;
use crate::runtime::SIGNAL_SLICE;

/// What a blocked `wait` sleeps on: set by the runtime's loss callback.
struct Fired {
    lost: Mutex<bool>,
    woken: Condvar,
}

impl Fired {
    fn fire(&self) {
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.woken.notify_all();
    }

    /// Sleeps (the caller has let go of the GIL) until fired or `slice`
    /// passed; true once fired.
    fn sleep(&self, slice: Duration) -> bool {
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        let (lost, _) = self.woken.wait_timeout_while(lost, slice, |lost| !*lost).unwrap_or_else(|p| p.into_inner());
        *lost
    }
}

struct LossInner {
    /// The lock's (or semaphore's) name, for the `LockLostError` of `check`.
    name: String,
    /// The runtime's signal: the truth about the loss, readable at any time.
    watch: LossWatch,
    fired: Arc<Fired>,
}

#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Loss {
    inner: ProcessBound<LossInner>,
}

impl Loss {
    pub(crate) fn new(name: &str, watch: LossWatch) -> Self {
        let fired = Arc::new(Fired { lost: Mutex::new(false), woken: Condvar::new() });
        // Weak: a hold's callbacks live as long as the grant, which may
        // outlive this object; a loss after it is gone has no one to wake.
        let wake: Weak<Fired> = Arc::downgrade(&fired);
        watch.on_loss(move |_| {
            if let Some(fired) = wake.upgrade() {
                fired.fire();
            }
        });
        Loss { inner: ProcessBound::new(LossInner { name: name.to_owned(), watch, fired }) }
    }
}

#[pymethods]
impl Loss {
    /// Lost (never for a grant released first).
    fn is_set(&self) -> PyResult<bool> {
        Ok(self.inner.get()?.watch.reason().is_some())
    }

    /// Why it was lost, or None.
    #[getter]
    fn reason(&self) -> PyResult<Option<String>> {
        Ok(self.inner.get()?.watch.reason().map(|r| r.to_string()))
    }

    /// LockLostError (naming the lock and the reason) if lost; else nothing.
    fn check(&self) -> PyResult<()> {
        let inner = self.inner.get()?;
        match inner.watch.reason() {
            Some(reason) => Err(to_py(polylock::Error::Lost { name: inner.name.clone(), reason })),
            None => Ok(()),
        }
    }

    /// Blocks until lost (true) or `timeout` seconds passed (false; None
    /// waits forever), with the GIL released; a signal handler's exception
    /// (KeyboardInterrupt) is raised between slices.
    #[pyo3(signature = (timeout))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let inner = self.inner.get()?;
        let deadline = seconds("timeout", timeout)?.map(|t| Instant::now() + t);
        loop {
            if inner.watch.reason().is_some() {
                return Ok(true);
            }
            let slice = match deadline {
                None => SIGNAL_SLICE,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(SIGNAL_SLICE),
                    _ => return Ok(false),
                },
            };
            let fired = inner.fired.clone();
            if py.detach(move || fired.sleep(slice)) {
                return Ok(true);
            }
            py.check_signals()?;
        }
    }

    /// Calls `callback(reason)` once if the grant is lost (soon, if it
    /// already is), on a thread of its own; never if it is released first.
    fn on_loss(&self, callback: Py<PyAny>) -> PyResult<()> {
        let callback = Arc::new(callback);
        self.inner.get()?.watch.on_loss(move |reason| report_loss(reason, callback));
        Ok(())
    }
}

/// Calls a Python callback with the reason of a loss, on a thread of its
/// own: it may block (a user's `on_lost` may call blocking polylock
/// methods), which must not happen on a runtime worker, where the runtime
/// calls this. Its exceptions go to `sys.unraisablehook`.
pub(crate) fn report_loss(reason: LossReason, callback: Arc<Py<PyAny>>) {
    tokio::task::spawn_blocking(move || {
        crate::exit_gate::attach(|py| {
            if let Err(e) = callback.call1(py, (reason.to_string(),)) {
                e.write_unraisable(py, Some(callback.bind(py)));
            }
        })
    });
}
