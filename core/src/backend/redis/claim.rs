//! One claim on a Redis lock as a state machine: acquire, queue and wait,
//! hold and renew, leave.

use std::sync::Arc;
use std::time::Duration;

use super::cut::OutsideCut;
use super::keys::RedisKeys;
use super::rw_scripts::{RW_ACQUIRE, RW_LEAVE, RW_RENEW};
use super::scripts::{ACQUIRE, LEAVE, RENEW};
use super::sem_scripts::{SEM_ACQUIRE, SEM_LEAVE, SEM_RENEW};
use crate::claim::{Claim, Cx, Progress};
use crate::io::{ConnectionEvent, Notification, RedisOp, RedisValue, Reply};
use crate::refusal::{is_noscript, Refusals};
use crate::timers::{Backoff, Timer, Timers};
use crate::{Error, FencingToken, Instant, LossReason, RequestId};

/// Where a Redis claim is in its life.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// The acquire script is out (`None`: waiting for the retry timer).
    Acquiring {
        req: Option<RequestId>,
        sent_at: Instant,
    },
    /// Busy once; subscribing to our channel before trying again.
    Subscribing {
        req: Option<RequestId>,
    },
    /// Queued and subscribed; waiting for our channel or the fallback timer.
    Waiting,
    /// Granted. `renew` is the renewal in flight and when it was sent.
    Held {
        token: FencingToken,
        renew: Option<(RequestId, Instant)>,
    },
    /// Leaving the lock and the queue (`None`: waiting for the retry timer).
    Leaving {
        req: Option<RequestId>,
    },
    Finished,
}

/// Which layout the claim works on: Redisson's `RLock`, one half of its
/// `RReadWriteLock` ([`super::rw_scripts`]), or `count` of the `total`
/// permits of its `RPermitExpirableSemaphore` ([`super::sem_scripts`]).
/// All answer alike, so the claim's life is the same; only the scripts and
/// their arguments differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedisRole {
    Mutex,
    Read,
    Write,
    Permits { total: u32, count: u32 },
}

impl RedisRole {
    /// `permits`: a semaphore acquire's ask (the machine has checked it is there).
    pub(crate) fn of(mode: crate::LockMode, permits: Option<crate::PermitRequest>) -> Self {
        match mode {
            // An election's leader holds the name's mutex: its scripts, its
            // queue and its release message (what observers listen to).
            crate::LockMode::Exclusive | crate::LockMode::Leader => RedisRole::Mutex,
            crate::LockMode::Read => RedisRole::Read,
            crate::LockMode::Write => RedisRole::Write,
            crate::LockMode::Semaphore => {
                let p = permits.unwrap_or(crate::PermitRequest { total: 1, count: 1 });
                RedisRole::Permits { total: p.total, count: p.count }
            }
        }
    }

    fn word(self) -> &'static str {
        match self {
            RedisRole::Mutex => "mutex",
            RedisRole::Read => "read",
            RedisRole::Write => "write",
            RedisRole::Permits { .. } => "permits",
        }
    }
}

/// One claim on a Redis lock.
#[derive(Debug)]
pub(crate) struct RedisClaim {
    keys: Arc<RedisKeys>,
    role: RedisRole,
    /// The owner's [`crate::holder_id`]: a reader's field; a writer's
    /// field is this and `:write` (Redisson's layout).
    holder: String,
    field: String,
    /// What this claim is granted for (also by a direct handoff: its queue
    /// member carries it) and how long its queue entry lives unrefreshed.
    terms: Terms,
    /// Our entry in the waiter queue and the name of our channel: the field
    /// and an id of this claim.
    member: String,
    wait: bool,
    phase: Phase,
    subscribed: bool,
    /// Listening on Redisson's channel too (while queued): a Redisson
    /// holder's release publishes only there, so a `0` there means try now.
    redisson_subscribed: bool,
    /// First in the server's queue, as the latest "queued" answer said: only
    /// the first tries again on Redisson's `0` (the others would only queue
    /// again). A waiter that becomes first is told on its own channel.
    first_in_line: bool,
    /// A wake-up arrived while an acquire was in flight: retry at once if it says busy.
    woken: bool,
    /// When the latest acquire that the server answered "queued" was sent.
    /// A direct handoff can only come after the server ran that acquire,
    /// and grants our lease from the handoff: the lower bound a handed-over
    /// lease is counted from.
    queued_since: Option<Instant>,
    /// When giving up: the moment after which nothing of ours can remain on
    /// the server (our queue entry expired, and with it any grant a handoff
    /// made from it), so retries stop.
    give_up_by: Option<Instant>,
    timers: Timers,
    backoff: Backoff,
    /// Whether the server's latest answer was a transient refusal.
    refusals: Refusals,
    /// The latest grant fell short of the replica acknowledgements asked
    /// for (what it said, to name when the caller's deadline passes).
    unacked: Option<String>,
    /// The acknowledgements the script in flight asked for (a claim has one
    /// acquire or renewal out at a time): its reply is read by this count,
    /// not by the config's, which the master's recount may have changed
    /// since (a reply asked with `WAIT` carries the count; one without does not).
    acks_asked: u32,
    /// The server answered `NOSCRIPT` to one of this claim's scripts (it
    /// restarted, failed over or flushed them): the claim sends its
    /// scripts with their source from then on. Sent by SHA1 until then.
    by_source: bool,
    /// The acquire in flight is the recheck after subscribing.
    rechecking: bool,
    /// When the lease we hold was last set, at the earliest (a renewal's
    /// or acquire's send time, a handoff's `queued_since`).
    lease_from: Instant,
    /// What our renewals saw of an outside party shortening our hold.
    cut: OutsideCut,
}

