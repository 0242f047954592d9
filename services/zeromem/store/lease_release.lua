-- Release a shard's lease if this holder (a worker, or a rebuild) still holds it.
--
-- KEYS[1] the shard's lease key (shard_lease_key)
-- ARGV[1] the holder's token
-- Returns 1 if released, 0 if someone else holds it (or nobody).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
