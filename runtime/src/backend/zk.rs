//! ZooKeeper: one `zookeeper-client` session per client, followed by a
//! session task that reports its state changes and opens a new session
//! after an expiry; every watch waited on by one task ([`super::zk_watches`]).

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use polylock_core::{Command, ConnectionEvent, Op, Reply, ZkOp};
use zookeeper_client as zk;

use super::zk_watches::Watches;
use super::{failed, not_ours, start_now, Report, Reports, Started, Transport};
use crate::error::{Error, Result};
use crate::options::ClientOptions;

/// Where and how to connect, from the URL.
pub(crate) struct ZkTarget {
    /// `host:port,...[/chroot]`.
    pub(crate) connect: String,
    pub(crate) auth: Option<(String, String)>,
    pub(crate) tls: bool,
    pub(crate) ca: Option<String>,
    /// The address, for errors.
    pub(crate) addr: String,
}

/// The session, replaced when one expires and a new one is opened.
struct Session {
    client: RwLock<zk::Client>,
}

impl Session {
    fn current(&self) -> zk::Client {
        self.client.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

pub(crate) struct ZkTransport {
    session: Arc<Session>,
    watches: Arc<Watches>,
    /// Tests only: the proxy `debug_expire_session` cuts.
    #[cfg(feature = "test-hooks")]
    fault_proxy: Option<crate::fault::Proxy>,
}

struct ZkParams {
    connect: String,
    auth: Option<(String, String)>,
    tls: Option<zk::TlsOptions>,
    addr: String,
    session_timeout: Duration,
    connect_timeout: Duration,
}

fn connect_error(addr: &str, reason: impl std::fmt::Display) -> Error {
    Error::Connect { addr: addr.to_owned(), reason: reason.to_string() }
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

/// Opens the session; returns the transport and the negotiated session timeout.
pub(crate) async fn connect(
    target: ZkTarget,
    opts: &ClientOptions,
    reports: Reports,
) -> Result<(ZkTransport, Duration)> {
    let ZkTarget { connect, auth, tls, ca, addr } = target;
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
    let negotiated = client.session_timeout();
    let session = Arc::new(Session { client: RwLock::new(client) });
    let watches = Watches::start(reports.clone());
    tokio::spawn(follow_session(Arc::downgrade(&session), Arc::downgrade(&watches), params, reports));
    let transport = ZkTransport {
        session,
        watches,
        #[cfg(feature = "test-hooks")]
        fault_proxy,
    };
    Ok((transport, negotiated))
}

/// Follows the ZooKeeper session: reports disconnections and expiry, drops
/// the expired session's watch routing, and opens a new session after an
/// expiry. Ends when the transport is dropped.
async fn follow_session(weak: Weak<Session>, watches: Weak<Watches>, params: ZkParams, reports: Reports) {
    let mut reported = zk::SessionState::SyncConnected;
    let report = |r: Report| reports.send(r).is_ok();
    loop {
        // One watcher per session; its first state() is the state now, so a
        // change that happened before we looked is not missed.
        let mut watcher = {
            let Some(session) = weak.upgrade() else { return };
            session.current().state_watcher()
        };
        let mut state = watcher.state();
        loop {
            if state != reported {
                reported = state;
                let alive = match state {
                    zk::SessionState::Disconnected => report(Report::Connection(ConnectionEvent::Disconnected)),
                    zk::SessionState::SyncConnected => report(Report::Connection(ConnectionEvent::Connected)),
                    _ => true,
                };
                if !alive {
                    return;
                }
            }
            match state {
                zk::SessionState::Expired => {
                    if let Some(w) = watches.upgrade() {
                        w.session_expired();
                    }
                    if !report(Report::Connection(ConnectionEvent::SessionExpired)) {
                        return;
                    }
                    let Some(client) = renew_session(&weak, &params).await else { return };
                    if !report(Report::SessionTimeout(client.session_timeout())) {
                        return;
                    }
                    let Some(session) = weak.upgrade() else { return };
                    *session.client.write().unwrap_or_else(|p| p.into_inner()) = client;
                    if !report(Report::Connection(ConnectionEvent::Connected)) {
                        return;
                    }
                    reported = zk::SessionState::SyncConnected;
                    break;
                }
                zk::SessionState::Closed | zk::SessionState::AuthFailed => return,
                _ => {}
            }
            state = watcher.changed().await;
            if weak.strong_count() == 0 {
                return; // the client is gone
            }
        }
    }
}

/// Opens a new session after an expiry, retrying until it works or the
/// client is dropped (`None`).
async fn renew_session(weak: &Weak<Session>, params: &ZkParams) -> Option<zk::Client> {
    let mut delay = Duration::from_millis(100);
    loop {
        match open_session(params, false).await {
            Ok(client) => return Some(client),
            Err(_) if weak.strong_count() > 0 => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(_) => return None,
        }
    }
}

/// The ZooKeeper server's name for an error (`KeeperException.Code`), so
/// that the core, which classifies refusals, reads the server's code and
/// not this crate's wording.
fn zk_code(e: &zk::Error) -> &'static str {
    match e {
        zk::Error::Throttled => "THROTTLEDOP",
        zk::Error::NotReadOnly => "NOTREADONLY",
        zk::Error::NoAuth => "NOAUTH",
        zk::Error::AuthFailed => "AUTHFAILED",
        zk::Error::BadVersion => "BADVERSION",
        zk::Error::NodeExists => "NODEEXISTS",
        zk::Error::NotEmpty => "NOTEMPTY",
        zk::Error::NoChildrenForEphemerals => "NOCHILDRENFOREPHEMERALS",
        zk::Error::InvalidAcl => "INVALIDACL",
        zk::Error::QuotaExceeded => "QUOTAEXCEEDED",
        zk::Error::Unimplemented => "UNIMPLEMENTED",
        zk::Error::MarshallingError => "MARSHALLINGERROR",
        zk::Error::BadArguments(_) => "BADARGUMENTS",
        _ => "SYSTEMERROR",
    }
}

fn zk_failure(e: zk::Error) -> Reply {
    match e {
        zk::Error::NoNode => Reply::NoNode,
        zk::Error::ConnectionLoss
        | zk::Error::SessionExpired
        | zk::Error::Timeout
        | zk::Error::NoHosts
        | zk::Error::ClientClosed
        | zk::Error::SessionMoved
        | zk::Error::Custom(_) => failed(e),
        other => Reply::Refused(format!("{} {other}", zk_code(&other))),
    }
}

impl Transport for ZkTransport {
    fn start(&self, cmd: Command) -> Started {
        let Op::ZooKeeper(op) = cmd.op else { return not_ours("ZooKeeper", &cmd.op) };
        let c = self.session.current();
        let id = cmd.id;
        match op {
            ZkOp::CreateSequential { path, data } => start_now(async move {
                let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                match c.create(&path, &data, &opts).await {
                    Ok((stat, seq)) => Reply::Created { path: format!("{path}{seq}"), czxid: stat.czxid },
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::CreateEphemeral { path, data } => start_now(async move {
                let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
                match c.create(&path, &data, &opts).await {
                    Ok((stat, _)) => Reply::Created { path, czxid: stat.czxid },
                    Err(zk::Error::NodeExists) => Reply::Done,
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::CreateContainers { path } => start_now(async move {
                let opts = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
                match c.mkdir(&path, &opts).await {
                    Ok(()) | Err(zk::Error::NodeExists) => Reply::Done,
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::CreatePersistent { path, data } => start_now(async move {
                let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                match c.create(&path, &data, &opts).await {
                    Ok((stat, _)) => Reply::Created { path, czxid: stat.czxid },
                    Err(zk::Error::NodeExists) => Reply::Done,
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::WatchChildren { path } => {
                // getChildren with a watcher: a missing node leaves no watch behind.
                let watches = self.watches.clone();
                watches.setting(id);
                start_now(async move {
                    match c.list_and_watch_children(&path).await {
                        Ok((children, watcher)) => {
                            watches.add(id, watcher);
                            Reply::Children(children)
                        }
                        Err(e) => {
                            watches.not_set(id);
                            zk_failure(e)
                        }
                    }
                })
            }
            ZkOp::GetChildren { path } => start_now(async move {
                match c.list_children(&path).await {
                    Ok(children) => Reply::Children(children),
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::Stat { path, watch: false } => start_now(async move {
                match c.get_data(&path).await {
                    Ok((_, stat)) => Reply::Stat { czxid: stat.czxid },
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::Stat { path, watch: true } => {
                // getData with a watch: a missing node leaves no watch behind.
                let watches = self.watches.clone();
                watches.setting(id);
                start_now(async move {
                    match c.get_and_watch_data(&path).await {
                        Ok((_, stat, watcher)) => {
                            watches.add(id, watcher);
                            Reply::Stat { czxid: stat.czxid }
                        }
                        Err(e) => {
                            watches.not_set(id);
                            zk_failure(e)
                        }
                    }
                })
            }
            ZkOp::GetData { path } => start_now(async move {
                match c.get_data(&path).await {
                    Ok((data, stat)) => Reply::Data { data, czxid: stat.czxid },
                    Err(e) => zk_failure(e),
                }
            }),
            ZkOp::Unwatch { watch } => {
                self.watches.unwatch(watch);
                Box::pin(std::future::ready(Reply::Done))
            }
            ZkOp::Delete { path } => start_now(async move {
                match c.delete(&path, None).await {
                    Ok(()) => Reply::Done,
                    Err(e) => zk_failure(e),
                }
            }),
        }
    }

    #[cfg(feature = "test-hooks")]
    fn debug_expire_session(&self) -> futures::future::BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(proxy) = &self.fault_proxy else {
                return Err(Error::InvalidOption("connect with debug_faults to inject faults".into()));
            };
            let timeout = self.session.current().session_timeout();
            proxy.cut();
            tokio::time::sleep(timeout + Duration::from_secs(1)).await;
            proxy.restore();
            Ok(())
        })
    }

    #[cfg(feature = "test-hooks")]
    fn debug_live_watches(&self) -> usize {
        self.watches.live()
    }

    #[cfg(feature = "test-hooks")]
    fn debug_watch_routes(&self) -> usize {
        self.watches.routes()
    }
}