/// The durations one claim runs with (per acquire: two handles of one name
/// may ask for different leases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    pub(crate) lease: Duration,
    pub(crate) waiter_ttl: Duration,
    /// The holder's time to stop its work ([`crate::AcquireOptions::stop_margin`]).
    pub(crate) stop_margin: Duration,
}

impl Terms {
    /// The local deadline margin for this lease (see [`crate::LockConfig::drift`]),
    /// plus the holder's stop margin: how long before the server may expire
    /// the grant the holder is told it lost it.
    fn drift(&self) -> Duration {
        crate::config::drift_for(self.lease) + self.stop_margin
    }
}

impl RedisClaim {
    /// `field`: the owner's [`crate::holder_id`]; `claim_id`: 128 bits of
    /// fresh randomness naming this claim's queue entry and channel.
    pub(crate) fn new(
        keys: Arc<RedisKeys>,
        role: RedisRole,
        holder: String,
        claim_id: u128,
        wait: bool,
        terms: Terms,
    ) -> Self {
        let field = match role {
            RedisRole::Write => format!("{holder}:write"),
            RedisRole::Mutex | RedisRole::Read | RedisRole::Permits { .. } => holder.clone(),
        };
        let kind = match role {
            RedisRole::Mutex => String::new(),
            RedisRole::Read => "r|".to_owned(),
            RedisRole::Write => "w|".to_owned(),
            RedisRole::Permits { count, .. } => format!("p{count}|"),
        };
        RedisClaim {
            member: format!("{kind}{field}|{claim_id:032x}|{}", terms.lease.as_millis()),
            keys,
            role,
            holder,
            field,
            terms,
            wait,
            phase: Phase::Acquiring { req: None, sent_at: Instant::default() },
            subscribed: false,
            redisson_subscribed: false,
            first_in_line: false,
            woken: false,
            queued_since: None,
            give_up_by: None,
            timers: Timers::default(),
            backoff: Backoff::default(),
            refusals: Refusals::default(),
            unacked: None,
            acks_asked: 0,
            by_source: false,
            rechecking: false,
            lease_from: Instant::default(),
            cut: OutsideCut::default(),
        }
    }

    /// A script call; with replicas to acknowledge (`cfg.replicas`), with
    /// its `WAIT` pipelined behind it.
    fn eval(
        &mut self,
        cx: &Cx<'_>,
        script: &'static crate::io::Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> RedisOp {
        let by_sha = !self.by_source;
        self.acks_asked = cx.cfg.replicas;
        match cx.cfg.replicas {
            0 => RedisOp::Eval { script, keys, args, by_sha },
            replicas => RedisOp::EvalAcked {
                script,
                keys,
                args,
                by_sha,
                replicas,
                // At least 1: `WAIT n 0` would block forever.
                timeout_ms: u64::try_from(cx.cfg.replica_timeout.as_millis()).unwrap_or(u64::MAX).max(1),
            },
        }
    }

    fn channel(&self) -> String {
        self.keys.waiter_channel(&self.member)
    }

    fn send_acquire(&mut self, cx: &mut Cx<'_>) {
        self.send_acquire_with(cx, false);
    }

