//! Redis: command connections (one, or a few [`Lanes`] for a client that
//! waits for replicas) and a pub/sub connection (RESP3 pushes), each a
//! `redis` crate `ConnectionManager` that reconnects by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use polylock_core::{Command, ConnectionEvent, Notification, Op, RedisOp, RedisValue, Reply};

use super::redis_lanes::Lanes;
use super::{failed, not_ours, start_now, Report, Reports, Started, Transport};
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::url;

pub(crate) struct RedisTransport {
    cmd: Lanes<redis::aio::ConnectionManager>,
    pubsub: redis::aio::ConnectionManager,
    request_timeout: Duration,
}

/// Where and how to connect, from the URL.
pub(crate) struct RedisTarget {
    pub(crate) url: String,
    pub(crate) tls: bool,
    pub(crate) ca: Option<String>,
    /// The address, for errors.
    pub(crate) addr: String,
}

pub(crate) fn connect_error(addr: &str, reason: impl std::fmt::Display) -> Error {
    Error::Connect { addr: addr.to_owned(), reason: reason.to_string() }
}

pub(crate) fn redis_client(url: &str, target: &RedisTarget) -> Result<redis::Client> {
    let made = match (target.tls, &target.ca) {
        (true, Some(path)) => {
            let pem =
                std::fs::read(path).map_err(|e| connect_error(&target.addr, format!("cannot read CA {path}: {e}")))?;
            redis::Client::build_with_tls(url, redis::TlsCertificates { client_tls: None, root_cert: Some(pem) })
        }
        _ => redis::Client::open(url),
    };
    made.map_err(|e| Error::InvalidUrl { url: url::redact(url), reason: e.to_string() })
}

/// The rustls crypto provider the redis crate leaves to the application.
pub(crate) fn install_rustls_provider() {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // zookeeper-client enables aws-lc-rs; make it the process default if none is set.
        rustls::crypto::aws_lc_rs::default_provider().install_default().is_ok()
    });
}

/// Connects both connections; pub/sub pushes and connection changes go to `reports`.
/// Connects `lanes` command connections (see [`Lanes`]) and the pub/sub one.
pub(crate) async fn connect(
    target: &RedisTarget,
    opts: &ClientOptions,
    lanes: usize,
    reports: Reports,
) -> Result<RedisTransport> {
    if target.tls {
        install_rustls_provider();
    }
    let manager_config = || {
        redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(opts.connect_timeout))
            .set_response_timeout(Some(opts.request_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500))
    };
    let open = |client, config| async move {
        tokio::time::timeout(opts.connect_timeout, redis::aio::ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| connect_error(&target.addr, "timed out"))?
            .map_err(|e| connect_error(&target.addr, e))
    };
    let client = redis_client(&target.url, target)?;
    let cmd = futures::future::try_join_all((0..lanes.max(1)).map(|_| open(client.clone(), manager_config()))).await?;
    // Pub/sub runs on RESP3 push messages: the only way the redis crate
    // reconnects and resubscribes by itself.
    let sep = if target.url.contains('?') { '&' } else { '?' };
    let pubsub_client = redis_client(&format!("{}{sep}protocol=resp3", target.url), target)?;
    let config = manager_config().set_push_sender(push_reporter(reports)).set_automatic_resubscription();
    let pubsub = open(pubsub_client, config).await?;
    Ok(RedisTransport { cmd: Lanes::new(cmd), pubsub, request_timeout: opts.request_timeout })
}

/// Turns the pub/sub connection's pushes into reports: messages, and the
/// connection going down and (once resubscribed) coming back.
fn push_reporter(
    reports: Reports,
) -> impl Fn(redis::PushInfo) -> std::result::Result<(), std::convert::Infallible> + Send + Sync + 'static {
    let down = Arc::new(AtomicBool::new(false));
    move |push: redis::PushInfo| {
        let report = match push.kind {
            redis::PushKind::Message | redis::PushKind::SMessage => match message_of(&push) {
                Some(message) => {
                    crate::trace::stamp(crate::trace::Hop::Read);
                    Report::Notification(message)
                }
                None => return Ok(()),
            },
            redis::PushKind::Disconnection => {
                down.store(true, Ordering::SeqCst);
                Report::Connection(ConnectionEvent::Disconnected)
            }
            // Resubscribed after a reconnect: messages may have been missed.
            redis::PushKind::Subscribe if down.swap(false, Ordering::SeqCst) => {
                Report::Connection(ConnectionEvent::Connected)
            }
            _ => return Ok(()),
        };
        // The executor is gone: nobody to tell.
        let _ = reports.send(report);
        Ok(())
    }
}

