-- Renew a shard's lease if this worker still holds it.
--
-- KEYS[1] the shard's lease key (shard_lease_key)
-- ARGV[1] the holder's token   ARGV[2] the lease's time to live (ms)
-- Returns 1 if renewed, 0 if nobody holds it (it expired), -1 if another holder does.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if holder then return -1 end
return 0