    /// `recheck`: asked again right after queueing, only to catch a release
    /// that came before our subscription; the place just taken is left as it is.
    fn send_acquire_with(&mut self, cx: &mut Cx<'_>, recheck: bool) {
        let wait = match (self.wait, recheck) {
            (false, _) => "0",
            (true, false) => "1",
            (true, true) => "2",
        };
        let k = &self.keys;
        let mut keys =
            vec![k.lock().to_owned(), k.fence().to_owned(), k.queue().to_owned(), k.queue_deadline().to_owned()];
        let mut args = vec![
            self.field.clone(),
            self.terms.lease.as_millis().to_string(),
            wait.to_owned(),
            self.terms.waiter_ttl.as_millis().to_string(),
            k.channel().to_owned(),
            self.member.clone(),
        ];
        let script = match self.role {
            RedisRole::Mutex => &ACQUIRE,
            RedisRole::Read | RedisRole::Write => {
                keys = self.rw_keys();
                args.push(self.role.word().to_owned());
                args.push(format!("{}:write", self.holder));
                &RW_ACQUIRE
            }
            RedisRole::Permits { total, count } => {
                keys = self.sem_keys();
                keys.push(k.permit_total().unwrap_or_default().to_owned());
                args.push(total.to_string());
                args.push(count.to_string());
                &SEM_ACQUIRE
            }
        };
        let op = self.eval(cx, script, keys, args);
        let id = cx.out.send(op);
        self.rechecking = recheck;
        self.woken = false;
        self.timers.clear(Timer::Retry);
        self.phase = Phase::Acquiring { req: Some(id), sent_at: cx.now };
    }

    /// Redisson's channel where a Redisson release is heard: `SSUBSCRIBE`
    /// on a cluster where the release script `SPUBLISH`es there (Redisson's
    /// default there), and `SUBSCRIBE` always (Redisson's other modes, and
    /// its cluster mode without sharded pub/sub).
    fn redisson_subscriptions(&self, cx: &Cx<'_>) -> (String, Option<String>) {
        let shard = self.keys.shard_channel().filter(|_| cx.cfg.shard_release).map(str::to_owned);
        (self.keys.channel().to_owned(), shard)
    }

    /// Subscribes to our channel and, in the same `SUBSCRIBE` (one command
    /// on the server, confirmed with ours), to Redisson's, where a Redisson
    /// release is heard. The table shares Redisson's channel between the
    /// lock's claims and leaves it out of the command when another claim
    /// listens there already. A sharded subscription (a cluster's
    /// `SSUBSCRIBE`, another command) goes ahead of it, unawaited: if it
    /// failed, the fallback timer still wakes us.
    fn send_subscribe(&mut self, cx: &mut Cx<'_>) {
        let mut channels = vec![self.channel()];
        if !self.redisson_subscribed {
            self.redisson_subscribed = true;
            let (channel, shard) = self.redisson_subscriptions(cx);
            channels.insert(0, channel);
            if let Some(channel) = shard {
                let _ = cx.out.send(RedisOp::ShardSubscribe { channels: vec![channel] });
            }
        }
        let id = cx.out.send(RedisOp::Subscribe { channels });
        self.subscribed = true;
        self.phase = Phase::Subscribing { req: Some(id) };
    }

    /// Drops our subscriptions, ours and Redisson's in one `UNSUBSCRIBE`.
    fn send_unsubscribe(&mut self, cx: &mut Cx<'_>) {
        let mut channels = Vec::with_capacity(2);
        if self.subscribed {
            self.subscribed = false;
            channels.push(self.channel());
        }
        if self.redisson_subscribed {
            self.redisson_subscribed = false;
            let (channel, shard) = self.redisson_subscriptions(cx);
            channels.push(channel);
            if let Some(channel) = shard {
                let _ = cx.out.send(RedisOp::ShardUnsubscribe { channels: vec![channel] });
            }
        }
        if !channels.is_empty() {
            let _ = cx.out.send(RedisOp::Unsubscribe { channels });
        }
    }

    /// Read-write locks: our reader timeout key (a writer passes it too,
    /// unused: every script of the layout declares the same keys).
    fn read_timeout(&self) -> String {
        self.keys.read_timeout(&self.holder).unwrap_or_default()
    }

    /// The keys every read-write script declares, in their order.
    fn rw_keys(&self) -> Vec<String> {
        let k = &self.keys;
        let queue = [k.lock(), k.fence(), k.queue(), k.queue_deadline()];
        queue.into_iter().map(str::to_owned).chain([self.read_timeout()]).collect()
    }

    /// The keys every semaphore script declares first, in their order.
    fn sem_keys(&self) -> Vec<String> {
        let k = &self.keys;
        let queue = [k.lock(), k.fence(), k.queue(), k.queue_deadline()];
        queue.into_iter().chain(k.permit_timeouts()).map(str::to_owned).collect()
    }

