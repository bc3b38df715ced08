-- The protected resource of the demo and the cross-language suite: a Redis
-- hash that refuses a write whose fencing token is lower than the last one
-- it accepted (Kleppmann's fencing check).
-- KEYS[1]: the resource hash. ARGV[1]: fencing token. ARGV[2]: the new count.
-- Returns 1 if the write was accepted, 0 if refused as stale.
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < last then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'count', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return 1
