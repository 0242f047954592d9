-- Cache a memory's token count in an encoding, only while the memory exists: never
-- resurrect a hash the reaper removed.
--
-- KEYS[1] the memory's hash   ARGV[1] the token field (tk:{encoding})   ARGV[2] the count
-- Returns 1 if the field was new, 0 otherwise (or nothing written).
if redis.call('HSTRLEN', KEYS[1], 'd') > 0 then
  return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 0