    fn send_leave(&mut self, cx: &mut Cx<'_>) {
        let k = &self.keys;
        let shard = k.shard_channel().filter(|_| cx.cfg.shard_release).unwrap_or_default().to_owned();
        // Both leave scripts take these first; the read-write one two more.
        let mut args =
            vec![self.field.clone(), k.channel().to_owned(), k.channel().to_owned(), self.member.clone(), shard];
        let op = match self.role {
            RedisRole::Mutex => RedisOp::Eval {
                by_sha: !self.by_source,
                script: &LEAVE,
                keys: vec![
                    k.lock().to_owned(),
                    k.queue().to_owned(),
                    k.queue_deadline().to_owned(),
                    k.fence().to_owned(),
                ],
                args,
            },
            RedisRole::Read | RedisRole::Write => {
                args.push(self.role.word().to_owned());
                args.push(k.timeout_base().unwrap_or_default().to_owned());
                RedisOp::Eval { script: &RW_LEAVE, keys: self.rw_keys(), args, by_sha: !self.by_source }
            }
            RedisRole::Permits { count, .. } => {
                args.push(count.to_string());
                RedisOp::Eval { script: &SEM_LEAVE, keys: self.sem_keys(), args, by_sha: !self.by_source }
            }
        };
        let id = cx.out.send(op);
        self.timers.clear(Timer::Retry);
        self.phase = Phase::Leaving { req: Some(id) };
    }

    fn send_renew(&mut self, cx: &mut Cx<'_>, token: FencingToken) {
        let lease = self.terms.lease.as_millis().to_string();
        let op = match self.role {
            RedisRole::Mutex => {
                let keys = vec![self.keys.lock().to_owned(), self.keys.fence().to_owned()];
                self.eval(cx, &RENEW, keys, vec![self.field.clone(), lease])
            }
            RedisRole::Read | RedisRole::Write => self.eval(
                cx,
                &RW_RENEW,
                vec![self.keys.lock().to_owned(), self.read_timeout()],
                vec![
                    self.field.clone(),
                    lease,
                    self.role.word().to_owned(),
                    self.keys.timeout_base().unwrap_or_default().to_owned(),
                ],
            ),
            RedisRole::Permits { count, .. } => self.eval(
                cx,
                &SEM_RENEW,
                vec![self.keys.permit_timeouts().unwrap_or_default().to_owned()],
                vec![self.field.clone(), lease, count.to_string()],
            ),
        };
        let id = cx.out.send(op);
        self.phase = Phase::Held { token, renew: Some((id, cx.now)) };
    }

    /// The lease is confirmed until `sent_at + lease`: the server set the
    /// expiry no earlier than we sent the request. Our own deadline is that
    /// less the drift margin, so we report loss before the server can expire it.
    /// When an outside party cuts our hold shorter than the lease (see
    /// [`OutsideCut`]), both count from what the cut left instead: a cut
    /// no longer than the drift margin is a loss at once.
    fn confirm_lease(&mut self, sent_at: Instant) {
        let t = self.terms;
        let lease = self.cut.lease(t.lease);
        self.lease_from = sent_at;
        self.timers.set(Timer::Loss, sent_at.saturating_add(lease).saturating_sub(t.drift()));
        // A third of the lease, as Redisson's watchdog.
        self.timers.set(Timer::Renew, sent_at.saturating_add(lease / 3));
        self.backoff.reset();
    }

    /// Takes a lock handed over by the previous holder. The server granted
    /// it for the lease our queue member carries, counted from the handoff,
    /// which came after the server ran our latest acquire answered "queued",
    /// so after `queued_since`: the lease is confirmed as from then, with
    /// the usual drift margin and renewal schedule. No round trip.
    /// With replicas to acknowledge, the handoff is confirmed by a round
    /// trip of our own: only a `WAIT` on our connection tells us that the
    /// replicas have the grant.
    fn handed_over(&mut self, cx: &mut Cx<'_>, token: FencingToken, queued_since: Instant) -> Progress {
        let t = self.terms;
        if cx.cfg.replicas > 0 || queued_since.saturating_add(t.lease).saturating_sub(t.drift()) <= cx.now {
            // Too old to count on, or not yet on the replicas: confirm with a round trip instead.
            self.send_acquire(cx);
            return Progress::Pending;
        }
        self.send_unsubscribe(cx);
        self.timers.clear_all();
        self.phase = Phase::Held { token, renew: None };
        self.confirm_lease(queued_since);
        Progress::Granted(token)
    }

