//! The Lua scripts of the Redis read-write lock: Redisson's
//! `RReadWriteLock` layout, with polylock's waiter queue, direct handoff
//! and fencing beside it. They answer as the mutex's scripts do
//! ([`super::scripts`]), so one claim drives either.
//!
//! Layout: one hash at the name, field `mode` = `read` or `write`; a
//! reader's field `<holder id>`, a writer's `<holder id>:write`, each with
//! hold count 1 (reentrancy is the client's); per reader a key
//! `{name}:<holder id>:rwlock_timeout:1` with the reader's lease as TTL, as
//! Redisson keeps one per read hold (a Redisson reader's release recomputes
//! the hash's expiry from them, so our readers must have theirs). The
//! hash's expiry is never shortened by a grant or renewal: it lives as long
//! as its longest-lived holder. Waiters queue in `polylock_rwqueue:K`
//! (members `r|<field>|<claim id>|<lease ms>` or `w|...`), and a waiting
//! writer blocks later readers (Redisson has no such rule; Curator does).

use super::lua::lua;
use super::scripts::lua_next_token;
use crate::io::Script;

/// Shared Lua of the read-write scripts: the clock, the queue walk (dead
/// waiters dropped), and a grant by handoff. KEYS[1] lock, KEYS[2] fence,
/// KEYS[3] queue, KEYS[4] queue deadlines.
macro_rules! rw_prelude {
    () => {
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The live queue, in order (members whose deadline passed are dropped).
local function live_queue()
  local live = {}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local d = tonumber(redis.call('ZSCORE', KEYS[4], m))
    if d and d > now then
      live[#live + 1] = m
    else
      redis.call('ZREM', KEYS[3], m)
      redis.call('ZREM', KEYS[4], m)
    end
  end
  return live
end
-- The fence lives as long as the longest-lived holder's lease.
local function token_for(lease)
  return next_token(KEYS[2], t, math.max(tonumber(redis.call('PTTL', KEYS[2])), tonumber(lease)))
end
-- Makes `field` a holder in `mode` for `lease` ms; `timeout` is a reader's key.
local function hold(mode, field, lease, timeout)
  if redis.call('HGET', KEYS[1], 'mode') ~= 'write' then
    redis.call('HSET', KEYS[1], 'mode', mode)
  end
  redis.call('HSET', KEYS[1], field, 1)
  if mode == 'read' then
    redis.call('SET', timeout, 1, 'PX', lease)
  end
  if redis.call('PTTL', KEYS[1]) < tonumber(lease) then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  return token_for(lease)
end
"#
    };
}

/// KEYS: lock, fence, queue, queue deadlines, our reader timeout key (a
/// writer passes it too: unused).
/// ARGV: field (a writer's ends in `:write`), lease ms, wait ('0' try,
/// '1' queue or refresh our place, '2' the recheck after subscribing),
/// waiter TTL ms, waiter channel prefix, our queue member, `read` or
/// `write`, the owner's writer field (a reader: its write hold makes this
/// a downgrade).
/// Returns `{1, token}` when granted, else `{0, pttl, first}`; `first` is 1
/// when only a holder stands in our way (nobody queued ahead of a writer,
/// no writer queued ahead of a reader): that waiter tries again on
/// Redisson's release message.
pub static RW_ACQUIRE: Script = Script {
    name: "polylock_rw_acquire",
    sha1: std::sync::OnceLock::new(),
    source: lua!(concat!(
        "-- polylock rw acquire v2\n",
        lua_next_token!(),
        rw_prelude!(),
        r#"
local reading = ARGV[7] == 'read'
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  -- Ours already: a grant whose reply was lost.
  return {1, hold(ARGV[7], ARGV[1], ARGV[2], KEYS[5])}
end
local mode = redis.call('HGET', KEYS[1], 'mode')
if reading and mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[8]) == 1 then
  -- A downgrade: the writer reads beside its own write hold.
  return {1, hold('read', ARGV[1], ARGV[2], KEYS[5])}
end
local live = live_queue()
-- Who is ahead of us: everyone before our place, or everyone if we have none.
local ahead = #live
for i, m in ipairs(live) do
  if m == ARGV[6] then ahead = i - 1 break end
end
local blocked = false
local first = true
for i = 1, ahead do
  if not reading or string.sub(live[i], 1, 2) == 'w|' then
    blocked = true
    first = false
    break
  end
end
-- A hash without a mode (a mutex's, say) is foreign: busy for both halves.
local free = redis.call('EXISTS', KEYS[1]) == 0 or (reading and mode == 'read')
if free and not blocked then
  redis.call('ZREM', KEYS[3], ARGV[6])
  redis.call('ZREM', KEYS[4], ARGV[6])
  return {1, hold(ARGV[7], ARGV[1], ARGV[2], KEYS[5])}
end
if ARGV[3] == '0' then
  return {0, redis.call('PTTL', KEYS[1]), 0}
end
local upkeep = ARGV[3] == '1'
if ARGV[3] == '2' then
  upkeep = (tonumber(redis.call('ZSCORE', KEYS[4], ARGV[6])) or 0) <= now
end
if upkeep then
  redis.call('ZADD', KEYS[3], 'NX', clock_us(t), ARGV[6])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[6])
  for _, k in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('PTTL', k) < tonumber(ARGV[4]) then
      redis.call('PEXPIRE', k, ARGV[4])
    end
  end
end
local head = 0
if first then head = 1 end
return {0, redis.call('PTTL', KEYS[1]), head}
"#
    )),
};

