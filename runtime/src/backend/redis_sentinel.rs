//! Redis under Sentinel: the master is found through the sentinels,
//! verified with `ROLE`, and served by a standalone [`RedisTransport`]
//! (the same ops, the same code). When the master moves, a new
//! `RedisTransport` is connected to the new one and swapped in.
//!
//! What says the master may have moved: `+switch-master` on any sentinel's
//! pub/sub (each sentinel is listened to, so one sentinel down loses
//! nothing), and any reply that failed or came back `READONLY` (a demoted
//! master) or `MASTERDOWN`. Then the sentinels are asked again; a new
//! address is switched to, reported as `Disconnected` before and
//! `Connected` once every subscription is restored on the new master, so
//! the core retries what was in flight and re-contends. The old master's
//! reports are dropped from then on: what it says no longer counts.
//!
//! Without `replicas=K` in the URL (none given, or `replicas=all`), the
//! master's replicas are counted again every second (`ROLE`) and each
//! change is reported, for the core to decide how many acknowledgements it
//! asks.
//!
//! Tasks per client, never per lock: one supervisor (re-resolves and
//! switches), one listener per sentinel, one report forwarder per master
//! connection, one replica counter (without `replicas=K`). All end when
//! the transport is dropped.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use polylock_core::{Command, ConnectionEvent, Op, RedisOp, Reply, RequestId};
use tokio::sync::{mpsc, watch, Notify};

use super::redis::{connect_error, redis_client, RedisTarget, RedisTransport};
use super::{not_ours, Report, Reports, Started, Transport};
use crate::error::Result;
use crate::options::ClientOptions;
use crate::url::SentinelEndpoint;

/// The least time between two rounds of asking the sentinels, so that a
/// burst of failed replies costs one round.
const RESOLVE_PACE: Duration = Duration::from_millis(100);
/// How long to wait before asking again when no sentinel named a live master.
const RESOLVE_RETRY: Duration = Duration::from_millis(200);
/// How long a sentinel listener waits before reconnecting to its sentinel.
const LISTEN_RETRY: Duration = Duration::from_secs(1);
/// How often the master's replicas are counted again (`ROLE`), when the
/// URL leaves their number to the master (no `replicas=K`, or
/// `replicas=all`): as often as Redisson rescans its Sentinel topology.
/// The sentinels' own events come too late to follow instead: `+slave`
/// only after their next `INFO` scan of the master (every 10 s), and
/// `+sdown slave` only after `down-after-milliseconds`, while a replica
/// whose link dropped acknowledges nothing from that moment.
const REPLICAS_RECOUNT: Duration = Duration::from_secs(1);

pub(crate) struct SentinelTransport {
    shared: Arc<Shared>,
    /// How many replicas the master listed in its `ROLE` at connect.
    replicas: usize,
    /// Dropped with the transport: every task sees the channel close and ends.
    _stop: watch::Sender<()>,
}

struct Shared {
    endpoint: SentinelEndpoint,
    opts: ClientOptions,
    current: Mutex<Current>,
    /// The generation whose reports reach the executor.
    live: Arc<AtomicU64>,
    /// Something says the master may have moved: the supervisor asks again.
    suspect: Notify,
}

/// The master in use.
struct Current {
    transport: Arc<RedisTransport>,
    /// host:port as the sentinels named it.
    addr: String,
    generation: u64,
    /// Every channel subscribed through us, to restore on the next master.
    channels: HashSet<String>,
}

