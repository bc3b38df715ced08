//! Redis Cluster: two `redis` crate cluster connections, one for the
//! scripts and one (RESP3) for the subscriptions, as on one server. The
//! crate routes each `EVAL` by its first key to the master of that key's
//! slot (every key of a lock is in the lock key's slot: core
//! `backend/redis/keys.rs`), sends it once (no retries, no redirects
//! followed: see [`RETRIES`]), refreshes the slot map after a `MOVED` or a
//! failover, and restores the subscriptions of a node that reconnects or
//! of slots that moved.
//! `EvalAcked` is one pipeline, `EVAL` + `WAIT`: the crate routes a
//! pipeline by its first command with a slot (the `EVAL`; `WAIT` alone
//! would go to every master) and sends it whole on that master's
//! connection, so the `WAIT` counts the replicas of the script's writes.
//!
//! The scripts never share a connection with subscriptions: the crate (1.8)
//! restores a node's subscriptions with one multi-channel `SUBSCRIBE` sent
//! as a one-reply command, and the server confirms each channel, so the
//! extra confirmations would be taken as the replies of the requests sent
//! next on that node's connection: one lock's grant read as another's.
//! On the pub/sub connection only subscription replies can be shifted,
//! which at worst lets a waiter retry a little before its subscription is
//! confirmed (it then wakes at its fallback timer).
//!
//! Our waiters listen with classic pub/sub (`PUBLISH`/`SUBSCRIBE`), which
//! a cluster broadcasts to every node, so a waiter hears a release whichever
//! node it is subscribed on. Sharded pub/sub (`SPUBLISH`) would stay inside
//! the slot's shard, but the scripts are one for every connection mode; and
//! a shard channel is slot-checked like a key, so a script could not
//! `SPUBLISH` on the channel of a name whose channel lies in another slot
//! (`a{`, `a}`). Redisson on a cluster waits on sharded pub/sub by default
//! (`shardedSubscriptionMode` AUTO), so the client sets the core's
//! `shard_release`: each release also `SPUBLISH`es Redisson's `0` where it
//! can, and a queued waiter also listens on Redisson's channel with
//! `SSUBSCRIBE` (core asks with `RedisOp::ShardSubscribe`; the crate sends
//! it to the slot's node and restores it like the others), to hear a
//! Redisson holder's release. Exclusion never depends on it: only wake-ups do.
//!
//! The executor is told of outages: a node's connection dropping reports
//! [`ConnectionEvent::Disconnected`]; `Connected` follows once every master
//! answers and every subscription is confirmed again, so the waiters that
//! retry at once are heard.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polylock_core::{Command, ConnectionEvent, Op, RedisOp};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};

use super::redis::{connect_error, install_rustls_provider, message_of, start_op, OpConnection};
use super::redis_lanes::Lanes;
use super::{not_ours, Report, Reports, Started, Transport};
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::url::{self, ClusterUrl};

pub(crate) struct ClusterTransport {
    /// One lane: the cluster client keeps a connection per node already
    /// (a `WAIT` for `replicas=K` holds up that node's connection).
    commands: Lanes<ClusterConnection>,
    pubsub: ClusterConnection,
    request_timeout: Duration,
    /// The channels subscribed (`true`: sharded): restored after an outage before `Connected`.
    channels: Arc<Mutex<HashSet<(bool, String)>>>,
    /// Turns pushes into reports; ends with the transport.
    supervisor: tokio::task::JoinHandle<()>,
}

impl Drop for ClusterTransport {
    fn drop(&mut self) {
        // It holds clones of the connections, which would otherwise live on.
        self.supervisor.abort();
    }
}

