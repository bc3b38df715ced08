//! The Redis protocol: keys, scripts, and one claim's life as a state machine.
//!
//! Layout (wire-compatible with Redisson `RLock`, see PROTOCOLS.md; key
//! names in [`crate::LockName`], all in the lock key's cluster slot):
//! - the lock is a HASH at the lock name, field `<client uuid>:<owner id>`, value 1;
//!   Redisson clients see it as held and wait; we see theirs the same way;
//! - every release publishes `0` on Redisson's channel
//!   (`redisson_lock__channel:{name}`, or `redisson_lock__channel:name` when
//!   the name holds a `{`), which wakes Redisson waiters;
//! - fencing: every grant, in the same script, takes the token
//!   `max(counter + 1, server time in µs)` and stores it in
//!   `polylock_fence:{name}` with the grant's lease as TTL. So tokens keep
//!   growing when the counter is lost or goes back (a restart without
//!   persistence or from an older snapshot, a failover to a replica that
//!   missed writes, an eviction), and the counter does not outlive the
//!   lock (see [`ACQUIRE`] for the one assumption: the server clock);
//! - polylock waiters queue in `polylock_queue:{name}` (FIFO, a sorted set
//!   scored by arrival time) with liveness deadlines in
//!   `polylock_queue_deadline:{name}` (members `<field>|<claim id>|<lease ms>`;
//!   both keys live as long as their longest-lived member), and each
//!   listens on its own channel, Redisson's channel `:<member>`. A release
//!   hands the lock straight to the first live waiter, for that waiter's
//!   lease, and publishes its fencing token on that waiter's channel: one
//!   release, one message, however many wait (no herd), and the waiter
//!   holds the lock without a round trip of its own.
//!
//! All scripts are idempotent in what they grant, so a request whose reply
//! was lost is simply sent again (a retried grant gets a new, larger token).

use crate::io::{ConnectionEvent, Notification, Op, RedisValue, Reply, Script};
use crate::refusal::Refusals;
use crate::slot::{Backoff, Claim, Cx, Progress, Timer, Timers};
use crate::{Error, FencingToken, Instant, LossReason, RequestId};

/// Shared Lua: the server's clock, and the first live waiter (dropping
/// waiters whose deadline passed: they crashed or gave up uncleanly).
/// Expects KEYS[q] and KEYS[d] to be passed as `qk` and `dk`.
macro_rules! lua_prelude {
    () => {
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local pruned = false
local function first_waiter(qk, dk)
  while true do
    local h = redis.call('ZRANGE', qk, 0, 0)[1]
    if not h then return nil end
    local d = tonumber(redis.call('ZSCORE', dk, h))
    if d and d > now then return h end
    redis.call('ZREM', qk, h)
    redis.call('ZREM', dk, h)
    pruned = true
  end
end
"#
    };
}

/// KEYS: lock, fence, queue, queue deadlines.
/// ARGV: field, lease ms, wait ('1' to join the queue when busy), waiter TTL ms,
/// waiter channel prefix, queue member (`<field>|<claim id>|<lease ms>`: one
/// per claim, so a message meant for an earlier claim of the same owner is
/// never taken for this one; the lease is what a direct handoff grants).
/// Returns `{1, token}` when granted, else `{0, pttl}` (`-2` when the key is
/// free but another waiter is first in line, `-1` for a foreign key without
/// expiry). A retried grant (our field already holds the lock: a reply was
/// lost) is granted again with a new token, so it never depends on the
/// counter still being there.
///
/// Every grant's token is `max(counter + 1, server time in µs)`, and the
/// counter expires with the grant's lease. The counter alone would go back
/// with the data (a restart from an older snapshot or AOF, a failover to a
/// replica that missed writes, an eviction); the clock alone would repeat
/// within a microsecond. So a token exceeds every earlier token of the name
/// as long as the counter holds the last one, or the server clock reads
/// later than at the last grant (it is not stepped back by more than the
/// time since; after a failover, the primaries' clocks differ by less than
/// the time since the last grant on the old one).
pub static ACQUIRE: Script = Script {
    name: "polylock_acquire",
    source: concat!(
        "-- polylock acquire v4\n",
        r#"
local function grant(now_us)
  if not now_us then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local token = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now_us)
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  -- %.0f: tostring would print a large token in float notation.
  redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', ARGV[2])
  return {1, token}
end
-- Fast path: ours already (a retried grant), or free and nobody queued
-- (one round trip, one clock read).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 or
   (redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[3]) == 0) then
  return grant(nil)
end
"#,
        lua_prelude!(),
        r#"
