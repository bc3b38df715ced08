//! `Client`: one connection string, one set of connections (Redis: a
//! command connection and a pub/sub connection; ZooKeeper: one session),
//! shared by every lock of the process that uses it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock, Weak};
use std::time::Duration;

use polylock_core::{Backend, ConnectionEvent, LockConfig, LockName};
use zookeeper_client as zk;

use crate::driver::Shared;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::transport::{RedisTransport, Transport, ZkTransport};
use crate::url::{self, Endpoint};

/// Connection settings. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// How long `connect` may take before it fails naming the address. Default 5 s.
    pub connect_timeout: Duration,
    /// Redis: how long one command may take before it counts as unanswered. Default 5 s.
    pub request_timeout: Duration,
    /// ZooKeeper: the session timeout asked of the server (it may clamp it). Default 10 s.
    pub session_timeout: Duration,
    /// Redis: the default lease of this client's locks. Default 30 s.
    pub lease: Duration,
    /// Tests only: route a single-host ZooKeeper connection through an
    /// in-process [`crate::fault::Proxy`], so `debug_expire_session` can
    /// partition this client for real. Default false.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub debug_faults: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            session_timeout: Duration::from_secs(10),
            lease: Duration::from_secs(30),
            #[cfg(feature = "test-hooks")]
            debug_faults: false,
        }
    }
}

/// Per-lock settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// Redis: this lock's lease (renewed every third of it). `None`: the client's.
    pub lease: Option<Duration>,
}

