-- Commit a batch of decided commands, in order, in one call.
--
-- The worker decides every command in Python against the state it read (engine.py) and
-- sends the decisions here as one msgpack array. For each decision this script checks that
-- the memory is still in the state it was decided on; if so it writes the memory, its
-- index entries, the command's result (idempotency) and the shard's stream position;
-- otherwise it changes nothing for that command and answers 'stale', and the worker
-- re-reads and decides again. The whole batch is refused ('fenced') unless this worker
-- still holds the shard's lease.
--
-- KEYS[1] the shard's lease key         KEYS[2] the shard sequence hash (shard -> sequence)
-- ARGV[1] lease token ('' = unfenced)    ARGV[2] shard
-- ARGV[3] result ttl (s)                 ARGV[4] tombstone ttl (ms)
-- ARGV[6] '1': all or nothing (a forget or an archive over an owner): every guard is
--         checked before anything is written, and one stale guard makes every decision
--         of the call answer 'stale'
-- ARGV[7] the last stream sequence this worker applied on the shard ('0': none known)
-- ARGV[8] stored results kept per tenant and shard at most, ARGV[9] their bytes ('0': no
--         bound; both '0' when decisions carry no results index)
-- ARGV[5] msgpack array of decisions (strings only: Redis's cmsgpack predates msgpack's
-- binary type, so the encoded result and item are packed as msgpack raw strings, which
-- Lua holds byte for byte), each an array:
--   1 item key   2 result key ('' = record nothing: one memory of a forget / archive)
--   3 stream sequence ('0' = none: not the last command of its message)   4 the result (msgpack)
--   5 guarded ('1'/'0')   6 base version   7 base last command id
--   8 action: 'w' write, 't' tombstone, 'f' count feedback, '-' record the result only,
--      'a' archive (a tombstone that stays, flagged ar=1: the memory is in the archive tier)
--   9 new version   10 the item (msgpack; '' = none)   11 command id
--   12 content changed ('1'/'0')
--   13 feedback field   14 index operations: flat array of opcode, key, a, b
--   15 clear the item's expiry on a write ('1'/'0'; only a tombstone has one)
--   16 feedback coalesced into this one: flat array of result key, result, the command's
--      stream sequence; each one not recorded yet is recorded and counted with this one
--      in a single increment
--   17 the tenant's stored-totals hash (n memories, b bytes of their stored form), moved
--      by every write, tombstone and archive here, where the old size is known exactly
--   18 the tenant's results index on this shard (RedisKeys.results; '' = none: results
--      are not bounded)   19 its byte count (RedisKeys.results_bytes)
--   20 the command's stream sequence (its result's score in the index)
--
-- The keys a decision touches (1, 2, 14, 16, 17) travel inside ARGV[5], not in KEYS: a
-- batch names tens of keys per command (one posting list per indexed term), and packing
-- each as an argument of its own cost the worker more than Redis spent on the batch
-- (measured when this packing was introduced; see worker/store.py). A batch spans many
-- owners and tenants anyway, so it could not run in one slot of a cluster; only the
-- fixed keys are declared.

if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 'fenced'
end
-- ARGV[7]: the last stream sequence this worker applied on the shard. Less in Redis means
-- Redis came back without applies the worker had confirmed (the unsynced tail of its
-- append-only file): commit nothing, or the shard's position would jump over the hole.
if ARGV[7] and ARGV[7] ~= '0' then
  if tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') < tonumber(ARGV[7]) then
    return 'behind'
  end
end

local max_records = tonumber(ARGV[8] or '0')
local max_bytes = tonumber(ARGV[9] or '0')

-- Index a result just recorded and keep only the newest of the tenant's results on the
-- shard: by stream sequence (then by member, so the survivors do not depend on the order
-- in which a worker or a rebuild recorded them), dropping the oldest until both bounds
-- hold. A member is "{bytes} {result key}": what it counts for travels with it, so the
-- count stays exact when a result expired on its own before being dropped here. The
-- indexes' expiry is renewed once per call (expire_results, at the end), not per command:
-- with it per command, the bookkeeping doubled Redis's CPU per put (21 -> 49 us,
-- bench/write_cost.py).
local touched = {}  -- results index -> its byte count's key, renewed at the end
local function remember(d, result_key, result, score)
  if not d[18] or d[18] == '' then return end
  local size = #result_key + #result
  redis.call('ZADD', d[18], score, size .. ' ' .. result_key)
  local bytes = redis.call('INCRBY', d[19], size)
  while (max_records > 0 and redis.call('ZCARD', d[18]) > max_records)
      or (max_bytes > 0 and bytes > max_bytes) do
    local oldest = redis.call('ZPOPMIN', d[18])
    if #oldest == 0 then break end
    local dropped, key = string.match(oldest[1], '^(%d+) (.+)$')
    redis.call('DEL', key)
    bytes = redis.call('DECRBY', d[19], tonumber(dropped))
  end
  touched[d[18]] = d[19]
end

local function expire_results()
  for index, bytes_key in pairs(touched) do
    redis.call('EXPIRE', index, ARGV[3])
    redis.call('EXPIRE', bytes_key, ARGV[3])
  end