/// The notification a pub/sub message push carries (channel, payload).
pub(crate) fn message_of(push: &redis::PushInfo) -> Option<Notification> {
    match push.data.as_slice() {
        [redis::Value::BulkString(ch), redis::Value::BulkString(payload), ..] => Some(Notification::Message {
            channel: String::from_utf8_lossy(ch).into_owned(),
            payload: String::from_utf8_lossy(payload).into_owned(),
        }),
        _ => None,
    }
}

/// A script call as one request: `EVALSHA` when the core says `by_sha`,
/// else `EVAL` with the source. No NOSCRIPT fallback here (the `redis`
/// crate's `Script` sends the source again after a NOSCRIPT): a request
/// sent again runs after whatever the core sent since, so a cancel could
/// run before the acquire it cancels and leave an orphan grant. The
/// refusal goes to the core, which sends the request again with its source
/// only while it is still the one it wants answered (see
/// `polylock_core::RedisOp::Eval`).
fn eval_cmd(script: &polylock_core::Script, by_sha: bool, keys: &[String], args: &[String]) -> redis::Cmd {
    let mut cmd = if by_sha {
        let mut c = redis::cmd("EVALSHA");
        c.arg(script.sha1());
        c
    } else {
        let mut c = redis::cmd("EVAL");
        c.arg(script.source);
        c
    };
    cmd.arg(keys.len()).arg(keys).arg(args);
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

/// The server's own text of an error reply (`BUSY Redis is busy ...`): the
/// core reads its first word, the error code, to tell a passing server
/// state from a real refusal.
fn refusal_text(code: &str, detail: Option<&str>) -> Reply {
    match detail {
        Some(detail) => Reply::Refused(format!("{code} {detail}")),
        None => Reply::Refused(code.to_owned()),
    }
}

fn redis_failure(e: redis::RedisError) -> Reply {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        // The request may or may not have run: the core decides what that means.
        return failed(e);
    }
    if let (Some(code), detail) = (e.code(), e.detail()) {
        return refusal_text(code, detail);
    }
    // A pipeline's errors, one per failed command: the first is the
    // earliest command's, which the later ones depend on.
    let text = e.to_string();
    match e.into_server_errors().as_deref() {
        Some([(_, first), ..]) => refusal_text(first.code(), first.details()),
        _ => Reply::Refused(text),
    }
}

/// The replies of `EVAL` + `WAIT`, as the core's `[script result, acks]`.
/// A refused `EVAL` (`BUSY`, `OOM`, `NOREPLICAS`...) did not run: its
/// refusal, code first, is the reply. An `EVAL` that ran followed by a
/// refused `WAIT` has no replica known to have its writes: 0 acks, which
/// the core treats as too few.
fn acked_reply(replies: Vec<redis::Value>) -> Reply {
    match <[redis::Value; 2]>::try_from(replies) {
        Ok([redis::Value::ServerError(e), _]) => refusal_text(e.code(), e.details()),
        Ok([value, redis::Value::ServerError(_)]) => {
            Reply::Redis(RedisValue::Array(vec![to_core(value), RedisValue::Int(0)]))
        }
        Ok([value, acks]) => Reply::Redis(RedisValue::Array(vec![to_core(value), to_core(acks)])),
        Err(other) => Reply::Refused(format!("unexpected reply to EVAL + WAIT: {other:?}")),
    }
}

