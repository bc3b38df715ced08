//! The Lua scripts of the Redis counting semaphore: Redisson's
//! `RPermitExpirableSemaphore` layout, with polylock's waiter queue,
//! direct handoff, fencing and agreed number of permits beside it. They
//! answer as the mutex's scripts do ([`super::scripts`]), so one claim
//! drives either.
//!
//! Layout: the available permits as a counter at the name (no expiry);
//! every held permit's id in the sorted set `{name}:timeout`, scored by its
//! expiry in ms. A polylock grant of `k` permits holds the ids
//! `<holder id>:1` .. `<holder id>:k` (Redisson's are 16 random bytes; the
//! ids only have to be unique). Every script first gives back the permits
//! whose expiry passed (Redisson's rule), so a holder that died frees its
//! permits once its lease runs out. Expiries are the server's clock
//! (Redisson scores with its caller's: a Redisson client whose clock runs
//! ahead of the server's sees our permits expire early, by the offset).
//! Free plus held permits is `N` after every script; when data is lost
//! behind the scripts' back, the next acquire restores it: a missing
//! counter is rebuilt as `N` less the held permits (permits given back
//! meanwhile go to no counter, which INCRBY would make anew at just
//! those), and a counter short of that (held ids lost without their
//! permits) is raised to it.
//! `polylock_permits:K` records the number of permits; a client made with
//! another number is refused and changes nothing. Waiters queue in
//! `polylock_semqueue:K` (members `p<k>|<holder id>|<claim id>|<lease ms>`),
//! first come first served: a waiter that asks for more permits than are
//! free is not overtaken by later, smaller asks.

use super::lua::lua;
use super::scripts::lua_next_token;
use crate::io::Script;