end

local function stale(d)
  if d[5] == '1' then
    local cur = redis.call('HMGET', d[1], 'v', 'lc')
    return (cur[1] or '0') ~= d[6] or (cur[2] or '') ~= d[7]
  end
  return false
end

local function apply(d)
  local item_key = d[1]
  if stale(d) then
    return 'stale'
  end
  local action = d[8]
  if action == 'f' then
    local data = redis.call('HGET', item_key, 'd')
    if not data or data == '' then
      return 'stale'
    end
  end
  -- The result is recorded first, only if the command id has none yet: one call both
  -- checks for a duplicate and records. (A duplicate that fails its guard answers 'stale'
  -- above; decided again, it is found by the worker's own look-up.)
  if d[2] ~= '' then
    if not redis.call('SET', d[2], d[4], 'NX', 'EX', ARGV[3]) then
      return {'dup', redis.call('GET', d[2])}
    end
    remember(d, d[2], d[4], d[20])
  end

  if d[17] and (action == 'w' or action == 't' or action == 'a') then
    local before = redis.call('HSTRLEN', item_key, 'd')
    local after = action == 'w' and #d[10] or 0
    local count = (after > 0 and 1 or 0) - (before > 0 and 1 or 0)
    if count ~= 0 then redis.call('HINCRBY', d[17], 'n', count) end
    if after ~= before then redis.call('HINCRBY', d[17], 'b', after - before) end
  end

  if action == 'w' then
    if d[12] == '1' then
      -- token counts cached per encoding describe the old content
      for _, f in ipairs(redis.call('HKEYS', item_key)) do
        if string.sub(f, 1, 3) == 'tk:' then redis.call('HDEL', item_key, f) end
      end
    end
    redis.call('HSET', item_key, 'v', d[9], 'd', d[10], 'lc', d[11])
    if d[15] == '1' then
      redis.call('PERSIST', item_key)
    end
  elseif action == 't' then
    -- keep the version as a tombstone so an old compare-and-set can never match again
    redis.call('DEL', item_key)
    redis.call('HSET', item_key, 'v', d[9], 'd', '', 'lc', d[11])
    redis.call('PEXPIRE', item_key, ARGV[4])
  elseif action == 'f' then
    local count = 1
    local followers = d[16]
    for i = 1, #followers, 3 do
      if not redis.call('GET', followers[i]) then
        redis.call('SET', followers[i], followers[i + 1], 'EX', ARGV[3])
        remember(d, followers[i], followers[i + 1], followers[i + 2])
        count = count + 1
      end
    end
    redis.call('HINCRBY', item_key, d[13], count)
  elseif action == 'a' then
    redis.call('DEL', item_key)
    redis.call('HSET', item_key, 'v', d[9], 'd', '', 'lc', d[11], 'ar', '1')
  end

  local ops = d[14]
  for i = 1, #ops, 4 do
    local op, key, a, b = ops[i], ops[i + 1], ops[i + 2], ops[i + 3]
    if op == 'za' then redis.call('ZADD', key, a, b)
    elseif op == 'zr' then redis.call('ZREM', key, a)
    elseif op == 'sa' then redis.call('SADD', key, a)
    elseif op == 'sr' then redis.call('SREM', key, a)
    elseif op == 'hi' then redis.call('HINCRBY', key, a, b)
    elseif op == 'hs' then redis.call('HSET', key, a, b)
    elseif op == 'hd' then redis.call('HDEL', key, a)
    end
  end

  return 'ok'
end

local decisions = cmsgpack.unpack(ARGV[5])
local replies = {}
if ARGV[6] == '1' then
  for i, d in ipairs(decisions) do
    if stale(d) then
      for j = 1, #decisions do replies[j] = 'stale' end
      return replies
    end
  end
end
-- The position advances over applied commands only up to the first stale one: that one
-- is decided again in a later call, and a position past it would let a restart skip it.
local last_sequence = 0
local blocked = false
-- Item keys with a duplicate or a stale decision in this call. The worker decided what
-- follows such a decision as if it had applied (it looks up stored results only for the
-- redeliveries it expects), so every later decision of the key is answered 'stale',
-- unapplied, and decided again on what Redis holds: a guarded one would fail its guard
-- anyway, an unguarded one (feedback) must not count on a state that never was.
local unsettled = {}
for i, d in ipairs(decisions) do
  if unsettled[d[1]] then
    replies[i] = 'stale'
  else
    replies[i] = apply(d)
    if replies[i] ~= 'ok' then
      unsettled[d[1]] = true
    end
  end
  if replies[i] == 'stale' then
    blocked = true
  elseif not blocked and replies[i] == 'ok' and tonumber(d[3]) > last_sequence then
    last_sequence = tonumber(d[3])
  end
end
expire_results()
if last_sequence > 0 then
  -- the shard's position in the command stream, atomic with the applies above; never
  -- moved back (a tenant's rebuild replays older commands of a shard)
  local current = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
  if last_sequence > current then
    redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', last_sequence))
  end
end
return replies
