//! Executes the core's commands on a real server. It decides nothing: each
//! [`Op`] maps to one call of the `redis` or `zookeeper-client` crate, and
//! each outcome to one [`Reply`].
//!
//! Every command is *started* synchronously, in the order the machine
//! emitted it (we poll each future once on the spot), so the bytes leave in
//! that order and a ZooKeeper create and the getChildren after it share one
//! round trip.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use polylock_core::{Op, RedisValue, Reply, RequestId, TransportError};
use zookeeper_client as zk;

use crate::driver::Shared;

pub(crate) type Started = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// Polls `f` once now, so that its request is sent before the next one is built.
pub(crate) fn start_now<F: Future<Output = Reply> + Send + 'static>(f: F) -> Started {
    let mut f: Started = Box::pin(f);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(r) => Box::pin(std::future::ready(r)),
        Poll::Pending => f,
    }
}

fn failed(msg: impl std::fmt::Display) -> Reply {
    Reply::Failed(TransportError { message: msg.to_string() })
}

pub(crate) enum Transport {
    Redis(RedisTransport),
    Zk(ZkTransport),
}

impl Transport {
    pub(crate) fn start(&self, name: &str, id: RequestId, op: Op) -> Started {
        match self {
            Transport::Redis(r) => r.start(op),
            Transport::Zk(z) => z.start(name, id, op),
        }
    }
}

// ---- Redis ----------------------------------------------------------------

pub(crate) struct RedisTransport {
    pub(crate) cmd: redis::aio::ConnectionManager,
    pub(crate) pubsub: redis::aio::ConnectionManager,
    pub(crate) request_timeout: Duration,
}

/// A script call as one `EVAL` carrying the source. Never EVALSHA: its
/// NOSCRIPT fallback (after a restart, a failover or `SCRIPT FLUSH`) sends
/// the script again *after* whatever the machine emitted next, so a cancel
/// could run before the acquire it cancels and leave an orphan grant. One
/// EVAL is one request, executed in the order it was sent. The cost is the
/// source's bytes: about 3.5 µs per acquire+release pair on loopback
/// (`cargo run --release -p polylock --example eval_vs_evalsha`).
fn eval_cmd(script: &polylock_core::Script, keys: &[String], args: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script.source).arg(keys.len()).arg(keys).arg(args);
    cmd
}

pub(crate) fn to_core(v: redis::Value) -> RedisValue {
    match v {
        redis::Value::Nil => RedisValue::Nil,
        redis::Value::Int(i) => RedisValue::Int(i),
        redis::Value::BulkString(b) => RedisValue::Bulk(b),
        redis::Value::Array(a) | redis::Value::Set(a) => RedisValue::Array(a.into_iter().map(to_core).collect()),
        redis::Value::SimpleString(s) => RedisValue::Status(s),
        redis::Value::Okay => RedisValue::Status("OK".into()),
        other => RedisValue::Status(format!("{other:?}")),
    }
}

fn redis_failure(e: redis::RedisError) -> Reply {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return failed(e);
    }
    // The server's own text (`BUSY Redis is busy ...`): the core reads the
    // error code to tell a passing server state from a real refusal.
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => Reply::Refused(format!("{code} {detail}")),
        (Some(code), None) => Reply::Refused(code.to_owned()),
        _ => Reply::Refused(e.to_string()),
    }
}

