//! The Lua scripts of the Redis protocol, each run as one `EVALSHA` (one
//! `EVAL` with its source when the server lacks it; see
//! [`crate::io::RedisOp::Eval`]), and the layout they share with Redisson
//! in the module docs of [`super`].

use super::lua::lua;
use crate::io::Script;

/// Shared Lua: the fencing token of a grant by the rule in [`ACQUIRE`],
/// stored at `fk` for `px` ms; `t` is a `TIME` reply. One `SET .. GET`
/// writes the clock's value and reads the counter it replaces; a second
/// `SET` runs only when that counter is not below it (the clock stepped
/// back, or two grants in one µs), so a grant costs one command for the
/// token where GET then SET cost two. (`SET .. GET`: Redis 6.2 or later.)
///
/// The token stays a decimal string from `TIME` to the reply. Lua's numbers
/// are doubles: a number here would round a counter above 2^53 (one set
/// ahead by hand, say), so `last + 1` could repeat `last`, and it cost a
/// parse of each `TIME` field, a multiplication and a `%.0f` format per
/// grant (the two scripts of an uncontended acquire+release ran 110k
/// instructions on the server with numbers, 103k without, under callgrind).
/// Decimal strings without leading zeros compare as numbers by length
/// first, then byte by byte; `last + 1` is a decimal increment of the
/// string. The read-write and semaphore scripts use this function too.
macro_rules! lua_next_token {
    () => {
        r#"
-- A TIME reply as µs since 1970, in decimal (its µs field has no leading zeros).
local function clock_us(t)
  return t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
end
local function next_token(fk, t, px)
  local us = clock_us(t)
  local last = redis.call('SET', fk, us, 'PX', px, 'GET')
  if not last or #last < #us or (#last == #us and last < us) then
    return us
  end
  -- last + 1: the trailing 9s become 0s, the digit before them grows
  -- (byte - 47: the next digit's value), or a 1 goes in front.
  local p, nines = string.match(last, '^(.-)(9*)$')
  local token = (p == '' and '1' or string.sub(p, 1, -2) .. string.byte(p, -1) - 47) .. string.rep('0', #nines)
  redis.call('SET', fk, token, 'PX', px)
  return token
end
"#
    };
}
pub(super) use lua_next_token;

/// Shared Lua: the server's clock, and the first live waiter (dropping
/// waiters whose deadline passed: they crashed or gave up uncleanly).
/// Expects KEYS[q] and KEYS[d] to be passed as `qk` and `dk`.
macro_rules! lua_prelude {
    () => {
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pruned = false
-- `h`: the queue's head when the caller has just read it (nothing changed
-- the queue since), so it is not read twice.
local function first_waiter(qk, dk, h)
  while true do
    h = h or redis.call('ZRANGE', qk, 0, 0)[1]
    if not h then return nil end
    local d = tonumber(redis.call('ZSCORE', dk, h))
    if d and d > now then return h end
    redis.call('ZREM', qk, h)
    redis.call('ZREM', dk, h)
    pruned = true
    h = nil
  end
end
"#
    };
}

/// KEYS: lock, fence, queue, queue deadlines.
/// ARGV: field, lease ms, wait ('1' to join the queue when busy or refresh
/// our place; '2' the same, but a place we still hold is left as it is), waiter TTL ms,
/// waiter channel prefix, queue member (`<field>|<claim id>|<lease ms>`: one
/// per claim, so a message meant for an earlier claim of the same owner is
/// never taken for this one; the lease is what a direct handoff grants).
/// Returns `{1, token}` when granted (the token a decimal string), else `{0, pttl, first}` (pttl `-2`
/// when the key is free but another waiter is first in line, `-1` for a
/// foreign key without expiry; `first` 1 when we are first in line: only
/// that waiter tries again on Redisson's `0`, so a Redisson release wakes
/// one polylock waiter). A dead first waiter dropped here makes the next
/// one first: it is told with a `0` on its channel, so it asks and learns it. A retried grant (our field already holds the lock: a reply was
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
    sha1: std::sync::OnceLock::new(),
    source: lua!(concat!(
        "-- polylock acquire v10\n",
        lua_next_token!(),
        r#"
local function grant(t)
  local token = next_token(KEYS[2], t or redis.call('TIME'), ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
-- Fast path: the lock and its queue both absent (one EXISTS for the two
-- keys) is a free lock with nobody waiting.
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  return grant(nil)
end
-- Read once: nothing below touches the lock before it is granted, and the
-- busy answer returns this same TTL. -2: no lock.
local pttl = redis.call('PTTL', KEYS[1])
local free = pttl == -2
-- Held by our field already: a retried grant whose reply was lost.
if not free and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return grant(nil)
end
"#,
        lua_prelude!(),
        r#"
local first = first_waiter(KEYS[3], KEYS[4])
if free then
  if first == nil or first == ARGV[6] then
    if first ~= nil then
      redis.call('ZREM', KEYS[3], ARGV[6])
      redis.call('ZREM', KEYS[4], ARGV[6])
    end
    return grant(t)
  end
end
if pruned and first ~= nil and first ~= ARGV[6] then
  redis.call('PUBLISH', ARGV[5] .. ':' .. first, '0')
end
-- '2': asked again right after queueing (to hear a release that came
-- before our subscription): a place still held and alive needs no upkeep.
local upkeep = ARGV[3] == '1'
if ARGV[3] == '2' and first ~= ARGV[6] then
  upkeep = (tonumber(redis.call('ZSCORE', KEYS[4], ARGV[6])) or 0) <= now
end
if upkeep then
  redis.call('ZADD', KEYS[3], 'NX', clock_us(t), ARGV[6])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[6])
  -- The queue lives as long as its longest-lived member: never shorten it
  -- (PEXPIRE GT would not set a TTL on a key that has none). A queue that
  -- had no live member is ours alone now: nothing to compare with.
  for _, k in ipairs({KEYS[3], KEYS[4]}) do
    if first == nil or redis.call('PTTL', k) < tonumber(ARGV[4]) then
      redis.call('PEXPIRE', k, ARGV[4])
    end
  end
end
local head = 0
if first == nil or first == ARGV[6] then head = 1 end
return {0, pttl, head}
"#
    )),
};