/// Resolves the master, connects to it and starts following it.
pub(crate) async fn connect(
    endpoint: SentinelEndpoint,
    opts: &ClientOptions,
    reports: Reports,
) -> Result<SentinelTransport> {
    if endpoint.tls {
        super::redis::install_rustls_provider();
    }
    let (host, port, replicas) = tokio::time::timeout(opts.connect_timeout, resolve(&endpoint, opts))
        .await
        .unwrap_or_else(|_| Err(connect_error(&endpoint.sentinels.join(","), "timed out asking the sentinels")))?;
    let live = Arc::new(AtomicU64::new(0));
    let transport = connect_master(&endpoint, opts, &host, port, 0, &live, &reports).await?;
    let (stop, stopped) = watch::channel(());
    let shared = Arc::new(Shared {
        current: Mutex::new(Current {
            transport: Arc::new(transport),
            addr: format!("{host}:{port}"),
            generation: 0,
            channels: HashSet::new(),
        }),
        endpoint,
        opts: opts.clone(),
        live,
        suspect: Notify::new(),
    });
    for addr in &shared.endpoint.sentinels {
        let client = sentinel_client(&shared.endpoint, addr)?;
        tokio::spawn(listen(client, shared.clone(), stopped.clone()));
    }
    if shared.endpoint.replicas.follows_the_master() {
        tokio::spawn(recount_replicas(shared.clone(), replicas, reports.clone(), stopped.clone()));
    }
    tokio::spawn(supervise(shared.clone(), reports, stopped));
    Ok(SentinelTransport { shared, replicas, _stop: stop })
}

impl SentinelTransport {
    /// How many replicas the master had when we connected (from its `ROLE`).
    pub(crate) fn replicas_at_connect(&self) -> usize {
        self.replicas
    }
}

fn sentinel_client(ep: &SentinelEndpoint, addr: &str) -> Result<redis::Client> {
    let url = ep.sentinel_url(addr);
    redis_client(&url, &RedisTarget { url: url.clone(), tls: ep.tls, ca: ep.ca.clone(), addr: addr.to_owned() })
}

fn master_target(ep: &SentinelEndpoint, host: &str, port: u16) -> RedisTarget {
    RedisTarget { url: ep.data_url(host, port), tls: ep.tls, ca: ep.ca.clone(), addr: format!("{host}:{port}") }
}

/// Connects a standalone transport to the master, its reports passed on
/// only while `generation` is the live one.
async fn connect_master(
    ep: &SentinelEndpoint,
    opts: &ClientOptions,
    host: &str,
    port: u16,
    generation: u64,
    live: &Arc<AtomicU64>,
    reports: &Reports,
) -> Result<RedisTransport> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
    let transport =
        super::redis::connect(&master_target(ep, host, port), opts, super::redis_lanes::WAITING_LANES, tx).await?;
    let (live, reports) = (live.clone(), reports.clone());
    // Ends when the transport, and so its report sender, is dropped.
    tokio::spawn(async move {
        while let Some(report) = rx.recv().await {
            if live.load(Ordering::SeqCst) == generation {
                let _ = reports.send(report);
            }
        }
    });
    Ok(transport)
}

/// Asks every sentinel at once for the master's address; the first that
/// names one whose `ROLE` says master wins. The error names every address
/// tried and what each said.
/// Also returns how many replicas the master lists.
async fn resolve(ep: &SentinelEndpoint, opts: &ClientOptions) -> Result<(String, u16, usize)> {
    let mut asks: FuturesUnordered<_> =
        ep.sentinels.iter().map(|addr| async move { (addr, ask_sentinel(ep, addr, opts).await) }).collect();
    let mut said = Vec::new();
    while let Some((addr, answer)) = asks.next().await {
        match answer {
            Ok(found) => return Ok(found),
            Err(why) => said.push(format!("{addr}: {why}")),
        }
    }
    Err(connect_error(
        &ep.sentinels.join(","),
        format!("no sentinel named a master for {:?} ({})", ep.master, said.join("; ")),
    ))
}