/// Runs `fut` within the request timeout; its error or the timeout becomes the reply.
async fn within<F>(timeout: Duration, what: &'static str, fut: F, ok: impl FnOnce(F::Output) -> Reply) -> Reply
where
    F: std::future::Future,
{
    match tokio::time::timeout(timeout, fut).await {
        Ok(out) => ok(out),
        Err(_) => failed(format!("{what} timed out")),
    }
}

/// A connection the Redis operations run on: the standalone connection
/// managers here, the cluster client in `redis_cluster.rs`. Both carry
/// EVAL as a plain command (the cluster client routes it by its first key)
/// and subscriptions as RESP3 pushes that they restore after a reconnect.
pub(crate) trait OpConnection: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {
    /// One `SUBSCRIBE` for all of `channels`.
    fn subscribe_to(self, channels: Vec<String>) -> impl std::future::Future<Output = redis::RedisResult<()>> + Send;
    /// One `UNSUBSCRIBE` for all of `channels`.
    fn unsubscribe_from(
        self,
        channels: Vec<String>,
    ) -> impl std::future::Future<Output = redis::RedisResult<()>> + Send;
    /// Sharded pub/sub (`SSUBSCRIBE`), which only a cluster speaks; the core
    /// asks for it only with `shard_release`, set for a cluster alone.
    fn shard_subscribe_to(
        self,
        channels: Vec<String>,
    ) -> impl std::future::Future<Output = redis::RedisResult<()>> + Send {
        async move { Err(no_sharded_pubsub(&channels)) }
    }
    fn shard_unsubscribe_from(
        self,
        channels: Vec<String>,
    ) -> impl std::future::Future<Output = redis::RedisResult<()>> + Send {
        async move { Err(no_sharded_pubsub(&channels)) }
    }
}

fn no_sharded_pubsub(channels: &[String]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "sharded pub/sub is a Redis Cluster's",
        channels.join(" "),
    ))
}

impl OpConnection for redis::aio::ConnectionManager {
    async fn subscribe_to(mut self, channels: Vec<String>) -> redis::RedisResult<()> {
        self.subscribe(channels).await
    }

    async fn unsubscribe_from(mut self, channels: Vec<String>) -> redis::RedisResult<()> {
        self.unsubscribe(channels).await
    }
}

/// Starts one Redis operation: scripts on the lane of their first key in
/// `commands`, subscriptions on `pubsub`, each within `timeout`, each
/// outcome one [`Reply`].
pub(crate) fn start_op<C: OpConnection>(commands: &Lanes<C>, pubsub: &C, timeout: Duration, op: RedisOp) -> Started {
    match op {
        RedisOp::Eval { script, keys, args, by_sha } => {
            let mut conn = commands.for_key(first_key(&keys));
            let cmd = eval_cmd(script, by_sha, &keys, &args);
            start_now(async move {
                within(timeout, "request", cmd.query_async::<redis::Value>(&mut conn), |r| match r {
                    Ok(v) => Reply::Redis(to_core(v)),
                    Err(e) => redis_failure(e),
                })
                .await
            })
        }
        RedisOp::EvalAcked { script, keys, args, by_sha, replicas, timeout_ms } => {
            let mut conn = commands.for_key(first_key(&keys));
            let mut pipe = redis::pipe();
            // Each command's own reply, errors included: the crate would
            // otherwise fold them into one "Pipeline failure" without a code.
            pipe.ignore_errors();
            pipe.add_command(eval_cmd(script, by_sha, &keys, &args)).cmd("WAIT").arg(replicas).arg(timeout_ms);
            start_now(async move {
                within(timeout, "request", pipe.query_async::<Vec<redis::Value>>(&mut conn), |r| match r {
                    Ok(replies) => acked_reply(replies),
                    Err(e) => redis_failure(e),
                })
                .await
            })
        }
        RedisOp::Subscribe { channels } => subscription(timeout, "subscribe", pubsub.clone().subscribe_to(channels)),
        RedisOp::Unsubscribe { channels } => {
            subscription(timeout, "unsubscribe", pubsub.clone().unsubscribe_from(channels))
        }
        RedisOp::ShardSubscribe { channels } => {
            subscription(timeout, "ssubscribe", pubsub.clone().shard_subscribe_to(channels))
        }
        RedisOp::ShardUnsubscribe { channels } => {
            subscription(timeout, "sunsubscribe", pubsub.clone().shard_unsubscribe_from(channels))
        }
    }
}

/// The key a script's lane is chosen by: its first (the lock's own key in
/// a lock's acquire and leave).
fn first_key(keys: &[String]) -> &str {
    keys.first().map_or("", String::as_str)
}

/// A (un)subscription on the pub/sub connection, within `timeout`: done, or why not.
fn subscription(
    timeout: Duration,
    what: &'static str,
    change: impl std::future::Future<Output = redis::RedisResult<()>> + Send + 'static,
) -> Started {
    start_now(async move { within(timeout, what, change, |r| r.map_or_else(redis_failure, |()| Reply::Done)).await })
}

impl Transport for RedisTransport {
    fn start(&self, cmd: Command) -> Started {
        let Op::Redis(op) = cmd.op else { return not_ours("Redis", &cmd.op) };
        start_op(&self.cmd, &self.pubsub, self.request_timeout, op)
    }
}