/// KEYS: lock, queue, queue deadlines, fence.
/// ARGV: field, Redisson channel, waiter channel prefix, our queue member,
/// Redisson's shard channel (optional, empty for none).
/// Leaves the lock and the queue: deletes the lock if our field holds it
/// and drops our queue entry. If the
/// lock is then free and we held it or were first in line, it is handed
/// straight to the first live waiter: granted to its field for the lease
/// its queue member carries (a duration, so no clock of this server is
/// carried to another after a failover), with a fencing token by
/// [`ACQUIRE`]'s rule, and the token published on its channel, so the
/// waiter holds the lock without a round trip of its own. A member without
/// a lease (an older client's) is granted until its queue deadline.
/// A release that hands the lock to nobody publishes `0` on Redisson's
/// channel: Redisson's waiters, and ours queued behind a Redisson holder,
/// listen there and try again (also with `SPUBLISH` on the shard channel
/// when given: Redisson's waiters on a cluster listen there; a server
/// without sharded pub/sub refuses it, which `pcall` ignores, as a release
/// must not fail for a wake-up). A release that hands over publishes only
/// the new holder's token: one waiter woken, no herd. When we (or a dead
/// waiter dropped here) were first in line and someone else holds the lock (a Redisson holder, say), the
/// next waiter is told with a `0` on its channel: it asks, learns it is
/// first now, and so tries again on that holder's release.
/// Returns 1 if we held the lock, else 0. Used for release, cancel and cleanup.
pub static LEAVE: Script = Script {
    name: "polylock_leave",
    sha1: std::sync::OnceLock::new(),
    source: lua!(concat!(
        "-- polylock leave v12\n",
        lua_next_token!(),
        r#"
local function wake_redisson()
  redis.call('PUBLISH', ARGV[2], '0')
  if ARGV[5] and ARGV[5] ~= '' then
    redis.pcall('SPUBLISH', ARGV[5], '0')
  end
end
-- Our field is the hash's only one while we hold the lock: deleting it
-- deletes the lock (Redis drops an empty hash), in one command.
local held = redis.call('HDEL', KEYS[1], ARGV[1]) == 1
-- The queue's head, read once (v10 asked EXISTS of the queue first, then
-- read the head again to hand over: a command more per handoff).
local head = nil
if held then
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  -- Fast path: a holder is never queued; with no queue there is nobody to hand to.
  if not head then
    wake_redisson()
    return 1
  end
end
"#,
        lua_prelude!(),
        r#"
-- A holder is never queued (its member left the queue when it was granted)
-- and has just deleted the lock: nothing to drop, nothing to look up.
local was_first = false
if not held then
  was_first = first_waiter(KEYS[2], KEYS[3]) == ARGV[4]
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
end
local handed = false
if held or ((was_first or pruned) and redis.call('EXISTS', KEYS[1]) == 0) then
  -- A holder's head is still the queue's: nothing above changed it.
  local first = first_waiter(KEYS[2], KEYS[3], head)
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
    redis.call('PUBLISH', ARGV[3] .. ':' .. first, next_token(KEYS[4], t, lease))
    handed = true
  end
end
if (was_first or pruned) and not handed and redis.call('EXISTS', KEYS[1]) == 1 then
  -- Someone else holds it (a Redisson holder, say): the next waiter is now
  -- first in line (we or a dead waiter were) and is told so, to listen for
  -- that holder's release.
  local first = first_waiter(KEYS[2], KEYS[3])
  if first ~= nil then
    redis.call('PUBLISH', ARGV[3] .. ':' .. first, '0')
  end
end
if held and not handed then wake_redisson() end
if held then return 1 end
return 0
"#
    )),
};

