-- Commit one decided command atomically.
--
-- The worker decides every command in Python against the state it read (see engine.py)
-- and sends the decision here. This script applies it only if the shard lease is still
-- ours (fencing) and the memory is still in the state the decision was made on; otherwise
-- it changes nothing and says why, and the worker re-reads and decides again.
--
-- KEYS[1] item hash        KEYS[2] command result    KEYS[3] shard sequence hash
-- KEYS[4] shard lease
-- ARGV[1] lease token ('' = unfenced)   ARGV[2] shard   ARGV[3] stream sequence
-- ARGV[4] result (msgpack)              ARGV[5] result ttl (s)
-- ARGV[6] guarded ('1'/'0')   ARGV[7] base version   ARGV[8] base last command id
-- ARGV[9] action: 'w' write, 't' tombstone, 'f' count feedback, '-' record result only
-- ARGV[10] new version   ARGV[11] item (msgpack)   ARGV[12] command id
-- ARGV[13] tombstone ttl (ms)   ARGV[14] content changed ('1'/'0')   ARGV[15] feedback field
-- ARGV[16..] index operations, four values each: opcode, key, a, b

if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {'fenced'}
end
local done = redis.call('GET', KEYS[2])
if done then
  return {'dup', done}
end

local action = ARGV[9]
if ARGV[6] == '1' then
  local cur = redis.call('HMGET', KEYS[1], 'v', 'lc')
  if (cur[1] or '0') ~= ARGV[7] or (cur[2] or '') ~= ARGV[8] then
    return {'stale'}
  end
end

if action == 'w' then
  if ARGV[14] == '1' then
    -- token counts cached per encoding describe the old content
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      if string.sub(f, 1, 3) == 'tk:' then redis.call('HDEL', KEYS[1], f) end
    end
  end
  redis.call('HSET', KEYS[1], 'v', ARGV[10], 'd', ARGV[11], 'lc', ARGV[12])
  redis.call('PERSIST', KEYS[1])
elseif action == 't' then
  -- keep the version as a tombstone so an old compare-and-set can never match again
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'v', ARGV[10], 'd', '', 'lc', ARGV[12])
  redis.call('PEXPIRE', KEYS[1], ARGV[13])
elseif action == 'f' then
  local d = redis.call('HGET', KEYS[1], 'd')
  if not d or d == '' then
    return {'stale'}
  end
  redis.call('HINCRBY', KEYS[1], ARGV[15], 1)
end

local i = 16
while i <= #ARGV do
  local op, key, a, b = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if op == 'za' then redis.call('ZADD', key, a, b)
  elseif op == 'zr' then redis.call('ZREM', key, a)
  elseif op == 'sa' then redis.call('SADD', key, a)
  elseif op == 'sr' then redis.call('SREM', key, a)
  elseif op == 'hi' then redis.call('HINCRBY', key, a, b)
  elseif op == 'hs' then redis.call('HSET', key, a, b)
  end
  i = i + 4
end

redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[5])
if ARGV[3] ~= '0' then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
end
return {'ok'}
