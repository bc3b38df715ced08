//! The runtime's seam per backend: each module connects, executes the
//! core's commands on its server, reports what the server says unasked
//! (pub/sub messages, fired watches, connection and session changes) over
//! the executor's report channel, and supervises its connection or session.
//! It decides nothing: each [`polylock_core::Op`] maps to one call of the
//! `redis` or `zookeeper-client` crate, each outcome to one [`Reply`].
//!
//! A new backend or Redis connection mode is one more module here with a
//! `connect` function and a [`Transport`] impl.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use polylock_core::{Command, ConnectionEvent, Notification, Reply, TransportError};
use tokio::sync::mpsc;

pub(crate) mod redis;
pub(crate) mod redis_cluster;
mod redis_lanes;
pub(crate) mod redis_sentinel;
pub(crate) mod zk;
mod zk_watches;

/// A command on its way: resolves to the server's reply.
pub(crate) type Started = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What a transport tells the executor without being asked.
#[derive(Debug)]
pub(crate) enum Report {
    /// A pub/sub message, or a watch fired (with the id of the command that set it).
    Notification(Notification),
    Connection(ConnectionEvent),
    /// ZooKeeper: a new session's negotiated timeout, reported before its `Connected`.
    SessionTimeout(Duration),
    /// Redis under Sentinel: how many replicas the master lists now, when
    /// that count changed since connect or since the last report.
    ReplicasSeen(usize),
}

/// Where a transport sends its [`Report`]s.
pub(crate) type Reports = mpsc::UnboundedSender<Report>;

/// One backend connection (or session), as the executor drives it.
pub(crate) trait Transport: Send + Sync + 'static {
    /// Starts `cmd` at once: its request is written before this returns, so
    /// commands leave in the order they were started (a ZooKeeper create and
    /// the getChildren after it share one round trip).
    fn start(&self, cmd: Command) -> Started;

    /// Tests only: makes the server expire this client's session.
    #[cfg(feature = "test-hooks")]
    fn debug_expire_session(&self) -> futures::future::BoxFuture<'_, crate::Result<()>> {
        Box::pin(async { Err(crate::Error::InvalidOption("session expiry applies to ZooKeeper only".into())) })
    }

    /// Tests only: watches set and neither fired nor dropped.
    #[cfg(feature = "test-hooks")]
    fn debug_live_watches(&self) -> usize {
        0
    }

    /// Tests only: watch routing entries kept (live, or unwanted before set).
    #[cfg(feature = "test-hooks")]
    fn debug_watch_routes(&self) -> usize {
        0
    }
}

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

/// The reply of a request that may or may not have reached the server.
pub(crate) fn failed(msg: impl std::fmt::Display) -> Reply {
    Reply::Failed(TransportError { message: msg.to_string() })
}

/// The answer to an operation of another backend's type. A lock table only
/// makes the operations of the backend it was made for, so this is never
/// reached; it answers instead of panicking in a caller's task.
pub(crate) fn not_ours(backend: &str, op: &polylock_core::Op) -> Started {
    Box::pin(std::future::ready(Reply::Refused(format!("not a {backend} operation: {op:?}"))))
}
