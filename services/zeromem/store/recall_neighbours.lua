#!lua flags=no-writes
-- The time-neighbours of a multi-owner recall's best conversation turns, read for stage
-- two: recall_survey.lua's expansion, for the memories recall_stage_one.lua's calls
-- chose (recall/retrieve.py merges them). The memories come in the order the survey
-- would hold them, and are sorted here as it sorts them, so the same turns are expanded.
--
-- KEYS: n time index keys, n keys of the owners' conversation turns (their type set of
-- ``message`` memories).
-- ARGV: neighbour expansion (how many turns get their time-neighbours read), neighbour gap
-- (seconds), owners n, then the n owners, then the chosen memories found in postings as
-- member, estimate ('%.17g').
-- Returns the neighbour pairs (key, neighbour key, ...), as recall_survey.lua does.
--
-- neighbours(): recall_expand.lua, loaded in front of this script (store/scripts.py).

local call, tonumber = redis.call, tonumber
local expand, gap, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local best_at = 3 + n

local turns, any_turns = {}, false
for o = 1, n do
  turns[o] = call('SCARD', KEYS[n + o])
  any_turns = any_turns or turns[o] > 0
end
local members, est, best_first = {}, {}, {}
for j = best_at + 1, #ARGV, 2 do
  local k = #members + 1
  members[k], est[k] = ARGV[j], tonumber(ARGV[j + 1])
  best_first[k] = k
end
local pairs_out = {}
if expand == 0 or #members == 0 or not any_turns then
  return pairs_out
end
local owner_index = {}
for o = 1, n do owner_index[ARGV[3 + o]] = o end
neighbours(best_first, est, members, owner_index, turns, 0, n, expand, gap, pairs_out,
           function() end)
return pairs_out