    /// The server did not have the script of the request in flight (it ran
    /// nothing): the same request goes again at once, with its source. Safe
    /// to send late because the phase is still the one that sent it: had the
    /// claim moved on (a cancel's LEAVE sent, say), the refusal would not be
    /// its request's and would be dropped, so a request sent again never
    /// runs after one that was meant to follow it.
    fn send_again_with_source(&mut self, cx: &mut Cx<'_>) -> Progress {
        self.by_source = true;
        match self.phase {
            Phase::Acquiring { .. } => self.send_acquire_with(cx, self.rechecking),
            Phase::Leaving { .. } => self.send_leave(cx),
            Phase::Held { token, .. } => self.send_renew(cx, token),
            // Subscriptions run no script.
            Phase::Subscribing { .. } | Phase::Waiting | Phase::Finished => {}
        }
        Progress::Pending
    }

    fn retry_later(&mut self, cx: &Cx<'_>) {
        self.timers.retry_with_backoff(&mut self.backoff, cx.cfg, cx.now);
    }

    fn finish(&mut self) -> Progress {
        self.phase = Phase::Finished;
        self.timers.clear_all();
        Progress::Finished
    }

    fn on_acquire_reply(&mut self, cx: &mut Cx<'_>, sent_at: Instant, reply: Reply) -> Progress {
        let (reply, acks) = split_acks(self.acks_asked, reply);
        if let (RedisRole::Permits { total, .. }, Some(server)) = (self.role, permits_mismatch(&reply)) {
            // Refused before the script changed anything: nothing to clean up.
            self.finish();
            return Progress::Refused(Error::PermitsMismatch { server, ours: total });
        }
        if holds_another_kind(&reply) {
            // The script failed at its first access to the name's key, before it wrote.
            self.finish();
            return Progress::Refused(Error::InvalidName(format!(
                "{:?} is in use on this server by another kind of primitive (the key holds another \
                 kind of value): a lock or read-write lock and a semaphore cannot share a name",
                self.keys.lock()
            )));
        }
        let (granted, value, first) = match parse_pair(&reply) {
            Ok(Some(pair)) => pair,
            Ok(None) => {
                // No answer: the script may or may not have run. It is idempotent.
                self.phase = Phase::Acquiring { req: None, sent_at };
                self.retry_later(cx);
                return Progress::Pending;
            }
            Err(e) => return Progress::Fatal(e),
        };
        if granted {
            let Ok(token) = u64::try_from(value) else {
                return Progress::Fatal(Error::Protocol(format!("negative fencing token {value}")));
            };
            let t = self.terms;
            if sent_at.saturating_add(t.lease).saturating_sub(t.drift()) <= cx.now {
                // Answered after the lease it confirms (counted from when we
                // asked) ran out: the server may have been paused and failed
                // over meanwhile, and be a stale primary granting what the
                // new master may grant too. Not reported; asked again at once.
                self.send_acquire(cx);
                return Progress::Pending;
            }
            if let Some(short) = short_of(cx, self.acks_asked, acks) {
                // Granted on the master alone: a failover now could lose it,
                // so it is not reported. Asked again (the script grants our
                // own field again, with a new token) until the replicas
                // confirm; the caller's deadline ends it with a LEAVE.
                self.phase = Phase::Acquiring { req: None, sent_at };
                self.retry_later(cx);
                if !self.wait {
                    return Progress::Unavailable(short);
                }
                self.unacked = Some(short);
                return Progress::Pending;
            }
            self.unacked = None;
            self.send_unsubscribe(cx);
            self.phase = Phase::Held { token: FencingToken(token), renew: None };
            self.confirm_lease(sent_at);
            return Progress::Granted(FencingToken(token));
        }
        self.backoff.reset();
        if !self.wait {
            self.finish();
            return Progress::Busy;
        }
        self.first_in_line = first;
        self.on_queued(cx, sent_at, value);
        Progress::Pending
    }

    /// The server put us in the waiter queue (acquire sent at `sent_at`;
    /// `holder_ttl_ms`: the holder's remaining lease, if known). Wait for our
    /// channel, subscribing first; a wake-up that came meanwhile means try now.
    fn on_queued(&mut self, cx: &mut Cx<'_>, sent_at: Instant, holder_ttl_ms: i64) {
        self.queued_since = Some(sent_at);
        if !self.subscribed {
            // Subscribe, then try once more: a release between our first try
            // and the subscription would otherwise go unheard.
            self.send_subscribe(cx);
        } else if self.woken {
            self.send_acquire(cx);
        } else {
            self.phase = Phase::Waiting;
            // Fallback when no message comes: at the holder's expiry, and at
            // least every third of the waiter TTL to keep our queue place alive.
            let refresh = self.terms.waiter_ttl / 3;
            let wait = match u64::try_from(holder_ttl_ms) {
                Ok(ms) if ms > 0 => std::time::Duration::from_millis(ms).min(refresh),
                _ => refresh,
            };
            self.timers.set(Timer::Retry, cx.now.saturating_add(wait));
        }
    }

