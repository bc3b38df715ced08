//! `Lock`: acquire and release for an explicit owner id, blocking (GIL
//! released, Ctrl-C aware) or asynchronous (a tokio task that reports to a
//! Python callback, which the package turns into an asyncio future).

use std::sync::{Arc, Mutex};

use polylock::{Guard, OwnerId};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyNone};

use crate::errors::{not_held, seconds, to_py};
use crate::holds::Holds;
use crate::process::ProcessBound;
use crate::runtime::{runtime, wait, OnInterrupt};

pub(crate) struct LockInner {
    client: polylock::Client,
    lock: polylock::Lock,
    holds: Arc<Holds>,
    on_lost: Option<Arc<Py<PyAny>>>,
}

impl LockInner {
    pub(crate) fn new(
        client: polylock::Client,
        lock: polylock::Lock,
        holds: Arc<Holds>,
        on_lost: Option<Py<PyAny>>,
    ) -> Self {
        LockInner { client, lock, holds, on_lost: on_lost.map(Arc::new) }
    }

    /// Parks a fresh grant; on the owner's first hold, starts forwarding a loss to `on_lost`.
    fn keep(&self, owner: u64, guard: Guard) -> PyResult<()> {
        let watch = self.on_lost.as_ref().map(|cb| (cb.clone(), guard.loss_watch()));
        if self.holds.push(owner, guard) {
            if let Some((callback, watch)) = watch {
                runtime()?.spawn(report_loss(watch, callback));
            }
        }
        Ok(())
    }
}

/// Waits for a loss of one hold and calls the user's callback with the
/// reason. Ends quietly when the hold is released (the sender goes away).
async fn report_loss(mut watch: tokio::sync::watch::Receiver<Option<polylock::LossReason>>, callback: Arc<Py<PyAny>>) {
    let reason = loop {
        if let Some(reason) = *watch.borrow_and_update() {
            break reason;
        }
        if watch.changed().await.is_err() {
            return;
        }
    };
    // A thread of its own: the callback may call blocking polylock methods,
    // which must not run on a runtime worker.
    let _ = tokio::task::spawn_blocking(move || {
        Python::try_attach(|py| {
            if let Err(e) = callback.call1(py, (reason.to_string(),)) {
                e.write_unraisable(py, Some(callback.bind(py)));
            }
        })
    })
    .await;
}

