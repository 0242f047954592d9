#!lua flags=no-writes
-- Read keys into a snapshot (embedded/snapshot.py, on the scratch server holding Redis's
-- point-in-time copy): one call per batch instead of two commands per key, which cost the
-- client more than the server (measured: 50,000 keys in 11.7 s as a pipeline, 3.2 s here).
--
-- KEYS   the keys to read
-- Returns a flat array, per key: its DUMP payload (false when it expired meanwhile) and
-- its absolute expiry in ms since the epoch (PEXPIRETIME: -1 none).
local out = {}
for _, name in ipairs(KEYS) do
  out[#out + 1] = redis.call('DUMP', name)
  out[#out + 1] = redis.call('PEXPIRETIME', name)
end
return out
