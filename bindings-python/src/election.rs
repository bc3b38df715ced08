//! `Election` and `Leadership`: the runtime's leader election. A campaign
//! is the runtime's (a fresh participant each time, withdrawn from the
//! server when the wait is given up); this module only waits for it the
//! Python ways (GIL released and Ctrl-C aware, or reporting to an asyncio
//! callback) and forwards a leadership's loss to the package's `lost`
//! event through the runtime's loss callback, so no thread waits for it.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyNone;
use pyo3::IntoPyObjectExt;

use crate::errors::{not_held, seconds, to_py, PythonErrorExt};
use crate::loss::Loss;
use crate::process::ProcessBound;
use crate::runtime::{runtime, wait, OnInterrupt};

/// Who leads, as Python gets it: (participant, term); the term is None
/// where the server no longer has it (Redis, once the grant's first lease
/// ran out).
type LeaderTuple = (String, Option<u64>);

#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Election {
    inner: ProcessBound<polylock::Election>,
}

impl Election {
    pub(crate) fn new(election: polylock::Election) -> Self {
        Election { inner: ProcessBound::new(election) }
    }
}

/// A campaign of a new participant: `Ok(None)` when `timeout` passed first
/// (the participant is withdrawn then).
async fn campaign(
    election: polylock::Election,
    timeout: Option<Duration>,
) -> polylock::Result<Option<polylock::Leadership>> {
    match timeout {
        None => election.campaign().await.map(Some),
        Some(timeout) => election.campaign_timeout(timeout).await,
    }
}

async fn leader(election: polylock::Election) -> polylock::Result<Option<LeaderTuple>> {
    Ok(election.leader().await?.map(|l| (l.participant, l.term)))
}

/// `done(value, None)` or `done(None, exc)` from a runtime thread, through
/// the exit gate (the error is made into its Python exception there too);
/// false if it could not be called.
fn deliver<T>(done: &Py<PyAny>, outcome: polylock::Result<T>) -> bool
where
    T: for<'py> IntoPyObject<'py>,
{
    let delivered = crate::exit_gate::attach(|py| {
        let args = match outcome.map_err(to_py).and_then(|v| v.into_bound_py_any(py)) {
            Ok(value) => (value, PyNone::get(py).to_owned().into_any()),
            Err(e) => (PyNone::get(py).to_owned().into_any(), e.into_value(py).into_bound(py).into_any()),
        };
        done.call1(py, args).map_err(|e| e.write_unraisable(py, Some(done.bind(py))))
    });
    matches!(delivered, Some(Ok(_)))
}

#[pymethods]
impl Election {
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.inner.get()?.name().to_owned())
    }

    /// Blocks until a new participant leads, GIL released; Ctrl-C withdraws
    /// it (a leadership that raced the interrupt is resigned). `timeout`:
    /// None waits forever, 0 leads only if nobody leads or waits. None when
    /// not leading in time.
    #[pyo3(signature = (timeout))]
    fn campaign(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Leadership>> {
        let election = self.inner.get()?.clone();
        let timeout = seconds("timeout", timeout)?;
        let name = election.name().to_owned();
        let led = wait(py, OnInterrupt::Cancel, campaign(election, timeout))?.py_err()?;
        Ok(led.map(|l| Leadership::new(name, l)))
    }

    /// Starts a campaign; `done(leadership or None, None)` (None: not
    /// leading in time) or `done(None, exc)` is called from a runtime
    /// thread when it ends. A `Leadership` nobody takes resigns when dropped.
    #[pyo3(signature = (timeout, done))]
    fn campaign_async(&self, timeout: Option<f64>, done: Py<PyAny>) -> PyResult<CampaignOp> {
        let election = self.inner.get()?.clone();
        let timeout = seconds("timeout", timeout)?;
        let task = runtime()?.spawn(async move {
            let name = election.name().to_owned();
            let outcome = campaign(election, timeout).await;
            deliver(&done, outcome.map(|led| led.map(|l| Leadership::new(name, l))));
        });
        Ok(CampaignOp { task: ProcessBound::new(task.abort_handle()) })
    }

    /// Who leads now, by every client (one read of the server):
    /// (participant, term), or None.
    fn leader(&self, py: Python<'_>) -> PyResult<Option<LeaderTuple>> {
        let election = self.inner.get()?.clone();
        wait(py, OnInterrupt::Cancel, leader(election))?.py_err()
    }

    /// Starts `leader`; `done((participant, term) or None, None)` or
    /// `done(None, exc)` when the server answered.
    fn leader_async(&self, done: Py<PyAny>) -> PyResult<()> {
        let election = self.inner.get()?.clone();
        runtime()?.spawn(async move {
            deliver(&done, leader(election).await);
        });
        Ok(())
    }
}

