//! `Semaphore` and `Permits`: the runtime's counting semaphore in its two
//! shapes. The `threading.Semaphore` shape (`acquire`/`release`) keeps its
//! grants in the runtime's handle (`acquire_held`), so any thread or task
//! may release what another acquired; the guard shape (`grant`) hands each
//! grant out as a `Permits`, with its own fencing token and loss.
//!
//! As for the lock, a blocking wait releases the GIL and answers Ctrl-C,
//! an asynchronous one reports to a Python callback, and a cancelled or
//! interrupted acquire leaves nothing held behind.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyNone;
use pyo3::IntoPyObjectExt;
use tokio::runtime::Handle;

use crate::errors::{not_held, seconds, to_py, PythonErrorExt};
use crate::loss::Loss;
use crate::process::ProcessBound;
use crate::runtime::{runtime, wait, OnInterrupt};

#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Semaphore {
    inner: ProcessBound<polylock::Semaphore>,
}

impl Semaphore {
    pub(crate) fn new(sem: polylock::Semaphore) -> Self {
        Semaphore { inner: ProcessBound::new(sem) }
    }
}

/// An acquire of the threading shape under way: whether its caller gave up
/// (Ctrl-C, asyncio cancellation, an undeliverable result) and the count of
/// a grant it already took, so that exactly one side gives that grant back.
#[derive(Default)]
struct HeldOp {
    cancelled: bool,
    granted: Option<u32>,
}

/// Runs `acquire_held` and records its grant in `op`, unless the caller
/// gave up meanwhile: then the grant goes straight back. `Ok(true)` granted.
async fn acquire_held(
    sem: polylock::Semaphore,
    op: Arc<Mutex<HeldOp>>,
    count: u32,
    timeout: Option<std::time::Duration>,
) -> polylock::Result<bool> {
    let Some(_token) = sem.acquire_held(count, timeout).await? else { return Ok(false) };
    let cancelled = {
        let mut state = op.lock().unwrap_or_else(|p| p.into_inner());
        if !state.cancelled {
            state.granted = Some(count);
        }
        state.cancelled
    };
    if cancelled {
        // Its own task: the abort that may follow the cancellation must not cut it short.
        tokio::spawn(async move { sem.release(count).await });
    }
    Ok(!cancelled)
}

/// The caller gave up: a grant that already arrived is released in the
/// background (the newest `count` held, all alike in the threading shape).
fn give_up(rt: &Handle, op: &Mutex<HeldOp>, sem: &polylock::Semaphore) {
    let mut state = op.lock().unwrap_or_else(|p| p.into_inner());
    state.cancelled = true;
    if let Some(count) = state.granted.take() {
        let sem = sem.clone();
        rt.spawn(async move { sem.release(count).await });
    }
}

/// `done(value, None)` or `done(None, exc)` from a runtime thread; false if
/// it could not be called (the interpreter is finalizing, or it raised).
fn deliver<T>(done: &Py<PyAny>, outcome: PyResult<T>) -> bool
where
    T: for<'py> IntoPyObject<'py>,
{
    let delivered = crate::exit_gate::attach(|py| {
        let args = match outcome.and_then(|v| v.into_bound_py_any(py)) {
            Ok(value) => (value, PyNone::get(py).to_owned().into_any()),
            Err(e) => (PyNone::get(py).to_owned().into_any(), e.into_value(py).into_bound(py).into_any()),
        };
        done.call1(py, args).map_err(|e| e.write_unraisable(py, Some(done.bind(py))))
    });
    matches!(delivered, Some(Ok(_)))
}

