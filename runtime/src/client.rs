//! `Client`: one connection string, one set of connections (Redis: a
//! command connection and a pub/sub connection; ZooKeeper: one session),
//! shared by every lock of the process that uses it.

use std::sync::Arc;
use std::time::Duration;

use polylock_core::{Backend, LockConfig, LockMode, LockName, LockStatus, ReplicasAsked};

use crate::backend::{self, Transport};
use crate::election::Election;
use crate::error::{Error, Result};
use crate::executor::Executor;
use crate::lock::{Lock, RwLock};
pub use crate::options::{ClientOptions, LockOptions};
use crate::semaphore::Semaphore;
use crate::url::{self, Endpoint};

/// A lock as the server sees it ([`Client::status`]).
pub type Status = LockStatus;

/// A connection to one Redis server or ZooKeeper ensemble. Cheap to clone;
/// every clone shares the connections and the locks.
#[derive(Clone)]
pub struct Client {
    pub(crate) exec: Arc<Executor>,
    backend: Backend,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("backend", &self.backend).finish()
    }
}

impl Client {
    /// Connects with default options. Must run inside a tokio runtime.
    pub async fn connect(url: &str) -> Result<Client> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with the given options.
    pub async fn connect_with(url: &str, opts: ClientOptions) -> Result<Client> {
        for (what, d) in [("connect_timeout", opts.connect_timeout), ("request_timeout", opts.request_timeout)] {
            if d.is_zero() {
                return Err(Error::InvalidOption(format!("{what} must be positive")));
            }
        }
        let mut config = LockConfig::new(Backend::Redis);
        config.set_lease(opts.lease);
        config.validate().map_err(|e| Error::from_core("", e))?;
        let (reports, reported) = tokio::sync::mpsc::unbounded_channel();
        let transport: Box<dyn Transport> = match url::parse(url)? {
            Endpoint::Redis { url, tls, ca, addr } => {
                let target = backend::redis::RedisTarget { url, tls, ca, addr };
                // No replicas to wait for: one command connection.
                Box::new(backend::redis::connect(&target, &opts, 1, reports).await?)
            }
            Endpoint::Sentinel(endpoint) => {
                let asked = endpoint.replicas;
                let transport = backend::redis_sentinel::connect(endpoint, &opts, reports).await?;
                config.acknowledge_replicas(asked, transport.replicas_at_connect(), opts.request_timeout);
                Box::new(transport)
            }
            Endpoint::RedisCluster(target) => {
                let transport = backend::redis_cluster::connect(&target, &opts, reports).await?;
                // As on Sentinel: each grant waits for `replicas=K` replicas of its
                // key's master (default 0 on a cluster: see docs/deployment.md).
                config.acknowledge_replicas(ReplicasAsked::Exactly(target.replicas), 0, opts.request_timeout);
                // Redisson's cluster default (sharded pub/sub): its waiters hear only SPUBLISH.
                config.shard_release = true;
                // Every key of one script in one slot: names that cannot be are refused in core.
                config.cluster = true;
                Box::new(transport)
            }
            Endpoint::Zk { connect, auth, tls, ca, addr } => {
                let target = backend::zk::ZkTarget { connect, auth, tls, ca, addr };
                let (transport, session_timeout) = backend::zk::connect(target, &opts, reports).await?;
                config.backend = Backend::ZooKeeper;
                config.session_timeout = session_timeout;
                Box::new(transport)
            }
        };
        let backend = config.backend;
        Ok(Client { exec: Executor::start(transport, reported, config)?, backend })
    }