/// An asynchronous campaign in flight, so asyncio can cancel it.
#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct CampaignOp {
    task: ProcessBound<tokio::task::AbortHandle>,
}

#[pymethods]
impl CampaignOp {
    /// Cancels the campaign: the participant is withdrawn from the server,
    /// and a leadership that already arrived resigns once dropped. Idempotent.
    fn cancel(&self) -> PyResult<()> {
        self.task.get()?.abort();
        Ok(())
    }
}

/// One participant's leadership. Dropped without a resign, it resigns in
/// the background.
#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Leadership {
    inner: ProcessBound<LeadershipInner>,
}

struct LeadershipInner {
    name: String,
    term: u64,
    participant: String,
    /// The leadership until it is resigned (taken out by `resign`).
    led: Mutex<Option<polylock::Leadership>>,
    /// Its loss signal, kept past the resign.
    loss: polylock::LossWatch,
}

impl Leadership {
    fn new(name: String, led: polylock::Leadership) -> Self {
        let loss = led.loss_watch();
        let inner = LeadershipInner {
            name,
            term: led.term(),
            participant: led.participant(),
            led: Mutex::new(Some(led)),
            loss,
        };
        Leadership { inner: ProcessBound::new(inner) }
    }

    fn take(&self) -> PyResult<polylock::Leadership> {
        let inner = self.inner.get()?;
        let taken = inner.led.lock().unwrap_or_else(|p| p.into_inner()).take();
        taken.ok_or_else(|| not_held(format!("this leadership of election {:?} was already resigned", inner.name)))
    }
}

#[pymethods]
impl Leadership {
    /// The term: larger than every earlier leadership's of the election.
    #[getter]
    fn term(&self) -> PyResult<u64> {
        Ok(self.inner.get()?.term)
    }

    /// This participant's id, as `Election.leader` reports it.
    #[getter]
    fn participant(&self) -> PyResult<String> {
        Ok(self.inner.get()?.participant.clone())
    }

    /// The leadership's loss signal (`lost` of the package's Leadership):
    /// the one a lock guard's `lost` is.
    fn loss(&self) -> PyResult<Loss> {
        let inner = self.inner.get()?;
        Ok(Loss::new(&inner.name, inner.loss.clone()))
    }

    /// Why the leadership was lost, or None.
    #[getter]
    fn lost_reason(&self) -> PyResult<Option<String>> {
        Ok(self.inner.get()?.loss.reason().map(|r| r.to_string()))
    }

    /// Still leading: neither resigned nor lost.
    #[getter]
    fn leading(&self) -> PyResult<bool> {
        let inner = self.inner.get()?;
        let holding = inner.led.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        Ok(holding && inner.loss.reason().is_none())
    }

    /// Ends the leadership and waits for the server. LockLostError if it
    /// was lost meanwhile; NotHeldError if already resigned.
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        let led = self.take()?;
        wait(py, OnInterrupt::Detach, async move { led.resign().await })?.py_err()
    }

    /// Starts the resign; `done(None, None)` or `done(None, exc)` when done.
    fn resign_async(&self, done: Py<PyAny>) -> PyResult<()> {
        let led = self.take()?;
        runtime()?.spawn(async move {
            deliver(&done, led.resign().await.map(|()| None::<bool>));
        });
        Ok(())
    }
}