/// The crate routes a `SUBSCRIBE` or `UNSUBSCRIBE` by its first channel's
/// slot, so each channel goes in a command of its own slot's channels: an
/// `UNSUBSCRIBE` then reaches the node its `SUBSCRIBE` did, whatever the
/// channels it is sent with (a waiter's own channel and Redisson's share a
/// slot, but not for a name with an unclosed brace: `a{`).
fn by_slot(channels: Vec<String>) -> Vec<Vec<String>> {
    let mut groups: Vec<(u16, Vec<String>)> = Vec::new();
    for channel in channels {
        let slot = polylock_core::keyslot::key_slot(&channel);
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(channel),
            None => groups.push((slot, vec![channel])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

impl OpConnection for ClusterConnection {
    async fn subscribe_to(mut self, channels: Vec<String>) -> redis::RedisResult<()> {
        for group in by_slot(channels) {
            self.subscribe(group).await?;
        }
        Ok(())
    }

    async fn unsubscribe_from(mut self, channels: Vec<String>) -> redis::RedisResult<()> {
        for group in by_slot(channels) {
            self.unsubscribe(group).await?;
        }
        Ok(())
    }

    async fn shard_subscribe_to(mut self, channels: Vec<String>) -> redis::RedisResult<()> {
        self.ssubscribe(channels).await
    }

    async fn shard_unsubscribe_from(mut self, channels: Vec<String>) -> redis::RedisResult<()> {
        self.sunsubscribe(channels).await
    }
}

/// The crate's own retries, off: each request is sent once and its outcome,
/// refusal or failure, goes to the core, the one retry authority. The
/// crate would otherwise sleep and send a script again on `TRYAGAIN`,
/// `CLUSTERDOWN`, `MASTERDOWN` or `LOADING`, and after a dropped connection
/// send again a script that may already have run: sent again behind the
/// core's back, an ACQUIRE can run after the LEAVE that cancelled it and
/// queue (or grant) a member nobody waits for. Redirects are not followed
/// either: `MOVED` and `ASK` (the script did not run) come back as
/// transient refusals that the core sends again after its backoff; a
/// `MOVED` also makes the crate refresh its slot map, so the core's next
/// try goes to the slot's new owner. While a slot migrates, a lock whose
/// keys the old owner no longer has (`ASK`) waits for the migration to end.
const RETRIES: u32 = 0;

/// Connects to the cluster through its seed nodes; pushes and outages go to `reports`.
pub(crate) async fn connect(target: &ClusterUrl, opts: &ClientOptions, reports: Reports) -> Result<ClusterTransport> {
    if target.tls {
        install_rustls_provider();
    }
    let commands = open(target, opts, builder(target, opts)?).await?;
    let (pushes, pushed) = tokio::sync::mpsc::unbounded_channel();
    let pubsub_builder = builder(target, opts)?.use_protocol(redis::ProtocolVersion::RESP3).push_sender(pushes);
    let pubsub = open(target, opts, pubsub_builder).await?;
    let channels = Arc::new(Mutex::new(HashSet::new()));
    let supervisor = tokio::spawn(supervise(
        pushed,
        reports,
        commands.clone(),
        pubsub.clone(),
        channels.clone(),
        opts.request_timeout,
    ));
    Ok(ClusterTransport {
        commands: Lanes::new(vec![commands]),
        pubsub,
        request_timeout: opts.request_timeout,
        channels,
        supervisor,
    })
}

fn builder(target: &ClusterUrl, opts: &ClientOptions) -> Result<redis::cluster::ClusterClientBuilder> {
    let mut builder = redis::cluster::ClusterClientBuilder::new(target.nodes.clone())
        .connection_timeout(opts.connect_timeout)
        .response_timeout(opts.request_timeout)
        .retries(RETRIES);
    if let Some(path) = &target.ca {
        let pem =
            std::fs::read(path).map_err(|e| connect_error(&target.addr, format!("cannot read CA {path}: {e}")))?;
        builder = builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem) });
    }
    Ok(builder)
}

async fn open(
    target: &ClusterUrl,
    opts: &ClientOptions,
    builder: redis::cluster::ClusterClientBuilder,
) -> Result<ClusterConnection> {
    let client = builder
        .build()
        .map_err(|e| Error::InvalidUrl { url: url::redact(&target.nodes.join(",")), reason: e.to_string() })?;
    tokio::time::timeout(opts.connect_timeout, client.get_async_connection())
        .await
        .map_err(|_| connect_error(&target.addr, "timed out"))?
        .map_err(|e| connect_error(&target.addr, e))
}