/// KEYS: lock, fence. ARGV: field, lease ms. Extends the lease if our
/// field still holds the lock: returns 1, else 0 (the lock is gone: we
/// lost it). The fence counter (our grant's token, the last one issued
/// while we hold) is extended with it, so it lives as long as the hold: a
/// status read (an election's term) finds it however long the lock is held.
pub static RENEW: Script = Script {
    name: "polylock_renew",
    sha1: std::sync::OnceLock::new(),
    source: lua!(
        r#"-- polylock renew v2
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
"#
    ),
};

/// KEYS: lock, fence, queue, read-write queue, and the semaphore's permit
/// expiries, queue and recorded number of permits. Returns `{holder field
/// or '', pttl, last token, waiters, readers}`: what `polylock status`
/// shows; for a semaphore (a counter at the name) `{first permit id, ms to
/// its expiry, last token, waiters, 0, permits held, permits}`.
/// A read-write lock's hash holds `mode` beside its holders' fields; while
/// it is `read`, every holder is a reader. Read-only.
pub static STATUS: Script = Script {
    name: "polylock_status",
    sha1: std::sync::OnceLock::new(),
    source: lua!(
        r#"-- polylock status v3
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
  -- A semaphore (Redisson's RPermitExpirableSemaphore): permits held now.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local held = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')
  local total = tonumber(redis.call('GET', KEYS[7]) or '-1')
  if total < 0 then total = tonumber(redis.call('GET', KEYS[1])) + redis.call('ZCARD', KEYS[5]) end
  local first = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local ttl = -2
  if first[2] then ttl = tonumber(first[2]) - now end
  return {first[1] or '', ttl, tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('ZCARD', KEYS[6]), 0, held, total}
end
local holders = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if f ~= 'mode' then holders[#holders + 1] = f end
end
local readers = 0
if redis.call('HGET', KEYS[1], 'mode') == 'read' then readers = #holders end
local waiters = redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4])
return {holders[1] or '', redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0'), waiters, readers}
"#
    ),
};