/// A connection to one Redis server or ZooKeeper ensemble. Cheap to clone;
/// every clone shares the connections and the locks.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
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
        let mut base = LockConfig::new(Backend::Redis);
        base.lease = opts.lease;
        base.waiter_ttl = opts.lease;
        base.validate().map_err(|e| Error::from_core("", e))?;
        match url::parse(url)? {
            Endpoint::Redis { url, tls, ca, addr } => connect_redis(&url, tls, ca, addr, &opts, base).await,
            Endpoint::Zk { connect, auth, tls, ca, addr } => {
                base.backend = Backend::ZooKeeper;
                connect_zk(connect, auth, tls, ca, addr, &opts, base).await
            }
        }
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
        let name = LockName::new(name).map_err(|e| Error::from_core(name, e))?;
        if let Some(lease) = opts.lease {
            let mut cfg = LockConfig::new(self.backend);
            cfg.lease = lease;
            cfg.waiter_ttl = lease;
            cfg.validate().map_err(|e| Error::from_core(name.as_str(), e))?;
        }
        Ok(Lock::new(self.shared.clone(), name, opts.lease))
    }

    /// Fault injection for tests (every binding's suite uses it): makes
    /// the ZooKeeper server expire this client's session the way a network
    /// partition does, by cutting the client off for longer than the session
    /// timeout. Needs `ClientOptions::debug_faults`; takes about the session
    /// timeout plus a second. On Redis it returns [`Error::InvalidOption`].
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub async fn debug_expire_session(&self) -> Result<()> {
        let Transport::Zk(z) = &self.shared.transport else {
            return Err(Error::InvalidOption("session expiry applies to ZooKeeper only".into()));
        };
        let Some(proxy) = &z.fault_proxy else {
            return Err(Error::InvalidOption("connect with debug_faults to inject faults".into()));
        };
        let timeout = z.current().session_timeout();
        proxy.cut();
        tokio::time::sleep(timeout + Duration::from_secs(1)).await;
        proxy.restore();
        Ok(())
    }

    /// Tests only: ZooKeeper watches set and neither fired nor dropped (0 on Redis).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn debug_live_watches(&self) -> usize {
        match &self.shared.transport {
            Transport::Zk(z) => z.watches.live(),
            Transport::Redis(_) => 0,
        }
    }

    /// This client's 128-bit random id, as in its Redis hash fields and ZooKeeper node data.
    pub fn id(&self) -> String {
        self.shared.client_id.to_uuid()
    }

    /// Releases every held lock, fails every pending acquire with
    /// [`Error::Closed`], and waits (at most 5 s) for the
    /// server-side cleanup. Each holder is told `Lost(Closed)` before its
    /// release is sent, and its guard's release reports that loss. Later
    /// calls fail with `Closed`.
    pub async fn close(&self) {
        let started = self.shared.close();
        self.shared.spawn_group(started);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !self.shared.is_quiet() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn connect_error(addr: &str, reason: impl std::fmt::Display) -> Error {
    Error::Connect { addr: addr.to_owned(), reason: reason.to_string() }
}

fn redis_client(url: &str, tls: bool, ca: &Option<String>, addr: &str) -> Result<redis::Client> {
    let made = match (tls, ca) {
        (true, Some(path)) => {
            let pem = std::fs::read(path).map_err(|e| connect_error(addr, format!("cannot read CA {path}: {e}")))?;
            redis::Client::build_with_tls(url, redis::TlsCertificates { client_tls: None, root_cert: Some(pem) })
        }
        _ => redis::Client::open(url),
    };
    made.map_err(|e| Error::InvalidUrl { url: url::redact(url), reason: e.to_string() })
}

async fn connect_redis(
    url: &str,
    tls: bool,
    ca: Option<String>,
    addr: String,
    opts: &ClientOptions,
    base: LockConfig,
) -> Result<Client> {
    if tls {
        // The redis crate leaves the rustls crypto provider to the application.
        let _ = rustls_provider();
    }
    let manager_config = || {
        redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(opts.connect_timeout))
            .set_response_timeout(Some(opts.request_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500))
    };
    let cmd_client = redis_client(url, tls, &ca, &addr)?;
    let cmd = tokio::time::timeout(
        opts.connect_timeout,
        redis::aio::ConnectionManager::new_with_config(cmd_client, manager_config()),
    )
    .await
    .map_err(|_| connect_error(&addr, "timed out"))?
    .map_err(|e| connect_error(&addr, e))?;

    // Pub/sub runs on RESP3 push messages: the only way the redis crate
    // reconnects and resubscribes by itself.
    let sep = if url.contains('?') { '&' } else { '?' };
    let pubsub_client = redis_client(&format!("{url}{sep}protocol=resp3"), tls, &ca, &addr)?;
    let cell: Arc<OnceLock<Weak<Shared>>> = Arc::new(OnceLock::new());
    let down = Arc::new(AtomicBool::new(false));
    let sender = {
        let cell = cell.clone();
        move |push: redis::PushInfo| -> std::result::Result<(), std::convert::Infallible> {
            let Some(shared) = cell.get().and_then(Weak::upgrade) else { return Ok(()) };
            match push.kind {
                redis::PushKind::Message => {
                    if let [redis::Value::BulkString(ch), redis::Value::BulkString(payload), ..] = push.data.as_slice()
                    {
                        shared.message(&String::from_utf8_lossy(ch), &String::from_utf8_lossy(payload));
                    }
                }
                redis::PushKind::Disconnection => {
                    down.store(true, Ordering::SeqCst);
                    let s = shared.clone();
                    shared.handle.spawn(async move { s.connection(ConnectionEvent::Disconnected) });
                }
                redis::PushKind::Subscribe if down.swap(false, Ordering::SeqCst) => {
                    // Resubscribed after a reconnect: messages may have been missed.
                    let s = shared.clone();
                    shared.handle.spawn(async move { s.connection(ConnectionEvent::Connected) });
                }
                _ => {}
            }
            Ok(())
        }
    };
    let pubsub = tokio::time::timeout(
        opts.connect_timeout,
        redis::aio::ConnectionManager::new_with_config(
            pubsub_client,
            manager_config().set_push_sender(sender).set_automatic_resubscription(),
        ),
    )
    .await
    .map_err(|_| connect_error(&addr, "timed out"))?
    .map_err(|e| connect_error(&addr, e))?;

    let transport = Transport::Redis(RedisTransport { cmd, pubsub, request_timeout: opts.request_timeout });
    let shared = Shared::new(transport, base);
    let _ = cell.set(Arc::downgrade(&shared));
    Ok(Client { shared, backend: Backend::Redis })
}

fn rustls_provider() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // zookeeper-client enables aws-lc-rs; make it the process default if none is set.
        rustls::crypto::aws_lc_rs::default_provider().install_default().is_ok()
    })
}

struct ZkParams {
    connect: String,
    auth: Option<(String, String)>,
    tls: Option<zk::TlsOptions>,
    addr: String,
    session_timeout: Duration,
    connect_timeout: Duration,
}

async fn open_session(p: &ZkParams, fail_eagerly: bool) -> Result<zk::Client> {
    let mut c = zk::Client::connector().with_session_timeout(p.session_timeout);
    if fail_eagerly {
        c = c.with_fail_eagerly();
    }
    if let Some((user, pass)) = &p.auth {
        c = c.with_auth("digest", format!("{user}:{pass}").as_bytes());
    }
    if let Some(t) = &p.tls {
        c = c.with_tls(t.clone());
    }
    tokio::time::timeout(p.connect_timeout, c.connect(&p.connect))
        .await
        .map_err(|_| connect_error(&p.addr, "timed out"))?
        .map_err(|e| connect_error(&p.addr, e))
}