impl Transport for ClusterTransport {
    fn start(&self, cmd: Command) -> Started {
        let Op::Redis(op) = cmd.op else { return not_ours("Redis", &cmd.op) };
        let mut held = self.channels.lock().unwrap();
        match &op {
            RedisOp::Subscribe { channels } => held.extend(channels.iter().map(|c| (false, c.clone()))),
            RedisOp::ShardSubscribe { channels } => held.extend(channels.iter().map(|c| (true, c.clone()))),
            RedisOp::Unsubscribe { channels } => {
                for c in channels {
                    held.remove(&(false, c.clone()));
                }
            }
            RedisOp::ShardUnsubscribe { channels } => {
                for c in channels {
                    held.remove(&(true, c.clone()));
                }
            }
            RedisOp::Eval { .. } | RedisOp::EvalAcked { .. } => {}
        }
        drop(held);
        start_op(&self.commands, &self.pubsub, self.request_timeout, op)
    }
}

/// Forwards messages, and reports each outage: `Disconnected` when a node's
/// connection drops, `Connected` once [`restore`] has seen the cluster
/// whole again. A drop during a restore starts it over.
async fn supervise(
    mut pushed: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
    reports: Reports,
    commands: ClusterConnection,
    pubsub: ClusterConnection,
    channels: Arc<Mutex<HashSet<(bool, String)>>>,
    timeout: Duration,
) {
    let mut restoring: Option<futures::future::BoxFuture<'static, ()>> = None;
    loop {
        let report = tokio::select! {
            push = pushed.recv() => {
                let Some(push) = push else { return };
                match push.kind {
                    // SMessage: a shard channel's (Redisson's `0` by `SPUBLISH`).
                    redis::PushKind::Message | redis::PushKind::SMessage => match message_of(&push) {
                        Some(message) => Report::Notification(message),
                        None => continue,
                    },
                    redis::PushKind::Disconnection => {
                        let first = restoring.is_none();
                        restoring =
                            Some(Box::pin(restore(commands.clone(), pubsub.clone(), channels.clone(), timeout)));
                        if !first {
                            continue;
                        }
                        Report::Connection(ConnectionEvent::Disconnected)
                    }
                    _ => continue,
                }
            }
            () = async { restoring.as_mut().expect("guarded").await }, if restoring.is_some() => {
                restoring = None;
                Report::Connection(ConnectionEvent::Connected)
            }
        };
        if reports.send(report).is_err() {
            // The executor is gone: nobody to tell.
            return;
        }
    }
}

/// Returns once every master answers and every channel we hold is
/// subscribed again (a channel whose node failed over is moved to the new
/// owner by the crate; subscribing again confirms it), retrying with backoff.
async fn restore(
    commands: ClusterConnection,
    pubsub: ClusterConnection,
    channels: Arc<Mutex<HashSet<(bool, String)>>>,
    timeout: Duration,
) {
    let mut delay = Duration::from_millis(20);
    loop {
        tokio::time::sleep(delay).await;
        if restored(&commands, &pubsub, &channels, timeout).await {
            return;
        }
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

async fn restored(
    commands: &ClusterConnection,
    pubsub: &ClusterConnection,
    channels: &Mutex<HashSet<(bool, String)>>,
    timeout: Duration,
) -> bool {
    let every_master =
        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::AllSucceeded)));
    let pinged = tokio::time::timeout(timeout, commands.clone().route_command(redis::cmd("PING"), every_master)).await;
    if !matches!(pinged, Ok(Ok(_))) {
        return false;
    }
    let wanted: Vec<(bool, String)> = channels.lock().unwrap().iter().cloned().collect();
    let subscribed = futures::future::join_all(wanted.into_iter().map(|(sharded, channel)| {
        let conn = pubsub.clone();
        tokio::time::timeout(timeout, async move {
            if sharded {
                conn.shard_subscribe_to(vec![channel]).await
            } else {
                conn.subscribe_to(vec![channel]).await
            }
        })
    }))
    .await;
    subscribed.iter().all(|r| matches!(r, Ok(Ok(()))))
}
