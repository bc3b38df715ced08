//! `NativeClient`: one `polylock::Client`. Holds `Option<Client>`: `None`
//! once closed, so every later call fails with the runtime's `Closed`.

use std::sync::{Arc, RwLock};

use crate::call::server_call;
use napi::bindgen_prelude::{BigInt, PromiseRaw};
use napi::Env;
use napi_derive::napi;

use crate::election::{Leaderships, NativeElection};
use crate::errors::{millis, to_napi, NapiErrorExt};
use crate::lock::NativeLock;
use crate::semaphore::{permit_count, Grants, NativeSemaphore};

/// Connection options, all in milliseconds; absent ones take the runtime's defaults.
#[napi(object)]
pub struct NativeClientOptions {
    pub connect_timeout_ms: Option<f64>,
    pub request_timeout_ms: Option<f64>,
    pub session_timeout_ms: Option<f64>,
    pub lease_ms: Option<f64>,
    /// Tests only: route a single-host ZooKeeper connection through the
    /// runtime's fault proxy so `debug_expire_session` can partition it.
    pub debug_faults: Option<bool>,
}

impl NativeClientOptions {
    fn to_runtime(&self) -> napi::Result<polylock::ClientOptions> {
        let mut o = polylock::ClientOptions::default();
        if let Some(ms) = self.connect_timeout_ms {
            o.connect_timeout = millis("connectTimeoutMs", ms)?;
        }
        if let Some(ms) = self.request_timeout_ms {
            o.request_timeout = millis("requestTimeoutMs", ms)?;
        }
        if let Some(ms) = self.session_timeout_ms {
            o.session_timeout = millis("sessionTimeoutMs", ms)?;
        }
        if let Some(ms) = self.lease_ms {
            o.lease = millis("leaseMs", ms)?;
        }
        #[cfg(feature = "test-hooks")]
        {
            o.debug_faults = self.debug_faults.unwrap_or(false);
        }
        #[cfg(not(feature = "test-hooks"))]
        if self.debug_faults == Some(true) {
            return Err(polylock::test_hooks_missing("debugFaults")).napi_err();
        }
        Ok(o)
    }
}

/// A lock as the server sees it (see `polylock::Status`).
#[napi(object)]
pub struct NativeStatus {
    pub held: bool,
    pub holder: Option<String>,
    pub fencing_token: Option<BigInt>,
    pub waiters: Option<u32>,
    pub ttl_ms: Option<f64>,
}

/// Connects to `url` (redis://, rediss://, zk://, zks://).
#[napi]
pub async fn connect(url: String, options: Option<NativeClientOptions>) -> napi::Result<NativeClient> {
    let opts = match options {
        Some(o) => o.to_runtime()?,
        None => polylock::ClientOptions::default(),
    };
    let client = polylock::Client::connect_with(&url, opts).await.napi_err()?;
    Ok(NativeClient {
        backend: client.backend().as_str().to_owned(),
        id: client.id(),
        inner: RwLock::new(Some(client)),
        grants: Grants::new(),
        leaderships: Leaderships::new(),
    })
}

#[napi]
pub struct NativeClient {
    inner: RwLock<Option<polylock::Client>>,
    backend: String,
    id: String,
    /// The permits its semaphores' JS guards hold (see `semaphore.rs`).
    grants: Arc<Grants>,
    /// The leaderships its elections' JS objects hold (see `election.rs`).
    leaderships: Arc<Leaderships>,
}

impl NativeClient {
    fn client(&self) -> napi::Result<polylock::Client> {
        self.inner.read().ok().and_then(|c| c.clone()).ok_or_else(|| to_napi(polylock::Error::Closed))
    }
}

#[napi]
impl NativeClient {
    /// "redis" or "zookeeper".
    #[napi(getter)]
    pub fn backend(&self) -> String {
        self.backend.clone()
    }

    /// The client's random id (a UUID), as stored on the server.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// A handle on the lock `name`; validates the name and lease, no I/O.
    #[napi]
    pub fn lock(&self, name: String, lease_ms: Option<f64>) -> napi::Result<NativeLock> {
        let lease = lease_ms.map(|ms| millis("leaseMs", ms)).transpose()?;
        let lock = self.client()?.lock_with(&name, polylock::LockOptions { lease, ..Default::default() }).napi_err()?;
        Ok(NativeLock::new(lock))
    }

    /// One half of the read-write lock `name` (the write half if `write`);
    /// validates the name and lease, no I/O.
    #[napi]
    pub fn rw_lock_half(&self, name: String, lease_ms: Option<f64>, write: bool) -> napi::Result<NativeLock> {
        let lease = lease_ms.map(|ms| millis("leaseMs", ms)).transpose()?;
        let rw =
            self.client()?.rw_lock_with(&name, polylock::LockOptions { lease, ..Default::default() }).napi_err()?;
        Ok(NativeLock::new(if write { rw.write() } else { rw.read() }.clone()))
    }

    /// The counting semaphore `name` of `permits` permits; validates the
    /// name, the number and the lease, no I/O.
    #[napi]
    pub fn semaphore(&self, name: String, permits: f64, lease_ms: Option<f64>) -> napi::Result<NativeSemaphore> {
        let permits = permit_count("permits", permits)?;
        let lease = lease_ms.map(|ms| millis("leaseMs", ms)).transpose()?;
        let sem = self
            .client()?
            .semaphore_with(&name, permits, polylock::LockOptions { lease, ..Default::default() })
            .napi_err()?;
        Ok(NativeSemaphore::new(sem, self.grants.clone()))
    }

    /// The leader election `name`; validates the name and lease, no I/O.
    #[napi]
    pub fn election(&self, name: String, lease_ms: Option<f64>) -> napi::Result<NativeElection> {
        let lease = lease_ms.map(|ms| millis("leaseMs", ms)).transpose()?;
        let election =
            self.client()?.election_with(&name, polylock::LockOptions { lease, ..Default::default() }).napi_err()?;
        Ok(NativeElection::new(election, self.leaderships.clone()))
    }

    /// Reads a lock's state from the server.
    #[napi]
    pub fn status<'env>(&self, env: &'env Env, name: String) -> napi::Result<PromiseRaw<'env, NativeStatus>> {
        let client = self.client()?;
        server_call(env, async move {
            let s = client.status(&name).await.napi_err()?;
            Ok(NativeStatus {
                held: s.held,
                holder: s.holder,
                fencing_token: s.fencing_token.map(BigInt::from),
                waiters: s.waiters.map(|w| w as u32),
                ttl_ms: s.ttl_ms.map(|t| t as f64),
            })
        })
    }

    /// Releases every held lock and permit and fails pending acquires; idempotent.
    #[napi]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = self.inner.write().ok().and_then(|mut c| c.take());
        let permits = self.grants.close();
        let leaderships = self.leaderships.close();
        env.spawn_future(async move {
            if let Some(c) = client {
                c.close().await;
            }
            // Released by the close already; dropping them after it sends nothing more.
            drop(permits);
            drop(leaderships);
            Ok(())
        })
    }

    /// Test hook: forces a ZooKeeper session expiry (an error on Redis).
    #[napi]
    pub fn debug_expire_session<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let client = self.client()?;
        #[cfg(feature = "test-hooks")]
        return env.spawn_future(async move { client.debug_expire_session().await.napi_err() });
        #[cfg(not(feature = "test-hooks"))]
        env.spawn_future(async move {
            drop(client);
            Err::<(), _>(polylock::test_hooks_missing("debugExpireSession")).napi_err()
        })
    }
}
