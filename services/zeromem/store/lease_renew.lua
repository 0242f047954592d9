-- Renew a shard's lease if this worker still holds it.
--
-- KEYS[1] the shard's lease key (shard_lease_key)
-- ARGV[1] the holder's token   ARGV[2] the lease's time to live (ms)
-- Returns 1 if renewed, 0 if someone else holds it (or nobody).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
