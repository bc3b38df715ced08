//! `Client`: a connection to Redis or ZooKeeper, made with the GIL released.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use polylock::{ClientOptions, LockOptions};
use pyo3::prelude::*;

use crate::election::Election;
use crate::errors::{lock_error, seconds, PythonErrorExt};
use crate::lock::{Lock, LockInner};
use crate::process::ProcessBound;
use crate::runtime::{wait, OnInterrupt};
use crate::semaphore::Semaphore;

pub(crate) struct ClientInner {
    pub(crate) client: polylock::Client,
}

#[pyclass(frozen, module = "polylock._native")]
pub(crate) struct Client {
    inner: ProcessBound<Arc<ClientInner>>,
}

fn required(what: &str, value: f64) -> PyResult<std::time::Duration> {
    Ok(seconds(what, Some(value))?.expect("Some in, Some out"))
}

/// Connects (blocking, interruptible). Times are in seconds. `debug_faults`
/// (tests only) lets `debug_expire_session` cut a ZooKeeper connection.
#[pyfunction]
#[pyo3(signature = (url, connect_timeout, request_timeout, session_timeout, lease, debug_faults=false))]
pub(crate) fn connect(
    py: Python<'_>,
    url: String,
    connect_timeout: f64,
    request_timeout: f64,
    session_timeout: f64,
    lease: f64,
    debug_faults: bool,
) -> PyResult<Client> {
    refuse_zookeeper_after_fork(&url)?;
    // `..default()` fills `debug_faults` when the runtime has its test hooks
    // (unified in by another crate) but this binding does not use them.
    #[allow(clippy::needless_update)]
    let opts = ClientOptions {
        connect_timeout: required("connect_timeout", connect_timeout)?,
        request_timeout: required("request_timeout", request_timeout)?,
        session_timeout: required("session_timeout", session_timeout)?,
        lease: required("lease", lease)?,
        #[cfg(feature = "test-hooks")]
        debug_faults,
        ..ClientOptions::default()
    };
    #[cfg(not(feature = "test-hooks"))]
    if debug_faults {
        return Err(polylock::test_hooks_missing("debug_faults")).py_err();
    }
    let client =
        wait(py, OnInterrupt::Cancel, async move { polylock::Client::connect_with(&url, opts).await })?.py_err()?;
    Ok(Client { inner: ProcessBound::new(Arc::new(ClientInner { client })) })
}

/// The pid that first connected to ZooKeeper (0: none yet).
static ZOOKEEPER_USER: AtomicU32 = AtomicU32::new(0);

/// zookeeper-client does its network I/O on async-io's process-global
/// reactor (an epoll fd and a driver thread, made once). A forked child
/// inherits the parent's epoll instance (shared with the parent) but not
/// the thread, nor the reactor lock that thread held, so its ZooKeeper
/// connections would never see an event. `polylock.connect` never gets
/// here in such a child: it loads a fresh copy of this library there
/// (`python/polylock/_fork.py`). This refusal guards direct `_native` use.
fn refuse_zookeeper_after_fork(url: &str) -> PyResult<()> {
    if !(url.starts_with("zk://") || url.starts_with("zks://")) {
        return Ok(());
    }
    let me = std::process::id();
    match ZOOKEEPER_USER.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => Ok(()),
        Err(first) if first == me => Ok(()),
        Err(first) => Err(lock_error(format!(
            "cannot connect to ZooKeeper in a process forked after its parent (pid {first}) used \
             ZooKeeper: the ZooKeeper client's I/O reactor does not survive fork; connect with \
             polylock.connect(), which loads a private copy of this library in a forked child"
        ))),
    }
}

#[pymethods]
impl Client {
    /// "redis" or "zookeeper".
    #[getter]
    fn backend(&self) -> PyResult<String> {
        Ok(self.inner.get()?.client.backend().as_str().to_owned())
    }