local first = first_waiter(KEYS[3], KEYS[4])
if redis.call('EXISTS', KEYS[1]) == 0 then
  if first == nil or first == ARGV[6] then
    if first ~= nil then
      redis.call('ZREM', KEYS[3], ARGV[6])
      redis.call('ZREM', KEYS[4], ARGV[6])
    end
    return grant(now_us)
  end
  if pruned then
    redis.call('PUBLISH', ARGV[5] .. ':' .. first, '0')
  end
end
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[6])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[6])
  -- The queue lives as long as its longest-lived member: never shorten it
  -- (PEXPIRE GT would not set a TTL on a key that has none).
  for _, k in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('PTTL', k) < tonumber(ARGV[4]) then
      redis.call('PEXPIRE', k, ARGV[4])
    end
  end
end
return {0, redis.call('PTTL', KEYS[1])}
"#
    ),
};

/// KEYS: lock, queue, queue deadlines, fence.
/// ARGV: field, Redisson channel, waiter channel prefix, our queue member.
/// Leaves the lock and the queue: deletes the lock if our field holds it
/// (publishing `0` for Redisson waiters) and drops our queue entry. If the
/// lock is then free and we held it or were first in line, it is handed
/// straight to the first live waiter: granted to its field for the lease
/// its queue member carries (a duration, so no clock of this server is
/// carried to another after a failover), with a fencing token by
/// [`ACQUIRE`]'s rule, and the token published on its channel, so the
/// waiter holds the lock without a round trip of its own. A member without
/// a lease (an older client's) is granted until its queue deadline.
/// Returns 1 if we held the lock, else 0. Used for release, cancel and cleanup.
pub static LEAVE: Script = Script {
    name: "polylock_leave",
    source: concat!(
        "-- polylock leave v5\n",
        r#"
local held = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if held then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '0')
  -- Fast path: a holder is never queued; with no queue there is nobody to wake.
  if redis.call('EXISTS', KEYS[2]) == 0 then
    return 1
  end
end
"#,
        lua_prelude!(),
        r#"
local was_first = (not held) and first_waiter(KEYS[2], KEYS[3]) == ARGV[4]
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('ZREM', KEYS[3], ARGV[4])
if (held or was_first or pruned) and redis.call('EXISTS', KEYS[1]) == 0 then
  local first = first_waiter(KEYS[2], KEYS[3])
  if first ~= nil then
    local field, lease = string.match(first, '^([^|]*)|[^|]*|(%d+)$')
    if not field then
      field = string.match(first, '^(.*)|') or first
      lease = math.max(1, tonumber(redis.call('ZSCORE', KEYS[3], first)) - now)
    end
    redis.call('ZREM', KEYS[2], first)
    redis.call('ZREM', KEYS[3], first)
    redis.call('HSET', KEYS[1], field, 1)
    redis.call('PEXPIRE', KEYS[1], lease)
    local token = math.max(tonumber(redis.call('GET', KEYS[4]) or '0') + 1, now_us)
    redis.call('SET', KEYS[4], string.format('%.0f', token), 'PX', lease)
    redis.call('PUBLISH', ARGV[3] .. ':' .. first, string.format('%.0f', token))
  end
end
if held then return 1 end
return 0
"#
    ),
};

/// KEYS: lock. ARGV: field, lease ms. Extends the lease if our field still
/// holds the lock: returns 1, else 0 (the lock is gone: we lost it).
pub static RENEW: Script = Script {
    name: "polylock_renew",
    source: r#"-- polylock renew v1
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#,
};

/// KEYS: lock, fence, queue. Returns `{holder field or '', pttl, last token, waiters}`:
/// what `polylock status` shows. Read-only.
pub static STATUS: Script = Script {
    name: "polylock_status",
    source: r#"-- polylock status v1
local h = redis.call('HKEYS', KEYS[1])[1] or ''
return {h, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('ZCARD', KEYS[3])}
"#,
};

/// The hash field an owner of a client holds a lock under: Redisson's
/// `<client uuid>:<thread id>` layout. The one definition of it.
pub fn field(client_id: crate::Nonce, owner: crate::OwnerId) -> String {
    format!("{}:{}", client_id.to_uuid(), owner.0)
}

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

/// One claim on a Redis lock.
#[derive(Debug)]
pub(crate) struct RedisClaim {
    field: String,
    /// Our entry in the waiter queue and the name of our channel: the field
    /// and an id of this claim.
    member: String,
    wait: bool,
    phase: Phase,
    subscribed: bool,
    /// A wake-up arrived while an acquire was in flight: retry at once if it says busy.
    woken: bool,
    /// When the latest acquire that the server answered "queued" was sent.
    /// A direct handoff can only come after the server ran that acquire,
    /// and grants our lease from the handoff: the lower bound a handed-over
    /// lease is counted from.
    queued_since: Option<Instant>,
    /// When giving up: the moment after which nothing of ours can remain on
    /// the server (lease and queue entry both expired), so retries stop.
    give_up_by: Option<Instant>,
    timers: Timers,
    backoff: Backoff,
    /// Whether the server's latest answer was a transient refusal.
    refusals: Refusals,
}

