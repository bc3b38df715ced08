-- The protected resource of the demo and the cross-language suite: a Redis
-- hash that refuses every access whose fencing token is lower than the
-- highest it has seen (Kleppmann's fencing check, on reads as well as
-- writes). Checking reads too is what makes a read-modify-write safe when
-- two holders overlap while both run (a failover that promoted a replica
-- lacking the grant): the older holder's write after the newer holder's read
-- is refused, so no update is lost. Checking writes alone covers only a
-- holder that was paused.
-- KEYS[1]: the resource hash. ARGV[1]: fencing token.
-- A read (no ARGV[2]): returns the count, or -1 if refused (the write that
-- follows is then refused too, and counted). A write: ARGV[2] is the new
-- count; returns 1 if accepted, 0 if refused as stale.
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if ARGV[2] == nil then
  if token < last then
    return -1
  end
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
  return tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
end
if token < last then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'count', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return 1