/// Shared Lua of the semaphore scripts. KEYS[1] the counter, KEYS[2]
/// fence, KEYS[3] queue, KEYS[4] queue deadlines, KEYS[5] permit expiries.
macro_rules! sem_prelude {
    () => {
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Gives n permits (their ids already removed) back to the counter. A
-- missing counter stays missing: the next acquire rebuilds it as N less
-- the permits still held; INCRBY would make it n alone, and the permits
-- held elsewhere would be lost for good.
local function give_back(n)
  if n > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('INCRBY', KEYS[1], n)
  end
end
-- Permits whose lease ran out go back to the counter (Redisson's rule).
local expired = redis.call('ZRANGEBYSCORE', KEYS[5], 0, now)
if #expired > 0 then
  redis.call('ZREM', KEYS[5], unpack(expired))
  give_back(#expired)
end
local function available()
  return tonumber(redis.call('GET', KEYS[1]) or '0')
end
-- The fence lives as long as the longest-lived holder's lease.
local function token_for(lease)
  return next_token(KEYS[2], t, math.max(tonumber(redis.call('PTTL', KEYS[2])), tonumber(lease)))
end
-- Takes k permits for `holder` until now + lease.
local function take(holder, k, lease)
  redis.call('DECRBY', KEYS[1], k)
  local expiry = now + tonumber(lease)
  for i = 1, k do
    redis.call('ZADD', KEYS[5], expiry, holder .. ':' .. i)
  end
  return token_for(lease)
end
-- Grants the waiters at the front of the queue while the first one's ask
-- fits, each told its token on its channel (`prefix:<member>`), dropping
-- dead waiters (their deadline passed) on the way; returns the token
-- granted to member `self` if it was one of them (not published: the
-- caller answers it). Walks only the front: a handoff costs what it
-- grants, however many wait. Afterwards the queue's first member, if
-- any, is live and waits for more permits than are free.
local function hand_on(prefix, self)
  local mine = nil
  while true do
    local m = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not m then return mine end
    local d = tonumber(redis.call('ZSCORE', KEYS[4], m))
    if d and d > now then
      local k, holder, lease = string.match(m, '^p(%d+)|(.*)|[^|]*|(%d+)$')
      if not k or tonumber(k) > available() then return mine end
      local token = take(holder, tonumber(k), lease)
      if m == self then
        mine = token
      else
        redis.call('PUBLISH', prefix .. ':' .. m, token)
      end
    end
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
  end
end
-- The ms until the earliest held permit expires (-1: none does).
local function next_expiry()
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if first[2] then return math.max(tonumber(first[2]) - now, 1) end
  return -1
end
"#
    };
}

/// KEYS: counter, fence, queue, queue deadlines, permit expiries, the
/// recorded number of permits.
/// ARGV: holder id, lease ms, wait ('0' try, '1' queue or refresh our
/// place, '2' the recheck after subscribing), waiter TTL ms, waiter
/// channel prefix, our queue member, the semaphore's permits `N`, our ask `k`.
/// Returns `{1, token}` when granted, `{0, ms to the next expiry, first}`
/// when not (`first`: nobody is queued ahead of us), `{-1, N on the server}`
/// when the server's number of permits is not ours.
pub static SEM_ACQUIRE: Script = Script {
    name: "polylock_sem_acquire",
    sha1: std::sync::OnceLock::new(),
    source: lua!(concat!(
        "-- polylock sem acquire v3\n",
        lua_next_token!(),
        sem_prelude!(),
        r#"
local total, k = tonumber(ARGV[7]), tonumber(ARGV[8])
local recorded = redis.call('GET', KEYS[6])
if recorded and tonumber(recorded) ~= total then return {-1, tonumber(recorded)} end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- First use (or the counter was lost): permits still held stay held.
  redis.call('SET', KEYS[1], total - redis.call('ZCARD', KEYS[5]))
  redis.call('SET', KEYS[6], total)
elseif not recorded then
  -- Set up by a Redisson client: its number is what is free plus what is held.
  local found = available() + redis.call('ZCARD', KEYS[5])
  if found ~= total then return {-1, found} end
  redis.call('SET', KEYS[6], total)
elseif available() + redis.call('ZCARD', KEYS[5]) < total then
  -- Held ids lost without their permits given back (the set deleted or
  -- evicted): those permits are free again, or they would be lost for good.
  redis.call('SET', KEYS[1], total - redis.call('ZCARD', KEYS[5]))
end
-- Ours already (a grant whose reply was lost): renewed, with a new token.
local held = 0
for i = 1, k do
  if redis.call('ZSCORE', KEYS[5], ARGV[1] .. ':' .. i) then held = held + 1 end
end
if held == k then
  for i = 1, k do
    redis.call('ZADD', KEYS[5], 'XX', now + tonumber(ARGV[2]), ARGV[1] .. ':' .. i)
  end
  return {1, token_for(ARGV[2])}
elseif held > 0 then
  -- Part of an earlier grant of ours expired: give back the rest.
  for i = 1, k do
    give_back(redis.call('ZREM', KEYS[5], ARGV[1] .. ':' .. i))
  end
end
local mine = hand_on(ARGV[5], ARGV[6])
if mine then return {1, mine} end
-- The queue's front is live now: anyone queued is ahead of a newcomer.
local rank = redis.call('ZRANK', KEYS[3], ARGV[6])
local ahead = rank or redis.call('ZCARD', KEYS[3])
if ahead == 0 and available() >= k then
  if rank then
    redis.call('ZREM', KEYS[3], ARGV[6])
    redis.call('ZREM', KEYS[4], ARGV[6])
  end
  return {1, take(ARGV[1], k, ARGV[2])}
end
if ARGV[3] == '0' then
  return {0, next_expiry(), 0}
end
local upkeep = ARGV[3] == '1'
if ARGV[3] == '2' then
  upkeep = (tonumber(redis.call('ZSCORE', KEYS[4], ARGV[6])) or 0) <= now
end
if upkeep then
  redis.call('ZADD', KEYS[3], 'NX', clock_us(t), ARGV[6])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[6])
  for _, q in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('PTTL', q) < tonumber(ARGV[4]) then
      redis.call('PEXPIRE', q, ARGV[4])
    end
  end
end
local first = 0
if ahead == 0 then first = 1 end
return {0, next_expiry(), first}
"#
    )),
};

/// KEYS: counter, fence, queue, queue deadlines, permit expiries.
/// ARGV: holder id, Redisson's channel, waiter channel prefix, our queue
/// member, Redisson's shard channel (empty for none), our ask `k`.
/// Gives back our permits (those still ours) and drops our queue entry,
/// then hands the freed permits on: to the waiters at the front of the
/// queue while the first one's ask fits, so a release of `k` permits wakes
/// at most `k` waiters and never one that cannot be granted. Permits left
/// free are announced on Redisson's channel (its waiters' wake-up, the new
/// count as Redisson publishes it). Returns 1 if we held permits, else 0.
pub static SEM_LEAVE: Script = Script {
    name: "polylock_sem_leave",
    sha1: std::sync::OnceLock::new(),
    source: lua!(concat!(
        "-- polylock sem leave v3\n",
        lua_next_token!(),
        sem_prelude!(),
        r#"
local freed = 0
for i = 1, tonumber(ARGV[6]) do
  freed = freed + redis.call('ZREM', KEYS[5], ARGV[1] .. ':' .. i)
end
give_back(freed)
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[4])
-- Always: our leaving the queue's front can let smaller asks behind us in.
hand_on(ARGV[3], nil)
local free = available()
if (freed > 0 or #expired > 0) and free > 0 then
  redis.call('PUBLISH', ARGV[2], free)
  if ARGV[5] ~= '' then redis.pcall('SPUBLISH', ARGV[5], free) end
end
if freed > 0 then return 1 end
return 0
"#
    )),
};

/// KEYS: permit expiries. ARGV: holder id, lease ms, our ask `k`.
/// Extends our permits to now + lease if every one of them is still ours
/// and unexpired. Returns 1, else 0 (we lost them).
pub static SEM_RENEW: Script = Script {
    name: "polylock_sem_renew",
    sha1: std::sync::OnceLock::new(),
    source: lua!(
        r#"-- polylock sem renew v1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local k = tonumber(ARGV[3])
for i = 1, k do
  local expiry = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1] .. ':' .. i))
  if not expiry or expiry <= now then return 0 end
end
for i = 1, k do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1] .. ':' .. i)
end
return 1
"#
    ),
};