impl RedisTransport {
    fn start(&self, op: Op) -> Started {
        let timeout = self.request_timeout;
        match op {
            Op::Eval { script, keys, args } => {
                let mut conn = self.cmd.clone();
                let cmd = eval_cmd(script, &keys, &args);
                start_now(async move {
                    match tokio::time::timeout(timeout, cmd.query_async::<redis::Value>(&mut conn)).await {
                        Ok(Ok(v)) => Reply::Redis(to_core(v)),
                        Ok(Err(e)) => redis_failure(e),
                        Err(_) => failed("request timed out"),
                    }
                })
            }
            Op::Subscribe { channel } => {
                let mut conn = self.pubsub.clone();
                start_now(async move {
                    match tokio::time::timeout(timeout, conn.subscribe(&channel)).await {
                        Ok(Ok(())) => Reply::Done,
                        Ok(Err(e)) => redis_failure(e),
                        Err(_) => failed("subscribe timed out"),
                    }
                })
            }
            Op::Unsubscribe { channel } => {
                let mut conn = self.pubsub.clone();
                start_now(async move {
                    match tokio::time::timeout(timeout, conn.unsubscribe(&channel)).await {
                        Ok(Ok(())) => Reply::Done,
                        Ok(Err(e)) => redis_failure(e),
                        Err(_) => failed("unsubscribe timed out"),
                    }
                })
            }
            other => Box::pin(std::future::ready(Reply::Refused(format!("not a Redis operation: {other:?}")))),
        }
    }
}

// ---- ZooKeeper ------------------------------------------------------------

pub(crate) struct ZkTransport {
    /// Replaced when a session expires and a new one is opened.
    pub(crate) client: RwLock<zk::Client>,
    /// Every watch of this client, waited on by one task.
    pub(crate) watches: Arc<crate::watches::Watches>,
    /// Tests only: the proxy `debug_expire_session` cuts.
    #[cfg(feature = "test-hooks")]
    pub(crate) fault_proxy: Option<crate::fault::Proxy>,
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

impl ZkTransport {
    pub(crate) fn current(&self) -> zk::Client {
        self.client.read().expect("zk client lock").clone()
    }

    fn start(&self, name: &str, id: RequestId, op: Op) -> Started {
        let c = self.current();
        match op {
            Op::CreateSequential { path, data } => start_now(async move {
                let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                match c.create(&path, &data, &opts).await {
                    Ok((stat, seq)) => Reply::Created { path: format!("{path}{seq}"), czxid: stat.czxid },
                    Err(e) => zk_failure(e),
                }
            }),
            Op::CreateContainers { path } => start_now(async move {
                let opts = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
                match c.mkdir(&path, &opts).await {
                    Ok(()) | Err(zk::Error::NodeExists) => Reply::Done,
                    Err(e) => zk_failure(e),
                }
            }),
            Op::GetChildren { path } => start_now(async move {
                match c.list_children(&path).await {
                    Ok(children) => Reply::Children(children),
                    Err(e) => zk_failure(e),
                }
            }),
            Op::Stat { path, watch: false } => start_now(async move {
                match c.get_data(&path).await {
                    Ok((_, stat)) => Reply::Stat { czxid: stat.czxid },
                    Err(e) => zk_failure(e),
                }
            }),
            Op::Stat { path, watch: true } => {
                // getData with a watch: a missing node leaves no watch behind.
                let watches = self.watches.clone();
                let name = name.to_owned();
                start_now(async move {
                    match c.get_and_watch_data(&path).await {
                        Ok((_, stat, watcher)) => {
                            watches.add(&name, id, watcher);
                            Reply::Stat { czxid: stat.czxid }
                        }
                        Err(e) => {
                            watches.not_set(&name, id);
                            zk_failure(e)
                        }
                    }
                })
            }
            Op::Unwatch { watch } => {
                self.watches.unwatch(name, watch);
                Box::pin(std::future::ready(Reply::Done))
            }
            Op::Delete { path } => start_now(async move {
                match c.delete(&path, None).await {
                    Ok(()) => Reply::Done,
                    Err(e) => zk_failure(e),
                }
            }),
            other => Box::pin(std::future::ready(Reply::Refused(format!("not a ZooKeeper operation: {other:?}")))),
        }
    }
}

/// Keeps `Arc<Shared>` construction and the transports' back-references apart.
pub(crate) fn link(transport: &Transport, shared: &Arc<Shared>) {
    if let Transport::Zk(z) = transport {
        z.watches.start(Arc::downgrade(shared));
    }
}
