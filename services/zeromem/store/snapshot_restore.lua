-- Put a snapshot's records back (lifecycle/snapshot_store.py): one call per batch.
--
-- KEYS   the records' names
-- ARGV[2i-1] key i's absolute expiry in ms since the epoch ('0': none); one already past
--        creates nothing (RESTORE ... ABSTTL)
-- ARGV[2i]   key i's DUMP payload, which replaces whatever the key holds
-- Returns the number of records given.
for i, name in ipairs(KEYS) do
  local at = ARGV[2 * i - 1]
  if at == '0' then
    redis.call('RESTORE', name, 0, ARGV[2 * i], 'REPLACE')
  else
    redis.call('RESTORE', name, at, ARGV[2 * i], 'REPLACE', 'ABSTTL')
  end
end
return #KEYS
