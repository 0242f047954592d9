#!lua flags=no-writes
-- A page of the distinct owners in a tenant's index of live keys, by skip-scan.
--
-- Keys are 'namespace:owner_id:name' and every key of one owner sorts between
-- 'namespace:owner_id:' and 'namespace:owner_id;' (';' is the byte after ':', and ':' is
-- in no owner id). So one ZRANGEBYLEX ... LIMIT 0 1 finds the next owner's first key, one
-- ZLEXCOUNT counts that owner's keys, and the scan jumps past them: a page costs two
-- O(log n) calls per owner, however many memories each owner holds.
--
-- KEYS[1]  the tenant's sorted set of live keys (RedisKeys.keys: every score 0)
-- ARGV[1]  where to start, a ZRANGEBYLEX bound ('[user:' or, after an owner, '[user:u1;')
-- ARGV[2]  where to stop, a ZRANGEBYLEX bound ('[user:\xff', or '+' for no prefix)
-- ARGV[3]  owners to return at most
-- Run with EVALSHA_RO: the read services' Redis user may only read these keys.
-- Returns {more, owner, count, owner, count, ...}: more is 1 when owners remain after
-- this page.
local out = {0}
local start = ARGV[1]
local limit = tonumber(ARGV[3])
local found = 0
while true do
  local first = redis.call('ZRANGEBYLEX', KEYS[1], start, ARGV[2], 'LIMIT', 0, 1)[1]
  if not first then
    break
  end
  if found == limit then
    out[1] = 1
    break
  end
  local owner = string.match(first, '^[^:]+:[^:]+')
  if not owner then
    break  -- not a key of this grammar: nothing the workers wrote
  end
  local count = redis.call('ZLEXCOUNT', KEYS[1], '[' .. owner .. ':', '(' .. owner .. ';')
  out[#out + 1] = owner
  out[#out + 1] = count
  found = found + 1
  start = '[' .. owner .. ';'
end
return out