/// One sentinel's answer, checked with `ROLE` on the master it names.
async fn ask_sentinel(
    ep: &SentinelEndpoint,
    addr: &str,
    opts: &ClientOptions,
) -> std::result::Result<(String, u16, usize), String> {
    let within = |what: &'static str| move |_| format!("{what} timed out");
    let client = sentinel_client(ep, addr).map_err(|e| e.to_string())?;
    let mut conn = tokio::time::timeout(opts.connect_timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(within("connect"))?
        .map_err(|e| e.to_string())?;
    let named: Option<(String, u16)> = tokio::time::timeout(
        opts.request_timeout,
        redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(&ep.master).query_async(&mut conn),
    )
    .await
    .map_err(within("SENTINEL GET-MASTER-ADDR-BY-NAME"))?
    .map_err(|e| e.to_string())?;
    let Some((host, port)) = named else { return Err(format!("does not know master {:?}", ep.master)) };
    let target = master_target(ep, &host, port);
    let master = redis_client(&target.url, &target).map_err(|e| e.to_string())?;
    let mut conn = tokio::time::timeout(opts.connect_timeout, master.get_multiplexed_async_connection())
        .await
        .map_err(within("connect to the master"))?
        .map_err(|e| format!("master {host}:{port}: {e}"))?;
    let role: redis::Value = tokio::time::timeout(opts.request_timeout, redis::cmd("ROLE").query_async(&mut conn))
        .await
        .map_err(within("ROLE"))?
        .map_err(|e| format!("master {host}:{port}: {e}"))?;
    match replicas_listed(&role) {
        Some(replicas) => Ok((host, port, replicas)),
        None => Err(format!("names {host}:{port}, whose ROLE is not master")),
    }
}

/// How many replicas a master's `ROLE` lists; `None` if it is not a master's.
fn replicas_listed(role: &redis::Value) -> Option<usize> {
    // A master's ROLE: ["master", offset, [[ip, port, offset], ...]].
    match role {
        redis::Value::Array(items) if matches!(items.first(), Some(redis::Value::BulkString(r)) if r == b"master") => {
            match items.get(2) {
                Some(redis::Value::Array(list)) => Some(list.len()),
                _ => Some(0),
            }
        }
        _ => None,
    }
}

/// Counts the current master's replicas every [`REPLICAS_RECOUNT`] and
/// reports each change of the count (from `seen`, the count at connect):
/// the core decides what the count means for the acknowledgements it asks.
/// Its own connection, so that a `ROLE` never waits behind a `WAIT`.
async fn recount_replicas(shared: Arc<Shared>, mut seen: usize, reports: Reports, mut stopped: watch::Receiver<()>) {
    let mut conn: Option<(String, redis::aio::MultiplexedConnection)> = None;
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(REPLICAS_RECOUNT) => {}
        }
        let addr = shared.current.lock().unwrap_or_else(|e| e.into_inner()).addr.clone();
        if conn.as_ref().is_none_or(|(at, _)| *at != addr) {
            conn = connect_role_probe(&shared, &addr).await.map(|c| (addr.clone(), c));
        }
        let Some((_, c)) = conn.as_mut() else { continue };
        let role = tokio::time::timeout(shared.opts.request_timeout, redis::cmd("ROLE").query_async(c)).await;
        let Ok(Ok(role)) = role else {
            // Connected again next time; meanwhile the count stands.
            conn = None;
            continue;
        };
        // Not a master (any more): the supervisor is finding the new one.
        let Some(replicas) = replicas_listed(&role) else { continue };
        if replicas != seen {
            seen = replicas;
            if reports.send(Report::ReplicasSeen(replicas)).is_err() {
                return;
            }
        }
    }
}

async fn connect_role_probe(shared: &Shared, addr: &str) -> Option<redis::aio::MultiplexedConnection> {
    let (host, port) = addr.rsplit_once(':')?;
    let target = master_target(&shared.endpoint, host, port.parse().ok()?);
    let client = redis_client(&target.url, &target).ok()?;
    tokio::time::timeout(shared.opts.connect_timeout, client.get_multiplexed_async_connection()).await.ok()?.ok()
}