impl RedisClaim {
    /// `lease`: what the claim is granted for, also by a direct handoff
    /// (carried in its queue member).
    pub(crate) fn new(field: String, claim_id: u64, wait: bool, lease: std::time::Duration) -> Self {
        RedisClaim {
            member: format!("{field}|{claim_id:016x}|{}", lease.as_millis()),
            field,
            wait,
            phase: Phase::Acquiring { req: None, sent_at: Instant::default() },
            subscribed: false,
            woken: false,
            queued_since: None,
            give_up_by: None,
            timers: Timers::default(),
            backoff: Backoff::default(),
            refusals: Refusals::default(),
        }
    }

    fn channel(&self, cx: &Cx<'_>) -> String {
        cx.name.redis_waiter_channel(&self.member)
    }

    fn send_acquire(&mut self, cx: &mut Cx<'_>) {
        let n = cx.name;
        let id = cx.out.send(Op::Eval {
            script: &ACQUIRE,
            keys: vec![
                n.redis_key().to_owned(),
                n.redis_fence_key(),
                n.redis_queue_key(),
                n.redis_queue_deadline_key(),
            ],
            args: vec![
                self.field.clone(),
                cx.cfg.lease.as_millis().to_string(),
                if self.wait { "1" } else { "0" }.to_owned(),
                cx.cfg.waiter_ttl.as_millis().to_string(),
                n.redis_channel(),
                self.member.clone(),
            ],
        });
        self.woken = false;
        self.timers.clear(Timer::Retry);
        self.phase = Phase::Acquiring { req: Some(id), sent_at: cx.now };
    }

    fn send_subscribe(&mut self, cx: &mut Cx<'_>) {
        let id = cx.out.send(Op::Subscribe { channel: self.channel(cx) });
        self.subscribed = true;
        self.phase = Phase::Subscribing { req: Some(id) };
    }

    fn send_unsubscribe(&mut self, cx: &mut Cx<'_>) {
        if self.subscribed {
            self.subscribed = false;
            let _ = cx.out.send(Op::Unsubscribe { channel: self.channel(cx) });
        }
    }

    fn send_leave(&mut self, cx: &mut Cx<'_>) {
        let n = cx.name;
        let id = cx.out.send(Op::Eval {
            script: &LEAVE,
            keys: vec![
                n.redis_key().to_owned(),
                n.redis_queue_key(),
                n.redis_queue_deadline_key(),
                n.redis_fence_key(),
            ],
            args: vec![self.field.clone(), n.redis_channel(), n.redis_channel(), self.member.clone()],
        });
        self.timers.clear(Timer::Retry);
        self.phase = Phase::Leaving { req: Some(id) };
    }

    fn send_renew(&mut self, cx: &mut Cx<'_>, token: FencingToken) {
        let id = cx.out.send(Op::Eval {
            script: &RENEW,
            keys: vec![cx.name.redis_key().to_owned()],
            args: vec![self.field.clone(), cx.cfg.lease.as_millis().to_string()],
        });
        self.phase = Phase::Held { token, renew: Some((id, cx.now)) };
    }

    /// The lease is confirmed until `sent_at + lease`: the server set the
    /// expiry no earlier than we sent the request. Our own deadline is that
    /// less the drift margin, so we report loss before the server can expire it.
    fn confirm_lease(&mut self, cx: &Cx<'_>, sent_at: Instant) {
        let cfg = cx.cfg;
        self.timers.set(Timer::Loss, sent_at.saturating_add(cfg.lease).saturating_sub(cfg.drift()));
        self.timers.set(Timer::Renew, sent_at.saturating_add(cfg.renew_interval()));
        self.backoff.reset();
    }

    /// Takes a lock handed over by the previous holder. The server granted
    /// it for the lease our queue member carries, counted from the handoff,
    /// which came after the server ran our latest acquire answered "queued",
    /// so after `queued_since`: the lease is confirmed as from then, with
    /// the usual drift margin and renewal schedule. No round trip.
    fn handed_over(&mut self, cx: &mut Cx<'_>, token: FencingToken, queued_since: Instant) -> Progress {
        let cfg = cx.cfg;
        if queued_since.saturating_add(cfg.lease).saturating_sub(cfg.drift()) <= cx.now {
            // Too old to count on: confirm with a round trip instead.
            self.send_acquire(cx);
            return Progress::Pending;
        }
        self.send_unsubscribe(cx);
        self.timers.clear_all();
        self.phase = Phase::Held { token, renew: None };
        self.confirm_lease(cx, queued_since);
        Progress::Granted(token)
    }