#[pymethods]
impl Semaphore {
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.inner.get()?.name().to_owned())
    }

    /// The number of permits every client of this name agrees on.
    #[getter]
    fn permits(&self) -> PyResult<u32> {
        Ok(self.inner.get()?.permits())
    }

    /// Blocks until `count` permits are held by this handle. `timeout`:
    /// None waits forever, 0 tries once. False when not granted in time.
    #[pyo3(signature = (count, timeout))]
    fn acquire(&self, py: Python<'_>, count: u32, timeout: Option<f64>) -> PyResult<bool> {
        let sem = self.inner.get()?.clone();
        let timeout = seconds("timeout", timeout)?;
        let op = Arc::new(Mutex::new(HeldOp::default()));
        let task = acquire_held(sem.clone(), op.clone(), count, timeout);
        match wait(py, OnInterrupt::Cancel, task) {
            Ok(outcome) => outcome.py_err(),
            Err(interrupted) => {
                give_up(runtime()?.handle(), &op, &sem);
                Err(interrupted)
            }
        }
    }

    /// Gives back `count` permits held by this handle (newest grants first)
    /// and waits for the server.
    fn release(&self, py: Python<'_>, count: u32) -> PyResult<()> {
        let sem = self.inner.get()?.clone();
        wait(py, OnInterrupt::Detach, async move { sem.release(count).await })?.py_err()
    }

    /// Starts an acquire of `count` permits for this handle; `done(True,
    /// None)` or `done(None, exc)` (LockTimeout when not granted in time)
    /// is called from a runtime thread when it ends.
    #[pyo3(signature = (count, timeout, done))]
    fn acquire_async(&self, count: u32, timeout: Option<f64>, done: Py<PyAny>) -> PyResult<SemOp> {
        let sem = self.inner.get()?.clone();
        let timeout = seconds("timeout", timeout)?;
        let op = Arc::new(Mutex::new(HeldOp::default()));
        let task = {
            let (sem, op) = (sem.clone(), op.clone());
            runtime()?.spawn(async move {
                let outcome = match acquire_held(sem.clone(), op.clone(), count, timeout).await {
                    Ok(true) => Ok(true),
                    Ok(false) if op.lock().unwrap_or_else(|p| p.into_inner()).cancelled => return,
                    Ok(false) => Err(to_py(polylock::Error::Timeout(sem.name().to_owned()))),
                    Err(e) => Err(to_py(e)),
                };
                if !deliver(&done, outcome) {
                    // Nobody will ever release it: give the grant back.
                    give_up(&Handle::current(), &op, &sem);
                }
            })
        };
        Ok(SemOp { inner: ProcessBound::new(OpInner { held: Some((op, sem)), task: task.abort_handle() }) })
    }

    /// Starts releasing `count` permits held by this handle; `done(None,
    /// None)` or `done(None, exc)` is called when the server has them back.
    fn release_async(&self, count: u32, done: Py<PyAny>) -> PyResult<()> {
        let sem = self.inner.get()?.clone();
        runtime()?.spawn(async move {
            let outcome = sem.release(count).await.map(|()| None::<bool>).map_err(to_py);
            deliver(&done, outcome);
        });
        Ok(())
    }

    /// The fencing token of the newest grant this handle holds, if any.
    fn fencing_token(&self) -> PyResult<Option<u64>> {
        Ok(self.inner.get()?.newest_token())
    }

    /// How many permits this handle (and its clones) holds.
    fn held_permits(&self) -> PyResult<u32> {
        Ok(self.inner.get()?.held_permits())
    }

    /// Blocks until `count` permits are granted, as one `Permits` (None
    /// when not granted in time).
    #[pyo3(signature = (count, timeout))]
    fn grant(&self, py: Python<'_>, count: u32, timeout: Option<f64>) -> PyResult<Option<Permits>> {
        let sem = self.inner.get()?.clone();
        let timeout = seconds("timeout", timeout)?;
        let waiting = sem.clone();
        let got = wait(py, OnInterrupt::Cancel, async move { waiting.acquire_for(count, timeout).await })?;
        match got {
            Ok(p) => Ok(Some(Permits::new(sem.name(), p))),
            Err(polylock::Error::Timeout(_) | polylock::Error::WouldBlock(_)) => Ok(None),
            Err(e) => Err(to_py(e)),
        }
    }

    /// Starts a `grant`; `done(permits, None)` or `done(None, exc)`
    /// (LockTimeout when not granted in time) is called when it ends. A
    /// `Permits` that nobody takes is released when it is dropped.
    #[pyo3(signature = (count, timeout, done))]
    fn grant_async(&self, count: u32, timeout: Option<f64>, done: Py<PyAny>) -> PyResult<SemOp> {
        let sem = self.inner.get()?.clone();
        let timeout = seconds("timeout", timeout)?;
        let task = runtime()?.spawn(async move {
            let outcome = sem.acquire_for(count, timeout).await.map(|p| Permits::new(sem.name(), p)).map_err(to_py);
            deliver(&done, outcome);
        });
        Ok(SemOp { inner: ProcessBound::new(OpInner { held: None, task: task.abort_handle() }) })
    }
}