    /// The subscription to our channel is up: try again, so a release that
    /// came before it is not missed.
    fn on_subscribed(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Done => {
                self.send_acquire_with(cx, true);
                Progress::Pending
            }
            Reply::Failed(_) => {
                // Dropped before it is asked again, so the table counts each
                // listener once (it forwards only a channel's last unsubscribe).
                self.send_unsubscribe(cx);
                self.phase = Phase::Subscribing { req: None };
                self.retry_later(cx);
                Progress::Pending
            }
            other => unexpected("subscribe", other),
        }
    }

    /// The answer to a renewal sent at `sent_at`: the lease is extended from
    /// then, or someone else's now (the holder must hear it), or unknown.
    fn on_renewed(&mut self, cx: &mut Cx<'_>, token: FencingToken, sent_at: Instant, reply: Reply) -> Progress {
        self.phase = Phase::Held { token, renew: None };
        let (reply, acks) = split_acks(self.acks_asked, reply);
        if let Some(left_ms) = renewed(&reply) {
            // A cut is known once the master reports it, acknowledged or not.
            let t = self.terms;
            self.cut.observe(left_ms, t.lease, t.drift(), self.lease_from, cx.now);
            if short_of(cx, self.acks_asked, acks).is_none() {
                self.confirm_lease(sent_at);
            } else {
                // Extended on the master alone: the replicas still have the
                // old expiry, so the lease is not counted as extended; the
                // Loss timer still runs from the last acknowledged one.
                self.timers.clear(Timer::Renew);
                self.retry_later(cx);
            }
            return Progress::Pending;
        }
        match reply {
            Reply::Redis(RedisValue::Int(0)) => {
                self.timers.clear_all();
                Progress::Lost(LossReason::RenewalRefused)
            }
            Reply::Failed(_) => {
                // Try again soon; the Loss timer still bounds how long we believe.
                self.timers.clear(Timer::Renew);
                self.retry_later(cx);
                Progress::Pending
            }
            other => unexpected("renew", other),
        }
    }

    /// The answer to LEAVE: done whether or not we still held the lock; on
    /// failure retried until nothing of ours can remain on the server.
    fn on_left(&mut self, cx: &mut Cx<'_>, reply: Reply) -> Progress {
        match reply {
            Reply::Redis(RedisValue::Int(0 | 1)) => self.finish(),
            Reply::Failed(_) if self.leave_is_moot(cx) => self.finish(),
            Reply::Failed(_) => {
                self.phase = Phase::Leaving { req: None };
                self.retry_later(cx);
                Progress::Pending
            }
            other => unexpected("leave", other),
        }
    }

    /// A wake-up: try now if waiting, or once more if the acquire in flight says busy.
    fn wake(&mut self, cx: &mut Cx<'_>) {
        match self.phase {
            Phase::Waiting => self.send_acquire(cx),
            Phase::Acquiring { req: Some(_), .. } => self.woken = true,
            _ => {}
        }
    }

    /// Whether our lease and queue entry have both expired on the server
    /// since we gave up, so that a LEAVE has nothing left to remove.
    fn leave_is_moot(&self, cx: &Cx<'_>) -> bool {
        self.give_up_by.is_some_and(|by| cx.now >= by)
    }
}

/// A reply of a kind the request cannot get: the driver is broken.
fn unexpected(request: &str, reply: Reply) -> Progress {
    Progress::Fatal(Error::Protocol(format!("unexpected {request} reply {reply:?}")))
}

/// A script reply without its acknowledgement count, and the count: `None`
/// when its request asked no acknowledgement (`asked` is 0); 0 when the
/// reply is not a script's (a failure, a refusal).
fn split_acks(asked: u32, reply: Reply) -> (Reply, Option<i64>) {
    if asked == 0 {
        return (reply, None);
    }
    match reply {
        Reply::Redis(RedisValue::Array(items)) => match <[RedisValue; 2]>::try_from(items) {
            Ok([value, RedisValue::Int(acks)]) => (Reply::Redis(value), Some(acks)),
            // Not what EvalAcked answers: left for the caller to call a protocol error.
            Ok(pair) => (Reply::Redis(RedisValue::Array(pair.into())), Some(0)),
            Err(items) => (Reply::Redis(RedisValue::Array(items)), Some(0)),
        },
        other => (other, Some(0)),
    }
}

/// What falls short, if fewer replicas acknowledged than the request asked for.
fn short_of(cx: &Cx<'_>, asked: u32, acks: Option<i64>) -> Option<String> {
    let wanted = i64::from(asked);
    match acks {
        Some(n) if n < wanted => Some(format!(
            "NOREPLICAS {n} of {wanted} replicas acknowledged the write within {} ms",
            cx.cfg.replica_timeout.as_millis()
        )),
        _ => None,
    }
}

