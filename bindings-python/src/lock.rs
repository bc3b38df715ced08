//! `Lock`: acquire and release for an explicit owner id, blocking (GIL
//! released, Ctrl-C aware) or asynchronous (a tokio task that reports to a
//! Python callback, which the package turns into an asyncio future).
//!
//! The binding keeps no holds: Python releases by owner, and the runtime
//! answers for each owner (its token, its count, the loss of its grant).

use std::sync::{Arc, Mutex};

use polylock::{Guard, LossWatch, OwnerId};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyNone};
use pyo3::IntoPyObjectExt;
use tokio::runtime::Handle;

use crate::errors::{seconds, to_py, PythonErrorExt};
use crate::loss::{report_loss, Loss};
use crate::process::ProcessBound;
use crate::runtime::{runtime, wait, OnInterrupt};

pub(crate) struct LockInner {
    client: polylock::Client,
    lock: polylock::Lock,
    on_lost: Option<Arc<Py<PyAny>>>,
}

impl LockInner {
    pub(crate) fn new(client: polylock::Client, lock: polylock::Lock, on_lost: Option<Py<PyAny>>) -> Self {
        LockInner { client, lock, on_lost: on_lost.map(Arc::new) }
    }
}

/// Leaves a grant's hold to the runtime (Python releases by owner) and, for
/// a new grant (its re-entries share its signal), forwards its loss to
/// `on_lost`. Returns the grant's fencing token.
fn keep(guard: Guard, on_lost: Option<&Arc<Py<PyAny>>>) -> u64 {
    if let Some(callback) = on_lost.filter(|_| !guard.is_reentry()) {
        let callback = callback.clone();
        // No task per grant: the runtime calls this only on a loss.
        guard.loss_watch().on_loss(move |reason| report_loss(reason, callback));
    }
    guard.into_token()
}

#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Lock {
    inner: ProcessBound<LockInner>,
}

impl Lock {
    pub(crate) fn new(inner: LockInner) -> Self {
        Lock { inner: ProcessBound::new(inner) }
    }
}

#[pymethods]
impl Lock {
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.inner.get()?.lock.name().to_owned())
    }

    /// "mutex", or the half of a read-write lock: "read" or "write".
    #[getter]
    fn mode(&self) -> PyResult<&'static str> {
        Ok(self.inner.get()?.lock.mode().as_str())
    }

    /// Blocks until `owner` holds the lock. `timeout`: None waits forever,
    /// 0 tries once. False when not granted in time.
    #[pyo3(signature = (owner, timeout))]
    fn acquire(&self, py: Python<'_>, owner: u64, timeout: Option<f64>) -> PyResult<bool> {
        let inner = self.inner.get()?;
        let timeout = seconds("timeout", timeout)?;
        let lock = inner.lock.clone();
        match wait(py, OnInterrupt::Cancel, async move { lock.acquire_as(OwnerId(owner), timeout).await })? {
            Ok(guard) => {
                keep(guard, inner.on_lost.as_ref());
                Ok(true)
            }
            Err(polylock::Error::Timeout(_) | polylock::Error::WouldBlock(_)) => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `acquire` for a guard block: `(fencing_token, Loss)` once `owner`
    /// holds the lock; LockTimeout when not granted in time.
    #[pyo3(signature = (owner, timeout))]
    fn acquire_guard(&self, py: Python<'_>, owner: u64, timeout: Option<f64>) -> PyResult<(u64, Loss)> {
        let inner = self.inner.get()?;
        let timeout = seconds("timeout", timeout)?;
        let lock = inner.lock.clone();
        let guard =
            wait(py, OnInterrupt::Cancel, async move { lock.acquire_as(OwnerId(owner), timeout).await })?.py_err()?;
        let loss = Loss::new(inner.lock.name(), guard.loss_watch());
        Ok((keep(guard, inner.on_lost.as_ref()), loss))
    }

    /// Ends `owner`'s newest hold and waits for the server. LockLostError
    /// if that hold was lost; NotHeldError if `owner` holds nothing.
    fn release(&self, py: Python<'_>, owner: u64) -> PyResult<()> {
        let lock = self.inner.get()?.lock.clone();
        wait(py, OnInterrupt::Detach, async move { lock.release_as(OwnerId(owner)).await })?.py_err()
    }

    /// Starts an acquire for `owner`; `done(True, None)` or `done(None, exc)`
    /// is called from a runtime thread when it ends.
    #[pyo3(signature = (owner, timeout, done))]
    fn acquire_async(&self, owner: u64, timeout: Option<f64>, done: Py<PyAny>) -> PyResult<AsyncOp> {
        self.start_acquire(owner, timeout, done, Answer::Granted)
    }

    /// `acquire_async` for a guard block: `done((fencing_token, Loss), None)`
    /// or `done(None, exc)` (LockTimeout when not granted in time).
    #[pyo3(signature = (owner, timeout, done))]
    fn acquire_guard_async(&self, owner: u64, timeout: Option<f64>, done: Py<PyAny>) -> PyResult<AsyncOp> {
        self.start_acquire(owner, timeout, done, Answer::Guard)
    }

    /// Starts releasing `owner`'s newest hold; `done(None, None)` or
    /// `done(None, exc)` is called when the server has released it.
    fn release_async(&self, owner: u64, done: Py<PyAny>) -> PyResult<()> {
        let lock = self.inner.get()?.lock.clone();
        runtime()?.spawn(async move {
            let outcome = lock.release_as(OwnerId(owner)).await;
            crate::exit_gate::attach(|py| {
                let error = match outcome {
                    Ok(()) => PyNone::get(py).to_owned().into_any(),
                    Err(e) => to_py(e).into_value(py).into_bound(py).into_any(),
                };
                if let Err(e) = done.call1(py, (PyNone::get(py), error)) {
                    e.write_unraisable(py, Some(done.bind(py)));
                }
            });
        });
        Ok(())
    }

    /// Does `owner` hold the lock (and has not lost it)?
    fn held(&self, owner: u64) -> PyResult<bool> {
        Ok(self.inner.get()?.lock.hold_count(OwnerId(owner)) > 0)
    }

    /// The fencing token of `owner`'s newest hold (LockLostError if that
    /// hold was lost, NotHeldError if there is none).
    fn fencing_token(&self, owner: u64) -> PyResult<u64> {
        self.inner.get()?.lock.fencing_token_of(OwnerId(owner)).py_err()
    }

    /// Held by anyone: by an owner of this client (no I/O), else as the server sees it.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.inner.get()?;
        if inner.lock.is_held_locally() {
            return Ok(true);
        }
        let (client, name) = (inner.client.clone(), inner.lock.name().to_owned());
        Ok(wait(py, OnInterrupt::Cancel, async move { client.status(&name).await })?.py_err()?.held)
    }
}