/// KEYS: lock, fence, queue, queue deadlines, our reader timeout key.
/// ARGV: field, Redisson's channel, waiter channel prefix, our queue
/// member, Redisson's shard channel (empty for none), `read` or `write`,
/// the reader timeout key base (`{name}`: a handed-over reader's key is
/// `<base>:<field>:rwlock_timeout:1`).
/// Leaves the lock and the queue: ends our hold if we have one (the hash
/// goes when its last holder does; a writer leaving its downgraded read
/// hold behind turns the lock to `read`), drops our queue entry, then
/// hands the lock on directly: to the first live waiter if it is a writer
/// and the lock is free, or to every reader at the front of the queue up
/// to the first writer when the lock is free or read. Each grantee's token
/// is published on its channel; a release that hands to nobody and frees
/// the lock publishes Redisson's message (`0` after a read release, `1`
/// after a write release). Returns 1 if we held the lock, else 0.
pub static RW_LEAVE: Script = Script {
    name: "polylock_rw_leave",
    sha1: std::sync::OnceLock::new(),
    source: lua!(concat!(
        "-- polylock rw leave v3\n",
        lua_next_token!(),
        rw_prelude!(),
        r#"
local held = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
-- Our timeout key, held or not (a lost reader's outlives its hold); only
-- this owner's claims use it, one at a time.
if ARGV[6] == 'read' then redis.call('DEL', KEYS[5]) end
if held then redis.call('HDEL', KEYS[1], ARGV[1]) end
-- A reader none of whose timeout keys is alive crashed (or was lost): its
-- field goes, as Redisson's read unlock judges readers by the same keys;
-- left, it would keep the lock read until the hash expires. Only in a
-- read-write lock's hash (one with a mode): a mutex's fields have no keys.
local pruned = false
local writers, others = 0, 0
if redis.call('HEXISTS', KEYS[1], 'mode') == 1 then
  local h = redis.call('HGETALL', KEYS[1])
  for i = 1, #h, 2 do
    local f = h[i]
    if f ~= 'mode' then
      local alive = string.sub(f, -6) == ':write'
      if alive then writers = writers + 1 end
      for n = 1, tonumber(h[i + 1]) or 1 do
        if alive then break end
        alive = redis.call('EXISTS', ARGV[7] .. ':' .. f .. ':rwlock_timeout:' .. n) == 1
      end
      if alive then
        others = others + 1
      else
        redis.call('HDEL', KEYS[1], f)
        pruned = true
      end
    end
  end
end
if held or pruned then
  if others == 0 then
    redis.call('DEL', KEYS[1])
  elseif writers == 0 then
    redis.call('HSET', KEYS[1], 'mode', 'read')
  end
end
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[4])
local free = redis.call('EXISTS', KEYS[1]) == 0
local reading = redis.call('HGET', KEYS[1], 'mode') == 'read'
local handed = false
-- Grants member m's claim in `mode`: it leaves the queue and hears its token.
local function hand(m, mode, field, lease, timeout)
  local token = hold(mode, field, lease, timeout)
  redis.call('ZREM', KEYS[3], m)
  redis.call('ZREM', KEYS[4], m)
  redis.call('PUBLISH', ARGV[3] .. ':' .. m, token)
  handed = true
end
if free or reading then
  for i, m in ipairs(live_queue()) do
    local kind, field, lease = string.match(m, '^([rw])|(.*)|[^|]*|(%d+)$')
    if not kind then break end
    if kind == 'w' then
      if i == 1 and free then hand(m, 'write', field, lease, nil) end
      break
    end
    hand(m, 'read', field, lease, ARGV[7] .. ':' .. field .. ':rwlock_timeout:1')
  end
end
if (held or pruned) and not handed and redis.call('EXISTS', KEYS[1]) == 0 then
  local message = '0'
  if ARGV[6] == 'write' then message = '1' end
  redis.call('PUBLISH', ARGV[2], message)
  if ARGV[5] and ARGV[5] ~= '' then
    redis.pcall('SPUBLISH', ARGV[5], message)
  end
end
if held then return 1 end
return 0
"#
    )),
};

