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
use std::sync::{Arc, OnceLock, RwLock};
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

/// The core's scripts as `redis::Script`s (EVALSHA, loading on NOSCRIPT), made once.
fn script_for(s: &'static polylock_core::Script) -> &'static redis::Script {
    static SCRIPTS: OnceLock<Vec<(&'static str, redis::Script)>> = OnceLock::new();
    let all = SCRIPTS.get_or_init(|| {
        use polylock_core::redis::{ACQUIRE, LEAVE, RENEW, STATUS};
        [&ACQUIRE, &LEAVE, &RENEW, &STATUS].iter().map(|s| (s.name, redis::Script::new(s.source))).collect()
    });
    &all.iter().find(|(n, _)| *n == s.name).expect("every core script is registered").1
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
        failed(e)
    } else {
        Reply::Refused(e.to_string())
    }
}

impl RedisTransport {
    fn start(&self, op: Op) -> Started {
        let timeout = self.request_timeout;
        match op {
            Op::Eval { script, keys, args } => {
                let mut conn = self.cmd.clone();
                let mut inv = script_for(script).prepare_invoke();
                for k in &keys {
                    inv.key(k);
                }
                for a in &args {
                    inv.arg(a);
                }
                start_now(async move {
                    match tokio::time::timeout(timeout, inv.invoke_async::<redis::Value>(&mut conn)).await {
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
    pub(crate) fault_proxy: Option<crate::fault::Proxy>,
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
        other => Reply::Refused(other.to_string()),
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
