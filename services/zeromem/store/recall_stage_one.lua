#!lua flags=no-writes
-- Recall's stage one over some of the owners of a recall over several (recall/retrieve.py
-- splits such a recall into calls of ``Limits.recall_owners_per_call`` owners: one survey
-- over sixteen owners held Redis for 76 ms, during which no other client was served).
-- The estimates are recall_survey.lua's, with the corpus numbers of all the recall's
-- owners passed in, so that the same memories get the same doubles.
--
-- KEYS: n time index keys, n*m term keys (owner-major).
-- ARGV: postings limit, recent limit, keep, k1, the posting score's tf scale, explain
-- ('1'/'0'), owners n, terms m, documents (of all the recall's owners), date range low and
-- high ('' for none), dated limit, then m document frequencies (summed over all the
-- recall's owners), m term factors.
--
-- Returns {candidates, recents, memories found, cut}: candidates are the keep best found
-- here (as recall_survey.lua's best() would choose them among these owners) and the
-- recent memories found in postings, in the order found, as member, estimate, created
-- ('%.17g' each); recents per owner (the always-scored memories, the dated ones
-- included); when explaining, every other memory found, as member, estimate.

local call, tonumber, floor = redis.call, tonumber, math.floor
local limit, nrecent, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local k1, scale, explain = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local n, m, n_docs = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local date_low, date_high, dated = ARGV[10], ARGV[11], tonumber(ARGV[12])
local df_at, factor_at = 12, 12 + m

local recents = {}
for o = 1, n do
  recents[o] = call('ZREVRANGE', KEYS[o], 0, nrecent - 1)
  if date_low ~= '' then
    local owned = recents[o]
    local seen = {}
    for _, member in ipairs(owned) do seen[member] = true end
    for _, member in ipairs(call('ZRANGEBYSCORE', KEYS[o], date_low,
                                 '(' .. date_high, 'LIMIT', 0, dated)) do
      if not seen[member] then owned[#owned + 1] = member end
    end
  end
end
-- BM25's idf as ranking.idf computes it, times (k1 + 1): recall_survey.lua's expression
local docs = math.max(n_docs, 0)
local weight = {}
for t = 1, m do
  local d = math.min(math.max(tonumber(ARGV[df_at + t]), 0), docs)
  weight[t] = math.log(1.0 + (docs - d + 0.5) / (d + 0.5)) * (k1 + 1.0)
              * tonumber(ARGV[factor_at + t])
end

-- Per memory found, by number in the order found: the estimate and the creation time.
local number, members, est, made = {}, {}, {}, {}
local n_members = 0
for o = 1, n do
  for t = 1, m do
    local list = KEYS[n + (o - 1) * m + t]
    local flat = call('ZREVRANGE', list, 0, limit - 1, 'WITHSCORES')
    local w = weight[t]
    for j = 1, #flat, 2 do
      local member, score = flat[j], tonumber(flat[j + 1])
      local f = floor(score / scale)
      local k = number[member]
      if k == nil then
        n_members = n_members + 1
        k = n_members
        number[member] = k
        members[k] = member
        est[k] = w * f / (f + k1)
        made[k] = score - f * scale
      else
        est[k] = est[k] + w * f / (f + k1)
      end
    end
  end
end

-- The keep best by (estimate, created, key), all descending: the same order as
-- recall_survey.lua's best(), where a memory outside these can never be among the best
-- of all the owners.
local taken = {}
if n_members <= keep then
  for k = 1, n_members do taken[k] = true end
else
  local order = {}
  for k = 1, n_members do order[k] = k end
  table.sort(order, function(a, b)
    local x, y = est[a], est[b]
    if x ~= y then return x > y end
    x, y = made[a], made[b]
    if x ~= y then return x > y end
    -- byte order, whatever the server's locale (Lua compares strings with strcoll)
    local p, q = members[a], members[b]
    for c = 1, math.min(#p, #q) do
      local u, v = string.byte(p, c), string.byte(q, c)
      if u ~= v then return u > v end
    end
    return #p > #q
  end)
  for j = 1, keep do taken[order[j]] = true end
end
for o = 1, n do
  for _, member in ipairs(recents[o]) do
    local k = number[member]
    if k then taken[k] = true end
  end
end

local candidates, cut = {}, {}
for k = 1, n_members do
  if taken[k] then
    candidates[#candidates + 1] = members[k]
    candidates[#candidates + 1] = string.format('%.17g', est[k])
    candidates[#candidates + 1] = string.format('%.17g', made[k])
  elseif explain then
    cut[#cut + 1] = members[k]
    cut[#cut + 1] = string.format('%.17g', est[k])
  end
end
return {candidates, recents, n_members, cut}