/// What an asynchronous acquire hands `done` once granted.
#[derive(Clone, Copy)]
enum Answer {
    /// `True` (`acquire_async`).
    Granted,
    /// `(fencing_token, Loss)` (`acquire_guard_async`).
    Guard,
}

impl Lock {
    fn start_acquire(&self, owner: u64, timeout: Option<f64>, done: Py<PyAny>, answer: Answer) -> PyResult<AsyncOp> {
        let inner = self.inner.get()?;
        let timeout = seconds("timeout", timeout)?;
        let op = Arc::new(Mutex::new(OpState::default()));
        let task = {
            let op = op.clone();
            let lock = inner.lock.clone();
            let on_lost = inner.on_lost.clone();
            runtime()?.spawn(async move {
                let outcome = match lock.acquire_as(OwnerId(owner), timeout).await {
                    Ok(guard) => {
                        let mut state = op.lock().unwrap_or_else(|p| p.into_inner());
                        if state.cancelled {
                            return; // dropping the guard gives the grant back
                        }
                        let watch = matches!(answer, Answer::Guard).then(|| guard.loss_watch());
                        let token = keep(guard, on_lost.as_ref());
                        state.granted = Some(token);
                        Ok((token, watch))
                    }
                    Err(e) => Err(e),
                };
                let delivered = crate::exit_gate::attach(|py| {
                    let none = || PyNone::get(py).to_owned().into_any();
                    let args = match outcome {
                        Ok((_, None)) => Ok((PyBool::new(py, true).to_owned().into_any(), none())),
                        Ok((token, Some(watch))) => {
                            granted_guard(py, lock.name(), token, watch).map(|value| (value, none()))
                        }
                        Err(e) => Ok((none(), to_py(e).into_value(py).into_bound(py).into_any())),
                    };
                    args.and_then(|args| done.call1(py, args)).map_err(|e| e.write_unraisable(py, Some(done.bind(py))))
                });
                if !matches!(delivered, Some(Ok(_))) {
                    // Nobody will ever release it: give the grant back.
                    cancel_op(&Handle::current(), &op, &lock, owner);
                }
            })
        };
        Ok(AsyncOp {
            inner: ProcessBound::new(OpInner { op, lock: inner.lock.clone(), owner, task: task.abort_handle() }),
        })
    }
}

/// A guard block's grant as Python gets it: `(fencing_token, Loss)`.
fn granted_guard<'py>(py: Python<'py>, name: &str, token: u64, watch: LossWatch) -> PyResult<Bound<'py, PyAny>> {
    (token, Loss::new(name, watch)).into_bound_py_any(py)
}

#[derive(Default)]
struct OpState {
    cancelled: bool,
    /// The fencing token of the grant this acquire delivered.
    granted: Option<u64>,
}

/// Marks the acquire cancelled; if it was already granted, gives that
/// grant back in the background (by token: never a newer grant).
fn cancel_op(rt: &Handle, op: &Mutex<OpState>, lock: &polylock::Lock, owner: u64) {
    let mut state = op.lock().unwrap_or_else(|p| p.into_inner());
    state.cancelled = true;
    if let Some(token) = state.granted.take() {
        let lock = lock.clone();
        rt.spawn(async move { lock.release_grant(OwnerId(owner), token).await });
    }
}

struct OpInner {
    op: Arc<Mutex<OpState>>,
    lock: polylock::Lock,
    owner: u64,
    task: tokio::task::AbortHandle,
}

/// An asynchronous acquire in flight, so the asyncio side can cancel it.
#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct AsyncOp {
    inner: ProcessBound<OpInner>,
}

#[pymethods]
impl AsyncOp {
    /// Cancels the acquire: nothing is left on the server, and a grant
    /// that already arrived is given back. Idempotent.
    fn cancel(&self) -> PyResult<()> {
        let inner = self.inner.get()?;
        cancel_op(runtime()?.handle(), &inner.op, &inner.lock, inner.owner);
        inner.task.abort();
        Ok(())
    }
}
