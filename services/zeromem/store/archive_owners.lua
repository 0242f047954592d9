#!lua flags=no-writes
-- A page of a tenant's owners whose oldest memory was last updated before a cutoff (what
-- to archive), found in the tenant's keys index without reading it whole: the scan walks
-- it owner by owner (ZRANGEBYLEX jumps past each owner's keys, as owners.lua does).
--
-- KEYS[1] the tenant's sorted set of live keys (RedisKeys.keys)
-- ARGV[1] the owners' time index key with '%OWNER%' in place of the owner
--         (RedisKeys.by_time): derived per owner found, so not declared
-- ARGV[2] where to start (a ZRANGEBYLEX bound)   ARGV[3] the cutoff
-- ARGV[4] owners to visit at most
-- Returns {next start or '', owner, owner, ...}: the owners visited that qualify.
local start = ARGV[2]
local cutoff = tonumber(ARGV[3])
local out = {''}
for _ = 1, tonumber(ARGV[4]) do
  local first = redis.call('ZRANGEBYLEX', KEYS[1], start, '+', 'LIMIT', 0, 1)[1]
  if not first then return out end
  local ns, id = string.match(first, '^([^:]+):([^:]+)')
  local owner = ns .. ':' .. id
  local oldest = redis.call('ZRANGE', string.gsub(ARGV[1], '%%OWNER%%', owner), 0, 0, 'WITHSCORES')
  if oldest[2] and tonumber(oldest[2]) < cutoff then out[#out + 1] = owner end
  start = '(' .. owner .. ';'  -- ';' sorts right after ':': past every key of this owner
  out[1] = start
end
return out
