#!lua flags=no-writes
-- Stage two's memories for some of the owners of a multi-owner recall (the ones
-- recall/retrieve.py chose from recall_stage_one.lua's calls), with the query-term
-- frequencies recall_survey.lua would report for them, in the same order: first the terms
-- in whose best postings the memory is (what stage one found, in term order), then, for a
-- recent memory, its other terms (in term order).
--
-- KEYS: n*m term keys (owner-major), then the memories' hashes.
-- ARGV: token field, postings limit, the posting score's tf scale, owners n, terms m, then
-- per memory (in the order of its hash in KEYS): member, owner (1..n), recent ('1'/'0', or
-- '2': recent, and read only if it has a query-term frequency, as recall_survey.lua
-- leaves such a memory unread).
-- Returns {rows (see read), their query-term frequencies (key, {term index, tf, ...})}.
--
-- read(): recall_read.lua, loaded in front of this script (store/scripts.py).

local call, tonumber, floor = redis.call, tonumber, math.floor
local token_field, limit, scale = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n, m = tonumber(ARGV[4]), tonumber(ARGV[5])
local items_at = n * m

local rows, tfs = {}, {}
local j = 0
for a = 6, #ARGV, 3 do
  j = j + 1
  local member, o, flag = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2]
  local recent = flag ~= '0'
  local found, later = {}, {}
  for t = 1, m do
    local list = KEYS[(o - 1) * m + t]
    local score = call('ZSCORE', list, member)
    if score then
      local f = floor(tonumber(score) / scale)
      local rank = call('ZREVRANK', list, member)
      if rank < limit then
        found[#found + 1] = t
        found[#found + 1] = f
      elseif recent then
        later[#later + 1] = t
        later[#later + 1] = f
      end
    end
  end
  for p = 1, #later do found[#found + 1] = later[p] end
  if flag ~= '2' or #found > 0 then
    read(rows, KEYS[items_at + j], member, token_field)
  end
  if #found > 0 then
    tfs[#tfs + 1] = member
    tfs[#tfs + 1] = found
  end
end
return {rows, tfs}