    /// Which backend this client speaks.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A handle on the lock `name`. Validates the name; no I/O.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        self.lock_with(name, LockOptions::default())
    }

    /// A handle on the lock `name` with its own options.
    pub fn lock_with(&self, name: &str, opts: LockOptions) -> Result<Lock> {
        let name = self.checked_name(name, &opts)?;
        Ok(Lock::new(self.exec.clone(), name, LockMode::Exclusive, &opts))
    }

    /// A read-write lock `name` (Curator's `InterProcessReadWriteLock`
    /// layout on ZooKeeper): `.read()` and `.write()` are its halves.
    /// Validates the name; no I/O. Use a name either as a mutex or as a
    /// read-write lock, not both: their server layouts differ.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        self.rw_lock_with(name, LockOptions::default())
    }

    /// [`Self::rw_lock`] with its own options (both halves share them).
    pub fn rw_lock_with(&self, name: &str, opts: LockOptions) -> Result<RwLock> {
        let name = self.checked_name(name, &opts)?;
        Ok(RwLock::new(self.exec.clone(), name, &opts))
    }

    /// A counting semaphore `name` of `permits` permits (Redisson's
    /// `RPermitExpirableSemaphore` layout on Redis, Curator's
    /// `InterProcessSemaphoreV2` on ZooKeeper): `.acquire(k)` waits
    /// for `k` of them. Every client of one name must be made with the
    /// same `permits`; the first acquire records it on the server, and a
    /// client with another gets [`Error::PermitsMismatch`]. Validates the
    /// name and count; no I/O.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        self.semaphore_with(name, permits, LockOptions::default())
    }

    /// [`Self::semaphore`] with its own options (the lease of each grant).
    pub fn semaphore_with(&self, name: &str, permits: u32, opts: LockOptions) -> Result<Semaphore> {
        let name = self.checked_name(name, &opts)?;
        Semaphore::new(self.exec.clone(), self.backend, name, permits, &opts)
    }

    /// A leader election `name` (Curator's `LeaderLatch` layout on
    /// ZooKeeper; the name's mutex on Redis, so use a name either as a lock
    /// or as an election): [`Election::campaign`] waits to lead, and the
    /// [`crate::Leadership`] it returns carries the term (a fencing token)
    /// and the loss signal. Validates the name; no I/O.
    pub fn election(&self, name: &str) -> Result<Election> {
        self.election_with(name, LockOptions::default())
    }

    /// [`Self::election`] with its own options (Redis: the leadership's lease).
    pub fn election_with(&self, name: &str, opts: LockOptions) -> Result<Election> {
        let name = self.checked_name(name, &opts)?;
        Ok(Election::new(self.exec.clone(), self.backend, name, &opts))
    }

    /// The name, and the options checked now, so that a bad lease fails
    /// here and not at the first acquire.
    fn checked_name(&self, name: &str, opts: &LockOptions) -> Result<LockName> {
        let name = LockName::new(name).map_err(|e| Error::from_core(name, e))?;
        if let Some(lease) = opts.lease {
            let mut cfg = LockConfig::new(self.backend);
            cfg.set_lease(lease);
            cfg.validate().map_err(|e| Error::from_core(name.as_str(), e))?;
        }
        Ok(name)
    }

    /// Fault injection for tests (every binding's suite uses it): makes
    /// the ZooKeeper server expire this client's session the way a network
    /// partition does, by cutting the client off for longer than the session
    /// timeout. Needs `ClientOptions::debug_faults`; takes about the session
    /// timeout plus a second. On Redis it returns [`Error::InvalidOption`].
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub async fn debug_expire_session(&self) -> Result<()> {
        self.exec.transport()?.debug_expire_session().await
    }

    /// Tests only: ZooKeeper watches set and neither fired nor dropped (0 on Redis).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn debug_live_watches(&self) -> usize {
        self.exec.transport().map_or(0, |t| t.debug_live_watches())
    }

    /// Tests only: ZooKeeper watch routing entries (watches live, and
    /// watches unwanted before they were set) the client keeps (0 on Redis).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn debug_watch_routes(&self) -> usize {
        self.exec.transport().map_or(0, |t| t.debug_watch_routes())
    }

    /// This client's 128-bit random id, as in its Redis hash fields and ZooKeeper node data.
    pub fn id(&self) -> String {
        self.exec.client_id().to_uuid()
    }

    /// Reads the lock's state from the server. Read-only; decoded by the core.
    pub async fn status(&self, name: &str) -> Result<Status> {
        let n = LockName::new(name).map_err(|e| Error::from_core(name, e))?;
        self.exec.status(self.backend, &n).await
    }

    /// Releases every held lock, fails every pending acquire with
    /// [`Error::Closed`], and waits (at most 5 s) for the
    /// server-side cleanup. Each holder is told `Lost(Closed)` before its
    /// release is sent, and its guard's release reports that loss. Later
    /// calls fail with `Closed`. Once the cleanup is done the client closes
    /// its connections and ends its tasks, even while the application
    /// still holds lock handles made from it.
    pub async fn close(&self) {
        self.exec.close();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !self.exec.is_quiet() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