async fn connect_zk(
    connect: String,
    auth: Option<(String, String)>,
    tls: bool,
    ca: Option<String>,
    addr: String,
    opts: &ClientOptions,
    mut base: LockConfig,
) -> Result<Client> {
    let tls = if tls {
        let Some(path) = ca else {
            return Err(Error::InvalidUrl { url: format!("zks://{addr}"), reason: "zks:// needs ?ca=PATH".into() });
        };
        let pem =
            std::fs::read_to_string(&path).map_err(|e| connect_error(&addr, format!("cannot read CA {path}: {e}")))?;
        Some(zk::TlsOptions::new().with_pem_ca(&pem).map_err(|e| connect_error(&addr, e))?)
    } else {
        None
    };
    // Tests only: put a cuttable proxy between this client and the server.
    #[cfg(feature = "test-hooks")]
    let (connect, fault_proxy) = if opts.debug_faults && !connect.contains(',') && tls.is_none() {
        let (hostport, chroot) = match connect.find('/') {
            Some(i) => (&connect[..i], &connect[i..]),
            None => (connect.as_str(), ""),
        };
        let proxy = crate::fault::Proxy::start(hostport).await.map_err(|e| connect_error(&addr, e))?;
        (format!("127.0.0.1:{}{chroot}", proxy.port()), Some(proxy))
    } else {
        (connect, None)
    };
    let params = ZkParams {
        connect,
        auth,
        tls,
        addr,
        session_timeout: opts.session_timeout,
        connect_timeout: opts.connect_timeout,
    };
    let client = open_session(&params, true).await?;
    base.session_timeout = client.session_timeout();
    let transport = Transport::Zk(ZkTransport {
        client: RwLock::new(client),
        watches: crate::watches::Watches::new(),
        #[cfg(feature = "test-hooks")]
        fault_proxy,
    });
    let shared = Shared::new(transport, base);
    tokio::spawn(session_task(Arc::downgrade(&shared), params));
    Ok(Client { shared, backend: Backend::ZooKeeper })
}

/// Follows the ZooKeeper session: reports disconnections and expiry to
/// every lock, and opens a new session after an expiry.
async fn session_task(weak: Weak<Shared>, params: ZkParams) {
    let mut reported = zk::SessionState::SyncConnected;
    loop {
        // One watcher per session; its first state() is the state now, so a
        // change that happened before we looked is not missed.
        let mut watcher = {
            let Some(shared) = weak.upgrade() else { return };
            let Transport::Zk(z) = &shared.transport else { return };
            z.current().state_watcher()
        };
        let mut state = watcher.state();
        loop {
            let Some(shared) = weak.upgrade() else { return };
            if state != reported {
                reported = state;
                match state {
                    zk::SessionState::Disconnected => shared.connection(ConnectionEvent::Disconnected),
                    zk::SessionState::SyncConnected => shared.connection(ConnectionEvent::Connected),
                    _ => {}
                }
            }
            match state {
                zk::SessionState::Expired => {
                    shared.connection(ConnectionEvent::SessionExpired);
                    if !renew_session(&weak, &shared, &params).await {
                        return;
                    }
                    reported = zk::SessionState::SyncConnected;
                    break;
                }
                zk::SessionState::Closed | zk::SessionState::AuthFailed => return,
                _ => {}
            }
            drop(shared);
            state = watcher.changed().await;
        }
    }
}

/// Opens a new session after an expiry, retrying until it works or the
/// client is dropped. False if the client is gone.
async fn renew_session(weak: &Weak<Shared>, shared: &Arc<Shared>, params: &ZkParams) -> bool {
    let mut delay = Duration::from_millis(100);
    loop {
        match open_session(params, false).await {
            Ok(client) => {
                if let Ok(mut cfg) = shared.base_config.lock() {
                    cfg.session_timeout = client.session_timeout();
                }
                if let Transport::Zk(z) = &shared.transport {
                    *z.client.write().expect("zk client lock") = client;
                }
                shared.connection(ConnectionEvent::Connected);
                return true;
            }
            Err(_) if weak.strong_count() > 1 => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(_) => return false,
        }
    }
}
