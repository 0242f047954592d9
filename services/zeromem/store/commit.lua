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
-- The position read here is the one the end of the script moves: nothing between writes
-- KEYS[2], so it is read once per call (one call of a lone append's ~30 less).
local position = nil
if ARGV[7] and ARGV[7] ~= '0' then
  position = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
  if position < tonumber(ARGV[7]) then
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
-- index's size and byte count are read once per call and kept here; the byte count is
-- written back, and the index's expiry renewed, once per call (flush_results): with the
-- bookkeeping per command, it doubled Redis's CPU per put (21 -> 49 us, write_cost.py).
-- Each add is trimmed at once, as the results of commands sharing a batch message share
-- a score, and then which ones survive the byte bound depends on when the trim runs. The
-- adds themselves wait and go in one ZADD per index (one ZADD per result was one call in
-- twelve of an append's), until a bound would be passed or the call ends: while the size
-- counts every waiting add as new (at least the true size) and both bounds hold, the
-- adds one by one would not have trimmed either; once one is passed, the waiting adds
-- are written and the true size known before trimming, as with the adds one by one.
local recorded = {}  -- results index -> {its byte count's key, size, bytes, bytes delta,
                     -- waiting ZADD arguments, the number of waiting adds}
local recorded_order = {}
local ADDS_CHUNK = 512  -- arguments per ZADD: Redis's Lua allows a few thousand on its stack
local function add_waiting(index, r)
  local args, added = r[5], 0
  for i = 1, #args, ADDS_CHUNK do
    added = added + redis.call('ZADD', index, unpack(args, i, math.min(#args, i + ADDS_CHUNK - 1)))
  end
  r[2] = r[2] - r[6] + added
  r[5], r[6] = {}, 0
end
local function over(r)
  return (max_records > 0 and r[2] > max_records) or (max_bytes > 0 and r[3] > max_bytes)
end
local function remember(d, result_key, result, score)
  local index = d[18]
  if not index or index == '' then return end
  local r = recorded[index]
  if not r then
    r = {d[19], redis.call('ZCARD', index), tonumber(redis.call('GET', d[19]) or '0'), 0, {}, 0}
    recorded[index] = r
    recorded_order[#recorded_order + 1] = index
  end
  local size = #result_key + #result
  local args = r[5]
  args[#args + 1] = score
  args[#args + 1] = size .. ' ' .. result_key
  r[6] = r[6] + 1
  r[2] = r[2] + 1
  r[3] = r[3] + size
  r[4] = r[4] + size
  if over(r) then add_waiting(index, r) end
  while over(r) do
    local oldest = redis.call('ZPOPMIN', index)
    if #oldest == 0 then break end
    local dropped, key = string.match(oldest[1], '^(%d+) (.+)$')
    redis.call('DEL', key)
    r[2] = r[2] - 1
    r[3] = r[3] - tonumber(dropped)
    r[4] = r[4] - tonumber(dropped)
  end
end

local function flush_results()
  for _, index in ipairs(recorded_order) do
    local r = recorded[index]
    if r[6] > 0 then add_waiting(index, r) end
    redis.call('INCRBY', r[1], r[4])
    redis.call('EXPIRE', index, ARGV[3])
    redis.call('EXPIRE', r[1], ARGV[3])
  end
end

-- Index writes are combined across the call's decisions and written once at the end:
-- the members a batch adds to a sorted set or a set go in one ZADD / SADD per key, one
-- HINCRBY per statistic with the batch's sum. Measured on the append workload (bench/write_cost.py),
-- a command's writes were ~40 calls into Redis, each paying the call's fixed cost (and
-- one append-only-file entry); a batch's commands of one owner share most of their
-- statistics and their commonest terms. Sorted sets and sets keep their operations in
-- order, as runs of one command: consecutive adds go in one ZADD (SADD), a remove starts
-- a run of removes; Redis applies a ZADD's members left to right, so the last operation
-- on a member still decides, as with the ordered calls. (A table per key and member,
-- walked with pairs() at the end, cost Lua more than most keys' single member is worth:
-- an append's postings are mostly new keys of one member.) Hash fields keep only the
-- last operation per field: HSET sets, HDEL deletes, HINCRBY adds to what the earlier
-- ones left. Nothing in this script reads an index key, so deferring them changes no
-- decision; a memory's own hash is never deferred (see apply).
local items = {}        -- item keys of this call's decisions
-- Sorted set and set runs: the last run's command and arguments per key, and every run
-- in the order it began (flat: key, command, arguments). Runs of different keys may
-- interleave there: only a key's own runs must keep their order. One table per new key
-- (its arguments), not three (a list of runs, a run, its arguments) behind a helper
-- call: collecting an append's operations cost Redis 26 -> 16 µs (commit_breakdown.py:
-- the index flush switched off, against no index operations; alternating, medians of 4).
local run_command, run_args = {}, {}
local run_list = {}
-- Hash fields: key -> field -> how ('s' set, 'd' delete, 'i' increment), and its value.
local hash_how, hash_value, hash_order = {}, {}, {}

local RUN_COMMAND = {za = 'ZADD', zr = 'ZREM', sa = 'SADD', sr = 'SREM'}

-- Operations as the engine sends them: 'za' key score member, 'zr' key member, 'sa' and
-- 'sr' key member, 'hs' key field value, 'hd' key field, 'hi' key field delta.
local function index_op(op, key, a, b)
  local command = RUN_COMMAND[op]
  if command then
    local args = run_args[key]
    if run_command[key] ~= command then
      args = {}
      run_command[key] = command
      run_args[key] = args
      local n = #run_list
      run_list[n + 1] = key
      run_list[n + 2] = command
      run_list[n + 3] = args
    end
    local n = #args
    args[n + 1] = a
    if op == 'za' then args[n + 2] = b end
    return
  end
  local how, value = hash_how[key], hash_value[key]
  if not how then
    how, value = {}, {}
    hash_how[key] = how
    hash_value[key] = value
    hash_order[#hash_order + 1] = key
  end
  if op == 'hs' then
    how[a] = 's'
    value[a] = b
  elseif op == 'hd' then
    how[a] = 'd'
    value[a] = nil
  elseif op == 'hi' then
    local h = how[a]
    if not h then
      how[a] = 'i'
      value[a] = tonumber(b)
    elseif h == 'i' then value[a] = value[a] + tonumber(b)
    elseif h == 's' then value[a] = (tonumber(value[a]) or 0) + tonumber(b)
    else
      how[a] = 's'
      value[a] = tonumber(b)
    end
  end
end

-- Redis's Lua allows a few thousand values on the stack: long argument lists go in parts.
local CHUNK = 512
local function call_chunked(command, key, args)
  if #args <= CHUNK then
    redis.call(command, key, unpack(args))
    return
  end
  for i = 1, #args, CHUNK do  -- CHUNK is even: a ZADD's or an HSET's pairs stay whole
    redis.call(command, key, unpack(args, i, math.min(#args, i + CHUNK - 1)))
  end
end

local function flush_index()
  for i = 1, #run_list, 3 do
    call_chunked(run_list[i + 1], run_list[i], run_list[i + 2])
  end
  for _, key in ipairs(hash_order) do
    local value = hash_value[key]
    local sets_, deletes, incrs = {}, {}, {}
    for field, h in pairs(hash_how[key]) do
      if h == 's' then
        sets_[#sets_ + 1] = field
        sets_[#sets_ + 1] = value[field]
      elseif h == 'd' then
        deletes[#deletes + 1] = field
      else
        incrs[#incrs + 1] = field
      end
    end
    -- Increments: an owner's statistics are about ten fields (memories, length and
    -- tokens, in all and per type), one HINCRBY each was 1.6 of an append's 20 calls
    -- into Redis. From three fields on, one HMGET and the sums in the HSET below; a
    -- field that does not hold an integer is left to HINCRBY, which refuses it as before.
    -- Even a sum of 0 is written: the increments left the field in place, at 0.
    if #incrs >= 3 then
      local current = redis.call('HMGET', key, unpack(incrs))
      for i, field in ipairs(incrs) do
        local now = tonumber(current[i] or '0')
        local delta = value[field]
        if now and math.floor(now) == now and math.floor(delta) == delta
            and math.abs(now + delta) < 2 ^ 53 then
          sets_[#sets_ + 1] = field
          sets_[#sets_ + 1] = string.format('%d', now + delta)
        else
          redis.call('HINCRBY', key, field, delta)
        end
      end
    else
      for _, field in ipairs(incrs) do
        redis.call('HINCRBY', key, field, value[field])
      end
    end
    if #deletes > 0 then call_chunked('HDEL', key, deletes) end
    if #sets_ > 0 then call_chunked('HSET', key, sets_) end
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

  local count_delta, bytes_delta, before = 0, 0, nil
  if d[17] and (action == 'w' or action == 't' or action == 'a') then
    -- A guarded decision on version 0 passed its guard (stale above): the hash holds no
    -- version, so no memory either (every write of d writes v). An append's call less.
    before = (d[5] == '1' and d[6] == '0') and 0 or redis.call('HSTRLEN', item_key, 'd')
    local after = action == 'w' and #d[10] or 0
    count_delta = (after > 0 and 1 or 0) - (before > 0 and 1 or 0)
    bytes_delta = after - before
  end

  local ops = d[14]
  -- A write sets the memory's own fields (its length, token count, recall card) in the
  -- same HSET as the memory, unless an operation other than HSET touches its hash.
  local merged = false
  if action == 'w' then
    local fields = {'v', d[9], 'd', d[10], 'lc', d[11]}
    merged = true
    local n = 6
    for i = 1, #ops, 4 do
      if ops[i + 1] == item_key then
        if ops[i] ~= 'hs' then
          merged = false
          fields = {'v', d[9], 'd', d[10], 'lc', d[11]}
          break
        end
        fields[n + 1] = ops[i + 2]
        fields[n + 2] = ops[i + 3]
        n = n + 2
      end
    end
    -- token counts cached per encoding describe the old content (a memory with no
    -- stored form, new or a tombstone, has none)
    if d[12] == '1' and before ~= 0 then
      for _, f in ipairs(redis.call('HKEYS', item_key)) do
        if string.sub(f, 1, 3) == 'tk:' then redis.call('HDEL', item_key, f) end
      end
    end
    redis.call('HSET', item_key, unpack(fields))
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

  for i = 1, #ops, 4 do
    local key = ops[i + 1]
    if merged and key == item_key then
      -- written with the memory above
    elseif items[key] then
      -- A memory's own hash: written now, in order with the action above (a tombstone
      -- deletes it, and a later decision of this call may read it).
      local op, a, b = ops[i], ops[i + 2], ops[i + 3]
      if op == 'hs' then redis.call('HSET', key, a, b)
      elseif op == 'hd' then redis.call('HDEL', key, a)
      elseif op == 'hi' then redis.call('HINCRBY', key, a, b)
      else index_op(op, key, a, b)
      end
    else
      index_op(ops[i], key, ops[i + 2], ops[i + 3])
    end
  end
  if d[17] and (action == 'w' or action == 't' or action == 'a') then
    if count_delta ~= 0 then index_op('hi', d[17], 'n', count_delta) end
    if bytes_delta ~= 0 then index_op('hi', d[17], 'b', bytes_delta) end
  end

  return 'ok'
end

local decisions = cmsgpack.unpack(ARGV[5])
for _, d in ipairs(decisions) do items[d[1]] = true end
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
flush_index()
flush_results()
if last_sequence > 0 then
  -- the shard's position in the command stream, atomic with the applies above; never
  -- moved back (a tenant's rebuild replays older commands of a shard)
  local current = position or tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
  if last_sequence > current then
    redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', last_sequence))
  end
end
return replies
