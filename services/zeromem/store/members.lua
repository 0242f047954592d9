-- Register a worker as alive (dynamic membership, zeromem.worker.membership) and list the
-- live workers. Expiry is by Redis's clock, so no worker's clock needs to agree with
-- another's; an expired registration is removed by whoever calls next.
--
-- KEYS[1] the sorted set of workers (worker_members_key): member id -> expiry (ms)
-- ARGV[1] this worker's id   ARGV[2] its registration's time to live (ms); 0: leave
-- Returns the ids of every live worker, in no particular order.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[1], now_ms + ttl, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