    fn retry_later(&mut self, cx: &Cx<'_>) {
        let d = self.backoff.next_delay(cx.cfg.min_backoff, cx.cfg.max_backoff);
        self.timers.set(Timer::Retry, cx.now.saturating_add(d));
    }

    fn finish(&mut self) -> Progress {
        self.phase = Phase::Finished;
        self.timers.clear_all();
        Progress::Finished
    }

    fn on_acquire_reply(&mut self, cx: &mut Cx<'_>, sent_at: Instant, reply: Reply) -> Progress {
        let (granted, value) = match parse_pair(&reply) {
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
            self.send_unsubscribe(cx);
            self.phase = Phase::Held { token: FencingToken(token), renew: None };
            self.confirm_lease(cx, sent_at);
            return Progress::Granted(FencingToken(token));
        }
        self.backoff.reset();
        if !self.wait {
            self.finish();
            return Progress::Busy;
        }
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
            let refresh = cx.cfg.waiter_ttl / 3;
            let wait = match u64::try_from(value) {
                Ok(ms) if ms > 0 => std::time::Duration::from_millis(ms).min(refresh),
                _ => refresh,
            };
            self.timers.set(Timer::Retry, cx.now.saturating_add(wait));
        }
        Progress::Pending
    }
}

/// Reads `{flag, value}` from a script reply. `Ok(None)` means no answer.
fn parse_pair(reply: &Reply) -> Result<Option<(bool, i64)>, Error> {
    match reply {
        Reply::Failed(_) => Ok(None),
        Reply::Redis(RedisValue::Array(items)) => match items.as_slice() {
            [RedisValue::Int(flag @ (0 | 1)), RedisValue::Int(v)] => Ok(Some((*flag == 1, *v))),
            _ => Err(Error::Protocol(format!("unexpected acquire reply {items:?}"))),
        },
        other => Err(Error::Protocol(format!("unexpected acquire reply {other:?}"))),
    }
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
        // A transient refusal (BUSY, LOADING, READONLY, ...) is retried like
        // a request that got no answer; a try without waiting has no time
        // to retry and reports it.
        let reply = self.refusals.filter(cx.cfg.backend, reply);
        let progress = match self.phase.clone() {
            Phase::Acquiring { req: Some(r), sent_at } if r == id => self.on_acquire_reply(cx, sent_at, reply),
            Phase::Subscribing { req: Some(r) } if r == id => match reply {
                Reply::Done => {
                    self.send_acquire(cx);
                    Progress::Pending
                }
                Reply::Failed(_) => {
                    self.phase = Phase::Subscribing { req: None };
                    self.retry_later(cx);
                    Progress::Pending
                }
                other => Progress::Fatal(Error::Protocol(format!("unexpected subscribe reply {other:?}"))),
            },
            Phase::Held { token, renew: Some((r, sent_at)) } if r == id => {
                self.phase = Phase::Held { token, renew: None };
                match reply {
                    Reply::Redis(RedisValue::Int(1)) => {
                        self.confirm_lease(cx, sent_at);
                        Progress::Pending
                    }
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
                    other => Progress::Fatal(Error::Protocol(format!("unexpected renew reply {other:?}"))),
                }
            }
            Phase::Leaving { req: Some(r) } if r == id => match reply {
                Reply::Redis(RedisValue::Int(0 | 1)) => self.finish(),
                Reply::Failed(_) => {
                    if self.give_up_by.is_some_and(|by| cx.now >= by) {
                        return self.finish();
                    }
                    self.phase = Phase::Leaving { req: None };
                    self.retry_later(cx);
                    Progress::Pending
                }
                other => Progress::Fatal(Error::Protocol(format!("unexpected leave reply {other:?}"))),
            },
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
        if *channel != self.channel(cx) {
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
            _ => match self.phase {
                Phase::Waiting => self.send_acquire(cx),
                Phase::Acquiring { req: Some(_), .. } => self.woken = true,
                _ => {}
            },
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
                if self.give_up_by.is_some_and(|by| cx.now >= by) {
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
        self.give_up_by = Some(cx.now.saturating_add(cx.cfg.lease.max(cx.cfg.waiter_ttl)));
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

    fn shared_identity(&self) -> Option<&str> {
        Some(&self.field)
    }

    fn refusal(&self) -> Option<&str> {
        self.refusals.latest()
    }
}