/// Redis's `WRONGTYPE`: the key at the name holds another kind of value
/// than this primitive keeps there (a lock's hash, a semaphore's counter).
fn holds_another_kind(reply: &Reply) -> bool {
    matches!(reply, Reply::Refused(text) if text.split([' ', ':']).next() == Some("WRONGTYPE"))
}

/// A renewal's "extended": the mutex's and the semaphore's `1`, or the
/// read-write lock's `{1, left}` with what the hold had left before it
/// (-1: nothing to go by). `None` for any other reply.
fn renewed(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Redis(RedisValue::Int(1)) => Some(-1),
        Reply::Redis(RedisValue::Array(items)) => match items.as_slice() {
            [RedisValue::Int(1), RedisValue::Int(left)] => Some(*left),
            _ => None,
        },
        _ => None,
    }
}

/// A semaphore acquire's `{-1, N}`: the server's number of permits is `N`, not ours.
fn permits_mismatch(reply: &Reply) -> Option<u32> {
    match reply {
        Reply::Redis(RedisValue::Array(items)) => match items.as_slice() {
            [RedisValue::Int(-1), RedisValue::Int(n)] => Some(u32::try_from(*n).unwrap_or(u32::MAX)),
            _ => None,
        },
        _ => None,
    }
}

/// Reads `{flag, value[, first]}` from an acquire reply (`first`, whether
/// a queued waiter is first in line, taken as yes when absent: a wake-up
/// too many costs one acquire, one too few a wait). A grant's token comes
/// as a decimal string (the scripts never turn it into a Lua number: see
/// `lua_next_token!`); as an integer it is read too (scripts before
/// acquire v10, and a driver that converts). `Ok(None)` means no answer.
fn parse_pair(reply: &Reply) -> Result<Option<(bool, i64, bool)>, Error> {
    let refused = || Error::Protocol(format!("unexpected acquire reply {reply:?}"));
    let Reply::Redis(RedisValue::Array(items)) = reply else {
        return match reply {
            Reply::Failed(_) => Ok(None),
            _ => Err(refused()),
        };
    };
    match items.as_slice() {
        [RedisValue::Int(1), RedisValue::Bulk(digits)] => {
            decimal(digits).map(|t| Some((true, t, true))).ok_or_else(refused)
        }
        [RedisValue::Int(flag @ (0 | 1)), RedisValue::Int(v)] => Ok(Some((*flag == 1, *v, true))),
        [RedisValue::Int(flag @ (0 | 1)), RedisValue::Int(v), RedisValue::Int(first @ (0 | 1))] => {
            Ok(Some((*flag == 1, *v, *first == 1)))
        }
        _ => Err(refused()),
    }
}