    /// This client's id, as in its Redis hash fields and ZooKeeper node data.
    #[getter]
    fn id(&self) -> PyResult<String> {
        Ok(self.inner.get()?.client.id())
    }

    /// A lock handle. No I/O; validates the name and lease.
    #[pyo3(signature = (name, lease, on_lost))]
    fn lock(&self, name: &str, lease: Option<f64>, on_lost: Option<Py<PyAny>>) -> PyResult<Lock> {
        let inner = self.inner.get()?;
        let lock = inner
            .client
            .lock_with(name, LockOptions { lease: seconds("lease", lease)?, ..Default::default() })
            .py_err()?;
        Ok(Lock::new(LockInner::new(inner.client.clone(), lock, on_lost)))
    }

    /// A read-write lock's halves, (read, write): each a `Lock` like
    /// `lock` returns, sharing `lease` and `on_lost`. No I/O.
    #[pyo3(signature = (name, lease, on_lost))]
    fn rw_lock(
        &self,
        py: Python<'_>,
        name: &str,
        lease: Option<f64>,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<(Lock, Lock)> {
        let inner = self.inner.get()?;
        let rw = inner
            .client
            .rw_lock_with(name, LockOptions { lease: seconds("lease", lease)?, ..Default::default() })
            .py_err()?;
        let half = |lock: &polylock::Lock, on_lost: Option<Py<PyAny>>| {
            Lock::new(LockInner::new(inner.client.clone(), lock.clone(), on_lost))
        };
        let write_on_lost = on_lost.as_ref().map(|f| f.clone_ref(py));
        Ok((half(rw.read(), on_lost), half(rw.write(), write_on_lost)))
    }

    /// A counting semaphore of `permits` permits. No I/O; validates the
    /// name, the number and the lease.
    #[pyo3(signature = (name, permits, lease))]
    fn semaphore(&self, name: &str, permits: u32, lease: Option<f64>) -> PyResult<Semaphore> {
        let inner = self.inner.get()?;
        let opts = LockOptions { lease: seconds("lease", lease)?, ..Default::default() };
        Ok(Semaphore::new(inner.client.semaphore_with(name, permits, opts).py_err()?))
    }

    /// A leader election. No I/O; validates the name and lease.
    #[pyo3(signature = (name, lease))]
    fn election(&self, name: &str, lease: Option<f64>) -> PyResult<Election> {
        let inner = self.inner.get()?;
        let opts = LockOptions { lease: seconds("lease", lease)?, ..Default::default() };
        Ok(Election::new(inner.client.election_with(name, opts).py_err()?))
    }

    /// The lock as the server sees it: (held, holder, fencing_token, waiters, ttl_ms).
    #[allow(clippy::type_complexity)]
    fn status(
        &self,
        py: Python<'_>,
        name: String,
    ) -> PyResult<(bool, Option<String>, Option<u64>, Option<usize>, Option<i64>)> {
        let client = self.inner.get()?.client.clone();
        let s = wait(py, OnInterrupt::Cancel, async move { client.status(&name).await })?.py_err()?;
        Ok((s.held, s.holder, s.fencing_token, s.waiters, s.ttl_ms))
    }

    /// Releases held locks, fails pending acquires; later calls fail.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.inner.get()?.client.clone();
        wait(py, OnInterrupt::Detach, async move { client.close().await })
    }

    /// Test hook: expire the ZooKeeper session from the server side.
    #[cfg(feature = "test-hooks")]
    fn debug_expire_session(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.inner.get()?.client.clone();
        wait(py, OnInterrupt::Cancel, async move { client.debug_expire_session().await })?.py_err()
    }

    /// Without the test hooks compiled in: a clear error.
    #[cfg(not(feature = "test-hooks"))]
    fn debug_expire_session(&self) -> PyResult<()> {
        Err(polylock::test_hooks_missing("debug_expire_session")).py_err()
    }
}