/// KEYS: lock, our reader timeout key. ARGV: field, lease ms, `read` or
/// `write`, the reader timeout key base (`{name}`). Extends our hold if
/// our field still holds the lock: the reader's timeout key to the lease,
/// the hash to at least the lease. Returns `{1, left}`, else 0 (we lost
/// it). `left`, a reader's only: how many ms the shorter of the hash and
/// our timeout key had left before this renewal extended them, while
/// another reader (one with a live timeout key) holds beside us; else -1
/// (nobody can shorten them until a reader joins; nobody shortens a
/// writer's). Core compares it with what our own last extension left and,
/// when another reader cut it shorter, renews and counts its loss deadline
/// by it: a Redisson reader's renewal sets the hash and every reader's key
/// to Redisson's watchdog time (see `backend/redis/cut.rs`).
/// A reader whose field holds but whose timeout key is gone has lost it
/// too: once the cut key ran out, a Redisson reader's unlock judged us
/// dead (it may delete the hash and let a writer in). The key is made
/// again, so Redisson's unlocks count us until our leave, and 0 is
/// answered.
pub static RW_RENEW: Script = Script {
    name: "polylock_rw_renew",
    sha1: std::sync::OnceLock::new(),
    source: lua!(
        r#"-- polylock rw renew v3
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local lease = tonumber(ARGV[2])
local left = -1
if ARGV[3] == 'read' then
  local mine = redis.call('PTTL', KEYS[2])
  if mine == -2 then
    redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
    if redis.call('PTTL', KEYS[1]) < lease then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return 0
  end
  -- Another reader whose timeout key lives (a dead one cuts nothing).
  local h = redis.call('HGETALL', KEYS[1])
  for i = 1, #h, 2 do
    local f = h[i]
    if left == -1 and f ~= 'mode' and f ~= ARGV[1] and string.sub(f, -6) ~= ':write' then
      for n = 1, tonumber(h[i + 1]) or 1 do
        if redis.call('EXISTS', ARGV[4] .. ':' .. f .. ':rwlock_timeout:' .. n) == 1 then
          left = redis.call('PTTL', KEYS[1])
          if left < 0 or (mine >= 0 and mine < left) then left = mine end
          break
        end
      end
    end
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, left}
"#
    ),
};