/// Ends one hold: the guard's own grant (by fencing token), so a lost one
/// reports its loss and never ends a newer hold of the same owner.
async fn release_guard(guard: Guard) -> polylock::Result<()> {
    guard.release().await
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

    /// Blocks until `owner` holds the lock. `timeout`: None waits forever,
    /// 0 tries once. False when not granted in time.
    #[pyo3(signature = (owner, timeout))]
    fn acquire(&self, py: Python<'_>, owner: u64, timeout: Option<f64>) -> PyResult<bool> {
        let inner = self.inner.get()?;
        let timeout = seconds("timeout", timeout)?;
        let lock = inner.lock.clone();
        match wait(py, OnInterrupt::Abort, async move { lock.acquire_as(OwnerId(owner), timeout).await })? {
            Ok(guard) => inner.keep(owner, guard).map(|()| true),
            Err(polylock::Error::Timeout(_) | polylock::Error::WouldBlock(_)) => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    /// Ends `owner`'s newest hold and waits for the server. LockLostError
    /// if that hold was lost; NotHeldError if `owner` holds nothing.
    fn release(&self, py: Python<'_>, owner: u64) -> PyResult<()> {
        let inner = self.inner.get()?;
        let guard = inner.holds.pop(owner).ok_or_else(|| not_held(inner.lock.name()))?;
        wait(py, OnInterrupt::Detach, release_guard(guard))?.map_err(to_py)
    }

    /// Starts an acquire for `owner`; `done(True, None)` or `done(None, exc)`
    /// is called from a runtime thread when it ends.
    #[pyo3(signature = (owner, timeout, done))]
    fn acquire_async(&self, owner: u64, timeout: Option<f64>, done: Py<PyAny>) -> PyResult<AsyncOp> {
        let inner = self.inner.get()?;
        let timeout = seconds("timeout", timeout)?;
        let op = Arc::new(Mutex::new(OpState::default()));
        let task = {
            let op = op.clone();
            let lock = inner.lock.clone();
            let keeper = Keeper { holds: inner.holds.clone(), on_lost: inner.on_lost.clone() };
            runtime()?.spawn(async move {
                let outcome = lock.acquire_as(OwnerId(owner), timeout).await;
                let outcome = match outcome {
                    Ok(guard) => {
                        let mut state = op.lock().unwrap_or_else(|p| p.into_inner());
                        if state.cancelled {
                            return; // dropping the guard gives the grant back
                        }
                        keeper.keep(owner, guard);
                        state.granted = true;
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let delivered = Python::try_attach(|py| {
                    let args = match outcome {
                        Ok(()) => (PyBool::new(py, true).to_owned().into_any(), PyNone::get(py).to_owned().into_any()),
                        Err(e) => {
                            (PyNone::get(py).to_owned().into_any(), to_py(e).into_value(py).into_bound(py).into_any())
                        }
                    };
                    done.call1(py, args).map_err(|e| e.write_unraisable(py, Some(done.bind(py))))
                });
                if !matches!(delivered, Some(Ok(_))) {
                    // Nobody will ever release it: give the grant back.
                    cancel_op(&op, &keeper.holds, owner);
                }
            })
        };
        Ok(AsyncOp {
            inner: ProcessBound::new(OpInner { op, holds: inner.holds.clone(), owner, task: task.abort_handle() }),
        })
    }

    /// Starts releasing `owner`'s newest hold; `done(None, None)` or
    /// `done(None, exc)` is called when the server has released it.
    fn release_async(&self, owner: u64, done: Py<PyAny>) -> PyResult<()> {
        let inner = self.inner.get()?;
        let guard = inner.holds.pop(owner).ok_or_else(|| not_held(inner.lock.name()))?;
        runtime()?.spawn(async move {
            let outcome = release_guard(guard).await;
            Python::try_attach(|py| {
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

    /// The fencing token of `owner`'s newest hold.
    fn fencing_token(&self, owner: u64) -> PyResult<u64> {
        let inner = self.inner.get()?;
        let (token, lost) = inner
            .holds
            .with_newest(owner, |g| (g.fencing_token(), g.lost_reason()))
            .ok_or_else(|| not_held(inner.lock.name()))?;
        match lost {
            None => Ok(token),
            Some(reason) => Err(to_py(polylock::Error::Lost { name: inner.lock.name().to_owned(), reason })),
        }
    }

    /// Held by anyone: by an owner of this client (no I/O), else as the server sees it.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.inner.get()?;
        if inner.lock.is_held_locally() {
            return Ok(true);
        }
        let (client, name) = (inner.client.clone(), inner.lock.name().to_owned());
        Ok(wait(py, OnInterrupt::Abort, async move { client.status(&name).await })?.map_err(to_py)?.held)
    }
}

/// What a spawned async acquire needs of its lock (no Python handles but the callback).
struct Keeper {
    holds: Arc<Holds>,
    on_lost: Option<Arc<Py<PyAny>>>,
}

impl Keeper {
    fn keep(&self, owner: u64, guard: Guard) {
        let watch = self.on_lost.as_ref().map(|cb| (cb.clone(), guard.loss_watch()));
        if self.holds.push(owner, guard) {
            if let Some((callback, watch)) = watch {
                tokio::spawn(report_loss(watch, callback));
            }
        }
    }
}

#[derive(Default)]
struct OpState {
    cancelled: bool,
    granted: bool,
}

/// Marks the acquire cancelled; if it was already granted, gives the grant
/// back (dropping the guard releases it in the background).
fn cancel_op(op: &Mutex<OpState>, holds: &Holds, owner: u64) {
    let mut state = op.lock().unwrap_or_else(|p| p.into_inner());
    state.cancelled = true;
    if std::mem::take(&mut state.granted) {
        drop(holds.pop(owner));
    }
}

struct OpInner {
    op: Arc<Mutex<OpState>>,
    holds: Arc<Holds>,
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
        cancel_op(&inner.op, &inner.holds, inner.owner);
        inner.task.abort();
        Ok(())
    }
}