/// A non-negative decimal integer of ASCII digits only (no sign, no blank,
/// not empty) that fits an `i64`.
fn decimal(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Claim for RedisClaim {
    fn begin(&mut self, cx: &mut Cx<'_>) {
        self.send_acquire(cx);
    }

    fn owns(&self, id: RequestId) -> bool {
        match &self.phase {
            Phase::Acquiring { req, .. } | Phase::Subscribing { req } | Phase::Leaving { req } => *req == Some(id),
            Phase::Held { renew, .. } => renew.map(|(r, _)| r) == Some(id),
            Phase::Waiting | Phase::Finished => false,
        }
    }

    fn on_reply(&mut self, cx: &mut Cx<'_>, id: RequestId, reply: Reply) -> Progress {
        if is_noscript(&reply) && self.owns(id) {
            return self.send_again_with_source(cx);
        }
        // A transient refusal (BUSY, LOADING, READONLY, ...) is retried like
        // a request that got no answer; a try without waiting has no time
        // to retry and reports it.
        let reply = self.refusals.filter(cx.cfg.backend, reply);
        let progress = match self.phase.clone() {
            Phase::Acquiring { req: Some(r), sent_at } if r == id => self.on_acquire_reply(cx, sent_at, reply),
            Phase::Subscribing { req: Some(r) } if r == id => self.on_subscribed(cx, reply),
            Phase::Held { token, renew: Some((r, sent_at)) } if r == id => self.on_renewed(cx, token, sent_at, reply),
            Phase::Leaving { req: Some(r) } if r == id => self.on_left(cx, reply),
            _ => Progress::Pending,
        };
        // Reported once the claim is in its retry state, which give_up leaves cleanly.
        match (self.wait, &self.phase, self.refusals.latest()) {
            (false, Phase::Acquiring { .. }, Some(text)) => Progress::Unavailable(text.to_owned()),
            _ => progress,
        }
    }

    fn on_notification(&mut self, cx: &mut Cx<'_>, n: &Notification) -> Progress {
        let Notification::Message { channel, payload } = n else { return Progress::Pending };
        if *channel == self.keys.channel() {
            // A release that handed the lock to nobody (a Redisson holder's,
            // or ours with nobody queued): the first in line tries at once
            // (an acquire in flight may be answered "first": asked again).
            // The others would only queue again: no herd.
            if self.first_in_line || matches!(self.phase, Phase::Acquiring { req: Some(_), .. }) {
                self.wake(cx);
            }
            return Progress::Pending;
        }
        if *channel != self.channel() {
            return Progress::Pending;
        }
        let waiting = matches!(self.phase, Phase::Waiting | Phase::Acquiring { .. } | Phase::Subscribing { .. });
        match payload.parse::<u64>() {
            // A direct handoff: the lock is ours, until our queue deadline.
            Ok(token) if token > 0 && waiting => match self.queued_since {
                Some(since) => return self.handed_over(cx, FencingToken(token), since),
                // Granted before we saw our own "queued" reply: ask once more
                // (the acquire script confirms a grant our field already has).
                None if !matches!(self.phase, Phase::Acquiring { req: Some(_), .. }) => self.send_acquire(cx),
                None => self.woken = true,
            },
            _ => self.wake(cx),
        }
        Progress::Pending
    }

    fn on_connection(&mut self, cx: &mut Cx<'_>, ev: ConnectionEvent) -> Progress {
        if ev != ConnectionEvent::Connected {
            return Progress::Pending;
        }
        // Back after an outage: a wake-up may have been missed, and every
        // request waiting for its retry timer can go now.
        self.backoff.reset();
        match self.phase.clone() {
            Phase::Waiting | Phase::Acquiring { req: None, .. } => self.send_acquire(cx),
            Phase::Subscribing { req: None } => self.send_subscribe(cx),
            Phase::Leaving { req: None } => self.send_leave(cx),
            Phase::Held { token, renew: None } if self.timers.get(Timer::Retry).is_some() => {
                self.timers.clear(Timer::Retry);
                self.send_renew(cx, token);
            }
            _ => {}
        }
        Progress::Pending
    }

    fn on_timer(&mut self, cx: &mut Cx<'_>, t: Timer) -> Progress {
        match (t, self.phase.clone()) {
            (Timer::Loss, Phase::Held { .. }) => {
                self.timers.clear_all();
                Progress::Lost(LossReason::LeaseExpired)
            }
            (Timer::Renew | Timer::Retry, Phase::Held { token, renew: None }) => {
                self.timers.clear(Timer::Retry);
                self.send_renew(cx, token);
                Progress::Pending
            }
            (Timer::Retry, Phase::Waiting | Phase::Acquiring { req: None, .. }) => {
                self.send_acquire(cx);
                Progress::Pending
            }
            (Timer::Retry, Phase::Subscribing { req: None }) => {
                self.send_subscribe(cx);
                Progress::Pending
            }
            (Timer::Retry, Phase::Leaving { req: None }) => {
                if self.leave_is_moot(cx) {
                    return self.finish();
                }
                self.send_leave(cx);
                Progress::Pending
            }
            _ => Progress::Pending,
        }
    }

    fn give_up(&mut self, cx: &mut Cx<'_>) {
        if matches!(self.phase, Phase::Finished | Phase::Leaving { .. }) {
            return;
        }
        // Acquired or not, queued or not, in flight or not: LEAVE covers every
        // case, and it runs after anything we sent before on the same connection.
        // Our queue entry lives at most a waiter TTL from now, and a
        // release's handoff may grant us the lock from it until then, for a
        // lease from the handoff: the sum, not the longer of the two.
        self.give_up_by = Some(cx.now.saturating_add(self.terms.lease.saturating_add(self.terms.waiter_ttl)));
        self.timers.clear_all();
        self.send_unsubscribe(cx);
        self.send_leave(cx);
    }

    fn timers(&mut self) -> &mut Timers {
        &mut self.timers
    }

    fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    fn describe(&self) -> String {
        self.field.clone()
    }

    /// The owner's id, which names our field (a writer's with `:write`):
    /// the machine compares it with the owner's [`crate::holder_id`].
    fn shared_identity(&self) -> Option<&str> {
        Some(&self.holder)
    }

    fn refusal(&self) -> Option<&str> {
        self.refusals.latest().or(self.unacked.as_deref())
    }

    fn refused(&self) -> bool {
        self.refusals.latest().is_some()
    }
}