/// Re-resolves whenever the master is suspected to have moved, and
/// switches to the new one.
async fn supervise(shared: Arc<Shared>, reports: Reports, mut stopped: watch::Receiver<()>) {
    // Whether we reported Disconnected and owe a Connected.
    let mut down = false;
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            () = shared.suspect.notified() => {}
        }
        tokio::time::sleep(RESOLVE_PACE).await;
        let Ok(Ok((host, port, _))) =
            tokio::time::timeout(shared.opts.connect_timeout, resolve(&shared.endpoint, &shared.opts)).await
        else {
            // Nobody knows yet (a failover under way): ask again soon.
            tokio::time::sleep(RESOLVE_RETRY).await;
            shared.suspect.notify_one();
            continue;
        };
        let addr = format!("{host}:{port}");
        let generation = {
            let cur = shared.current.lock().unwrap_or_else(|e| e.into_inner());
            if cur.addr == addr && !down {
                continue;
            }
            cur.generation + 1
        };
        if !down {
            down = true;
            let _ = reports.send(Report::Connection(ConnectionEvent::Disconnected));
        }
        let Ok(transport) =
            connect_master(&shared.endpoint, &shared.opts, &host, port, generation, &shared.live, &reports).await
        else {
            tokio::time::sleep(RESOLVE_RETRY).await;
            shared.suspect.notify_one();
            continue;
        };
        let transport = Arc::new(transport);
        // Under the lock, so that a subscription made meanwhile is either in
        // this snapshot or sent to the new master.
        let channels: Vec<String> = {
            let mut cur = shared.current.lock().unwrap_or_else(|e| e.into_inner());
            cur.transport = transport.clone();
            cur.addr = addr;
            cur.generation = generation;
            shared.live.store(generation, Ordering::SeqCst);
            cur.channels.iter().cloned().collect()
        };
        // One SUBSCRIBE for them all.
        let resubscribed = if channels.is_empty() {
            Reply::Done
        } else {
            transport.start(Command { id: RequestId(0), op: Op::Redis(RedisOp::Subscribe { channels }) }).await
        };
        if resubscribed != Reply::Done {
            // The new master is not answering yet: try the whole switch again.
            shared.suspect.notify_one();
            continue;
        }
        down = false;
        let _ = reports.send(Report::Connection(ConnectionEvent::Connected));
    }
}

/// Follows `+switch-master` on one sentinel, reconnecting when it drops.
/// A (re)subscription also counts as a suspicion: a switch may have been
/// announced while we were not listening.
async fn listen(client: redis::Client, shared: Arc<Shared>, mut stopped: watch::Receiver<()>) {
    let master = shared.endpoint.master.clone();
    let timeout = shared.opts.connect_timeout;
    let mut first = true;
    loop {
        if let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout, client.get_async_pubsub()).await {
            if pubsub.subscribe("+switch-master").await.is_ok() {
                if !std::mem::take(&mut first) {
                    shared.suspect.notify_one();
                }
                let mut messages = pubsub.on_message();
                loop {
                    tokio::select! {
                        _ = stopped.changed() => return,
                        msg = messages.next() => match msg {
                            // "<master name> <old ip> <old port> <new ip> <new port>"
                            Some(msg) => {
                                let payload: String = msg.get_payload().unwrap_or_default();
                                if payload.split(' ').next() == Some(master.as_str()) {
                                    shared.suspect.notify_one();
                                }
                            }
                            None => break,
                        },
                    }
                }
            }
        }
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(LISTEN_RETRY) => {}
        }
    }
}

/// A reply that says this may no longer be the master.
fn points_elsewhere(reply: &Reply) -> bool {
    match reply {
        Reply::Failed(_) => true,
        Reply::Refused(text) => text.starts_with("READONLY") || text.starts_with("MASTERDOWN"),
        _ => false,
    }
}

impl Transport for SentinelTransport {
    fn start(&self, cmd: Command) -> Started {
        let Op::Redis(op) = &cmd.op else { return not_ours("Redis", &cmd.op) };
        let started = {
            let mut cur = self.shared.current.lock().unwrap_or_else(|e| e.into_inner());
            match op {
                RedisOp::Subscribe { channels } => {
                    cur.channels.extend(channels.iter().cloned());
                }
                RedisOp::Unsubscribe { channels } => {
                    for channel in channels {
                        cur.channels.remove(channel);
                    }
                }
                // Never asked here (a cluster's alone); the transport refuses it.
                RedisOp::ShardSubscribe { .. } | RedisOp::ShardUnsubscribe { .. } => {}
                RedisOp::Eval { .. } | RedisOp::EvalAcked { .. } => {}
            }
            cur.transport.start(cmd)
        };
        let shared = self.shared.clone();
        Box::pin(async move {
            let reply = started.await;
            if points_elsewhere(&reply) {
                shared.suspect.notify_one();
            }
            reply
        })
    }
}