struct OpInner {
    /// The threading shape's acquire (its state and handle); None for a
    /// `grant`, whose undelivered `Permits` releases itself when dropped.
    held: Option<(Arc<Mutex<HeldOp>>, polylock::Semaphore)>,
    task: tokio::task::AbortHandle,
}

/// An asynchronous semaphore acquire in flight, so asyncio can cancel it.
#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct SemOp {
    inner: ProcessBound<OpInner>,
}

#[pymethods]
impl SemOp {
    /// Cancels the acquire: nothing is left on the server, and a grant
    /// that already arrived is given back. Idempotent.
    fn cancel(&self) -> PyResult<()> {
        let inner = self.inner.get()?;
        if let Some((op, sem)) = &inner.held {
            give_up(runtime()?.handle(), op, sem);
        }
        inner.task.abort();
        Ok(())
    }
}

/// One grant of `count` permits (the guard shape). Dropped unreleased, it
/// is released in the background.
#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Permits {
    inner: ProcessBound<PermitsInner>,
}

struct PermitsInner {
    /// The semaphore's name, for the LockLostError of `Loss.check`.
    name: String,
    count: u32,
    token: u64,
    /// The grant until it is released (taken out by `release`).
    grant: Mutex<Option<polylock::Permits>>,
    /// Its loss signal, kept past the release.
    loss: polylock::LossWatch,
}

impl Permits {
    fn new(name: &str, p: polylock::Permits) -> Self {
        let inner = PermitsInner {
            name: name.to_owned(),
            count: p.count(),
            token: p.fencing_token(),
            loss: p.loss_watch(),
            grant: Mutex::new(Some(p)),
        };
        Permits { inner: ProcessBound::new(inner) }
    }

    fn take(&self) -> PyResult<polylock::Permits> {
        let inner = self.inner.get()?;
        let taken = inner.grant.lock().unwrap_or_else(|p| p.into_inner()).take();
        taken.ok_or_else(|| not_held(format!("these {} permits were already released", inner.count)))
    }
}

#[pymethods]
impl Permits {
    #[getter]
    fn count(&self) -> PyResult<u32> {
        Ok(self.inner.get()?.count)
    }

    #[getter]
    fn fencing_token(&self) -> PyResult<u64> {
        Ok(self.inner.get()?.token)
    }

    /// Why the permits were lost, or None while they are held (or after
    /// their release).
    #[getter]
    fn lost_reason(&self) -> PyResult<Option<String>> {
        Ok(self.inner.get()?.loss.reason().map(|r| r.to_string()))
    }

    /// The semaphore's name.
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.inner.get()?.name.clone())
    }

    /// This grant's loss signal, to wait on or read (one per call: the
    /// package keeps the first).
    fn loss(&self) -> PyResult<Loss> {
        let inner = self.inner.get()?;
        Ok(Loss::new(&inner.name, inner.loss.clone()))
    }

    /// Still held: neither released nor lost.
    #[getter]
    fn held(&self) -> PyResult<bool> {
        let inner = self.inner.get()?;
        let holding = inner.grant.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        Ok(holding && inner.loss.reason().is_none())
    }

    /// Gives the permits back and waits for the server.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let grant = self.take()?;
        wait(py, OnInterrupt::Detach, async move { grant.release().await })?.py_err()
    }

    /// Starts the release; `done(None, None)` or `done(None, exc)` when done.
    fn release_async(&self, done: Py<PyAny>) -> PyResult<()> {
        let grant = self.take()?;
        runtime()?.spawn(async move {
            let outcome = grant.release().await.map(|()| None::<bool>).map_err(to_py);
            deliver(&done, outcome);
        });
        Ok(())
    }
}
